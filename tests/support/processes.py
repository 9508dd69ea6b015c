"""Test server processes on sockets the test owns: listening sockets, the notes server over HTTP, stopping."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Literal

import trio

NOTES_SERVER = str(Path(__file__).resolve().parents[1] / "mcpservers" / "notes_server.py")

STOP_GRACE = 5.0
"""Seconds a test server gets to exit after SIGTERM before SIGKILL."""


def listening(backlog: int = 64) -> tuple[socket.socket, int]:
    """A loopback socket already listening (a server inherits it, so a restart needs no readiness probe), and its port."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(backlog)
    return listener, listener.getsockname()[1]


async def stop(process: trio.Process, grace: float = STOP_GRACE) -> None:
    """SIGTERM ``process``, SIGKILL it after ``grace`` seconds; shielded, so it runs during a cancellation."""
    with trio.CancelScope(shield=True):
        if process.returncode is None:
            process.terminate()
            with trio.move_on_after(grace):
                await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()


async def start_notes_server(
    listener: socket.socket, state: Path, transport: Literal["http", "sse"] = "http", *, quiet: bool = False
) -> trio.Process:
    """The notes server over ``transport`` on ``listener``, its notes in ``state`` (``quiet``: no stdout/stderr)."""
    fd = listener.fileno()
    output = subprocess.DEVNULL if quiet else None
    return await trio.lowlevel.open_process(
        [sys.executable, NOTES_SERVER, "--state", str(state), "--transport", transport, "--fd", str(fd)],
        pass_fds=(fd,),
        stdin=subprocess.DEVNULL,
        stdout=output,
        stderr=output,
    )


@asynccontextmanager
async def notes_server(
    listener: socket.socket, state: Path, transport: Literal["http", "sse"] = "http"
) -> AsyncIterator[trio.Process]:
    """:func:`start_notes_server` for the block, stopped at its end."""
    process = await start_notes_server(listener, state, transport)
    try:
        yield process
    finally:
        await stop(process)
