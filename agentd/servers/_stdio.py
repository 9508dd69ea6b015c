"""The stdio transport of the bundled servers: trio-native reads, batched writes, known flushes.

Why not the SDK's ``stdio_server``: it reads stdin with a blocking ``readline``
in a worker thread that cannot be cancelled (so SIGTERM leaves the server
running, lock held, until the client writes or closes stdin), and writes each
message with two more thread hops (``write`` then ``flush``) after whatever
holds the event loop: a notification leaves later than the work that follows
it. This transport

* reads fd 0 with non-blocking reads (``trio.lowlevel.FdStream``): a
  cancellation (SIGTERM, SIGINT) ends it at once, whatever stdin does;
* writes fd 1 at once when nothing is queued ahead (``send_raw`` puts the
  bytes in the pipe before it returns), otherwise from one writer task that
  batches whatever is queued into one ``write``;
  :meth:`StdioTransport.wait_written` returns once everything queued before
  the call is in the pipe (the client receives it even if this process is
  SIGKILLed right after);
* accepts pre-serialised JSON-RPC lines (:meth:`StdioTransport.send_raw`) in
  the same queue as the SDK's messages, so custom notifications keep their
  order without a pydantic round trip each.

While serving, fd 0 points at ``/dev/null`` and fd 1 at stderr (stray output
of handlers or children never corrupts the wire); both are restored on exit.
stdin or stdout that cannot be polled (a regular file, ``/dev/null``) is read
or written in a worker thread instead, abandoned on cancellation.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import stat
from typing import Final, TypeAlias

import anyio
import mcp_types as types
import trio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.lowlevel.server import Server
from mcp.server.models import InitializationOptions
from mcp.shared.message import SessionMessage

__all__ = ["MAX_INBOUND_LINE", "StdioTransport"]

MAX_INBOUND_LINE: Final = 64 * 1024 * 1024
"""Longest JSON-RPC line accepted from the client; a longer one is dropped (reported to the SDK as an error)."""
_READ_SIZE: Final = 65536
_BATCH_BYTES: Final = 256 * 1024  # one write() carries at most about this much


def _pollable(fd: int) -> bool:
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or (stat.S_ISCHR(mode) and os.isatty(fd))


class _ThreadFd:
    """Blocking reads/writes of an fd that cannot be polled, in a worker thread (abandoned on cancel)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    async def receive_some(self, n: int) -> bytes:
        return await trio.to_thread.run_sync(os.read, self.fd, n, abandon_on_cancel=True)

    async def send_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = await trio.to_thread.run_sync(os.write, self.fd, view, abandon_on_cancel=True)
            view = view[n:]

    async def aclose(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


class _CountingSend:
    """The SDK's write stream: counts what it queues, so :meth:`StdioTransport.wait_written` can wait for it."""

    def __init__(
        self, transport: StdioTransport, inner: MemoryObjectSendStream[SessionMessage | bytes]
    ) -> None:
        self._transport = transport
        self._inner = inner

    async def send(self, item: SessionMessage, /) -> None:
        self._transport.queued += 1
        self._transport._unwritten += 1
        await self._inner.send(item)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _CountingSend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


_Reader: TypeAlias = "trio.lowlevel.FdStream | _ThreadFd"


class StdioTransport:
    """Serve one MCP connection over this process's stdin/stdout (see the module docstring)."""

    def __init__(self) -> None:
        self._send: MemoryObjectSendStream[SessionMessage | bytes] | None = None
        self.queued = 0
        """Items handed to the writer so far."""
        self.written = 0
        """Items written to the pipe so far."""
        self._unwritten = 0  # items accepted and not yet completely in the pipe
        self._out_fd: int | None = None  # set when stdout can be written without blocking (a pipe, a tty)
        self._progress = trio.Event()
        self.closed = False

    # ---------------------------------------------------------------- sending

    async def send_raw(self, data: bytes) -> None:
        """Send pre-serialised JSON-RPC lines (each ending in a newline), after everything queued so far.

        With nothing queued ahead, the bytes are written to the pipe before this returns.
        """
        if self._send is None or self.closed:
            raise trio.ClosedResourceError("the stdio transport is not serving")
        self.queued += 1
        if self._unwritten == 0 and self._out_fd is not None:
            try:
                data = data[self._write_now(data) :]
            except OSError as exc:
                self.closed = True
                raise trio.ClosedResourceError("the client went away") from exc
            if not data:
                self._wrote(1)
                return
        self._unwritten += 1
        try:
            await self._send.send(data)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            raise trio.ClosedResourceError("the client went away") from exc

    def _write_now(self, data: bytes) -> int:
        """Write as much of ``data`` as the pipe takes without blocking; returns how much."""
        assert self._out_fd is not None
        view = memoryview(data)
        done = 0
        while done < len(data):
            try:
                done += os.write(self._out_fd, view[done:])
            except BlockingIOError:
                break
        return done

    async def _write_all(self, writer: _ThreadFd, data: bytes) -> None:
        if self._out_fd is None:
            await writer.send_all(data)
            return
        done = self._write_now(data)
        while done < len(data):
            await trio.lowlevel.wait_writable(self._out_fd)
            done += self._write_now(data[done:])

    def _wrote(self, items: int) -> None:
        self.written += items
        self._progress.set()
        self._progress = trio.Event()

    async def wait_written(self) -> None:
        """Return once every item queued before this call has been written to stdout."""
        target = self.queued
        while self.written < target and not self.closed:
            await self._progress.wait()

    # ---------------------------------------------------------------- serving

    async def serve(self, low: Server, init_options: InitializationOptions) -> None:
        """Run the low-level server ``low`` over stdio until stdin closes (or cancellation)."""
        in_fd = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
        out_fd = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
        keep_in = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
        keep_out = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
        devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.dup2(devnull, 0)
            os.dup2(2, 1)
        finally:
            os.close(devnull)
        reader: _Reader = trio.lowlevel.FdStream(in_fd) if _pollable(in_fd) else _ThreadFd(in_fd)
        writer = _ThreadFd(out_fd)
        out_was_blocking = True
        if _pollable(out_fd):
            out_was_blocking = os.get_blocking(out_fd)
            os.set_blocking(out_fd, False)
            self._out_fd = out_fd
        read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_send, write_recv = anyio.create_memory_object_stream[SessionMessage | bytes](math.inf)
        self._send = write_send.clone()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._read_loop, reader, read_send)
                nursery.start_soon(self._write_loop, writer, write_recv, nursery.cancel_scope)
                await low.run(read_recv, _CountingSend(self, write_send), init_options)
                nursery.cancel_scope.cancel()
        finally:
            self.closed = True
            self._progress.set()
            self._send.close()
            if self._out_fd is not None:
                with contextlib.suppress(OSError):
                    os.set_blocking(out_fd, out_was_blocking)
                self._out_fd = None
            with trio.CancelScope(shield=True):
                await reader.aclose()
                await writer.aclose()
            os.dup2(keep_in, 0)
            os.dup2(keep_out, 1)
            os.close(keep_in)
            os.close(keep_out)

    async def _read_loop(
        self, reader: _Reader, out: MemoryObjectSendStream[SessionMessage | Exception]
    ) -> None:
        buf = b""
        dropping = False
        async with out:
            while True:
                try:
                    chunk = await reader.receive_some(_READ_SIZE)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    return
                if not chunk:
                    return
                buf += chunk
                lines = buf.split(b"\n")
                buf = lines.pop()
                for line in lines:
                    if dropping:
                        dropping = False
                        continue
                    if not line.strip():
                        continue
                    try:
                        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                    except Exception as exc:  # the SDK reports a bad line to its own handler
                        await out.send(exc)
                        continue
                    await out.send(SessionMessage(message))
                if len(buf) > MAX_INBOUND_LINE:
                    buf = b""
                    dropping = True
                    await out.send(ValueError(f"dropped an inbound line over {MAX_INBOUND_LINE} bytes"))

    async def _write_loop(
        self,
        writer: _ThreadFd,
        items: MemoryObjectReceiveStream[SessionMessage | bytes],
        scope: trio.CancelScope,
    ) -> None:
        async with items:
            while True:
                try:
                    first = await items.receive()
                except (anyio.EndOfStream, anyio.ClosedResourceError):
                    return
                batch = [first]
                size = 0
                while size < _BATCH_BYTES:
                    try:
                        batch.append(items.receive_nowait())
                    except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                        break
                    size += 1024
                data = b"".join(
                    item
                    if isinstance(item, bytes)
                    else item.message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"
                    for item in batch
                )
                try:
                    await self._write_all(writer, data)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    # The client is gone: nothing more can be delivered; stop serving.
                    self.closed = True
                    self._progress.set()
                    scope.cancel()
                    return
                self._unwritten -= len(batch)
                self._wrote(len(batch))
