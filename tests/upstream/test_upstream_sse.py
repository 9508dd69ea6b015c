"""Upstream over the legacy HTTP+SSE transport, and the per-server tool-call timeout.

A real notes server (the SDK's ``sse_app``) on a loopback socket the test owns:
agentd connects through the SDK's ``sse_client``, calls tools, subscribes, and
notices when the server is killed (its event stream ends), then reconnects and
re-reads what it subscribed to.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from agentd.config import ServerSpec
from agentd.core.errors import UpstreamError
from agentd.events import ResourceChanged, ServerState, ServerStateChanged
from agentd.observe.telemetry import NullTelemetry
from agentd.upstream import Upstream
from tests.mcpservers.helpers import notes_spec, restarting_upstream
from tests.support.processes import listening, notes_server

pytestmark = pytest.mark.process  # its servers run as child processes (tests/support helpers)


async def test_sse_server_calls_subscribes_and_survives_a_restart(tmp_path: Path) -> None:
    state = tmp_path / "s.json"
    listener, port = listening()
    up, events = restarting_upstream(
        ServerSpec(name="legacy", url=f"http://127.0.0.1:{port}/sse", transport="sse")
    )
    try:
        async with notes_server(listener, state, "sse") as first, trio.open_nursery() as nursery:
            await nursery.start(up.run)
            assert up.state is ServerState.CONNECTED, up.last_error
            assert "set_note" in {t.name for t in up.tools}
            await up.subscribe("note://alpha")
            result = await up.call_tool("set_note", {"name": "alpha", "text": "one"})
            assert not result.is_error
            assert await events.next(ResourceChanged) == ResourceChanged("legacy", "note://alpha", "updated")

            first.kill()
            await first.wait()
            await events.next(ServerStateChanged, state=ServerState.RESTARTING)
            async with notes_server(listener, state, "sse"):
                synthetic = await events.next(ResourceChanged, within=20)
                assert synthetic == ResourceChanged("legacy", "note://alpha", "synthetic")
                read = await up.read_resource("note://alpha")
                assert read.contents[0].text == "one"  # type: ignore[union-attr]
                nursery.cancel_scope.cancel()
    finally:
        listener.close()


async def test_tool_timeout_is_the_servers_own(tmp_path: Path) -> None:
    send, _recv = trio.open_memory_channel[object](100)
    base = notes_spec("slow", tmp_path / "s.json")
    spec = ServerSpec(name="slow", command=base.command, args=base.args, timeout=0.5)
    up = Upstream(spec, send, NullTelemetry())
    assert up.tool_timeout == 0.5
    async with trio.open_nursery() as nursery:
        await nursery.start(up.run)
        assert (await up.call_tool("sleep", {"seconds": 0.05})).is_error is False
        with pytest.raises(
            UpstreamError,
            match=r"did not answer tools/call 'sleep' within 0\.5s \(tool_timeout, or the server's timeout",
        ):
            await up.call_tool("sleep", {"seconds": 30})
        # The connection is still usable after a timed-out call.
        assert (await up.call_tool("list_notes", {})).is_error is False
        nursery.cancel_scope.cancel()


async def test_a_tool_call_may_outlast_request_timeout(tmp_path: Path) -> None:
    """A server's timeout above request_timeout is honoured (the SDK's read timeout follows it)."""
    send, _recv = trio.open_memory_channel[object](100)
    base = notes_spec("slow", tmp_path / "s.json")
    spec = ServerSpec(name="slow", command=base.command, args=base.args, timeout=10)
    up = Upstream(spec, send, NullTelemetry(), request_timeout=0.3)
    async with trio.open_nursery() as nursery:
        await nursery.start(up.run)
        result = await up.call_tool("sleep", {"seconds": 0.8})
        assert not result.is_error, result
        nursery.cancel_scope.cancel()
