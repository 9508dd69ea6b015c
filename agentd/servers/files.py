"""``agentd serve files --root DIR``: a directory tree as watchable MCP resources.

Size: over 600 lines because one server's resources, tools and inotify
watchers stay together; safe file access is ``_safefs.py``, inotify ``_inotify.py``.

Resources (paths are relative to ``--root``; ``.`` or empty is the root):

``file-events://{+path}`` (event-log, ``EVENTS_MIME``)
    ``ADDED`` / ``MODIFIED`` / ``DELETED`` events for regular files anywhere
    below the directory ``path``, each ``{"seq", "type", "path", "size",
    "mtime"}``; ``ERROR`` in-band when the kernel dropped events (the watcher
    then re-scans and reports what differs) or the directory went away.
``file:///{+path}`` (state, ``STATE_MIME``)
    One file: ``{"path", "size", "text"}`` for UTF-8 text up to
    ``--max-text-bytes``, otherwise ``{"path", "size", "sha256"}``.

Change detection (see rfcs/0060): inotify marks paths *dirty*; once the tree
has been quiet for ``COALESCE_QUIET_S`` (at most ``COALESCE_MAX_S`` after
the first change) each dirty path is ``lstat``-ed and compared with the
watcher's snapshot. A path that appeared is ``ADDED``, one whose size, mtime
or inode changed is ``MODIFIED``, one that vanished is ``DELETED``; a
temporary file created and renamed away inside the window yields nothing.
So an editor's write-temp-then-rename save is one ``MODIFIED``.

Paths outside the root (``..``, absolute paths elsewhere, symlinks that
resolve outside it) are refused with :class:`PathRefused`.

This module also holds :class:`WatcherRegistry`, the subscription-counted
watcher table the kube server shares (one watcher per subscribed URI key,
started by the first subscriber of either protocol era, cancelled when the
last one leaves, at most ``--max-watchers`` at once: rfcs/0265).
"""

from __future__ import annotations

import argparse
import errno
import hashlib
import logging
import os
import stat
from collections import Counter
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Generic, Literal, Protocol, TypeVar
from urllib.parse import unquote

import orjson
import trio
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.resources.templates import ResourceSecurity
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_REQUEST

from agentd.core.errors import ConfigError
from agentd.servers import _sdk
from agentd.servers._base import (
    EVENTS_MIME,
    STATE_MIME,
    EventRing,
    ResourceError,
    SourceGate,
    WatchableServer,
    describe,
    whole_number,
)
from agentd.servers._inotify import (
    IN_ATTRIB,
    IN_CLOSE_WRITE,
    IN_CREATE,
    IN_DELETE,
    IN_DELETE_SELF,
    IN_MODIFY,
    IN_MOVE_SELF,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    Inotify,
    InotifyError,
    RecursiveWatcher,
    TreeEvent,
)
from agentd.servers._safefs import UnsafePath, open_regular

__all__ = [
    "COALESCE_MAX_S",
    "COALESCE_QUIET_S",
    "DEFAULT_MAX_TEXT_BYTES",
    "DEFAULT_MAX_WATCHERS",
    "SUMMARY",
    "FileStat",
    "PathRefused",
    "TreeSnapshot",
    "WatcherRegistry",
    "add_arguments",
    "build",
    "file_body",
    "resolve_in_root",
]

log = logging.getLogger("agentd.servers.files")

SUMMARY: Final = "a directory tree as event-log and file resources, pushed by inotify"

#: ``agentd serve files --help``: what it serves and how agentd uses it.
HELP: Final = """\
resources (paths relative to --root; nothing outside it is served):
  file-events://{+path}     ADDED / MODIFIED / DELETED events for the files below
                            the directory path ('.' for all), newest 256 (event-log)
  file:///{+path}           one file: its text up to --max-text-bytes, else its
                            size and sha256 (state)
tools: none (read-only); an editor's save (temp file + rename) is one MODIFIED.

with agentd:
  agentd --mcp-stdio 'files=agentd serve files --root ./inbox' \\
         --mode reactive --subscribe 'files:file-events://.' \\
         --route 'file-events://*=spawn' "handle the new files"
  mcpServers JSON: {"files": {"command": "agentd", "args": ["serve", "files", "--root", "."]}}"""
EVENTS_TEMPLATE: Final = "file-events://{+path}"
FILE_TEMPLATE: Final = "file:///{+path}"

COALESCE_QUIET_S: Final = 0.02
"""Quiet time after the last inotify event before dirty paths are examined.
An editor's save (write a temp file, fsync, rename over the original) takes
well under 20 ms, so it lands in one window and reads as one MODIFIED; the
watch layer downstream debounces for seconds, so this adds nothing visible."""

COALESCE_MAX_S: Final = 0.5
"""Longest a change waits while the tree never goes quiet (a long copy, a log
being appended to): events are still reported at least twice a second."""

DEFAULT_MAX_TEXT_BYTES: Final = 256 * 1024
"""Largest file ``file:///`` returns as text; bigger files report size and sha256."""

_HASH_CHUNK: Final = 1024 * 1024  # bytes read per step while hashing a large file

DEFAULT_MAX_WATCHERS: Final = 32
"""Watchers one bundled server runs at once (``--max-watchers``; kube and files, rfcs/0265).
Each is a process (``kubectl get --watch``) or an inotify instance, and Linux
allows a user 128 inotify instances by default, shared with everything else
that user runs; 32 distinct subscribed URIs is far more than an agent reading
a cluster or a tree needs, and a model's loop of subscribe calls stops there."""

EventType = Literal["ADDED", "MODIFIED", "DELETED"]


# --------------------------------------------------------------------------- paths (pure)


class PathRefused(ValueError):
    """A path the server will not serve; the message says why and what to give instead."""


def resolve_in_root(root: str, raw: str, *, uri: str) -> str:
    """The real absolute path for ``raw``, which must stay inside ``root``.

    Args:
        root: The served root, already absolute and fully resolved.
        raw: Path from the URI: relative to the root (``""``/``"."`` is the
            root), or absolute (accepted only when it lies inside the root).
        uri: The URI, for messages.

    Raises:
        PathRefused: NUL byte, ``..`` leaving the root, an absolute path
            elsewhere, or a symlink that resolves outside the root.
    """
    if "\0" in raw:
        raise PathRefused(f"{uri!r}: the path contains a NUL byte; give a plain path relative to the root")
    lexical = os.path.normpath(raw if os.path.isabs(raw) else os.path.join(root, raw or "."))
    if not _inside(root, lexical):
        if os.path.isabs(raw):
            raise PathRefused(
                f"{uri!r}: {raw!r} is outside the served root {root!r}; give a path relative to the root"
            )
        raise PathRefused(
            f"{uri!r}: {raw!r} leads outside the served root {root!r} (through '..'); "
            "give a path inside the root"
        )
    real = os.path.realpath(lexical)
    if not _inside(root, real):
        raise PathRefused(
            f"{uri!r}: {raw!r} is or passes through a symlink to {real!r}, outside the served root "
            f"{root!r}; only paths that stay inside the root are served"
        )
    return real


def _inside(root: str, path: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def relative(root: str, path: str) -> str:
    """``path`` relative to ``root`` in POSIX form; ``"."`` for the root itself."""
    return os.path.relpath(path, root) if path != root else "."


# --------------------------------------------------------------------------- snapshot and diff (pure)


@dataclass(frozen=True, slots=True)
class FileStat:
    """What the watcher remembers about one regular file."""

    size: int
    mtime_ns: int
    inode: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileStat:
        return cls(st.st_size, st.st_mtime_ns, st.st_ino)


Stat = Callable[[str], FileStat | None]
"""Returns a regular file's stat, or None when the path is gone or not a regular file."""


def lstat_file(path: str) -> FileStat | None:
    """:data:`Stat` on the real file system (symlinks are not followed)."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return FileStat.of(st) if stat.S_ISREG(st.st_mode) else None


def scan_tree(top: str) -> dict[str, FileStat]:
    """Every regular file below ``top`` (absolute path -> stat); symlinked directories are not entered."""
    out: dict[str, FileStat] = {}
    for dirpath, _dirnames, filenames in os.walk(top, followlinks=False):
        for name in filenames:
            path = os.path.join(dirpath, name)
            st = lstat_file(path)
            if st is not None:
                out[path] = st
    return out


def _draft(kind: EventType, root: str, path: str, st: FileStat) -> dict[str, object]:
    return {"type": kind, "path": relative(root, path), "size": st.size, "mtime": st.mtime_ns / 1e9}


@dataclass
class TreeSnapshot:
    """The regular files of one watched subtree, and the diff that turns changes into events.

    Pure: all file system access goes through the ``stat`` callable.

    Attributes:
        root: The served root (event paths are relative to it).
        top: The watched directory (the root or a directory below it).
        files: Absolute path -> last reported stat.
    """

    root: str
    top: str
    files: dict[str, FileStat] = field(default_factory=dict)

    def update(self, dirty: Iterable[str], stat_fn: Stat = lstat_file) -> list[dict[str, object]]:
        """Re-examine ``dirty`` paths; drafts (no ``seq``) for the ones that changed, sorted by path."""
        out: list[dict[str, object]] = []
        for path in sorted(set(dirty)):
            now = stat_fn(path)
            before = self.files.get(path)
            if now is None:
                if before is not None:
                    del self.files[path]
                    out.append(_draft("DELETED", self.root, path, before))
            elif before is None:
                self.files[path] = now
                out.append(_draft("ADDED", self.root, path, now))
            elif now != before:
                self.files[path] = now
                out.append(_draft("MODIFIED", self.root, path, now))
        return out

    def under(self, directory: str) -> list[str]:
        """Known files below ``directory`` (for a directory that moved or vanished)."""
        prefix = directory.rstrip("/") + "/"
        return [p for p in self.files if p.startswith(prefix)]

    def replace(self, fresh: Mapping[str, FileStat]) -> list[dict[str, object]]:
        """Diff a full re-scan against the snapshot (after an overflow); drafts for every difference."""
        dirty = set(self.files) | set(fresh)
        return self.update(dirty, lambda p: fresh.get(p))


def dirty_paths(batch: Iterable[TreeEvent], snapshot: TreeSnapshot) -> tuple[set[str], bool, bool]:
    """Paths a batch of tree events may have changed; plus (overflow, the watched dir itself went away)."""
    dirty: set[str] = set()
    overflow = gone = False
    for ev in batch:
        if ev.overflow:
            overflow = True
            continue
        if ev.path == snapshot.top and ev.mask & (IN_DELETE_SELF | IN_MOVE_SELF):
            gone = True
            continue
        if ev.is_dir:
            if ev.mask & (IN_DELETE | IN_MOVED_FROM | IN_DELETE_SELF | IN_MOVE_SELF):
                dirty.update(snapshot.under(ev.path))
            continue
        dirty.add(ev.path)
    return dirty, overflow, gone


# --------------------------------------------------------------------------- file bodies (pure)


def file_body(root: str, path: str, *, max_text_bytes: int) -> dict[str, object]:
    """The ``file:///`` body for a regular file.

    The file is opened without following a final symlink and without
    blocking, and must be a regular file (checked on the open descriptor): a
    FIFO, device or socket is refused at once, never read.

    Raises:
        FileNotFoundError: it does not exist.
        IsADirectoryError: it is a directory.
        UnsafePath: it is a FIFO, device, socket (or a symlink swapped in).
        PermissionError: it is not readable.
    """
    if os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, "is a directory", path)
    rel = relative(root, path)
    fd = open_regular(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as f:
        if os.fstat(fd).st_size <= max_text_bytes:
            data = f.read(max_text_bytes + 1)
            if len(data) <= max_text_bytes and b"\0" not in data:
                try:
                    return {"path": rel, "size": len(data), "text": data.decode("utf-8")}
                except UnicodeDecodeError:
                    pass
            if len(data) <= max_text_bytes:
                return {"path": rel, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            digest, size = hashlib.sha256(data), len(data)
        else:
            digest, size = hashlib.sha256(), 0
        while chunk := f.read(_HASH_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return {"path": rel, "size": size, "sha256": digest.hexdigest()}


# --------------------------------------------------------------------------- watcher registry (trio)


class Watcher(Protocol):
    """What :class:`WatcherRegistry` runs: a change source with a readiness gate."""

    gate: SourceGate

    async def run(self) -> None:
        """Run until cancelled (or return after recording a failure in ``gate``)."""
        ...


W = TypeVar("W", bound=Watcher)


@dataclass
class _Entry(Generic[W]):
    watcher: W
    uris: Counter[str] = field(default_factory=Counter)
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    finished: bool = False


class WatcherLimitReached(Exception):
    """A subscription would start a watcher past ``--max-watchers`` (internal; becomes an MCP error)."""


class WatcherRegistry(Generic[W]):
    """One watcher per key, counted by subscriptions from both protocol eras.

    ``key(uri)`` maps a URI to the watcher it shares (None: not ours, or not
    valid; the read reports why). A 2026-07-28 ``subscriptions/listen`` stream
    holds its URIs for as long as the stream is open; a handshake-era
    ``resources/subscribe`` holds its URI until ``resources/unsubscribe`` or
    the connection closes. The first holder starts the watcher, the last one
    to leave cancels it. Learned through server middleware, since the SDK has
    no subscription hooks (the seam belongs in ``_base``).

    At most ``max_watchers`` watchers run at once (rfcs/0265): a subscription
    that would start one more is refused with an MCP error (``INVALID_REQUEST``)
    naming the cap, the flag and the fix; a listen stream is refused whole, so a
    client that opens a new stream with its set plus one URI before closing the
    old one sees exactly that URI refused. URIs sharing a running watcher never
    count twice.
    """

    def __init__(
        self,
        server: WatchableServer,
        *,
        key: Callable[[str], Hashable | None],
        factory: Callable[[str], W],
        max_watchers: int = DEFAULT_MAX_WATCHERS,
        watcher_noun: str = "watchers",
    ) -> None:
        self._server = server
        self._key = key
        self._factory = factory
        self._max_watchers = max_watchers
        self._watcher_noun = watcher_noun
        self._entries: dict[Hashable, _Entry[W]] = {}
        self._legacy: dict[object, set[str]] = {}
        self._nursery: trio.Nursery | None = None
        self._nursery_ready = trio.Event()

    def install(self) -> None:
        """Hook into ``server``: a source task that owns the watchers, and the subscription middleware."""
        self._server.add_source(self._own_watchers)
        self._server.mcp.middleware.append(self._middleware)

    # ------------------------------------------------------------ lookups

    def get(self, uri: str) -> W | None:
        """The live watcher serving ``uri``; a finished (failed) one is restarted first."""
        k = self._key(uri)
        entry = self._entries.get(k) if k is not None else None
        if entry is None:
            return None
        if entry.finished and self._nursery is not None:
            # A watcher that failed to start is retried by the next read (a client action, not a timer).
            entry.watcher = self._factory(uri)
            entry.scope = trio.CancelScope()
            entry.finished = False
            self._nursery.start_soon(self._run, entry)
        return entry.watcher

    def notifier(self, uri: str) -> Callable[[], Awaitable[None]]:
        """A callback that notifies every subscribed URI sharing ``uri``'s watcher."""
        k = self._key(uri)

        async def changed() -> None:
            entry = self._entries.get(k) if k is not None else None
            for u in list(entry.uris) if entry is not None else [uri]:
                await self._server.notify_changed(u)

        return changed

    def active_keys(self) -> list[Hashable]:
        return list(self._entries)

    # ------------------------------------------------------------ acquire / release

    async def acquire(self, uri: str) -> None:
        """Count one subscription of ``uri``; start its watcher if it is the first.

        Raises:
            WatcherLimitReached: it would start a watcher past ``max_watchers``.
        """
        k = self._key(uri)
        if k is None:
            return
        await self._nursery_ready.wait()
        assert self._nursery is not None
        entry = self._entries.get(k)
        if entry is None:
            if len(self._entries) >= self._max_watchers:
                raise WatcherLimitReached(self._limit_message(uri))
            entry = _Entry(self._factory(uri))
            self._entries[k] = entry
            self._nursery.start_soon(self._run, entry)
        entry.uris[uri] += 1

    def _first_past_cap(self, uris: Iterable[str]) -> str | None:
        """The first of ``uris`` (in order) whose watcher would be one past ``max_watchers``, if any."""
        new: set[Hashable] = set()
        for uri in uris:
            k = self._key(uri)
            if k is None or k in self._entries or k in new:
                continue
            if len(self._entries) + len(new) >= self._max_watchers:
                return uri
            new.add(k)
        return None

    def _watchers_before(self, uris: Iterable[str], past: str) -> int:
        """Watchers running plus those ``uris`` start before ``past`` (what the refusal counts)."""
        keys = set(self._entries)
        for uri in uris:
            if uri == past:
                break
            k = self._key(uri)
            if k is not None:
                keys.add(k)
        return len(keys)

    def _limit_message(self, uri: str, running: int | None = None) -> str:
        name = self._server.name
        count = len(self._entries) if running is None else running
        return (
            f"subscription to {uri!r} refused: this server already runs {count} "
            f"{self._watcher_noun} (one per subscribed URI), its limit (--max-watchers "
            f"{self._max_watchers} of `agentd serve {name}`); unsubscribe from a URI you no longer "
            f"need and subscribe again, or start the server with a higher --max-watchers"
        )

    def _refusal(self, uri: str, exc: WatcherLimitReached) -> MCPError:
        return MCPError(
            code=INVALID_REQUEST,
            message=str(exc),
            data={"uri": uri, "limit": "--max-watchers", "value": self._max_watchers},
        )

    def release(self, uri: str) -> None:
        """Drop one subscription of ``uri``; cancel its watcher when none are left."""
        k = self._key(uri)
        entry = self._entries.get(k) if k is not None else None
        if entry is None:
            return
        entry.uris[uri] -= 1
        if entry.uris[uri] <= 0:
            del entry.uris[uri]
        if not entry.uris:
            entry.scope.cancel()
            del self._entries[k]

    async def _run(self, entry: _Entry[W]) -> None:
        with entry.scope:
            try:
                await entry.watcher.run()
            except Exception as exc:  # one broken watcher must not stop the others or the server
                log.exception("watcher %r crashed", entry.watcher)
                entry.watcher.gate.failed(f"the change source crashed: {exc!r}; see the server's stderr")
        entry.finished = True

    async def _own_watchers(self) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._nursery_ready.set()
            await trio.sleep_forever()

    # ------------------------------------------------------------ middleware

    async def _middleware(self, ctx: ServerRequestContext, call_next: CallNext) -> HandlerResult:
        method = ctx.method
        params = ctx.params if isinstance(ctx.params, Mapping) else {}
        if method == "subscriptions/listen":
            notifications = params.get("notifications")
            raw = notifications.get("resourceSubscriptions") if isinstance(notifications, Mapping) else None
            uris = [u for u in raw if isinstance(u, str)] if isinstance(raw, list) else []
            past = self._first_past_cap(uris)
            if past is not None:
                # Refused before anything starts: no watcher is started and stopped for a refused stream.
                running = self._watchers_before(uris, past)
                raise self._refusal(past, WatcherLimitReached(self._limit_message(past, running))) from None
            held: list[str] = []
            try:
                for uri in uris:
                    try:
                        await self.acquire(uri)
                    except WatcherLimitReached as exc:
                        # The whole stream is refused: its acknowledgement would promise every URI.
                        raise self._refusal(uri, exc) from None
                    held.append(uri)
                return await call_next(ctx)
            finally:
                for uri in held:
                    self.release(uri)
        target = params.get("uri")
        if method == "resources/subscribe" and isinstance(target, str):
            return await self._legacy_subscribe(ctx, call_next, target)
        if method == "resources/unsubscribe":
            result = await call_next(ctx)
            if isinstance(target, str):
                held_set = self._legacy.get(_sdk.connection_of(ctx.session))
                if held_set is not None and target in held_set:
                    held_set.discard(target)
                    self.release(target)
            return result
        return await call_next(ctx)

    async def _legacy_subscribe(
        self, ctx: ServerRequestContext, call_next: CallNext, uri: str
    ) -> HandlerResult:
        """``resources/subscribe``: its watcher is acquired first, so a subscription past the cap is refused."""
        conn = _sdk.connection_of(ctx.session)
        held_set = self._legacy.get(conn)
        if held_set is not None and uri in held_set:
            return await call_next(ctx)  # already held by this connection: nothing new to start
        try:
            await self.acquire(uri)
        except WatcherLimitReached as exc:
            raise self._refusal(uri, exc) from None
        try:
            result = await call_next(ctx)
        except BaseException:
            self.release(uri)
            raise
        if held_set is None:
            held_set = self._legacy[conn] = set()
            stack = getattr(conn, "exit_stack", None)
            if stack is not None:
                stack.callback(self._drop_connection, conn)
        held_set.add(uri)
        return result

    def _drop_connection(self, conn: object) -> None:
        for uri in self._legacy.pop(conn, set()):
            self.release(uri)


def request_uri(ctx: Context) -> str | None:
    """The URI exactly as the client sent it in ``resources/read`` (the key its subscription uses)."""
    params = ctx.request_context.params
    uri: object = params.get("uri") if isinstance(params, Mapping) else None
    return uri if isinstance(uri, str) else None


# --------------------------------------------------------------------------- watchers (trio)


async def _coalesce(
    first: list[TreeEvent], wait: Callable[[], Awaitable[list[TreeEvent]]]
) -> list[TreeEvent]:
    """Gather events until the source has been quiet for COALESCE_QUIET_S (at most COALESCE_MAX_S)."""
    batch = list(first)
    deadline = trio.current_time() + COALESCE_MAX_S
    while True:
        quiet_until = min(trio.current_time() + COALESCE_QUIET_S, deadline)
        with trio.move_on_at(quiet_until) as scope:
            more = await wait()
        if scope.cancelled_caught:
            return batch
        batch.extend(more)


def _not_a_directory(root: str, top: str) -> str | None:
    """Why ``top`` cannot be watched as a tree (with the fix), or None when it can."""
    if os.path.isdir(top):
        return None
    rel = relative(root, top)
    if os.path.exists(top):
        return f"{rel!r} is not a directory: subscribe to file:///{rel} to watch one file"
    return f"{rel!r} does not exist: create it first, or watch its parent directory"


class TreeWatcher:
    """The event-log of one directory subtree (one inotify instance, shared by its subscribers)."""

    def __init__(self, root: str, top: str, *, changed: Callable[[], Awaitable[None]]) -> None:
        self.root = root
        self.top = top
        self.ring = EventRing()
        self.gate = SourceGate(f"the inotify watch of {relative(root, top)!r}")
        self._changed = changed

    async def run(self) -> None:
        problem = _not_a_directory(self.root, self.top)
        if problem is not None:
            self.gate.failed(problem)
            return
        watcher = RecursiveWatcher(self.top)
        try:
            try:
                watcher.start()
            except InotifyError as exc:
                self.gate.failed(f"cannot watch {relative(self.root, self.top)!r}: {exc}")
                return
            snapshot = TreeSnapshot(self.root, self.top, scan_tree(self.top))
            self.gate.running()
            while True:
                batch = await _coalesce(await watcher.wait_changes(), watcher.wait_changes)
                dirty, overflow, gone = dirty_paths(batch, snapshot)
                drafts = snapshot.update(dirty)
                if overflow:
                    drafts.append(
                        {
                            "type": "ERROR",
                            "reason": "overflow",
                            "message": "the kernel dropped file events (inotify queue overflow); the tree was "
                            "re-scanned and the events after this one bring it up to date; re-read any "
                            "file:/// resources you depend on",
                        }
                    )
                    drafts.extend(snapshot.replace(scan_tree(self.top)))
                if gone:
                    drafts.extend(snapshot.replace({}))
                    message = (
                        f"the watched directory {relative(self.root, self.top)!r} was removed or moved away"
                    )
                    drafts.append(
                        {
                            "type": "ERROR",
                            "reason": "gone",
                            "message": message + "; watch it again once it exists",
                        }
                    )
                await self._emit(drafts)
                if gone:
                    self.gate.failed(message + ": recreate it and subscribe again")
                    return
        finally:
            watcher.close()

    async def _emit(self, drafts: list[dict[str, object]]) -> None:
        if self.ring.append_drafts(drafts):
            await self._changed()


_FILE_MASK: Final = (
    IN_CLOSE_WRITE | IN_MODIFY | IN_ATTRIB | IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO
)


class FileWatcher:
    """Notifies when one file's ``file:///`` body may have changed (inotify on its directory)."""

    def __init__(self, root: str, path: str, *, changed: Callable[[], Awaitable[None]]) -> None:
        self.root = root
        self.path = path
        self.gate = SourceGate(f"the inotify watch of {relative(root, path)!r}")
        self._changed = changed

    async def run(self) -> None:
        directory, name = os.path.split(self.path)
        ino = Inotify()
        try:
            try:
                ino.add_watch(directory, _FILE_MASK)
            except InotifyError as exc:
                self.gate.failed(f"cannot watch the directory of {relative(self.root, self.path)!r}: {exc}")
                return
            last = lstat_file(self.path)
            self.gate.running()

            async def wait() -> list[TreeEvent]:
                return [TreeEvent(e.path, e.mask) for e in await ino.wait_events() if e.name == name]

            while True:
                first = await wait()
                if not first:
                    continue
                await _coalesce(first, wait)
                now = lstat_file(self.path)
                if now != last:
                    last = now
                    await self._changed()
        finally:
            ino.close()


# --------------------------------------------------------------------------- the server


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``agentd serve files``."""
    parser.add_argument(
        "--root", required=True, metavar="DIR", help="directory tree to serve (nothing outside it)"
    )
    parser.add_argument(
        "--max-text-bytes",
        type=whole_number,
        default=DEFAULT_MAX_TEXT_BYTES,
        metavar="N",
        help=f"largest file returned as text by file:/// (default {DEFAULT_MAX_TEXT_BYTES}); larger: size + sha256",
    )
    add_max_watchers(parser, "inotify watches")


def add_max_watchers(parser: argparse.ArgumentParser, what: str) -> None:
    """``--max-watchers N``: the cap on a server's per-subscription watchers (kube and files)."""
    parser.add_argument(
        "--max-watchers",
        type=whole_number,
        default=DEFAULT_MAX_WATCHERS,
        metavar="N",
        help=f"{what} running at once, one per subscribed URI; a subscription past it is refused "
        f"(default {DEFAULT_MAX_WATCHERS})",
    )


def max_watchers(args: argparse.Namespace) -> int:
    """``--max-watchers``, checked.

    Raises:
        ConfigError: it is below 1.
    """
    value = int(args.max_watchers)
    if value < 1:
        raise ConfigError(
            "--max-watchers",
            args.max_watchers,
            f"give a whole number of 1 or more (default {DEFAULT_MAX_WATCHERS}); past it a subscription "
            "is refused",
        )
    return value


_Key = tuple[str, str]  # ("tree" | "file", real absolute path)


def build(args: argparse.Namespace) -> WatchableServer:
    """Construct the files server.

    Raises:
        ConfigError: ``--root`` is not an existing directory, or ``--max-text-bytes`` < 0.
    """
    root = os.path.realpath(args.root)
    if not os.path.isdir(root):
        raise ConfigError("--root", args.root, "give an existing directory")
    if args.max_text_bytes < 0:
        raise ConfigError("--max-text-bytes", args.max_text_bytes, "give a byte count of 0 or more")
    max_text = int(args.max_text_bytes)
    cap = max_watchers(args)
    server = WatchableServer(
        "files",
        instructions=(
            f"Files under {root}. Watch file-events://DIR (relative to the root; . for all) for "
            "ADDED/MODIFIED/DELETED events, or subscribe to file:///PATH for one file's content."
        ),
    )

    def parse(uri: str) -> tuple[_Key, str]:
        if uri.startswith("file-events://"):
            raw, kind = uri.removeprefix("file-events://"), "tree"
        elif uri.startswith("file:///"):
            raw, kind = uri.removeprefix("file:///"), "file"
        else:
            raise PathRefused(f"{uri!r} is not a file-events:// or file:/// URI")
        return (kind, resolve_in_root(root, unquote(raw), uri=uri)), raw

    def key(uri: str) -> _Key | None:
        try:
            return parse(uri)[0]
        except PathRefused:
            return None

    def make(uri: str) -> Watcher:
        (kind, path), _ = parse(uri)
        if kind == "tree":
            return TreeWatcher(root, path, changed=registry.notifier(uri))
        return FileWatcher(root, path, changed=registry.notifier(uri))

    registry: WatcherRegistry[Watcher] = WatcherRegistry(
        server, key=key, factory=make, max_watchers=cap, watcher_noun="inotify watches"
    )
    registry.install()
    open_security = ResourceSecurity(exempt_params={"path"})  # our own checks, with clearer messages

    def resolve(ctx: Context, fallback: str) -> tuple[str, str]:
        """The URI the client read (its subscription key) and the real path it names."""
        uri = request_uri(ctx) or fallback
        try:
            (_, real), _raw = parse(uri)
        except PathRefused as exc:
            raise ResourceError(str(exc)) from exc
        return uri, real

    events_description = describe(
        "File changes below a directory of the served root (the path is relative to the root; "
        "'.' or empty for the whole tree): ADDED / MODIFIED / DELETED events with path, size and "
        "mtime, each with a seq, in a ring of the last 256. An editor's save (temp file + rename) "
        "is one MODIFIED. ERROR events report dropped kernel events (then re-read) or a removed "
        "directory.",
        name="src",
        uri="file-events://src",
    )

    @server.mcp.resource(
        EVENTS_TEMPLATE,
        name="file-events",
        description=events_description,
        mime_type=EVENTS_MIME,
        security=open_security,
    )
    async def read_events(path: str, ctx: Context) -> str:
        uri, real = resolve(ctx, f"file-events://{path}")
        watcher = registry.get(uri)
        if not isinstance(watcher, TreeWatcher):  # file-events:// URIs key tree watchers only
            problem = _not_a_directory(root, real)
            if problem is not None:
                raise ResourceError(problem)
            return orjson.dumps({"events": []}).decode()
        await watcher.gate.wait_ready()
        return watcher.ring.body()

    file_description = describe(
        "One file under the served root (the path is relative to the root), as JSON: "
        f"{{path, size, text}} for UTF-8 text up to {max_text} bytes, otherwise {{path, size, sha256}}. "
        "Subscribe to be told when it changes.",
        name="readme",
        uri="file:///README.md",
    )

    @server.mcp.resource(
        FILE_TEMPLATE, name="file", description=file_description, mime_type=STATE_MIME, security=open_security
    )
    async def read_file(path: str, ctx: Context) -> str:
        uri, real = resolve(ctx, f"file:///{path}")
        watcher = registry.get(uri)
        if watcher is not None:
            await watcher.gate.wait_ready()
        try:
            body = await trio.to_thread.run_sync(lambda: file_body(root, real, max_text_bytes=max_text))
        except FileNotFoundError as exc:
            raise ResourceError(
                f"{path!r} does not exist under the served root; list it with file-events://."
            ) from exc
        except IsADirectoryError as exc:
            raise ResourceError(f"{path!r} is a directory; watch it with file-events://{path}") from exc
        except UnsafePath as exc:
            raise ResourceError(
                f"{path!r} is not a regular file (a FIFO, device or socket); only regular files are served"
            ) from exc
        except PermissionError as exc:
            raise ResourceError(f"{path!r} is not readable by the server: {exc.strerror}") from exc
        return orjson.dumps(body).decode()

    return server
