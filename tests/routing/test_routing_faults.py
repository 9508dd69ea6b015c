"""The fault catalog, routing cases: ``block`` overflow under a server writing faster than agents consume.

Each test runs the real ``agentd`` command against the fault server
(``tests/mcpservers/fault_server.py``: a storm on SIGUSR1 bumps ``item://0..N-1`` and
publishes every bump) with one spawn route that admits one agent at a time,
a queue of two and ``overflow = "block"``. Agents read the item they were
started for (``template = "{uri}"``) and print what they saw. Waits are on
telemetry and stdout; nothing sleeps (rfcs/0131).
"""

from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support.agentd_proc import Agentd, drain
from tests.support.leftovers import tagged_env
from tests.support.routing import (
    FAST_BACKOFF,
    FAULT_SERVER,
    START,
    run_storm,
    script,
    sdk_server,
    server_process,
    supervised,
    wait_until,
)

pytestmark = pytest.mark.fault

ITEMS = 10
ROUNDS = 50

#: How much agentd's resident memory may grow over a storm of ITEMS x ROUNDS
#: updates. Paused streams hold at most one pending change per URI, so the
#: growth is allocator noise, not a backlog (a backlog of 500 events and
#: their telemetry would not fit either way; the bound is about leaks).
RSS_GROWTH_BOUND = 32 * 1024 * 1024

#: One agent reading one item and answering, then the next one: the storm's
#: tail is at most ITEMS of these.
DRAIN_STORM = 90.0

_SAW = re.compile(r"^saw item://(\d+): \1:(\d+)$")


def _args(tmp: Path, era: str) -> list[str]:
    model = script(
        tmp,
        [
            {"tool_calls": [{"name": "read_resource", "arguments": {"uri": "{instruction}"}}]},
            {"text": "saw {instruction}: {last_tool_result}"},
        ],
        then="stop",
    )
    route = "item://*=spawn:1,queue_cap=2,overflow=block,debounce=0,reread_on_start=false,template={uri}"
    return [
        "--mode", "reactive", "--verbose",
        "--mcp-stdio", sdk_server(tmp, "many", "--items", str(ITEMS), server=FAULT_SERVER, era=era),
        "--subscribe", "many:item://*", "--route", route, "--model", model, "read it",
    ]  # fmt: skip


def _balanced(a: Agentd) -> bool:
    """Every pause of the server was followed by its resume."""
    return len(a.find("upstream.resumed")) == len(a.find("upstream.paused"))


def _last_seen(a: Agentd) -> dict[int, int]:
    """Item -> the version the latest agent that read it saw."""
    seen: dict[int, int] = {}
    for line in a.out.splitlines():
        m = _SAW.match(line)
        if m:
            seen[int(m.group(1))] = int(m.group(2))
    return seen


async def _wait_all_seen(a: Agentd, version: int, after: int = 0) -> None:
    """Until every item has been read at ``version`` by an output line past index ``after``."""

    def done() -> bool:
        seen: dict[int, int] = {}
        for line in a.out.splitlines()[after:]:
            m = _SAW.match(line)
            if m:
                seen[int(m.group(1))] = int(m.group(2))
        return all(seen.get(i) == version for i in range(ITEMS))

    await wait_until(a, done, timeout=DRAIN_STORM)


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_block_pauses_the_server_and_nothing_is_lost_with_flat_memory(
    tmp_path: Path, era: str, allow_files: Any
) -> None:
    allow_files("*.storm")
    async with supervised(_args(tmp_path, era), env=tagged_env(tmp_path)) as a:
        await a.wait_event("subscription.established", count=ITEMS, timeout=START)
        rss_before = psutil.Process(a.proc.pid).memory_info().rss
        await run_storm(a, tmp_path / "many.json", {"items": ITEMS, "rounds": ROUNDS})
        paused = await a.wait_event("upstream.paused", timeout=START)
        # Every item's last bump reaches an agent, which reads the final version.
        await _wait_all_seen(a, ROUNDS)
        # ... and once the queue has room, the server is read again. Counted here, not
        # at exit: the changes kept while paused are delivered on resume and their
        # agents may fill the queue once more (a pause the drain then ends).
        await wait_until(a, lambda: _balanced(a), timeout=DRAIN_STORM)
        pauses = len(a.find("upstream.paused"))
        rss_after = psutil.Process(a.proc.pid).memory_info().rss
        await drain(a)
    assert (paused["server"], paused["route"]) == ("many", "r0")
    assert pauses >= 1
    # Both eras: what was read while paused was kept one change per URI (rfcs/0260), so
    # far fewer changes reached the reactor than were written.
    routed = a.find("resource.updated", lambda e: e["route"] == "r0")
    assert len(routed) < ITEMS * ROUNDS // 2, len(routed)
    exit_line = a.find("supervisor.exit")[0]
    assert exit_line["dropped"] == {}
    assert exit_line["router"]["blocked"] >= 1
    assert rss_after - rss_before < RSS_GROWTH_BOUND, (rss_before, rss_after)
    assert _last_seen(a) == dict.fromkeys(range(ITEMS), ROUNDS)


async def test_a_server_killed_while_paused_comes_back_and_every_item_is_read_again(
    tmp_path: Path, allow_files: Any
) -> None:
    allow_files("*.storm")
    env = tagged_env(tmp_path, **FAST_BACKOFF)
    async with supervised(_args(tmp_path, "modern"), env=env) as a:
        await a.wait_event("subscription.established", count=ITEMS, timeout=START)
        await run_storm(a, tmp_path / "many.json", {"items": ITEMS, "rounds": ROUNDS})
        await a.wait_event("upstream.paused", timeout=START)
        server_process(a, "fault_server.py").send_signal(signal.SIGKILL)  # mid-storm, while paused
        await a.wait_event("server.state", lambda e: e["state"] == "restarting", timeout=START)
        lines_at_restart = len(a.out.splitlines())
        # The new process starts every item at version 0; its re-read reaches every item.
        await _wait_all_seen(a, 0, after=lines_at_restart)
        await wait_until(a, lambda: _balanced(a), timeout=DRAIN_STORM)
        await drain(a)
    assert len(a.find("subscription.established")) == 2 * ITEMS
