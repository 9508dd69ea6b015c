"""Launch ``agentd serve NAME`` for tests: over HTTP (waiting for its ``listening on`` line)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import trio

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
        with trio.CancelScope(shield=True):
            proc.terminate()
            with trio.move_on_after(10):
                await proc.wait()
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


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
