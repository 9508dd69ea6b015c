"""The third-party ``@modelcontextprotocol/server-everything`` (Node) over HTTP, for interop tests.

``scripts/setup`` installs it and ``AGENTD_EVERYTHING_SERVER`` points at its
entry point; a missing install fails the test (never a skip). Over HTTP it
listens on ``PORT`` (it cannot inherit a socket): the test picks a free port
and waits for the server's own "listening" line on stderr, no polling.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Literal

import pytest
import trio

from tests.support.processes import stop

INSTALL = (
    "run scripts/setup (it installs @modelcontextprotocol/server-everything from npm into .venv/npm) and set "
    "AGENTD_EVERYTHING_SERVER=.venv/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
)

START_TIMEOUT = 30.0
"""Node starts the server in well under a second; the bound is for a loaded CI machine."""


def everything_entry() -> str:
    """The server's ``dist/index.js`` (fails the test with the fix when it is not installed)."""
    path = os.environ.get("AGENTD_EVERYTHING_SERVER")
    if not path:
        pytest.fail(f"AGENTD_EVERYTHING_SERVER is not set: {INSTALL}")
    if not Path(path).is_file():
        pytest.fail(f"AGENTD_EVERYTHING_SERVER={path!r} is not a file: {INSTALL}")
    if shutil.which("node") is None:
        pytest.fail("node is not on PATH: install Node.js 20 or newer to run the interop test")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def everything_http(mode: Literal["sse", "streamableHttp"]) -> AsyncIterator[str]:
    """server-everything in ``mode`` on a free loopback port for the block; yields its endpoint URL."""
    port = _free_port()
    process = await trio.lowlevel.open_process(
        ["node", everything_entry(), mode],
        env={**os.environ, "PORT": str(port)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        assert process.stderr is not None
        seen = b""
        with trio.fail_after(START_TIMEOUT):
            while str(port).encode() not in seen:
                chunk = await process.stderr.receive_some(4096)
                if not chunk:
                    raise AssertionError(f"server-everything {mode} exited before listening: {seen!r}")
                seen += chunk
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_drain, process.stderr)
            yield f"http://127.0.0.1:{port}/" + ("sse" if mode == "sse" else "mcp")
            nursery.cancel_scope.cancel()
    finally:
        await stop(process)


async def _drain(stream: trio.abc.ReceiveStream) -> None:
    """Keep reading the server's stderr so its log lines never block it."""
    while await stream.receive_some(65536):
        pass
