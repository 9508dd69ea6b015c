"""Pausing an upstream's update streams (``block`` overflow, rfcs/0131), against the real notes server."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from agentd.events import ResourceChanged, SubscriptionStateChanged
from agentd.observe.telemetry import NullTelemetry
from agentd.upstream import Upstream
from tests.mcpservers.helpers import Events, notes_spec

pytestmark = pytest.mark.process  # its servers run as child processes (tests/support helpers)


def _posted(recv: trio.MemoryReceiveChannel[object]) -> list[object]:
    out = []
    while True:
        try:
            out.append(recv.receive_nowait())
        except trio.WouldBlock:
            return out


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_paused_updates_are_held_and_come_back_once_per_uri_on_resume(tmp_path: Path, era: str) -> None:
    send, recv = trio.open_memory_channel[object](100)
    events = Events(recv)
    up = Upstream(notes_spec("notes", tmp_path / "s.json", era=era), send, NullTelemetry())
    async with trio.open_nursery() as nursery:
        await nursery.start(up.run)
        for uri in ("note://alpha", "note://beta"):
            await up.subscribe(uri)
            await events.next(SubscriptionStateChanged, uris=frozenset({uri}), state="established")
        up.pause_updates()
        assert up.updates_paused
        for n in range(20):  # a burst; calls keep working while paused
            await up.call_tool("set_note", {"name": "alpha", "text": f"v{n}"})
        await up.call_tool("set_note", {"name": "beta", "text": "b"})
        result = await up.call_tool("get_note", {"name": "alpha"})
        assert result.content[0].text == "v19"  # type: ignore[union-attr]
        assert [e for e in _posted(recv) if isinstance(e, ResourceChanged)] == []
        missed = up.resume_updates()
        assert not up.updates_paused
        await up.post_possibly_changed(missed)
        seen: list[ResourceChanged] = []
        while {e.uri for e in seen} != {"note://alpha", "note://beta"}:
            seen.append(await events.next(ResourceChanged))
        nursery.cancel_scope.cancel()
    seen += [e for e in _posted(recv) if isinstance(e, ResourceChanged)]
    # Both eras: the stream (or the connection) was read on while paused, one
    # entry kept per URI, posted as pushed once resumed: nothing was lost and
    # nothing piled up (21 writes; at most the change a send was carrying when
    # the pause landed, plus the one kept).
    assert missed == []
    assert {e.kind for e in seen} == {"updated"}
    assert all(1 <= [e.uri for e in seen].count(u) <= 2 for u in ("note://alpha", "note://beta"))
