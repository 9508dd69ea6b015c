"""Best-effort output: bounded buffers written off the reactor's path.

agentd writes two streams: telemetry (NDJSON on stderr) and results (stdout).
Neither may stop the supervisor. Whoever holds the other end can make a write
fail (a full disk, ``2>/dev/full``, a closed descriptor, a pipe whose reader
left) or block forever (a pipe nobody reads); the reactor must keep turning,
``/healthz`` must keep answering and SIGTERM must keep draining either way.

* :class:`LineWriter` owns one descriptor. :meth:`LineWriter.put` writes a
  line at once when ``poll`` shows the pipe (socket, terminal) can take it
  without blocking and nothing is queued, else appends it to a bounded
  buffer that a daemon thread writes; either way it returns at once. A line
  that does not fit, or whose write fails, is dropped and counted
  (:attr:`LineWriter.dropped`). A blocked pipe blocks only that thread.
  Writes are blocking writes on the descriptor as the process inherited it:
  making the descriptor non-blocking would change it for every process
  sharing it (MCP servers, the zygote and agents write to the same stderr).
* :class:`RateLimiter` is the pure rule that folds a flood of identical
  warnings from one source into a few lines and one summary with a count.
* :func:`claim_standard_fds` runs first thing: a descriptor 0, 1 or 2 that is
  closed at start is pointed at ``/dev/null``, so no socket or file agentd
  opens later can land on it (and receive telemetry or a result by mistake);
  the writer for a stream that was closed counts everything as dropped.
* :func:`print_line` writes a command's report (``agentd check``) to stdout;
  a reader that closed the pipe early (``agentd check | head -1``) ends the
  writing quietly, without a traceback (rfcs/0323).
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import select
import stat
import sys
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

#: Bytes of telemetry held while stderr is slow or blocked; beyond this, new
#: lines are dropped and counted. Several seconds of a storm's telemetry.
DEFAULT_TELEMETRY_BUFFER = 8 * 1024 * 1024
#: Bytes of published results held while stdout is slow or blocked.
DEFAULT_OUTPUT_BUFFER = 8 * 1024 * 1024
#: Bytes handed to one ``write(2)``: a batch of lines per system call.
WRITE_BATCH = 256 * 1024


@dataclass(frozen=True, slots=True)
class Suppressed:
    """A window in which a source's repeats were folded: ``count`` lines not written."""

    key: Hashable
    count: int
    window_s: float


@dataclass(slots=True)
class _Window:
    """One source's current rate window."""

    ends: float
    """Monotonic time the window closes; the source's next line after it opens a new one."""
    passed: int = 0
    """Lines written in this window (at most the burst)."""
    suppressed: int = 0
    """Lines folded in this window (reported as one :class:`Suppressed` when it closes)."""


class RateLimiter:
    """Per-source rate limit: ``burst`` lines per ``window`` seconds, the rest folded into a count.

    Pure: time comes in as ``now``. A window opens at a source's first line;
    within it the first ``burst`` lines pass and the others are suppressed.
    Once the window is over, :meth:`due` returns one :class:`Suppressed` per
    window that folded something (the caller writes it as one line) and
    forgets the window: the limiter holds only the windows still open, so
    sources that come and go (an agent id each) do not accumulate.
    Windows are kept in the order they close (every window is ``window``
    long and opens at a non-decreasing ``now``), so :meth:`due` looks only
    at the windows that closed.
    """

    def __init__(self, *, burst: int = 10, window: float = 10.0) -> None:
        self.burst = burst
        self.window = window
        # An OrderedDict: taking its front is O(1) (a plain dict's is not, rfcs/0281).
        self._windows: collections.OrderedDict[Hashable, _Window] = collections.OrderedDict()

    def admit(self, key: Hashable, now: float) -> bool:
        """Whether the next line from ``key`` passes (call :meth:`due` first so ended windows close)."""
        w = self._windows.get(key)
        if w is None or now >= w.ends:
            w = self._windows[key] = _Window(ends=now + self.window)
            self._windows.move_to_end(key)  # the new window goes last: the order stays the closing order
        if w.passed < self.burst:
            w.passed += 1
            return True
        w.suppressed += 1
        return False

    def next_due(self) -> float | None:
        """When the earliest window that folded something ends (None: nothing pending)."""
        return next((w.ends for w in self._windows.values() if w.suppressed), None)

    def due(self, now: float, *, all_: bool = False) -> list[Suppressed]:
        """Close the windows that ended by ``now`` (every window with ``all_``); their summaries."""
        out: list[Suppressed] = []
        windows = self._windows
        while windows:
            key, w = next(iter(windows.items()))
            if not all_ and now < w.ends:
                break  # the rest close later
            windows.popitem(last=False)
            if w.suppressed:
                out.append(Suppressed(key=key, count=w.suppressed, window_s=self.window))
        return out

    def __len__(self) -> int:
        """Windows still open."""
        return len(self._windows)


class LineWriter:
    """Writes lines to one descriptor without ever blocking the caller.

    A line is written at once, from the caller's thread, when that cannot
    block: nothing is queued ahead of it, it is at most ``PIPE_BUF`` bytes, the
    descriptor is a pipe, socket or terminal, and ``poll`` says it is writable
    (a pipe then has a free slot, so a write of up to ``PIPE_BUF`` bytes
    returns at once). That keeps the order of lines across stdout and stderr
    as the caller wrote them while the reader keeps up. Otherwise (a larger
    line, a regular file, a reader that fell behind) the line is queued and a
    daemon thread writes it.

    Args:
        fd: the descriptor (1 or 2).
        max_bytes: bytes queued at most; a line that does not fit is dropped.
        closed: the descriptor was closed when agentd started: nothing is
            written, every line counts as dropped.
        on_error: called once per distinct errno (e.g. to emit one telemetry
            line); must not block.
        on_tick: called from the writer thread when the time set with
            :meth:`wake_at` passes (the rate limiter's summaries).
        name: the thread's name.
    """

    def __init__(
        self,
        fd: int,
        *,
        max_bytes: int,
        closed: bool = False,
        on_error: Callable[[str], None] | None = None,
        on_tick: Callable[[], None] | None = None,
        name: str = "agentd-writer",
    ) -> None:
        self._fd = fd
        self._max_bytes = max_bytes
        self._closed_at_start = closed
        self._on_error = on_error
        self._on_tick = on_tick
        self._cond = threading.Condition(threading.Lock())
        self._lines: collections.deque[bytes] = collections.deque()
        self._bytes = 0
        self._busy = False
        """Someone (the thread, or a caller writing directly) is in ``write(2)`` on the descriptor."""
        self._stopping = False
        self._wake_at: float | None = None
        self._errors: set[int] = set()
        self._poll = _writable_poller(fd) if not closed else None
        self.dropped = 0
        """Lines dropped: buffer full, write failed, or the stream was closed at start."""
        self.written = 0
        self.last_error: str | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # -- any thread ------------------------------------------------------------------

    def put(self, line: bytes) -> bool:
        """Write or queue ``line`` (with its newline); False if it was dropped. Never blocks on I/O."""
        with self._cond:
            if self._closed_at_start or self._stopping or self._bytes + len(line) > self._max_bytes:
                self.dropped += 1
                return False
            direct = (
                self._poll is not None
                and not self._busy
                and not self._lines
                and len(line) <= select.PIPE_BUF
                and bool(self._poll.poll(0))
            )
            if not direct:
                self._lines.append(line)
                self._bytes += len(line)
                self._cond.notify()
                return True
            self._busy = True
        try:
            self._write(line, 1)
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify_all()
        return True

    def wake_at(self, when: float) -> None:
        """Have the writer thread call ``on_tick`` at monotonic time ``when`` (the earliest asked wins)."""
        with self._cond:
            if self._wake_at is None or when < self._wake_at:
                self._wake_at = when
                self._cond.notify()

    def flush(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s until everything queued was written (or dropped); True if it was."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._lines or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def close(self, timeout: float) -> bool:
        """Flush (bounded), then stop taking lines. A writer stuck on a blocked pipe is left behind."""
        done = self.flush(timeout)
        with self._cond:
            self._stopping = True
            self.dropped += len(self._lines)
            self._lines.clear()
            self._bytes = 0
            self._cond.notify_all()
        return done

    @property
    def closed_at_start(self) -> bool:
        return self._closed_at_start

    # -- the writer thread -----------------------------------------------------------

    def _run(self) -> None:
        while True:
            tick = False
            with self._cond:
                while (not self._lines or self._busy) and not self._stopping:
                    if self._wake_at is not None and time.monotonic() >= self._wake_at:
                        break
                    timeout = None if self._wake_at is None else max(0.0, self._wake_at - time.monotonic())
                    self._cond.wait(timeout)
                if self._stopping and not self._lines:
                    return
                if self._wake_at is not None and time.monotonic() >= self._wake_at:
                    self._wake_at = None
                    tick = True
                batch: list[bytes] = []
                size = 0
                if not self._busy:
                    while self._lines and (not batch or size + len(self._lines[0]) <= WRITE_BATCH):
                        line = self._lines.popleft()
                        batch.append(line)
                        size += len(line)
                    self._bytes -= size
                    self._busy = bool(batch)
            if tick and self._on_tick is not None:
                self._on_tick()
            if batch:
                try:
                    self._write(b"".join(batch), len(batch))
                finally:
                    with self._cond:
                        self._busy = False
                        self._cond.notify_all()

    def _write(self, data: bytes, lines: int) -> None:
        """Write ``data`` (``lines`` lines) whole; on an error count what was not written. Caller holds ``_busy``."""
        view = memoryview(data)
        while view:
            try:
                n = os.write(self._fd, view)
            except InterruptedError:
                continue
            except OSError as exc:
                lost = min(lines, view.tobytes().count(b"\n") or 1)
                with self._cond:
                    self.dropped += lost
                    self.written += lines - lost
                    self.last_error = os.strerror(exc.errno) if exc.errno else str(exc)
                first = exc.errno not in self._errors
                self._errors.add(exc.errno or 0)
                if first and self._on_error is not None:
                    with contextlib.suppress(Exception):
                        self._on_error(self.last_error)
                return
            view = view[n:]
        with self._cond:
            self.written += lines


def _writable_poller(fd: int) -> select.poll | None:
    """A poller for ``fd`` if writes to it can be checked before they block (pipe, socket, terminal)."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return None
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)):
        return None  # a regular file or a device: always "writable"; the thread writes it
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return poller


def claim_standard_fds() -> frozenset[int]:
    """Point any of descriptors 0, 1, 2 that is closed at ``/dev/null``; return which were closed.

    Run before anything opens a file or socket: otherwise the first one
    opened takes the lowest free number, 1 or 2, and receives output meant
    for stdout or stderr.
    """
    closed: set[int] = set()
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError as exc:
            if exc.errno != errno.EBADF:
                continue
            closed.add(fd)
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd, inheritable=True)
                os.close(null)
            else:
                os.set_inheritable(fd, True)
    return frozenset(closed)


def print_line(text: str, *, err: bool = False) -> bool:
    """Write ``text`` and a newline to stdout (stderr with ``err``) now; False when its reader has gone.

    For what a command writes itself (``agentd check``'s report, its notes
    and errors), not for a run's streams (:class:`LineWriter`). A reader that
    stops early (``agentd check | head -1``) took what it wanted: the rest is
    dropped without a word, as ``git`` or ``grep`` do, and the command's exit
    code stays what its work decided (rfcs/0323). From then on the stream is
    ``/dev/null`` (:func:`mute`), so no later write, nor the flush at exit,
    meets the closed pipe again.
    """
    stream = sys.stderr if err else sys.stdout
    try:
        stream.write(text + "\n")
        stream.flush()
    except BrokenPipeError:
        mute(stream)
        return False
    return True


def mute(stream: object) -> None:
    """Point ``stream``'s descriptor at ``/dev/null``: its reader has gone (a closed pipe).

    What Python's own documentation advises after ``BrokenPipeError``; a
    stream with no descriptor (a test's capture) is left as it is.
    """
    try:
        fd = stream.fileno()  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)


__all__ = [
    "DEFAULT_OUTPUT_BUFFER",
    "DEFAULT_TELEMETRY_BUFFER",
    "LineWriter",
    "RateLimiter",
    "Suppressed",
    "claim_standard_fds",
    "mute",
    "print_line",
]
