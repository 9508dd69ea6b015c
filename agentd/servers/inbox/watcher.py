"""The inbox's change source: inotify on its directory and the directory's parent, one drainer task.

Events only set flags and wake the drainer (``file``: drain the inbox;
``dir``: check the directory path; ``refill``: the window ran low), so a
burst of writes costs one drain. A directory moved away or deleted is
reported once and waited for; one created again is claimed (its lock, its
sentinels) and served from its own cursor; one another server holds stops
this server (rfcs/0141).
"""

from __future__ import annotations

import logging
import os
from typing import Final, Literal

import trio

from agentd.servers._base import ServerStartError, SourceGate, WatchableServer
from agentd.servers._inboxlog import InboxLog
from agentd.servers._inotify import (
    IN_CLOSE_WRITE,
    IN_CREATE,
    IN_DELETE,
    IN_DELETE_SELF,
    IN_IGNORED,
    IN_MODIFY,
    IN_MOVE_SELF,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    IN_ONLYDIR,
    Inotify,
    InotifyError,
)
from agentd.servers.inbox.cursor import CursorPersister
from agentd.servers.inbox.files import InboxDir
from agentd.servers.inbox.notify import Notifier
from agentd.servers.inbox.tail import InboxTail

log = logging.getLogger("agentd.servers.inbox")

_DIR_MASK: Final = (
    IN_MODIFY
    | IN_CLOSE_WRITE
    | IN_MOVED_TO
    | IN_MOVED_FROM
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
)
_PARENT_MASK: Final = IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_MOVED_FROM | IN_ONLYDIR

Wanted = Literal["file", "dir", "refill"]


class InboxWatcher:
    """Follows the directory and drives the tail; :meth:`run` is the server's change source."""

    def __init__(
        self,
        directory: InboxDir,
        log: InboxLog,
        tail: InboxTail,
        persister: CursorPersister,
        notifier: Notifier,
        server: WatchableServer,
        gate: SourceGate,
        warnings: list[str],
    ) -> None:
        self._directory = directory
        self._log = log
        self._tail = tail
        self._persister = persister
        self._notifier = notifier
        self._server = server
        self._gate = gate
        self._warnings = warnings
        self._wake = trio.Event()
        self._flags: set[Wanted] = set()
        """What the drainer is to do when it wakes."""
        self._ino: Inotify | None = None
        self._dir_wd: int | None = None
        """The watch on the directory itself (replaced with the directory)."""
        self._dir_missing = False
        """The directory is gone (said once until it is back)."""

    def request(self, flag: Wanted) -> None:
        self._flags.add(flag)
        self._wake.set()

    async def run(self) -> None:
        """Watch, drain what is there, then follow changes until cancelled."""
        path = self._directory.path
        try:
            ino = Inotify()
            self._dir_wd = ino.add_watch(path, _DIR_MASK)
        except InotifyError as exc:
            self._gate.failed(f"cannot watch the inbox directory: {exc}")
            return
        try:
            ino.add_watch(os.path.dirname(path) or "/", _PARENT_MASK)
        except InotifyError as exc:
            log.warning("cannot watch the parent of %s (%s): a replaced directory goes unnoticed", path, exc)
        self._ino = ino
        with ino:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._persister.run)
                for warning in self._warnings:
                    self._log.error(warning)
                await self._tail.drain()
                self._gate.running()
                nursery.start_soon(self._pump, ino)
                await self._drainer()

    async def _pump(self, ino: Inotify) -> None:
        dir_name = os.path.basename(self._directory.path)
        async for batch in ino:
            for ev in batch:
                if ev.overflow:
                    self._flags |= {"file", "dir"}
                elif ev.wd == self._dir_wd:
                    if ev.name == self._directory.names.inbox:
                        self._flags.add("file")
                    elif not ev.name and ev.mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED):
                        self._flags.add("dir")
                elif ev.name == dir_name:
                    self._flags.add("dir")
            if self._flags:
                self._wake.set()

    async def _drainer(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            flags, self._flags = self._flags, set()
            if "dir" in flags and await self._check_dir():
                continue
            if "file" in flags:
                await self._tail.drain()
            if self._log.needs_refill() and await self._tail.refill():
                self.request("file")

    async def _check_dir(self) -> bool:
        """Re-resolve the directory path; True when it changed (gone or replaced) and was handled."""
        path = self._directory.path
        try:
            st: os.stat_result | None = os.stat(path)
        except OSError:
            st = None
        mine = os.fstat(self._directory.fd)
        if st is not None and (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino):
            return False
        if st is None:
            if not self._dir_missing:
                self._dir_missing = True
                entry = self._log.error(
                    f"the inbox directory {path} was moved away or deleted; waiting for it to be created "
                    f"again ({self._log.pending_count()} pending message(s) of the old inbox stay in the "
                    "moved directory, if it was moved)"
                )
                await self._notifier.publish([entry])
            return True
        self._dir_missing = False
        try:
            new = InboxDir.claim(path, self._directory.names)
        except ServerStartError as exc:
            entry = self._log.error(
                f"the inbox directory {path} was replaced and the new one is drained by another server; "
                f"this server stops ({exc})"
            )
            await self._notifier.publish([entry])
            await self._server.wait_written()
            self._server.fail(
                ServerStartError(
                    f"the inbox directory {path} was replaced and another server holds it: {exc}"
                )
            )
            return True
        async with (
            self._persister.io_lock
        ):  # no cursor write is in flight while the directory changes under it
            self._tail.close_inbox()
            self._directory.take_over(new)
        if self._ino is not None:
            try:
                self._dir_wd = self._ino.add_watch(path, _DIR_MASK)
            except InotifyError as exc:
                log.warning("cannot watch the new inbox directory %s: %s", path, exc)
        await self._tail.resume_in_new_directory()
        return True
