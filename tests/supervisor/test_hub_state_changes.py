"""The hub tells the reactor which tool calls may have changed state (the loop's idle rule, rfcs/0280).

Real bundled servers over real stdio: a call counts when it succeeded and its
tool does not say ``readOnlyHint: true`` (a tool without the annotation
counts: MCP's default). The bundled servers annotate every tool they offer.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from agentd.events import ToolChangedState
from agentd.observe.telemetry import NullTelemetry
from agentd.supervisor.hub import SupervisorHub
from agentd.upstream import Upstream
from tests.mcpservers.helpers import running_upstream
from tests.support.watch import Spec


def bundled(name: str, *args: str) -> Spec:
    return Spec(name=name, command=sys.executable, args=["-m", "agentd", "serve", name, *args])


@asynccontextmanager
async def hub_over(up: Upstream) -> AsyncIterator[tuple[SupervisorHub, trio.MemoryReceiveChannel[Any]]]:
    send, recv = trio.open_memory_channel[Any](100)
    yield SupervisorHub(events=send, upstreams={up.name: up}, telemetry=NullTelemetry()), recv


def told(recv: trio.MemoryReceiveChannel[Any]) -> list[Any]:
    out = []
    while True:
        try:
            out.append(recv.receive_nowait())
        except trio.WouldBlock:
            return out


async def test_only_a_successful_call_to_a_tool_that_may_write_is_told(tmp_path: Path) -> None:
    (tmp_path / "notes.json").write_text('{"a": 1}')
    async with (
        running_upstream(bundled("memo", "--file", str(tmp_path / "notes.json"))) as (up, _events),
        hub_over(up) as (hub, recv),
    ):
        reads: list[tuple[str, dict[str, object]]] = [
            ("memo__memo_get", {"key": "a"}),
            ("read_resource", {"uri": "memo://notes"}),
            ("list_resources", {}),
            ("watch_list", {}),  # answered "not available" here, but read-only whatever it says
        ]
        for name, args in reads:
            await hub.call("a1", name, args)
        assert told(recv) == []
        assert (await hub.call("a1", "memo__memo_delete", {"key": "nope"})).is_error  # failed: no change
        assert (await hub.call("a1", "no_such_tool", {})).is_error
        assert told(recv) == []
        assert not (await hub.call("a1", "memo__memo_set", {"key": "b", "value": 2})).is_error
        assert not (await hub.call("a2", "memo__memo_delete", {"key": "a"})).is_error
        assert told(recv) == [
            ToolChangedState("a1", "memo__memo_set"),
            ToolChangedState("a2", "memo__memo_delete"),
        ]


@pytest.mark.parametrize(
    ("server", "args"),
    [("memo", ["--file", "notes.json"]), ("inbox", ["--agent", "me", "--dir", "inbox"])],
)
async def test_every_bundled_tool_says_whether_it_only_reads(
    tmp_path: Path, server: str, args: list[str]
) -> None:
    (tmp_path / "inbox").mkdir()
    spec = bundled(server, *(str(tmp_path / a) if a in ("notes.json", "inbox") else a for a in args))
    async with running_upstream(spec) as (up, _events):
        hints = {t.name: t.annotations.read_only_hint if t.annotations else None for t in up.tools}
    assert hints, f"{server} offers no tools"
    assert None not in hints.values(), hints
    expected_reads = {"memo": {"memo_get"}, "inbox": set()}[server]
    assert {name for name, ro in hints.items() if ro} == expected_reads
