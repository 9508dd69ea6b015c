"""A small MCP server (written with the ``mcp`` SDK) that publishes many resource updates fast.

Used by ``bench_reactive.py`` (the update storm), ``bench_idle.py`` (many
idle subscriptions) and ``bench_subscriptions.py`` (10,000 of them). Serves
stdio, or Streamable HTTP on an inherited listening socket (``--fd N``: the
bench owns the port), 2026-07-28 era (``subscriptions/listen``).

Resources ``storm://0`` … ``storm://{N-1}`` (``--uris N``, default 100); each
reads as the sequence number of its latest update. A burst of ``n`` updates
goes round-robin over the URIs (update ``k`` changes ``storm://{k % N}``) and
publishes one ``ResourceUpdated`` per update. Two ways to start a burst:

* the tool ``burst(n)`` (from any client of this server), or
* a line ``n`` written to the FIFO given as ``--trigger PATH``: the bench
  can start a burst on the server that agentd itself runs over stdio.

Progress: with ``--ready PATH --expect K`` the server writes the line
``ready`` to the FIFO PATH once a listen stream carrying K resource URIs is
open (a listen stream joins the bus before its acknowledgement is sent, so
nothing published after that is lost), and ``done N`` after each burst has
been published. agentd carries every subscribed URI of a server on one
stream (rfcs/0260), so a bench expecting N subscriptions waits for N.
"""

from __future__ import annotations

import argparse
import contextvars
import os
from typing import Any

import anyio
import mcp_types as types
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.resources.types import FunctionResource
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourceUpdated

_carried: contextvars.ContextVar[int] = contextvars.ContextVar("carried", default=0)
"""The resource URIs of the listen request being served (set by the wrapper, read by the bus)."""


class _CountingBus(InMemorySubscriptionBus):
    """The SDK's bus, calling ``on_count`` with the URIs of each listen stream that joins it."""

    def __init__(self, on_count: Any) -> None:
        super().__init__()
        self._on_count = on_count

    def subscribe(self, listener: Any) -> Any:
        unsubscribe = super().subscribe(listener)
        self._on_count(_carried.get())
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
    handler = ListenHandler(bus)

    async def on_listen(ctx: Any, params: types.SubscriptionsListenRequestParams) -> Any:
        # The SDK's own handler, told how many URIs this stream carries (for --expect).
        _carried.set(len(params.notifications.resource_subscriptions or ()))
        return await handler(ctx, params)

    app._lowlevel_server.add_request_handler(
        "subscriptions/listen", types.SubscriptionsListenRequestParams, on_listen
    )
    return app, burst


async def follow_trigger(path: str, burst: Any) -> None:
    # O_RDWR keeps a writer open on the FIFO, so reads wait instead of seeing EOF between bench writes.
    fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
    buf = b""
    while True:
        await anyio.wait_readable(fd)
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            continue
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
    async with anyio.create_task_group() as tasks:
        if args.trigger:
            tasks.start_soon(follow_trigger, args.trigger, burst)
        if args.fd is not None:
            import socket

            import uvicorn

            config = uvicorn.Config(app.streamable_http_app(), log_level="warning", lifespan="on")
            await uvicorn.Server(config).serve(sockets=[socket.socket(fileno=args.fd)])
        else:
            async with stdio_server() as (read, write):
                await low.run(read, write, low.create_initialization_options())
        tasks.cancel_scope.cancel()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--uris", type=int, default=100)
    ap.add_argument("--trigger", help="FIFO to read burst sizes from (one integer per line)")
    ap.add_argument("--ready", help="FIFO to write 'ready' to once --expect listen streams are open")
    ap.add_argument("--expect", type=int, default=0, help="URIs one listen stream carries before 'ready'")
    ap.add_argument("--fd", type=int, help="serve Streamable HTTP on this inherited listening socket")
    args = ap.parse_args()
    # Streamable HTTP is served by uvicorn, which needs asyncio; stdio keeps trio (as agentd).
    anyio.run(main, args, backend="asyncio" if args.fd is not None else "trio")
