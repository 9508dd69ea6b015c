"""A small Linux inotify wrapper for trio, through ctypes.

Why not ``watchfiles``: its Rust backend wakes on an internal timer, and
agentd promises zero wakeups while nothing changes. This module waits with
``trio.lowlevel.wait_readable(fd)`` on the inotify descriptor, so an idle
watcher costs nothing.

Public API::

    Inotify()                             open a descriptor (IN_NONBLOCK | IN_CLOEXEC)
      .add_watch(path, mask) -> int       watch descriptor; raises InotifyError
      .rm_watch(wd) -> None               ignore an already-gone watch
      .path_of(wd) -> str | None          the path a watch descriptor was added for
      .read_nowait() -> list[InotifyEvent]   what is queued now (may be empty)
      await .wait_events() -> list[InotifyEvent]   block until at least one event
      async for batch in inotify: ...     the same, forever
      .close() / with Inotify() as ino:   release the descriptor (wakes waiters)

    parse_events(buf) -> list[RawEvent]   pure parser of the kernel's byte format

    RecursiveWatcher(root, mask=DEFAULT_TREE_MASK)
      .start() -> None                    watch root and every directory below it
      await .wait_changes() -> list[TreeEvent]   block until something changed
      async for batch in watcher: ...     the same, forever
      .close()

A ``TreeEvent`` carries the absolute ``path``, the inotify ``mask`` and an
``overflow`` flag. New subdirectories are watched as they appear, and the
files already inside them when the watch lands are reported as synthetic
``IN_CREATE`` events (a writer can create a directory and a file in it faster
than we add the watch). ``IN_Q_OVERFLOW`` is reported as one event with
``overflow=True`` and ``path == root``: the kernel dropped events, so the
caller must re-scan whatever it derives from the tree.

Errors: :class:`InotifyError` (an ``OSError``) names the path and the errno,
and for ``ENOSPC`` says which sysctl to raise.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Final

import trio

IN_ACCESS: Final = 0x00000001
IN_MODIFY: Final = 0x00000002
IN_ATTRIB: Final = 0x00000004
IN_CLOSE_WRITE: Final = 0x00000008
IN_CLOSE_NOWRITE: Final = 0x00000010
IN_OPEN: Final = 0x00000020
IN_MOVED_FROM: Final = 0x00000040
IN_MOVED_TO: Final = 0x00000080
IN_CREATE: Final = 0x00000100
IN_DELETE: Final = 0x00000200
IN_DELETE_SELF: Final = 0x00000400
IN_MOVE_SELF: Final = 0x00000800
IN_UNMOUNT: Final = 0x00002000
IN_Q_OVERFLOW: Final = 0x00004000
IN_IGNORED: Final = 0x00008000
IN_ONLYDIR: Final = 0x01000000
IN_DONT_FOLLOW: Final = 0x02000000
IN_EXCL_UNLINK: Final = 0x04000000
IN_MASK_ADD: Final = 0x20000000
IN_ISDIR: Final = 0x40000000
IN_ONESHOT: Final = 0x80000000

IN_NONBLOCK: Final = os.O_NONBLOCK
IN_CLOEXEC: Final = os.O_CLOEXEC

#: What a directory tree watch listens for: content changes and membership changes.
DEFAULT_TREE_MASK: Final = (
    IN_CLOSE_WRITE
    | IN_MODIFY
    | IN_ATTRIB
    | IN_CREATE
    | IN_DELETE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_DELETE_SELF
)

_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len (struct inotify_event)
# One read drains up to this many bytes of queued events; the kernel never
# splits an event across reads, and 64 KiB holds ~2,000 typical events.
_READ_SIZE: Final = 65536

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.inotify_init1.argtypes = [ctypes.c_int]
_libc.inotify_init1.restype = ctypes.c_int
_libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
_libc.inotify_add_watch.restype = ctypes.c_int
_libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
_libc.inotify_rm_watch.restype = ctypes.c_int


class InotifyError(OSError):
    """An inotify call failed; the message names the path and what to do."""


def _error(call: str, path: str | None) -> InotifyError:
    code = ctypes.get_errno()
    what = f"{call}({path!r})" if path is not None else f"{call}()"
    hint = ""
    if code == errno.ENOSPC:
        hint = ": the inotify watch limit is reached; raise fs.inotify.max_user_watches (sysctl)"
    elif code == errno.EMFILE:
        hint = ": too many inotify instances; raise fs.inotify.max_user_instances (sysctl)"
    elif code == errno.ENOENT:
        hint = ": the path does not exist; create it first"
    elif code == errno.EACCES:
        hint = ": permission denied; make the path readable by this user"
    return InotifyError(code, f"{what} failed: {os.strerror(code)}{hint}")


@dataclass(frozen=True, slots=True)
class RawEvent:
    """One ``struct inotify_event`` as the kernel wrote it."""

    wd: int
    mask: int
    cookie: int
    name: str
    """File name inside the watched directory; ``""`` for the watched path itself."""


@dataclass(frozen=True, slots=True)
class InotifyEvent:
    """A parsed event with the watched path resolved."""

    wd: int
    mask: int
    cookie: int
    name: str
    path: str
    """Absolute path: the watched path joined with ``name`` (or the watched path itself)."""

    @property
    def overflow(self) -> bool:
        """The kernel queue overflowed: events were lost, re-scan."""
        return bool(self.mask & IN_Q_OVERFLOW)

    @property
    def is_dir(self) -> bool:
        return bool(self.mask & IN_ISDIR)


def parse_events(buf: bytes) -> list[RawEvent]:
    """Parse a buffer of concatenated ``inotify_event`` records.

    Raises:
        ValueError: the buffer ends inside a record (the kernel never does this).
    """
    events: list[RawEvent] = []
    offset = 0
    size = _HEADER.size
    while offset < len(buf):
        if offset + size > len(buf):
            raise ValueError(f"truncated inotify record header at byte {offset} of {len(buf)}")
        wd, mask, cookie, length = _HEADER.unpack_from(buf, offset)
        offset += size
        if offset + length > len(buf):
            raise ValueError(f"truncated inotify record name at byte {offset} of {len(buf)}")
        raw_name = buf[offset : offset + length].split(b"\0", 1)[0]
        offset += length
        events.append(RawEvent(wd, mask, cookie, os.fsdecode(raw_name)))
    return events


class Inotify:
    """One inotify descriptor, read without blocking the trio loop."""

    def __init__(self) -> None:
        fd = _libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise _error("inotify_init1", None)
        self._fd: int | None = fd
        self._paths: dict[int, str] = {}

    @property
    def fd(self) -> int:
        if self._fd is None:
            raise InotifyError(errno.EBADF, "this Inotify is closed; create a new one")
        return self._fd

    def add_watch(self, path: str | os.PathLike[str], mask: int) -> int:
        """Watch ``path`` for ``mask``; returns the watch descriptor.

        Adding the same inode twice returns the same descriptor (the kernel
        merges them); the newest path is remembered for it.
        """
        p = os.fspath(path)
        wd = _libc.inotify_add_watch(self.fd, os.fsencode(p), mask)
        if wd < 0:
            raise _error("inotify_add_watch", p)
        self._paths[wd] = os.path.abspath(p)
        return int(wd)

    def rm_watch(self, wd: int) -> None:
        """Stop a watch; a watch the kernel already dropped is ignored."""
        self._paths.pop(wd, None)
        if _libc.inotify_rm_watch(self.fd, wd) < 0 and ctypes.get_errno() != errno.EINVAL:
            raise _error("inotify_rm_watch", str(wd))

    def path_of(self, wd: int) -> str | None:
        return self._paths.get(wd)

    def read_nowait(self) -> list[InotifyEvent]:
        """Return the events queued right now (possibly none); never blocks."""
        chunks: list[bytes] = []
        while True:
            try:
                chunk = os.read(self.fd, _READ_SIZE)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
            if len(chunk) < _READ_SIZE // 2:
                break  # the queue is (almost certainly) drained; the next wait picks up the rest
        out: list[InotifyEvent] = []
        for raw in parse_events(b"".join(chunks)):
            base = self._paths.get(raw.wd, "")
            out.append(
                InotifyEvent(
                    raw.wd, raw.mask, raw.cookie, raw.name, os.path.join(base, raw.name) if raw.name else base
                )
            )
            if raw.mask & IN_IGNORED:
                self._paths.pop(raw.wd, None)  # the kernel dropped this watch
        return out

    async def wait_events(self) -> list[InotifyEvent]:
        """Block (without waking) until at least one event is queued, then return them all."""
        while True:
            events = self.read_nowait()
            if events:
                return events
            await trio.lowlevel.wait_readable(self.fd)

    def __aiter__(self) -> AsyncIterator[list[InotifyEvent]]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[list[InotifyEvent]]:
        while True:
            yield await self.wait_events()

    def close(self) -> None:
        """Close the descriptor; a task blocked in ``wait_events`` gets ``ClosedResourceError``."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(RuntimeError):  # outside trio nobody can be waiting on it
                trio.lowlevel.notify_closing(fd)
            os.close(fd)

    def __enter__(self) -> Inotify:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class TreeEvent:
    """A change somewhere in a watched tree."""

    path: str
    mask: int
    overflow: bool = False
    """True when the kernel dropped events: re-scan the whole tree."""

    @property
    def is_dir(self) -> bool:
        return bool(self.mask & IN_ISDIR)


class RecursiveWatcher:
    """Watch a directory and every directory below it, following new ones.

    Call :meth:`start` (synchronous: it adds the watches, and raises
    :class:`InotifyError` if the root cannot be watched), then await
    :meth:`wait_changes`. Events for paths inside new subdirectories that were
    created before their watch landed are reported as synthetic ``IN_CREATE``.
    """

    def __init__(self, root: str | os.PathLike[str], mask: int = DEFAULT_TREE_MASK) -> None:
        self.root = os.path.abspath(os.fspath(root))
        # Always follow directory creation/moves so the tree stays covered.
        self._mask = mask | IN_CREATE | IN_MOVED_TO | IN_DELETE_SELF | IN_ONLYDIR | IN_EXCL_UNLINK
        self._ino = Inotify()

    def start(self) -> None:
        """Watch the root and all its subdirectories (symlinks are not followed)."""
        self._ino.add_watch(self.root, self._mask)
        self._add_below(self.root, synthetic=None)

    def _add_below(self, top: str, synthetic: list[TreeEvent] | None) -> None:
        for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
            if synthetic is not None:
                synthetic.extend(TreeEvent(os.path.join(dirpath, f), IN_CREATE) for f in filenames)
            for d in dirnames:
                sub = os.path.join(dirpath, d)
                try:
                    self._ino.add_watch(sub, self._mask)
                except InotifyError as exc:
                    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                        continue  # vanished between listing and watching
                    raise
                if synthetic is not None:
                    synthetic.append(TreeEvent(sub, IN_CREATE | IN_ISDIR))

    async def wait_changes(self) -> list[TreeEvent]:
        """Block until something in the tree changed; returns the changes in kernel order."""
        while True:
            out: list[TreeEvent] = []
            for ev in await self._ino.wait_events():
                if ev.overflow:
                    out.append(TreeEvent(self.root, ev.mask, overflow=True))
                    continue
                if ev.mask & IN_IGNORED:
                    continue
                if ev.mask & IN_DELETE_SELF and not ev.name:
                    if ev.path == self.root:
                        out.append(TreeEvent(ev.path, ev.mask | IN_ISDIR))
                    continue  # a subdirectory's own removal also shows up as IN_DELETE on its parent
                out.append(TreeEvent(ev.path, ev.mask))
                if ev.is_dir and ev.mask & (IN_CREATE | IN_MOVED_TO):
                    try:
                        self._ino.add_watch(ev.path, self._mask)
                    except InotifyError as exc:
                        if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
                            raise
                        continue
                    self._add_below(ev.path, synthetic=out)
            if out:
                return out

    def __aiter__(self) -> AsyncIterator[list[TreeEvent]]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[list[TreeEvent]]:
        while True:
            yield await self.wait_changes()

    def close(self) -> None:
        self._ino.close()

    def __enter__(self) -> RecursiveWatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
