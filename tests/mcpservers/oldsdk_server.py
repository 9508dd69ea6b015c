"""A FastMCP server written against the Python ``mcp`` SDK 1.x, for agentd's era tests.

It runs under an *old* SDK in a virtual environment of its own
(``tests/support/oldmcp.py`` builds it), never under agentd's interpreter, so it
imports nothing from the repository and only what every 1.x release since
1.8 has: ``FastMCP``, its ``sse_app``/``streamable_http_app`` and the
low-level server's ``subscribe_resource`` decorator.

Catalog: tools ``echo(text)``, ``add(a, b)`` and ``set_note(name, text)``
(changes a note and sends ``notifications/resources/updated`` to every session
subscribed to ``note://NAME``); resources ``note://alpha`` and ``note://beta``.

1.x servers register a ``resources/subscribe`` handler but always advertise
``resources.subscribe: false``; servers that push updates on 1.x patch the
capability in, as this one does with ``--subscribe``.

Transports: ``stdio`` (default), ``sse --fd N`` (the HTTP+SSE transport: GET
``/sse``, POST ``/messages/``) or ``http --fd N`` (Streamable HTTP at ``/mcp``),
on an inherited, already-listening socket (the test owns the port).
"""

from __future__ import annotations

import argparse
import socket
import sys
from typing import Any

import anyio
from mcp import types
from mcp.server.fastmcp import FastMCP

NOTES: dict[str, str] = {"alpha": "first", "beta": "second"}
SUBSCRIBERS: dict[str, list[Any]] = {}


def build(subscribe: bool) -> FastMCP:
    mcp = FastMCP("oldsdk", log_level="WARNING")
    low = mcp._mcp_server

    @mcp.tool()
    def echo(text: str) -> str:
        """Return the text."""
        return text

    @mcp.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @mcp.tool()
    async def set_note(name: str, text: str) -> str:
        """Change a note and notify its subscribers."""
        NOTES[name] = text
        uri = f"note://{name}"
        for session in list(SUBSCRIBERS.get(uri, [])):
            try:
                await session.send_resource_updated(uri)
            except Exception:  # a session that went away stops being notified
                SUBSCRIBERS[uri].remove(session)
        return f"{name} = {text}"

    for name in NOTES:
        mcp.resource(f"note://{name}", name=name, mime_type="text/plain")(_reader(name))

    if subscribe:

        @low.subscribe_resource()
        async def _subscribe(uri: Any) -> None:
            SUBSCRIBERS.setdefault(str(uri), []).append(low.request_context.session)

        @low.unsubscribe_resource()
        async def _unsubscribe(uri: Any) -> None:
            sessions = SUBSCRIBERS.get(str(uri), [])
            if low.request_context.session in sessions:
                sessions.remove(low.request_context.session)

        original = low.get_capabilities

        def capabilities(*args: Any, **kwargs: Any) -> types.ServerCapabilities:
            caps = original(*args, **kwargs)
            if caps.resources is not None:
                caps.resources.subscribe = True
            return caps

        low.get_capabilities = capabilities  # type: ignore[method-assign]
    return mcp


def _reader(name: str) -> Any:
    def read() -> str:
        return NOTES[name]

    return read


async def serve_http(mcp: FastMCP, transport: str, fd: int) -> None:
    import uvicorn

    sock = socket.socket(fileno=fd)
    app = mcp.sse_app() if transport == "sse" else mcp.streamable_http_app()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    await server.serve(sockets=[sock])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("transport", choices=["stdio", "sse", "http"], nargs="?", default="stdio")
    parser.add_argument("--fd", type=int, help="listening socket fd for sse/http")
    parser.add_argument("--subscribe", action="store_true", help="advertise and serve resources/subscribe")
    args = parser.parse_args()
    mcp = build(args.subscribe)
    if args.transport == "stdio":
        anyio.run(mcp.run_stdio_async)
    else:
        if args.fd is None:
            sys.exit("sse and http need --fd N (an inherited listening socket)")
        anyio.run(serve_http, mcp, args.transport, args.fd)


if __name__ == "__main__":
    main()
