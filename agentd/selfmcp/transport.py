"""JSON-lines MCP transport over a connected trio stream (the child's socket).

Used on both ends of the self-MCP channel: the child's ``mcp.Client`` and the
supervisor's ``mcp.server.lowlevel.Server.run`` both take the
``(read_stream, write_stream)`` pair this yields. One JSON-RPC message per
line, like the stdio transport, with a cap on line length so a runaway peer
cannot grow our memory.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import mcp_types as types
import trio
from mcp.shared.message import SessionMessage

#: Longest line accepted from the peer. Tool results pass through this
#: channel, so it is generous; anything longer is a protocol violation.
MAX_LINE_BYTES = 64 * 1024 * 1024

#: Bytes asked of the socket per read.
READ_CHUNK = 256 * 1024


class LineTooLong(Exception):
    """The peer sent a line longer than :data:`MAX_LINE_BYTES`."""


@asynccontextmanager
async def stream_transport(
    stream: trio.abc.Stream, *, max_line: int = MAX_LINE_BYTES
) -> AsyncIterator[
    tuple[
        anyio.abc.ObjectReceiveStream[SessionMessage | Exception], anyio.abc.ObjectSendStream[SessionMessage]
    ]
]:
    """Bridge ``stream`` to the SDK's message streams until the block exits or the peer closes."""
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](16)

    async def reader() -> None:
        buf = bytearray()
        async with read_writer:
            try:
                while True:
                    chunk = await stream.receive_some(READ_CHUNK)
                    if not chunk:
                        return
                    buf += chunk
                    while (nl := buf.find(b"\n")) >= 0:
                        line = bytes(buf[:nl])
                        del buf[: nl + 1]
                        if line.strip():
                            await read_writer.send(_parse(line))
                    if len(buf) > max_line:
                        await read_writer.send(LineTooLong(f"line longer than {max_line} bytes"))
                        return
            except (
                trio.BrokenResourceError,
                trio.ClosedResourceError,
                anyio.BrokenResourceError,
                anyio.ClosedResourceError,
                OSError,
            ):
                return

    async def writer() -> None:
        async with write_reader:
            try:
                async for msg in write_reader:
                    data = msg.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await stream.send_all(data.encode() + b"\n")
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                return

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        nursery.start_soon(writer)
        try:
            yield read_stream, write_stream
        finally:
            nursery.cancel_scope.cancel()
            await write_stream.aclose()
            await read_stream.aclose()


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        return exc
