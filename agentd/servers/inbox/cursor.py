"""The cursor file: the consumer position on disk, its group commit, and its place in a rewritten inbox.

Beside the position (``offset``, ``seq``, acknowledged ranges, notes) the
file records two digests of the bytes before ``offset``: ``check`` (the last
4 KiB: is the file still the one that was read?) and ``anchor`` (the last
acknowledged line: where to resume when it is not). An earlier agentd's push
mark and state file are read once and replaced. :class:`CursorPersister`
writes it: one writer task, and an acknowledgement waits for the write that
covers it (rfcs/0140).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from datetime import UTC, datetime
from typing import Final

import orjson
import trio

from agentd.servers._base import ToolError
from agentd.servers._inboxlog import (
    Cursor,
    CursorSnapshot,
    InboxLog,
    Ledger,
    Reader,
    cursor_from_json,
    find_newline,
)
from agentd.servers._safefs import read_regular, write_atomic
from agentd.servers.inbox.files import InboxDir, Names

log = logging.getLogger("agentd.servers.inbox")

DRAIN_CHUNK: Final = 64 * 1024
"""Bytes read (and parsed) per step of a drain: a big append is drained in steps, each pushed before the
next is parsed, so clients receive the first messages while the rest are still being read."""
PREFIX_CHECK_BYTES: Final = 4096
"""Bytes before the read position compared on every drain (a rewritten file is caught there)."""
ANCHOR_LINE_MAX: Final = 64 * 1024
"""Longest last-acknowledged line remembered as the resume point after a rewrite."""


def reader(fd: int) -> Reader:
    """Positional reads of ``fd`` (never moves a file offset: safe from any thread)."""
    return lambda offset, n: os.pread(fd, n, offset)


def boundary_digests(read: Reader, offset: int) -> tuple[str | None, str | None]:
    """(check, anchor) for a cursor at ``offset``: sha256 of the 4 KiB before it and of the last non-blank line."""
    if offset <= 0:
        return None, None
    start = max(0, offset - ANCHOR_LINE_MAX)
    data = read(start, offset - start)
    if len(data) != offset - start:
        return None, None
    check = hashlib.sha256(data[-PREFIX_CHECK_BYTES:]).hexdigest()
    end = len(data)
    while end > 0:
        nl = data.rfind(b"\n", 0, end - 1)
        line = data[nl + 1 : end]
        if line.strip():
            if nl < 0 and start > 0:
                return check, None  # the line began before what we read: too long to anchor on
            return check, hashlib.sha256(line).hexdigest()
        if nl < 0:
            break
        end = nl + 1
    return check, None


def find_anchor(read: Reader, size: int, anchor: str) -> int | None:
    """Offset just past the *first* non-blank line whose sha256 is ``anchor`` (first: a repeated line never
    makes delivery skip ahead), or None."""
    pos = 0
    buf = b""
    base = 0
    while pos < size:
        i = pos - base
        nl = buf.find(b"\n", i)
        if nl < 0:
            have = base + len(buf)
            if have >= size:
                line, end = buf[i:], size
            elif have - pos > ANCHOR_LINE_MAX:
                found = find_newline(read, have, size)
                if found is None:
                    return None
                pos, buf, base = found + 1, b"", found + 1
                continue
            else:
                more = read(have, min(DRAIN_CHUNK, size - have))
                if not more:
                    return None
                buf, base = buf[i:] + more, pos
                continue
        else:
            line, end = buf[i : nl + 1], base + nl + 1
        if line.strip() and hashlib.sha256(line).hexdigest() == anchor:
            return end
        pos = end
    return None


def load_cursor(dir_fd: int, directory: str, names: Names) -> tuple[Cursor, Ledger, list[str], bool]:
    """Read the cursor file (or migrate an earlier agentd's mark and state).

    Returns (cursor, ledger, warnings, migrated). A cursor file that cannot be
    used is moved aside (``.corrupt-<UTC>``) and delivery starts from the
    beginning of the inbox (duplicates, never a loss), with a warning.
    """
    warnings: list[str] = []
    path = os.path.join(directory, names.cursor)
    try:
        raw = read_regular(names.cursor, dir_fd=dir_fd)
    except FileNotFoundError:
        raw = None
    except OSError as exc:
        warnings.append(f"cannot read the inbox position {path}: {exc.strerror}; delivering from the start")
        return Cursor(), Ledger(), warnings, False
    if raw is not None:
        try:
            doc = orjson.loads(raw)
            if not isinstance(doc, dict):
                raise ValueError(f"it holds a JSON {type(doc).__name__}, not an object")
            cursor, ledger = cursor_from_json(doc)
            return cursor, ledger, warnings, False
        except (orjson.JSONDecodeError, ValueError) as exc:
            aside = f"{names.cursor}.corrupt-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}"
            with contextlib.suppress(OSError):
                os.rename(names.cursor, aside, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            warnings.append(
                f"the inbox position {path} is unusable ({exc}); it was moved to {aside} and every message "
                "in the inbox is offered again (consumers may see ones they already handled)"
            )
            return Cursor(), Ledger(), warnings, False
    # An earlier agentd kept a push mark and a state file: start from the mark.
    cursor, ledger, migrated = Cursor(), Ledger(), False
    with contextlib.suppress(OSError, orjson.JSONDecodeError, TypeError, ValueError):
        hwm = orjson.loads(read_regular(names.legacy_hwm, dir_fd=dir_fd))
        cursor = Cursor(offset=max(0, int(hwm["offset"])))
        migrated = True
    with contextlib.suppress(OSError, orjson.JSONDecodeError, TypeError, ValueError, AttributeError):
        ledger = Ledger(orjson.loads(read_regular(names.legacy_state, dir_fd=dir_fd)))
        migrated = True
    return cursor, ledger, warnings, migrated


# --------------------------------------------------------------------------- writing it


class CursorPersister:
    """Writes the cursor file: one writer task, group commit.

    Acknowledgements change the log (its ``version`` moves); :meth:`wait_written`
    returns once the cursor as it was at the call is on disk, one write serving
    every change made meanwhile. :meth:`write_soon` asks for a write nobody
    waits for. Nothing on the notification path waits for a write.
    """

    def __init__(self, log: InboxLog, directory: InboxDir, *, migrated: bool) -> None:
        self._log = log
        self._directory = directory
        self._migrated = migrated
        """An earlier agentd's mark and state file are still there: the first write removes them."""
        self._written_version = -1
        """The log version the file holds."""
        self._wanted = trio.Event()
        self._written = trio.Event()
        """Set (and replaced) after each write: what :meth:`wait_written` waits on."""
        self.error: str | None = None
        """Why the last write failed (what the status shows), or None."""
        self.io_lock = trio.Lock()
        """Held while a write is in flight: the directory is not replaced under it."""

    def write_soon(self) -> None:
        if self._log.version != self._written_version:
            self._wanted.set()

    async def wait_written(self) -> None:
        """Return once the cursor as it is now is on disk (raises ToolError if it cannot be written)."""
        target = self._log.version
        while self._written_version < target:
            self._wanted.set()
            done = self._written
            await done.wait()
        if self.error is not None:
            raise ToolError(self.error)

    async def wait_written_quietly(self) -> None:
        """:meth:`wait_written`, a failure left to the status and stderr (where it already is)."""
        with contextlib.suppress(ToolError):
            await self.wait_written()

    async def run(self) -> None:
        """The writer task (runs until cancelled)."""
        while True:
            while self._log.version == self._written_version:
                await self._wanted.wait()
                self._wanted = trio.Event()
            version = self._log.version
            snap = self._log.snapshot()
            async with self.io_lock:
                try:
                    offset, check, anchor = await trio.to_thread.run_sync(
                        self._write, self._directory.fd, snap
                    )
                except OSError as exc:
                    self.error = (
                        "could not record the inbox position in "
                        f"{os.path.join(self._directory.path, self._directory.names.cursor)}: "
                        f"{exc.strerror}; acknowledgements hold until the server restarts (then the messages "
                        "are offered again); free space or fix the directory's permissions"
                    )
                    log.warning("%s", self.error)
                else:
                    self.error = None
                    if self._log.cursor.offset == offset:
                        self._log.cursor.check, self._log.cursor.anchor = check, anchor
            self._written_version = max(self._written_version, version)
            done, self._written = self._written, trio.Event()
            done.set()

    def write_final(self) -> None:
        """Write what the writer task has not (at shutdown, on the event loop; errors ignored)."""
        if self._log.version != self._written_version:
            with contextlib.suppress(OSError):
                self._write(self._directory.fd, self._log.snapshot())

    def _write(self, dir_fd: int, snap: CursorSnapshot) -> tuple[int, str | None, str | None]:
        """Write the cursor file (in a worker thread); fills in check/anchor from the inbox. Returns them."""
        names = self._directory.names
        offset = snap["offset"]
        check = anchor = None
        if offset > 0:
            try:
                fd = self._directory.open_inbox(dir_fd)
            except OSError:
                fd = None
            if fd is not None:
                try:
                    check, anchor = boundary_digests(reader(fd), offset)
                finally:
                    os.close(fd)
        snap = {**snap, "check": check, "anchor": anchor}
        write_atomic(names.cursor, orjson.dumps(snap), new_mode=0o600, dir_fd=dir_fd)
        if self._migrated:
            for name in (names.legacy_hwm, names.legacy_state):
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=dir_fd)
            self._migrated = False
        return offset, check, anchor
