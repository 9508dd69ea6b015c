"""Framing of the control channel: one JSON frame per line, with a cap on line length.

Both ends use :class:`FrameStream` (the supervisor's per-child reader task and
the child's link); the child reads its first frame, the spawn payload, with
the blocking :func:`read_first_line` before it starts trio. What a frame may
contain is :mod:`agentd.selfmcp.protocol`'s business; this module only cuts
lines and enforces the size cap, so a peer that never sends a newline cannot
grow our memory.
"""

from __future__ import annotations

import socket

import trio

from agentd.core.errors import ProtocolError
from agentd.selfmcp.protocol import Frame, encode

#: Bytes asked of the socket per read.
READ_CHUNK = 64 * 1024


class FrameStream:
    """Frames over a connected trio stream. One task receives, one task sends.

    Args:
        stream: the connected stream (a socketpair end).
        max_line: longest line accepted from the peer, in bytes (without the newline).
    """

    def __init__(self, stream: trio.abc.Stream, *, max_line: int) -> None:
        self._stream = stream
        self._max_line = max_line
        self._buf = bytearray()
        self._scanned = 0

    async def receive_line(self) -> bytes | None:
        """The next line (without its newline), or None once the peer closed the channel.

        Raises:
            ProtocolError: the peer sent a line longer than ``max_line``, or closed
                the channel in the middle of one.
        """
        while True:
            nl = self._buf.find(b"\n", self._scanned)
            if nl >= 0:
                line = bytes(self._buf[:nl])
                del self._buf[: nl + 1]
                self._scanned = 0
                if len(line) > self._max_line:
                    raise ProtocolError(f"frame longer than {self._max_line} bytes")
                return line
            self._scanned = len(self._buf)
            if len(self._buf) > self._max_line:
                raise ProtocolError(f"frame longer than {self._max_line} bytes")
            try:
                chunk = await self._stream.receive_some(READ_CHUNK)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                chunk = b""
            if not chunk:
                if self._buf:
                    raise ProtocolError(f"channel closed in the middle of a frame ({len(self._buf)} bytes)")
                return None
            self._buf += chunk

    async def send(self, frame: Frame) -> None:
        """Write one frame (raises ``trio.BrokenResourceError`` once the peer is gone)."""
        await self._stream.send_all(encode(frame))

    async def aclose(self) -> None:
        await self._stream.aclose()


def read_first_line(sock: socket.socket, *, max_line: int) -> bytes:
    """Blocking: read exactly one line from a fresh channel (the spawn payload).

    Raises:
        EOFError: the supervisor closed the channel first.
        ProtocolError: the line is too long, or more bytes follow it (the
            supervisor sends nothing else before the child's first request).
    """
    buf = bytearray()
    while b"\n" not in buf:
        if len(buf) > max_line:
            raise ProtocolError(f"spawn payload longer than {max_line} bytes")
        chunk = sock.recv(READ_CHUNK)
        if not chunk:
            raise EOFError("the supervisor closed the channel before sending the spawn payload")
        buf += chunk
    line, _, rest = bytes(buf).partition(b"\n")
    if rest:
        raise ProtocolError("unexpected bytes after the spawn payload")
    return line
