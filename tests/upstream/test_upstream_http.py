"""Upstream over Streamable HTTP: a real server process on a loopback socket, restarted mid-subscription."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from agentd.events import (
    ResourceChanged,
    ServerState,
    ServerStateChanged,
    SubscriptionStateChanged,
)
from tests.mcpservers.helpers import Spec, restarting_upstream
from tests.support.processes import listening, notes_server

pytestmark = pytest.mark.process  # its servers run as child processes (tests/support helpers)


async def test_http_subscribe_and_survive_a_server_restart(tmp_path: Path) -> None:
    state = tmp_path / "s.json"
    listener, port = listening()
    up, events = restarting_upstream(
        Spec(name="web", url=f"http://127.0.0.1:{port}/mcp", headers={"X-Test": "1"})
    )
    try:
        async with notes_server(listener, state) as first, trio.open_nursery() as nursery:
            await nursery.start(up.run)
            assert up.state is ServerState.CONNECTED
            assert {str(r.uri) for r in up.resources} >= {"note://alpha"}
            await up.subscribe("note://alpha")
            await up.call_tool("set_note", {"name": "alpha", "text": "one"})
            assert await events.next(ResourceChanged) == ResourceChanged("web", "note://alpha", "updated")

            first.kill()
            await first.wait()
            async with notes_server(listener, state):
                synthetic = await events.next(ResourceChanged, within=20)
                assert synthetic == ResourceChanged("web", "note://alpha", "synthetic")
                read = await up.read_resource("note://alpha")
                assert read.contents[0].text == "one"  # type: ignore[union-attr]
                await up.call_tool("set_note", {"name": "alpha", "text": "two"})
                assert await events.next(ResourceChanged) == ResourceChanged("web", "note://alpha", "updated")
                nursery.cancel_scope.cancel()
    finally:
        listener.close()
    states = [e.state for e in events.of(SubscriptionStateChanged)]
    assert states[0] == "established"
    assert states[-1] == "established"
    assert "lost" in states
    assert events.of(ServerStateChanged)[0].state is ServerState.CONNECTED
