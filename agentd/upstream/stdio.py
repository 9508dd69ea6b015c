"""agentd's own stdio transport for upstream MCP servers.

The SDK's ``stdio_client`` passes the server's stderr straight through, has no
cap on a stdout line, only notices a dead server when its stdout reaches EOF
(which never happens while an orphaned grandchild holds the pipe), and polls
``returncode`` while stopping it. This transport keeps the SDK's wire format
and shutdown order but gives agentd the guarantees it needs:

* The process is its own session and process group; the whole group is killed
  when the leader exits (no orphaned grandchildren) and at teardown.
* Process exit is awaited directly (trio waits on a pidfd), so a dead server
  ends the read stream at once: the dispatcher then fails every pending
  request with "connection closed" instead of hanging.
* stderr goes into a bounded ring buffer (:meth:`StdioTransport.stderr_tail`),
  quoted in errors such as "the server exited during initialize".
* A stdout line that is not JSON-RPC is reported to telemetry and skipped; the
  connection survives.
* A response whose id was never sent (or was answered already) is counted
  (``upstream.unknown_response``) and dropped.
* A stdout line longer than ``max_line_bytes`` is discarded as it streams in
  (memory stays bounded); the request it answers fails with an error naming
  the cap, and the connection stays up.
* Given ``probe_silence``, a server that takes the ``server/discover`` probe
  off its stdin and then says nothing on stdout for that long while it lives
  (an SDK that ignores the probe, such as the Python ``mcp`` up to 1.8) is
  declared lost at once, so the connection tries ``initialize`` without
  waiting out the SDK's 10 s probe timeout (rfcs/0378).

Shutdown contract: close stdin, wait :data:`EXIT_GRACE`, SIGTERM the process
group, wait :data:`TERM_GRACE`, SIGKILL the group; shielded from cancellation,
every wait bounded.
"""

from __future__ import annotations

import array
import fcntl
import os
import re
import signal
import subprocess
import termios
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Literal

import anyio
import mcp_types as types
import trio
from anyio.streams.memory import MemoryObjectSendStream
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from agentd.core.prelaunch import PASSED_ENV, ChildProcess, EarlyProcess, server_environment
from agentd.observe.telemetry import Telemetry
from agentd.upstream.transport import Transport

__all__ = [
    "EXIT_GRACE",
    "MAX_LINE_BYTES",
    "PASSED_ENV",
    "PROBE_SILENCE",
    "STDERR_TAIL_BYTES",
    "TERM_GRACE",
    "StdioTransport",
    "server_environment",
]

EXIT_GRACE = 2.0
"""Seconds a server gets to exit on its own after its stdin closes (the MCP shutdown
sequence); long enough to flush, short enough that a drain is not held up."""

TERM_GRACE = 2.0
"""Seconds between SIGTERM and SIGKILL of the server's process group."""

STDOUT_EOF_AFTER_EXIT = 1.0
"""Seconds to wait for stdout EOF once the server process has exited and its group was
killed; only a process stuck in the kernel outlives SIGKILL, so this is a backstop."""

EXIT_AFTER_EOF = 0.5
"""Seconds to wait, after stdout EOF, for the process to exit so the error can name its
exit status; a server that closes stdout but lives on is declared lost after this."""

MAX_LINE_BYTES = 16 * 1024 * 1024
"""Default cap on one stdout line (one JSON-RPC message). Large resource bodies fit;
a runaway server cannot exhaust the supervisor's memory."""

_ID_SCAN_BYTES = 4096
"""How much of an oversized message is searched for its request id (servers put it first)."""

_ID_RE = re.compile(rb'"id"\s*:\s*("(?:[^"\\]|\\.)*"|-?\d+)')
"""The JSON-RPC ``id`` member near the start of a message."""

STDERR_TAIL_BYTES = 8 * 1024
"""Bytes of the server's most recent stderr kept for error messages."""

PROBE_SILENCE = 1.0
"""Seconds a stdio server may stay silent after taking the ``server/discover`` probe off its
stdin before it is taken for one that ignores the probe (rfcs/0378). A server that answers
it (with a result or an error) does so in milliseconds once it reads it; a server still
importing has not read it yet, so its start-up time does not count here."""

PROBE_READ_POLL = 0.02
"""Seconds between looks at whether the server has read the probe from its stdin pipe. Linux
gives no readiness event for "the reader drained the pipe", so the connect path polls
(``FIONREAD``) until it has: at most for the server's start-up, and only on a probe try."""

_READ_CHUNK = 64 * 1024
_GARBAGE_PREVIEW = 200


@dataclass
class _Ring:
    """The last ``limit`` bytes written to it."""

    limit: int
    data: bytearray = field(default_factory=bytearray)

    def add(self, chunk: bytes | bytearray) -> None:
        self.data += chunk
        if len(self.data) > self.limit:
            del self.data[: len(self.data) - self.limit]


class StdioTransport(Transport):
    """An MCP ``Transport`` that runs a server as a child process.

    Use as an async context manager yielding ``(read_stream, write_stream)``
    for ``mcp.Client``. After the read stream ends, :attr:`lost_reason` says
    why (exit status, EOF, oversized line).

    Args:
        server: the server's configured name (for messages).
        command: the executable.
        args: its arguments.
        env: variables added over a minimal inherited environment (HOME, PATH, ...) and the
            proxy and CA settings (:data:`PASSED_ENV`).
        cwd: working directory, or ``None`` for the supervisor's.
        telemetry: where skipped stdout lines are reported.
        max_line_bytes: cap on one stdout line.
        early: the server's process, already started (:mod:`agentd.core.prelaunch`):
            adopted instead of starting one.
        probe_silence: on a try that probes the era, seconds of silence after the server
            read the ``server/discover`` probe before the connection is declared lost
            (:attr:`ignored_probe`); ``None``: wait for the SDK's own probe timeout.
    """

    def __init__(
        self,
        server: str,
        command: str,
        args: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        telemetry: Telemetry,
        max_line_bytes: int = MAX_LINE_BYTES,
        early: EarlyProcess | None = None,
        probe_silence: float | None = None,
    ) -> None:
        super().__init__(server)
        self._early = early
        self.command = command
        self.args = list(args)
        self.env = dict(env or {})
        self.cwd = cwd
        self.telemetry = telemetry
        self.max_line_bytes = max_line_bytes
        self.pid: int | None = None
        self.started: Literal["forked", "early", "exec"] | None = None
        """How the process came to be: forked from the supervisor or launched before its imports
        (an early process adopted, :mod:`agentd.core.prelaunch`), or started here by exec."""
        self.returncode: int | None = None
        self.probe_silence = probe_silence
        self.ignored_probe: str | None = None
        """Why the connection was declared lost when the server read the ``server/discover``
        probe and said nothing for ``probe_silence`` s while it lived (a clause, without the
        server's name); ``None`` otherwise."""
        self._stderr = _Ring(STDERR_TAIL_BYTES)
        self._stderr_done = trio.Event()

    def stderr_tail(self, max_lines: int = 20) -> str:
        """The last ``max_lines`` lines the server wrote to stderr (decoded leniently)."""
        text = self._stderr.data.decode("utf-8", errors="replace")
        return "\n".join(text.strip().splitlines()[-max_lines:])

    async def wait_stderr_closed(self, bound: float) -> None:
        """Wait up to ``bound`` s for the server's stderr to reach EOF (so the tail is complete)."""
        with trio.move_on_after(bound):
            await self._stderr_done.wait()

    @asynccontextmanager
    async def _run(self) -> AsyncIterator[tuple[object, object]]:
        env = server_environment(self.env)
        early, self._early = self._early, None
        try:
            process: ChildProcess = (
                early.adopt()
                if early is not None
                else await trio.lowlevel.open_process(
                    [self.command, *self.args],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env=env,
                    cwd=self.cwd,
                    start_new_session=True,
                )
            )
        except OSError as exc:
            raise OSError(
                f"server {self.server!r}: cannot start {self.command!r}: {exc.strerror or exc}; "
                "check the server's command and PATH"
            ) from exc
        self.pid = process.pid
        self.started = "exec" if early is None else "forked" if early.forked else "early"
        self.reached = True
        assert process.stdin is not None
        assert process.stdout is not None
        assert process.stderr is not None
        read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)

        def lose(reason: str) -> None:
            self.mark_lost(reason)
            # Ending the read stream makes the SDK fail every pending request at once.
            read_send.close()

        async def stdout_reader() -> None:
            assert process.stdout is not None
            buffer = bytearray()
            skipping = 0  # bytes of an oversized line discarded so far (0: not skipping)
            try:
                while True:
                    chunk = await process.stdout.receive_some(_READ_CHUNK)
                    if not chunk:
                        break
                    spoke.set()
                    buffer += chunk
                    if skipping:
                        nl = buffer.find(b"\n")
                        if nl < 0:
                            skipping += len(buffer)
                            buffer.clear()
                            continue
                        skipping += nl
                        del buffer[: nl + 1]
                        self.telemetry.emit("upstream.oversized_skipped", server=self.server, bytes=skipping)
                        skipping = 0
                    while (nl := buffer.find(b"\n")) >= 0:
                        line = bytes(buffer[:nl])
                        del buffer[: nl + 1]
                        await deliver(line)
                    if len(buffer) > self.max_line_bytes:
                        # One message over the cap: fail only the request it
                        # answers (its id is near the start of the line) and
                        # discard the rest of the line; the connection stays.
                        await refuse_oversized(bytes(buffer[:_ID_SCAN_BYTES]))
                        skipping = len(buffer)
                        buffer.clear()
            except (trio.ClosedResourceError, trio.BrokenResourceError, anyio.ClosedResourceError):
                pass
            # EOF usually means the process is exiting: wait briefly so the reason names its status.
            with trio.move_on_after(EXIT_AFTER_EOF):
                await exited.wait()
            lose(self._exit_reason("closed its stdout"))

        async def refuse_oversized(head: bytes) -> None:
            message = (
                f"server {self.server!r} sent a message longer than {self.max_line_bytes} bytes (the cap for "
                "one message); it was discarded and the connection kept. Raise --max-read-bytes if the server "
                "legitimately sends messages this large"
            )
            self.telemetry.incr("upstream.oversized")
            match = _ID_RE.search(head)
            request_id: str | int | None = None
            if match is not None:
                raw: bytes = match.group(1)
                if raw.startswith(b'"'):
                    request_id = raw[1:-1].decode("utf-8", errors="replace")
                else:
                    with suppress(ValueError):
                        request_id = int(raw)
            key = None if request_id is None else coerce_request_id(request_id)
            self.telemetry.emit(
                "upstream.oversized", server=self.server, id=request_id, cap=self.max_line_bytes
            )
            if key is None or key not in outstanding:
                return
            outstanding.discard(key)
            error = types.JSONRPCError(
                jsonrpc="2.0",
                id=request_id,
                error=types.ErrorData(code=types.INTERNAL_ERROR, message=message),
            )
            with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                await read_send.send(SessionMessage(error))

        async def deliver(line: bytes) -> None:
            if not line.strip():
                return
            try:
                message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
            except (ValidationError, ValueError):
                # A server that prints a stray non-JSON line to stdout must not break the connection.
                self.telemetry.incr("upstream.stdout_garbage")
                self.telemetry.emit(
                    "upstream.stdout_garbage",
                    server=self.server,
                    bytes=len(line),
                    preview=line[:_GARBAGE_PREVIEW].decode("utf-8", errors="replace"),
                )
                return
            if isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
                key = None if message.id is None else coerce_request_id(message.id)
                if key not in outstanding:
                    # An id we never sent, or answered already: the SDK would drop it
                    # silently; count it so a confused server shows up in telemetry.
                    self.telemetry.incr("upstream.unknown_response")
                    self.telemetry.emit("upstream.unknown_response", server=self.server, id=message.id)
                    return
                outstanding.discard(key)
            with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                await read_send.send(SessionMessage(message))

        async def stderr_reader() -> None:
            assert process.stderr is not None
            try:
                while chunk := await process.stderr.receive_some(_READ_CHUNK):
                    self._stderr.add(chunk)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                pass
            finally:
                self._stderr_done.set()

        async def stdin_writer() -> None:
            assert process.stdin is not None
            try:
                async with write_recv:
                    async for message in write_recv:
                        _track(message.message)
                        data = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                        await process.stdin.send_all(data.encode())
                        if (
                            _is_probe(message.message)
                            and self.probe_silence is not None
                            and not spoke.is_set()
                        ):
                            nursery.start_soon(probe_watch, self.probe_silence)
            except (trio.ClosedResourceError, trio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                lose(self._exit_reason("stopped reading its stdin"))

        async def probe_watch(silence: float) -> None:
            # The bound starts once the server has taken the probe off the pipe: a server still
            # importing has not, so a slow start is never taken for silence (rfcs/0378).
            assert process.stdin is not None
            while not spoke.is_set() and not exited.is_set():
                unread = _unread_bytes(process.stdin)
                if unread is None:
                    return  # not a pipe agentd can look into: the SDK's own timeout decides
                if unread == 0:
                    break
                await trio.sleep(PROBE_READ_POLL)
            with trio.move_on_after(silence):
                async with trio.open_nursery() as either:
                    for event in (spoke, exited):
                        either.start_soon(_wait_then_cancel, event, either.cancel_scope)
                return
            self.ignored_probe = (
                f"read the server/discover probe and answered nothing for {silence:g}s: "
                "taken for a server of the initialize era that ignores the probe"
            )
            lose(f"server {self.server!r} {self.ignored_probe}")

        async def exit_watcher() -> None:
            self.returncode = await process.wait()
            exited.set()
            # The leader is gone and its helpers are orphans (they would keep the pipes open). Kill the group now,
            # which also releases a stdout pipe a grandchild may still hold.
            _killpg(process.pid, signal.SIGKILL)
            with trio.move_on_after(STDOUT_EOF_AFTER_EXIT):
                await stdout_done.wait()
            lose(self._exit_reason("exited"))

        # Ids of requests written and not yet answered (or cancelled): a response
        # with any other id is unknown or a duplicate. Bounded by the requests in flight.
        outstanding: set[object] = set()

        def _track(message: types.JSONRPCMessage) -> None:
            if isinstance(message, types.JSONRPCRequest):
                outstanding.add(coerce_request_id(message.id))
            elif (
                isinstance(message, types.JSONRPCNotification) and message.method == "notifications/cancelled"
            ):
                request_id = (message.params or {}).get("requestId")
                if isinstance(request_id, str | int):
                    outstanding.discard(coerce_request_id(request_id))

        stdout_done = trio.Event()
        exited = trio.Event()
        spoke = trio.Event()  # set by the first byte the server writes on stdout

        async def stdout_task() -> None:
            try:
                await stdout_reader()
            finally:
                stdout_done.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(stdout_task)
            nursery.start_soon(stderr_reader)
            nursery.start_soon(stdin_writer)
            nursery.start_soon(exit_watcher)
            try:
                yield read_recv, write_send
            finally:
                with trio.CancelScope(shield=True):
                    await self._stop(process, write_send)
                    read_send.close()
                    read_recv.close()
                nursery.cancel_scope.cancel()

    def _exit_reason(self, what: str) -> str:
        if self.returncode is None:
            return f"server {self.server!r} {what}"
        if self.returncode < 0:
            try:
                name = signal.Signals(-self.returncode).name
            except ValueError:
                name = f"signal {-self.returncode}"
            return f"server {self.server!r} was killed by {name}"
        return f"server {self.server!r} exited with status {self.returncode}"

    async def _stop(self, process: ChildProcess, write_send: MemoryObjectSendStream[SessionMessage]) -> None:
        """Close stdin, wait, SIGTERM the group, wait, SIGKILL the group (all bounded)."""
        write_send.close()
        assert process.stdin is not None
        with suppress(trio.ClosedResourceError, trio.BrokenResourceError, OSError):
            await process.stdin.aclose()
        if process.returncode is None:
            with trio.move_on_after(EXIT_GRACE):
                await process.wait()
        if process.returncode is None:
            _killpg(process.pid, signal.SIGTERM)
            with trio.move_on_after(TERM_GRACE):
                await process.wait()
        # Always SIGKILL the group: grandchildren may outlive a leader that exited cleanly.
        _killpg(process.pid, signal.SIGKILL)
        with trio.move_on_after(TERM_GRACE):
            await process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                await stream.aclose()


def _is_probe(message: types.JSONRPCMessage) -> bool:
    return isinstance(message, types.JSONRPCRequest) and message.method == "server/discover"


def _unread_bytes(stream: object) -> int | None:
    """Bytes written to a pipe that its reader has not taken yet (``None``: not a pipe's fd)."""
    fileno = getattr(stream, "fileno", None)
    if fileno is None:
        return None
    count = array.array("i", [0])
    try:
        fcntl.ioctl(fileno(), termios.FIONREAD, count)
    except (OSError, ValueError):
        return None
    return count[0]


async def _wait_then_cancel(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


def _killpg(pgid: int, sig: int) -> None:
    """Signal a process group, ignoring one that is already gone."""
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
