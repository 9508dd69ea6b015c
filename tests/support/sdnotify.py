"""The service manager's end of ``NOTIFY_SOCKET``, for tests of agentd's sd_notify messages."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import trio

STEP_TIMEOUT = 30
"""Seconds for one expected notification (start-up imports and a server connect on a busy machine)."""


class NotifyListener:
    """A bound unix datagram socket: every datagram agentd sent, in order."""

    def __init__(self, sock: trio.socket.SocketType) -> None:
        self.sock = sock
        self.messages: list[str] = []

    async def next(self, timeout: float = STEP_TIMEOUT) -> str:
        with trio.fail_after(timeout):
            data = await self.sock.recv(65536)
        text = data.decode()
        self.messages.append(text)
        return text

    async def until(self, line: str, describe: Callable[[], str] = lambda: "") -> str:
        """Read until a message holding ``line`` (e.g. ``READY=1``); on a timeout, fail with ``describe()``."""
        while True:
            with trio.move_on_after(STEP_TIMEOUT) as scope:
                message = await self.next()
            if scope.cancelled_caught:
                raise AssertionError(f"no {line!r} in {self.messages}\n{describe()}")
            if line in message.split("\n"):
                return message


def bind_address(address: str) -> str:
    """The ``bind`` form of a ``NOTIFY_SOCKET`` value (``@name`` is the abstract namespace)."""
    return "\0" + address[1:] if address.startswith("@") else address


@asynccontextmanager
async def notify_socket(address: str) -> AsyncIterator[NotifyListener]:
    """Listen where ``NOTIFY_SOCKET=address`` points, for the duration of the block."""
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        await sock.bind(bind_address(address))
        yield NotifyListener(sock)
    finally:
        sock.close()


def lines(messages: list[str]) -> list[str]:
    """Every ``VAR=VALUE`` line of every message, in order."""
    return [line for m in messages for line in m.split("\n")]
