"""A small real MCP server (written with the ``mcp`` SDK) for agentd's upstream tests.

It serves "notes": named text documents kept in a JSON state file, so a change
made while a client is disconnected survives a restart of the server process.

Eras:
    ``--era modern`` (default): answers ``server/discover`` (2026-07-28) and
    serves ``subscriptions/listen``; change events go through the bus.
    ``--era legacy``: refuses ``server/discover`` so clients fall back to the
    ``initialize`` handshake; serves ``resources/subscribe`` and pushes
    ``notifications/resources/updated`` to subscribed sessions.

Catalog:
    resources ``note://<name>`` (one per note) and ``config://server``; the
    template ``note://{name}``; tools ``get_note`` and ``list_notes``
    (read-only), ``set_note`` (changes a note and notifies), ``add_note``
    (adds a resource: ``resources/list_changed``), ``add_tool`` (adds a tool:
    ``tools/list_changed``), ``emit_garbage`` and ``emit_huge_line`` (write
    non-protocol bytes to stdout), ``sleep`` (answers late; tells a
    test's port it has the call).

Fault knobs (argv): ``--exit-during-init`` (write to stderr and exit with
status 7 when the first request arrives, whatever it is: the probe, or the
``initialize`` that follows a failed probe), ``--crash-after S`` (``os._exit(3)`` after S seconds),
``--garbage-at-start N`` (write N non-JSON lines to stdout before serving),
``--no-subscribe`` (no subscribe capability), ``--grandchild`` (spawn a
sleeping grandchild that inherits stdout, to test process-group teardown; its
pid is written to ``<state>.grandchild``).

Transports: ``--transport stdio`` (default), ``--transport http --fd N`` or ``--transport sse --fd N``
(serve Streamable HTTP on an inherited, already-listening socket: the test owns
the port, so a restart needs no readiness probe).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resources.types import FunctionResource
from mcp.server.runner import serve_loop
from mcp.server.stdio import stdio_server

READ_ONLY = types.ToolAnnotations(read_only_hint=True)


class _Store:
    """Notes persisted in a JSON file (rewritten whole on every change)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if not path.exists():
            self._write({"alpha": "first note", "beta": "second note"})

    def _write(self, notes: dict[str, str]) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(notes))
        tmp.replace(self.path)

    def all(self) -> dict[str, str]:
        return dict(json.loads(self.path.read_text()))

    def get(self, name: str) -> str:
        notes = self.all()
        if name not in notes:
            raise ValueError(f"no note named {name!r}")
        return notes[name]

    def put(self, name: str, text: str) -> None:
        notes = self.all()
        notes[name] = text
        self._write(notes)


class _RawStdout:
    """The wire: synchronous writes to fd 1, shared by the SDK writer and the fault tools.

    Writes are whole lines from one thread, so a garbage line never tears a frame.
    """

    async def write(self, text: str) -> None:
        data = text.encode()
        while data:
            n = os.write(1, data)
            data = data[n:]

    async def flush(self) -> None:
        return None


def build(args: argparse.Namespace) -> MCPServer[Any]:
    legacy = args.era == "legacy"
    store = _Store(Path(args.state))
    mcp: MCPServer[Any] = MCPServer(
        "notes",
        subscriptions=False if (args.no_subscribe and not legacy) else None,
        warn_on_duplicate_resources=False,
    )
    low = mcp._lowlevel_server
    subscribed: set[str] = set()

    def add_note_resource(name: str) -> None:
        def read() -> str:
            return store.get(name)

        mcp.add_resource(
            FunctionResource.from_function(read, uri=f"note://{name}", name=name, mime_type="text/plain")
        )

    for name in store.all():
        add_note_resource(name)

    @mcp.resource("config://server", mime_type="application/json")
    def config() -> str:
        return json.dumps({"era": args.era})

    @mcp.resource("note://{name}", mime_type="text/plain")
    def note_template(name: str) -> str:
        return store.get(name)

    async def notify_updated(ctx: Context, uri: str) -> None:
        if legacy:
            if uri in subscribed:
                await ctx.session.send_resource_updated(uri)
        else:
            await ctx.notify_resource_updated(uri)

    @mcp.tool(annotations=READ_ONLY)
    def get_note(name: str) -> str:
        """Return the text of note ``name``."""
        return store.get(name)

    @mcp.tool(annotations=READ_ONLY)
    def list_notes() -> list[str]:
        """Return the names of every note."""
        return sorted(store.all())

    @mcp.tool()
    async def set_note(name: str, text: str, ctx: Context) -> str:
        """Replace the text of note ``name`` and notify subscribers of ``note://name``."""
        store.put(name, text)
        await notify_updated(ctx, f"note://{name}")
        return "ok"

    @mcp.tool()
    async def add_note(name: str, text: str, ctx: Context) -> str:
        """Create note ``name`` (a new resource) and announce the catalog change."""
        store.put(name, text)
        add_note_resource(name)
        if legacy:
            await ctx.session.send_resource_list_changed()
        else:
            await ctx.notify_resources_changed()
        return "ok"

    @mcp.tool()
    async def add_tool(name: str, ctx: Context) -> str:
        """Register a new tool called ``name`` and announce the tool-list change."""

        def extra() -> str:
            return name

        mcp.add_tool(extra, name=name, description="added at run time")
        if legacy:
            await ctx.session.send_tool_list_changed()
        else:
            await ctx.notify_tools_changed()
        return "ok"

    @mcp.tool()
    async def emit_garbage(lines: int = 1) -> str:
        """Write ``lines`` non-JSON lines straight onto stdout (the wire)."""
        for i in range(lines):
            await _RawStdout().write(f"this is not json {i}\n")
        return "garbage written"

    @mcp.tool()
    async def emit_huge_line(size: int) -> str:
        """Write one line of ``size`` bytes (no newline until the end) onto stdout."""
        await _RawStdout().write("x" * size + "\n")
        return "huge line written"

    @mcp.tool()
    async def sleep(seconds: float, receipt_port: int = 0) -> str:
        """Answer after ``seconds``; with ``receipt_port``, first write ``sleep\\n`` to 127.0.0.1 at that port
        (so a test can await the call's arrival instead of guessing a delay)."""
        if receipt_port:
            async with await anyio.connect_tcp("127.0.0.1", receipt_port) as receipt:
                await receipt.send(b"sleep\n")
        await anyio.sleep(seconds)
        return "slept"

    if legacy and not args.no_subscribe:

        async def on_subscribe(_ctx: Any, params: types.SubscribeRequestParams) -> types.EmptyResult:
            subscribed.add(str(params.uri))
            return types.EmptyResult()

        async def on_unsubscribe(_ctx: Any, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
            subscribed.discard(str(params.uri))
            return types.EmptyResult()

        low.add_request_handler("resources/subscribe", types.SubscribeRequestParams, on_subscribe)
        low.add_request_handler("resources/unsubscribe", types.UnsubscribeRequestParams, on_unsubscribe)

    if args.exit_during_init:

        async def die(_ctx: Any, _params: Any) -> Any:
            _refuse_to_start()

        low.add_request_handler("server/discover", types.RequestParams, die)
    return mcp


def _refuse_to_start() -> None:
    sys.stderr.write("notes server: fatal: refusing to start (exit-during-init knob)\n")
    sys.stderr.flush()
    os._exit(7)


async def serve_stdio(mcp: MCPServer[Any], args: argparse.Namespace) -> None:
    if args.exit_during_init:
        # Whatever the first request is (the server/discover probe, or the initialize
        # a client sends after a failed probe), the server dies before answering it.
        await anyio.to_thread.run_sync(sys.stdin.buffer.readline)
        _refuse_to_start()
    for i in range(args.garbage_at_start):
        await _RawStdout().write(f"garbage before the handshake {i}\n")
    low = mcp._lowlevel_server
    options = low.create_initialization_options(
        NotificationOptions(resources_changed=True, tools_changed=True)
    )
    async with stdio_server(stdout=_RawStdout()) as (read_stream, write_stream):  # type: ignore[arg-type]
        if args.era == "legacy":
            # Handshake-only loop: a 2026-07-28 probe is refused, so clients fall back to initialize.
            async with low.lifespan(low) as state:
                await serve_loop(low, read_stream, write_stream, lifespan_state=state, init_options=options)
        else:
            await low.run(read_stream, write_stream, options)


async def serve_http(mcp: MCPServer[Any], args: argparse.Namespace) -> None:
    import socket

    import uvicorn

    sock = socket.socket(fileno=args.fd)
    # --transport sse: the legacy HTTP+SSE transport (GET /sse, POST /messages/).
    app = mcp.sse_app() if args.transport == "sse" else mcp.streamable_http_app()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    await server.serve(sockets=[sock])


async def main_async(args: argparse.Namespace) -> None:
    mcp = build(args)
    async with anyio.create_task_group() as tg:
        if args.crash_after is not None:

            async def crash() -> None:
                await anyio.sleep(args.crash_after)
                os._exit(3)

            tg.start_soon(crash)
        if args.grandchild:
            # Deliberately blocking: a test-server knob run once before serving.
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # noqa: ASYNC220
            Path(args.state + ".grandchild").write_text(str(child.pid))  # noqa: ASYNC240
        if args.transport == "stdio":
            await serve_stdio(mcp, args)
        else:
            await serve_http(mcp, args)
        tg.cancel_scope.cancel()
    if args.close_work is not None:
        # Work a real server does once its client closes (flushing state): the
        # marker exists only if the server was given the time to finish it.
        await anyio.sleep(args.close_work)
        Path(args.state + ".closed").write_text("closed")  # noqa: ASYNC240


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--era", choices=["modern", "legacy"], default="modern")
    parser.add_argument("--state", required=True, help="JSON file holding the notes (created if missing)")
    parser.add_argument("--transport", choices=["stdio", "http", "sse"], default="stdio")
    parser.add_argument("--fd", type=int, help="listening socket fd for --transport http/sse")
    parser.add_argument("--exit-during-init", action="store_true")
    parser.add_argument("--crash-after", type=float)
    parser.add_argument("--garbage-at-start", type=int, default=0)
    parser.add_argument("--no-subscribe", action="store_true")
    parser.add_argument("--grandchild", action="store_true")
    parser.add_argument(
        "--close-work", type=float, help="seconds of work after stdin closes, then STATE.closed"
    )
    args = parser.parse_args()
    anyio.run(main_async, args)


if __name__ == "__main__":
    main()
