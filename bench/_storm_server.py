"""A small MCP server (written with the ``mcp`` SDK) that publishes many resource updates fast.

Used by ``bench_reactive.py`` (the update storm) and ``bench_idle.py`` (many
idle subscriptions). Serves stdio, 2026-07-28 era (``subscriptions/listen``).

Resources ``storm://0`` … ``storm://{N-1}`` (``--uris N``, default 100); each
reads as the sequence number of its latest update. A burst of ``n`` updates
goes round-robin over the URIs (update ``k`` changes ``storm://{k % N}``) and
publishes one ``ResourceUpdated`` per update. Two ways to start a burst:

* the tool ``burst(n)`` (from any client of this server), or
* a line ``n`` written to the FIFO given as ``--trigger PATH``: the bench
  can start a burst on the server that agentd itself runs over stdio.

Progress: with ``--ready PATH --expect K`` the server writes the line
``ready`` to the FIFO PATH once K listen streams are open (a listen stream
joins the bus before its acknowledgement is sent, so nothing published after
that is lost), and ``done N`` after each burst has been published. agentd opens one stream per subscribed URI plus one for catalog
changes, so a bench expecting N subscriptions waits for N + 1.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import trio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.resources.types import FunctionResource
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ResourceUpdated


class _CountingBus(InMemorySubscriptionBus):
    """The SDK's bus, calling ``on_count`` with the number of listen streams after each join."""

    def __init__(self, on_count: Any) -> None:
        super().__init__()
        self._on_count = on_count

    def subscribe(self, listener: Any) -> Any:
        unsubscribe = super().subscribe(listener)
        self._on_count(len(self._listeners))
        return unsubscribe


def build(n_uris: int, on_count: Any = lambda n: None) -> tuple[MCPServer[Any], Any]:
    bus = _CountingBus(on_count)
    app: MCPServer[Any] = MCPServer("storm", subscriptions=bus)
    state = {f"storm://{i}": -1 for i in range(n_uris)}

    for uri in state:

        def read(uri: str = uri) -> str:
            return str(state[uri])

        app.add_resource(FunctionResource.from_function(read, uri=uri, name=uri, mime_type="text/plain"))

    async def burst(n: int) -> str:
        """Publish ``n`` updates round-robin over every URI; returns how many."""
        for k in range(n):
            uri = f"storm://{k % n_uris}"
            state[uri] = k
            await bus.publish(ResourceUpdated(uri=uri))
        return f"published {n}"

    app.add_tool(burst, name="burst", description="Publish n resource updates round-robin over the URIs.")
    return app, burst


async def follow_trigger(path: str, burst: Any) -> None:
    # O_RDWR keeps a writer open on the FIFO, so reads wait instead of seeing EOF between bench writes.
    fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
    stream = trio.lowlevel.FdStream(fd)
    buf = b""
    while chunk := await stream.receive_some(4096):
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            if line.strip():
                await burst(int(line))


async def main(args: argparse.Namespace) -> None:
    said_ready = False
    # The bench opened the FIFO for reading before starting agentd, so this open does not block.
    progress = os.open(args.ready, os.O_WRONLY) if args.ready else None

    def say(line: str) -> None:
        if progress is not None:
            os.write(progress, line.encode() + b"\n")

    def on_count(n: int) -> None:
        nonlocal said_ready
        if not said_ready and n >= args.expect:
            said_ready = True
            say("ready")

    app, publish = build(args.uris, on_count)

    async def burst(n: int) -> str:
        result: str = await publish(n)
        say(f"done {n}")
        return result

    low = app._lowlevel_server
    async with trio.open_nursery() as nursery:
        if args.trigger:
            nursery.start_soon(follow_trigger, args.trigger, burst)
        async with stdio_server() as (read, write):
            await low.run(read, write, low.create_initialization_options())
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--uris", type=int, default=100)
    ap.add_argument("--trigger", help="FIFO to read burst sizes from (one integer per line)")
    ap.add_argument("--ready", help="FIFO to write 'ready' to once --expect listen streams are open")
    ap.add_argument("--expect", type=int, default=0, help="listen streams to wait for before 'ready'")
    trio.run(main, ap.parse_args())
