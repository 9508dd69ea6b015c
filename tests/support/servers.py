"""Launch ``agentd serve NAME`` for tests (over HTTP, waiting for its ``listening on`` line), and
connect an SDK client subscribed to its resources in either protocol era."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import trio
from mcp import Client

from tests.support.processes import stop
from tests.support.rawmcp import REPO, server_env

START_BOUND = 30.0
"""A server prints ``listening on`` after its imports (~0.5 s; more on a loaded 2-core box)."""


@dataclass
class HttpServer:
    proc: trio.Process
    url: str
    """``http://HOST:PORT/mcp`` as the server printed it."""


def serve_argv(name: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "agentd.servers", name, *args]


@asynccontextmanager
async def http_server(argv: Sequence[str], *, env: dict[str, str] | None = None) -> AsyncIterator[HttpServer]:
    """Start a bundled server with ``--http``; yield once it listens; terminate it after."""
    proc = await trio.lowlevel.open_process(
        list(argv), cwd=REPO, env=env or server_env(), stdin=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        assert proc.stderr is not None
        buf = b""
        with trio.fail_after(START_BOUND):
            while b"listening on " not in buf or not buf.endswith(b"\n"):
                chunk = await proc.stderr.receive_some()
                assert chunk, f"the server exited before listening: {buf.decode(errors='replace')}"
                buf += chunk
        line = next(ln for ln in buf.decode().splitlines() if "listening on " in ln)
        yield HttpServer(proc, line.split("listening on ", 1)[1].strip())
    finally:
        await stop(proc, grace=10)


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``agentd serve ARGS`` to completion (for usage errors), stdin closed."""
    return subprocess.run(
        serve_argv(*args),
        cwd=REPO,
        env=env or server_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


#: How long a test waits for one push (a change travelling file -> server -> client).
PUSH_TIMEOUT = 10.0


class Pushes:
    """The URIs of ``resources/updated`` pushes as they arrive, from either era."""

    def __init__(self, capacity: int = 1000, timeout: float = PUSH_TIMEOUT) -> None:
        self.send, self.recv = trio.open_memory_channel[str](capacity)
        self.timeout = timeout

    async def handler(self, message: Any) -> None:
        """The client's message handler (handshake era: pushes are notifications)."""
        msg = getattr(message, "root", message)
        if getattr(msg, "method", None) == "notifications/resources/updated":
            self.send.send_nowait(str(msg.params.uri))

    async def next(self) -> str:
        with trio.fail_after(self.timeout):
            return await self.recv.receive()

    async def until(self, uri: str) -> None:
        """Skip pushes until one for ``uri`` arrives."""
        while await self.next() != uri:
            pass


@asynccontextmanager
async def subscribed(server: Any, era: str, uris: Sequence[str]) -> AsyncIterator[tuple[Client, Pushes]]:
    """An SDK client of ``server`` subscribed to ``uris``: "legacy" subscribes, "modern" listens."""
    pushes = Pushes()
    legacy = era == "legacy"
    # Modern listen events also reach a message handler as raw notifications: count them once (from the stream).
    async with Client(
        server, mode="legacy" if legacy else "auto", message_handler=pushes.handler if legacy else None
    ) as client:
        if legacy:
            for uri in uris:
                await client.subscribe_resource(uri)
            yield client, pushes
            return
        async with client.listen(resource_subscriptions=list(uris)) as sub, trio.open_nursery() as nursery:

            async def pump() -> None:
                async for ev in sub:
                    pushes.send.send_nowait(str(ev.uri))

            nursery.start_soon(pump)
            yield client, pushes
            nursery.cancel_scope.cancel()
