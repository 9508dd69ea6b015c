"""Following the inbox file: read what was appended, notice a rewrite, resume where consumers left off.

Each drain reads only the bytes after the read position, in steps of
``DRAIN_CHUNK`` (a big append reaches clients while the rest is parsed), and
first compares the 4 KiB before that position with what was read there: a
file rewritten or truncated is caught, and delivery resumes after the last
acknowledged line (its anchor, rfcs/0140), or from the start when that line
is gone: duplicates, never a loss. A line longer than one step is searched
for its end in a worker thread; one over ``MAX_LINE_BYTES`` is skipped with
an ``ERROR``. When the window runs low, older pending events come back from
disk (:meth:`InboxTail.refill`).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import stat
from functools import partial

import trio

from agentd.servers._inboxlog import MAX_LINE_BYTES, Cursor, Entry, InboxLog, find_newline
from agentd.servers._intervals import IntervalSet
from agentd.servers.inbox.cursor import (
    DRAIN_CHUNK,
    PREFIX_CHECK_BYTES,
    CursorPersister,
    find_anchor,
    load_cursor,
    reader,
)
from agentd.servers.inbox.files import InboxDir
from agentd.servers.inbox.lookup import walk_pending
from agentd.servers.inbox.notify import Notifier

log = logging.getLogger("agentd.servers.inbox")


class InboxTail:
    """Reads the inbox file into the log: drains, rewrite recovery, refills, lookups of pending ids."""

    def __init__(
        self, directory: InboxDir, log: InboxLog, persister: CursorPersister, notifier: Notifier
    ) -> None:
        self._directory = directory
        self._log = log
        self._persister = persister
        self._notifier = notifier
        self._fd: int | None = None
        """The inbox, kept open between drains."""
        self._fd_id: tuple[int, int] = (0, 0)
        """(st_dev, st_ino) of :attr:`_fd`: another file at the path is opened anew."""
        self._tail = b""
        """The last ``PREFIX_CHECK_BYTES`` consumed: what the file must still hold before the read position."""
        self._long_line_scanned = 0
        """How far the search for the end of a line longer than one read has got (0: no such line)."""
        self._read_error: str | None = None
        """The read error last reported: said once, until a read succeeds."""
        self._refill_stuck: tuple[int, int] | None = None
        """(pending, in memory) when a refill found nothing to bring back: not retried until they change."""

    # ---------------------------------------------------------------- the open file

    def _current_inbox(self) -> tuple[int, int] | None:
        """(fd, size) of the inbox file, kept open between drains; reopened when another file is at the path.

        None when there is no inbox file. Raises what :func:`open_regular` raises.
        """
        try:
            st = os.lstat(self._directory.names.inbox, dir_fd=self._directory.fd)
        except FileNotFoundError:
            self.close_inbox()
            return None
        if self._fd is not None and (st.st_dev, st.st_ino) == self._fd_id and stat.S_ISREG(st.st_mode):
            return self._fd, st.st_size
        self.close_inbox()
        fd = self._directory.open_inbox()
        opened = os.fstat(fd)
        self._fd, self._fd_id = fd, (opened.st_dev, opened.st_ino)
        return fd, opened.st_size

    def close_inbox(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # ---------------------------------------------------------------- draining

    def _report_read_error(self, exc: OSError) -> None:
        message = (
            f"cannot read {self._directory.inbox_path}: {exc.strerror}; fix it (it must be a regular file "
            "readable by the server)"
        )
        if message != self._read_error:
            self._read_error = message
            self._log.error(message)

    def _remember_tail(self, consumed: bytes) -> None:
        if len(consumed) >= PREFIX_CHECK_BYTES:
            self._tail = consumed[-PREFIX_CHECK_BYTES:]
        elif consumed:
            self._tail = (self._tail + consumed)[-PREFIX_CHECK_BYTES:]

    def _tail_before(self, fd: int, offset: int) -> bytes:
        return os.pread(fd, min(offset, PREFIX_CHECK_BYTES), offset - min(offset, PREFIX_CHECK_BYTES))

    def _rewritten(self, fd: int, size: int) -> bool:
        """Does the file still hold, before the read position, what was read there? (size, last 4 KiB)"""
        head = self._log.head
        if size < head:
            return True
        if head == 0:
            return False
        k = min(head, PREFIX_CHECK_BYTES)
        before = os.pread(fd, k, head - k)
        if self._tail:
            return before != self._tail[-k:]
        # Not read in this run yet (start-up): compare with what the cursor file recorded.
        check = self._log.cursor.check if self._log.cursor.offset == head else None
        ok = hashlib.sha256(before).hexdigest() == check if check is not None else before.endswith(b"\n")
        if ok:
            self._tail = before
        return not ok

    async def _recover(self, fd: int | None, size: int, why: str) -> None:
        """The file no longer holds what was consumed: resume after the last acknowledged line."""
        anchor = self._log.cursor.anchor
        offset: int | None = 0 if self._log.cursor.offset == 0 else None
        if offset is None and anchor is not None and fd is not None:
            offset = await trio.to_thread.run_sync(find_anchor, reader(fd), size, anchor)
        pending = self._log.pending_count()
        if offset is not None and offset > 0:
            message = (
                f"{why}; resuming after the last acknowledged message (byte {offset}) with new sequence "
                f"numbers: the {pending} unacknowledged message(s) are offered again (same ids)"
            )
        else:
            offset = 0
            message = (
                f"{why} and the last acknowledged message is not in it any more; every message in the file "
                "is offered again from the start, with new sequence numbers (same ids: skip ones you handled)"
            )
        log.warning("%s: %s", self._directory.inbox_path, message)
        entry = self._log.restart_at(offset, message)
        self._tail = self._tail_before(fd, offset) if fd else b""
        self._long_line_scanned = 0
        await self._persister.wait_written_quietly()
        await self._notifier.publish([entry])

    async def drain(self) -> None:
        """Read what was appended since the last read, make it pending, tell clients."""
        new: list[Entry] = []
        try:
            current = self._current_inbox()
        except OSError as exc:
            self._report_read_error(exc)
            await self._notifier.publish(self._log.finish_drain())
            return
        if current is None:
            # No inbox file (not created yet, or deleted): nothing to read. When one appears, the
            # prefix check tells a continuation from a new file.
            await self._notifier.publish(self._log.finish_drain())
            return
        self._read_error = None
        fd, size = current
        if self._rewritten(fd, size):
            await self._recover(fd, size, "the inbox was rewritten or truncated")
        while self._log.head < size:
            head = self._log.head
            if self._long_line_scanned > head:
                if not await self._long_line(fd, size):
                    break
                continue
            data = os.pread(fd, min(size - head, DRAIN_CHUNK), head)
            if not data:
                break
            fed = self._log.feed(data, at_eof=head + len(data) >= size)
            self._remember_tail(data[: fed.consumed])
            if fed.entries:
                await self._notifier.publish(fed.entries)
            if fed.long_line:
                self._long_line_scanned = head + len(data)
                continue
            if fed.stop is not None or fed.consumed == 0:
                break
        before = self._log.deferral
        new = self._log.finish_drain()
        await self._notifier.publish(new)
        if not new and self._log.deferral != before:
            await self._notifier.status_changed()  # a waiting line's attempts are in the status
        self._persister.write_soon()

    async def _long_line(self, fd: int, size: int) -> bool:
        """A line longer than one read is being consumed: find its end; False while it has none."""
        head = self._log.head
        found = await trio.to_thread.run_sync(find_newline, reader(fd), self._long_line_scanned, size)
        if found is None:
            self._long_line_scanned = size
            return False
        end = found + 1
        self._long_line_scanned = 0
        if end - head > MAX_LINE_BYTES:
            entry = self._log.skip_long_line(end)
            self._tail = self._tail_before(fd, end)
            await self._notifier.publish([entry] if entry is not None else [])
            return True
        line = await trio.to_thread.run_sync(os.pread, fd, end - head, head)
        fed = self._log.feed(line, at_eof=end >= size)
        self._remember_tail(line[: fed.consumed])
        await self._notifier.publish(fed.entries)
        return fed.consumed > 0

    # ---------------------------------------------------------------- from disk

    async def refill(self) -> bool:
        """The window ran low while older pending events wait on disk: bring the newest of them back.

        Returns:
            Whether the file should be drained again: pending events counted on
            disk were not found where they should be.
        """
        state = (self._log.pending_count(), len(self._log.mem))
        if self._refill_stuck == state:
            return False
        start, seq, stop, below = self._log.refill_request()
        acked = IntervalSet(self._log.cursor.acked.ranges())
        try:
            walked = await trio.to_thread.run_sync(
                partial(walk_pending, uri=self._log.uri), self._directory, self._directory.fd, start, seq, stop,
                list(self._log.cursor.notes), below, acked, self._log.mem_cap,
            )  # fmt: skip
        except OSError as exc:
            self._report_read_error(exc)
            return False
        added = self._log.refill(walked, below=below)
        self._refill_stuck = state if not added and self._log.needs_refill() else None
        if self._refill_stuck is not None:
            log.warning(
                "%s: pending messages counted on disk were not found; re-checking the file",
                self._directory.inbox_path,
            )
        await self._notifier.publish(added)
        self._persister.write_soon()
        return self._refill_stuck is not None

    async def find_pending(self, msg_id: str) -> list[Entry]:
        """Pending events with ``msg_id``: in memory, else walked on disk."""
        found = self._log.pending_by_id(msg_id)
        if found or self._log.hidden_count() == 0:
            return found
        cur = self._log.cursor
        low = self._log.lowest_in_mem()
        return await trio.to_thread.run_sync(
            partial(walk_pending, uri=self._log.uri), self._directory, self._directory.fd, cur.offset, cur.seq,
            self._log.head, list(cur.notes), low, IntervalSet(cur.acked.ranges()), 0, msg_id,
        )  # fmt: skip

    # ---------------------------------------------------------------- a new directory

    async def resume_in_new_directory(self) -> None:
        """The directory was replaced (and taken over): serve its inbox from its own cursor, if that matches."""
        directory = self._directory
        cursor, _ledger, _warnings, _migrated = load_cursor(directory.fd, directory.path, directory.names)
        offset = cursor.offset if await self._prefix_matches(cursor) else 0
        pending = self._log.pending_count()
        entry = self._log.restart_at(
            offset,
            f"the inbox directory {directory.path} was replaced (moved away or deleted, then created again); "
            f"now serving the new {directory.names.inbox} from byte {offset} with new sequence numbers "
            f"({pending} unacknowledged message(s) of the old inbox are not delivered from here: they stay in "
            "the moved directory, if it was moved)",
        )
        self._tail = b""
        if offset > 0:
            with contextlib.suppress(OSError):
                fd = directory.open_inbox()
                try:
                    self._tail = self._tail_before(fd, offset)
                finally:
                    os.close(fd)
        self._long_line_scanned = 0
        await self._persister.wait_written_quietly()
        await self._notifier.publish([entry])
        await self.drain()

    async def _prefix_matches(self, cursor: Cursor) -> bool:
        if cursor.offset == 0 or cursor.check is None:
            return False
        try:
            fd = self._directory.open_inbox()
        except OSError:
            return False
        try:
            k = min(cursor.offset, PREFIX_CHECK_BYTES)
            before = os.pread(fd, k, cursor.offset - k)
            return len(before) == k and hashlib.sha256(before).hexdigest() == cursor.check
        finally:
            os.close(fd)
