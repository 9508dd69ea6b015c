"""What the stdio and HTTP transports share: the loss record and the context-manager shell.

A transport is an async context manager yielding ``(read_stream, write_stream)``
for ``mcp.Client``; its :meth:`Transport._run` does the work. When the server
goes away, :meth:`Transport.mark_lost` records why (the first reason wins) and
sets :attr:`Transport.lost`, which the connection watches.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from types import TracebackType

import trio


class Transport:
    """The loss record and ``async with`` shell of a transport; subclasses implement :meth:`_run`.

    Args:
        server: the server's configured name (for messages).
    """

    def __init__(self, server: str) -> None:
        self.server = server
        self.lost_reason: str | None = None
        """Why the connection ended on the server's side, once it has (``None`` while it is up)."""
        self.lost = trio.Event()
        """Set when the server went away (exit, EOF, a bad line, a lost HTTP session)."""
        self.reached = False
        """Whether the server answered at all: its process started, or an HTTP response came
        back. A try that never reached the server says nothing about its era or transport."""
        self._ctx: AbstractAsyncContextManager[tuple[object, object]] | None = None

    def mark_lost(self, reason: str) -> None:
        """Record that the connection is unusable (the first reason wins); teardown follows."""
        if self.lost_reason is None:
            self.lost_reason = reason
            self.lost.set()

    def _run(self) -> AbstractAsyncContextManager[tuple[object, object]]:
        """Open the connection; yield ``(read_stream, write_stream)``; close it on exit."""
        raise NotImplementedError

    async def __aenter__(self) -> tuple[object, object]:
        self._ctx = self._run()
        return await self._ctx.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._ctx is not None
        return await self._ctx.__aexit__(exc_type, exc, tb)


__all__ = ["Transport"]
