"""One source's deliveries on disk: durable before 2xx, once per delivery id, bounded, acknowledged.

Size: over 600 lines because the log, its index, the group commit and the
retention are one state kept consistent together; what a line means is
``delivery.py`` and the positions, acknowledgements and gaps are the inbox's
pure log (``servers/_inboxlog.py``).

Files (``<dir>/<source>/``: the state directory's rules, ARCHITECTURE decision 14, carried out by
:func:`open_private_dir`: this user's, 0700; refused when another user owns it or others may
write it; files opened without following links, regular files of this user only: a file another
user owns is refused and left as it is)::

    seg-<20-digit offset>.jsonl   the log: one delivery per line, in segments named by the
                                  offset of their first byte in the whole log (offsets never move)
    state.json                    the consumer position (the inbox cursor: first pending offset and
                                  seq, acknowledged seqs, in-band notes) and where retention cut
    lock                          flock()ed by the one server that owns the directory
    torn-<UTC>.bin                a torn last line found at start (a crash mid-write), kept aside

Durable before 2xx
------------------
:meth:`DeliveryStore.append` writes the line under the append lock, then
waits for the *group commit*: one task (:meth:`DeliveryStore.run`) calls
``fdatasync`` for everything written so far, in a worker thread, and only then
marks those deliveries durable, feeds them to the log (giving each its
``seq``) and wakes their senders. Concurrent deliveries share one sync. A
delivery is never shown (events, listing, reads) before it is durable. A line
left half-written by a crash (never answered 2xx) is cut off at the next start
and kept aside in ``torn-*.bin``.

Once per delivery id, once per signed body
------------------------------------------
The dedupe keys of every retained delivery are indexed (rebuilt from the log
at start, so they survive restarts; bounded by the retention). A repeat
within the source's window is answered 2xx and not stored; if the original is
not durable yet, the repeat waits for it (so a 2xx always means "durable").
So are the replay keys of signed bodies (source, event and raw body hashed):
the same signed body again under a fresh delivery id is a replay of a
captured request, answered 2xx as a duplicate and not stored (rfcs/0374).

Retention and gaps
------------------
At most ``retain_count`` deliveries are kept, none older than ``retain_age``.
Deliveries that fall off are acknowledged in the log; those still pending
(never acknowledged) are named by one in-band ``GAP`` event (count, seqs,
why). Whole segments below both the retention mark and the consumer position
are deleted. Acknowledgements (``ack``, ``ack_through``) are durable before
the tool call returns.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import fcntl
import itertools
import logging
import os
import re
import secrets
import stat
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, Literal

import orjson
import trio

from agentd.core.durations import format_duration
from agentd.core.errors import ConfigError, NotAFile, NotOurs
from agentd.core.jsonvalue import JSONObject
from agentd.observe.timeline import mark
from agentd.servers._base import ServerStartError
from agentd.servers._inboxlog import NOTES_CAP, WINDOW, AckError, Cursor, Entry, InboxLog, cursor_from_json
from agentd.servers._safefs import open_regular, write_atomic
from agentd.servers.webhook.delivery import (
    Accepted,
    Record,
    decode_record,
    make_parser,
    stored_record,
    valid_id,
)
from agentd.servers.webhook.sources import SourceSpec
from agentd.state.files import directory_problem, make_private_dir, user

__all__ = [
    "DEFAULT_RETAIN_AGE",
    "DEFAULT_RETAIN_COUNT",
    "SEGMENT_BYTES",
    "DeliveryStore",
    "Duplicate",
    "StoreUnavailable",
    "Stored",
]

log = logging.getLogger("agentd.servers.webhook")

DEFAULT_RETAIN_COUNT: Final = 1000
"""Deliveries kept per source (acknowledged or not): what dedupe and reads by id can reach."""
DEFAULT_RETAIN_AGE: Final = 7 * 86400.0
"""Seconds a delivery is kept: longer than GitHub's 3-day redelivery horizon."""
SEGMENT_BYTES: Final = 16 * 1024 * 1024
"""A segment is closed and a new one started past this size: retention frees disk a segment at a time."""
SCAN_CHUNK: Final = 1 << 20
"""Bytes read per step when the log is read back at start."""
RETENTION_SLACK: Final = 0.001
"""Seconds past a delivery's expiry before the age check runs (so it is strictly over the age)."""
PERSIST_DELAY: Final = 1.0
"""Seconds retention changes wait before the position is written: one write per burst, not per
delivery (an acknowledgement is written at once; a crash before this write loses nothing: the
same deliveries are evicted again at start)."""
INLINE_SYNC_BELOW: Final = 0.01
"""Seconds: while the last ``fdatasync`` took less, the next one is made on the event loop itself.
Handing a sync to a worker thread and back costs 0.5-0.8 ms of CPU on 2 busy cores (measured),
several times a fast disk's sync (0.1-0.3 ms on the test machines' ext4); a slower disk (or one
that stalls) is synced in a thread so the server keeps reading requests and answering MCP calls
meanwhile. Each sync's own time decides (in the thread too, without the hop)."""
PROBE_CAP: Final = 4 * 1024 * 1024
"""Most bytes the write probe (:meth:`DeliveryStore.writable`) writes: the size of the write that
failed, up to this (a delivery line is at most ``--max-body`` plus its record)."""
_WRITE_TROUBLE: Final = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.EROFS: "the file system is read-only",
    errno.EFBIG: "the log file reached the size limit",
    errno.EIO: "the disk reported an I/O error",
}
"""What the sender and the probes are told when a write fails (never the path: that is logged)."""
STATE_NAME: Final = "state.json"
LOCK_NAME: Final = "lock"
_SEGMENT_RE: Final = re.compile(r"seg-([0-9]{20})\.jsonl")  # [0-9]: \d takes every script's digits

Step = Literal["written", "synced"]
"""Points a fault test can stop the process at (``step_hook``): ``written``, a delivery is in the
file but not synced; ``synced``, it is on disk but nobody was answered or told yet."""


class StoreUnavailable(Exception):
    """The delivery cannot be stored now (disk full, or the log broke); the sender should retry.

    ``str()`` is for the server's log (it names the files); :attr:`public` is what the sender is
    told (it names no local path).
    """

    def __init__(self, message: str, public: str) -> None:
        super().__init__(message)
        self.public = public


@dataclass(slots=True)
class _Item:
    """One retained delivery in the index."""

    id: str
    key: str | None
    at: float
    """Received, Unix seconds (retention by age)."""
    offset: int
    end: int
    event: str
    received: str
    seq: int | None = None
    """Its seq in the log; None when it was acknowledged before this process started."""
    durable: bool = False
    digest: str | None = None
    """The replay key of its signed body (:attr:`~agentd.servers.webhook.delivery.Accepted.digest`)."""


@dataclass(frozen=True, slots=True)
class Stored:
    """A new delivery, durable."""

    id: str
    seq: int


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A retry of a delivery already stored (durable); nothing new was written."""

    id: str
    replay: bool = False
    """Recognised by its signed body, under another delivery id (a captured request sent again)."""


@dataclass(frozen=True, slots=True)
class Staged:
    """A delivery written (or found: ``duplicate``) by :meth:`DeliveryStore.stage`; durable once
    ``item.durable``."""

    item: _Item
    duplicate: bool
    replay: bool = False


@dataclass(slots=True)
class _Segment:
    start: int
    name: str
    size: int


@dataclass
class Counters:
    """What the status resource shows for one source."""

    accepted: int = 0
    duplicates: int = 0
    replays: int = 0
    """Duplicates recognised by their signed body under another delivery id (counted in both)."""
    answered: int = 0
    """Verified and answered without storing (ping, url_verification)."""
    refused: dict[str, int] = field(default_factory=dict)
    evicted: int = 0
    evicted_unacknowledged: int = 0
    syncs: int = 0
    """Group commits (``fdatasync`` calls): concurrent deliveries share one."""
    last_received: str | None = None


def _segment_name(start: int) -> str:
    return f"seg-{start:020d}.jsonl"


def _trouble(exc: OSError) -> str:
    """A failed write, as a sender may be told it (no path)."""
    known = _WRITE_TROUBLE.get(exc.errno or 0)
    return known if known is not None else f"a write failed ({exc.strerror or 'unknown error'})"


def _read_fd(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, SCAN_CHUNK):
        chunks.append(chunk)
    return b"".join(chunks)


def open_private_dir(path: str) -> int:
    """Create ``path`` (mode 0700) or check the one there, and open it (never through a link).

    The state directory's rules (:mod:`agentd.state.files`): this user's directory, writable by
    nobody else. One it creates is 0700 whatever the umask. One of this user's that its group
    may write (what Kubernetes' ``fsGroup`` makes of every directory on a volume at each mount:
    the group is the pod's own) is tightened to 0700, said in the log; one that others may write
    is refused: anyone on the host could have planted files in it.

    Raises:
        ConfigError: it is not a directory, another user's, or writable by others.
        ServerStartError: it cannot be created or opened.
    """
    try:
        make_private_dir(Path(path))
    except NotAFile as exc:
        raise ConfigError(
            "--dir",
            path,
            f"{path} is {exc.kind}, not a directory; remove it (the server creates it) or choose another --dir",
        ) from exc
    except NotOurs:
        pass  # judged below, on what is opened (no swap in between)
    except OSError as exc:
        raise ServerStartError(
            f"cannot use the delivery directory {path}: {exc.strerror}; choose another with --dir"
        ) from exc
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise ServerStartError(
            f"cannot use the delivery directory {path}: {exc.strerror}; choose another with --dir"
        ) from exc
    st = os.fstat(fd)
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid == os.geteuid() and mode & stat.S_IWGRP and not mode & stat.S_IWOTH:
        try:
            os.fchmod(fd, 0o700)
        except OSError as exc:
            os.close(fd)
            raise ServerStartError(
                f"cannot make {path} private ({exc.strerror}); run `chmod 700 {path}`"
            ) from exc
        log.warning(
            "the delivery directory %s was writable by its group (mode %04o); it is 0700 now", path, mode
        )
        st = os.fstat(fd)
    problem = directory_problem(Path(path), st)
    if problem is not None:
        os.close(fd)
        raise ConfigError("--dir", path, f"the delivery directory {problem}")
    return fd


def _utc_stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")


def _timed_sync(fd: int) -> float:
    """``fdatasync(fd)``; returns the seconds it took."""
    began = time.perf_counter()
    os.fdatasync(fd)
    return time.perf_counter() - began


class DeliveryStore:
    """The durable log of one source (see the module docstring).

    Args:
        spec: the source.
        directory: ``<dir>/<source>`` (created 0700).
        retain_count, retain_age: the retention bound (``retain_age`` None: no age bound).
        on_change: called (synchronously) when what readers see changed: ``new`` are the ids
            that became durable, ``listing`` whether the set of pending deliveries changed.
        on_broken: called once if the log cannot be written any more (a failed fsync).
        clock: the wall clock (Unix seconds): received times and retention by age.
        step_hook: fault tests stop the process at a :data:`Step`.
    """

    def __init__(
        self,
        spec: SourceSpec,
        directory: str,
        *,
        retain_count: int = DEFAULT_RETAIN_COUNT,
        retain_age: float | None = DEFAULT_RETAIN_AGE,
        window: int = WINDOW,
        segment_bytes: int = SEGMENT_BYTES,
        on_change: Callable[[list[str], bool], None] = lambda new, listing: None,
        on_broken: Callable[[str], None] = lambda message: None,
        clock: Callable[[], float] = time.time,
        step_hook: Callable[[Step], None] | None = None,
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self.dir = directory
        self.uri = f"webhook://{spec.name}/events"
        self.retain_count = retain_count
        self.retain_age = retain_age
        self._window = window
        self._segment_bytes = segment_bytes
        self._on_change = on_change
        self._on_broken = on_broken
        self._clock = clock
        self._hook = step_hook
        self.counters = Counters()
        self.warnings: list[str] = []
        self._dir_fd = -1
        self._lock_fd = -1
        self._segments: list[_Segment] = []
        self._fd: int | None = None  # the active (last) segment, open for appending
        self._end = 0  # global offset just past the last byte written
        self._retained_from = 0
        self._order: deque[_Item] = deque()
        self._by_id: dict[str, _Item] = {}
        self._by_key: dict[str, _Item] = {}
        self._by_digest: dict[str, _Item] = {}
        self._unsynced: list[tuple[_Item, bytes]] = []
        self._scanned: Record | None = None
        self._prepared: dict[
            int, Record
        ] = {}  # offset -> the record just written there (fed without a re-parse)
        self.log = self._new_log(Cursor())
        self._version = 0
        self._written_version = -1
        self._broken: str | None = None
        self._unwritable: str | None = None
        self._failed_size = 0
        self._append_lock = trio.Lock()
        self._persist_lock = trio.Lock()
        self._dirty = trio.Event()
        self._inline_sync = True
        """Whether the next fdatasync is made on the event loop (the last one was fast: INLINE_SYNC_BELOW)."""
        self._round = trio.Event()
        self.round_hooks: list[Callable[[], None]] = []
        """Called after each round of the group commit (and when the log breaks): staged deliveries
        may have become durable (or never will)."""
        self._armed = trio.Event()
        self._persist_wanted = trio.Event()
        self._evicted_version = 0

    def _new_log(self, cursor: Cursor) -> InboxLog:
        return InboxLog(
            self.name,
            self.uri,
            cursor,
            window=self._window,
            # Every pending delivery stays in memory (the retention bounds them), so the log
            # never has to walk the file for events hidden below the window.
            mem_cap=self.retain_count + NOTES_CAP + 1,
            parse=make_parser(self._saw, lambda offset: self._prepared.pop(offset, None)),
            item_uri=f"webhook://{self.name}/event/{{id}}",
            noun="delivery",
        )

    def _saw(self, offset: int, end: int, record: Record | None) -> None:
        self._scanned = record

    # ---------------------------------------------------------------- start and stop

    def open(self) -> None:
        """Create or open the directory, take its lock, read the log back. Synchronous (``build`` calls it).

        Raises:
            ServerStartError: another server owns the directory, or it cannot be used.
        """
        self._dir_fd = open_private_dir(self.dir)
        self._take_lock()
        self._remove_temporaries()
        cursor, retained_from, evicted = self._load_state()
        self.counters.evicted = evicted
        self._list_segments()
        self._cut_torn_tail()
        self._retained_from = max(retained_from, self._segments[0].start if self._segments else 0)
        self.log = self._new_log(cursor)
        self._read_back(cursor)
        self._delete_old_segments()
        self._open_active()
        note = self._evict(self._clock())
        if note is not None or self.log.version:
            self._write_state()
        for warning in self.warnings:
            log.warning("%s: %s", self.name, warning)

    def close(self) -> None:
        """Persist the position one last time and release the directory (a cleanup: runs on every exit)."""
        if self._dir_fd < 0:
            return
        if self._broken is None and self._current_version() != self._written_version:
            with contextlib.suppress(OSError):
                self._write_state()
        for fd in (self._fd, self._lock_fd, self._dir_fd):
            if fd is not None and fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._fd, self._lock_fd, self._dir_fd = None, -1, -1

    def _open_ours(self, name: str, flags: int, mode: int = 0o600) -> int:
        """Open ``name`` in the directory: a regular file of this user, never through a link.

        Raises:
            ServerStartError: another user's file (left as it is).
            OSError: as :func:`~agentd.servers._safefs.open_regular` (UnsafePath: not a regular file).
        """
        fd = open_regular(name, flags, mode, dir_fd=self._dir_fd, shown=os.path.join(self.dir, name))
        try:
            self._check_ours(name, os.fstat(fd))
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _check_ours(self, name: str, st: os.stat_result) -> None:
        """Refuse a file another user owns: the server did not write it (it is left as it is)."""
        if st.st_uid != os.geteuid():
            raise ServerStartError(
                f"{os.path.join(self.dir, name)} is owned by {user(st.st_uid)}, not by this server's user "
                f"({user(os.geteuid())}): not a file the server wrote, so it is neither read nor replaced; "
                "remove it if it is not wanted, or choose another --dir"
            )

    def _take_lock(self) -> None:
        try:
            fd = self._open_ours(LOCK_NAME, os.O_RDWR | os.O_CREAT)
        except OSError as exc:
            raise ServerStartError(
                f"cannot open {os.path.join(self.dir, LOCK_NAME)}: {exc.strerror}"
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ServerStartError(
                f"the deliveries of source {self.name!r} in {self.dir} are already served by another "
                "`agentd serve webhook`; stop it first, or give this one another --dir"
            ) from None
        self._lock_fd = fd

    def _remove_temporaries(self) -> None:
        # Left by a SIGKILL during write_atomic; we hold the lock, so nobody else writes them.
        with contextlib.suppress(OSError):
            for name in os.listdir(self._dir_fd):
                if name.startswith(".~") and name.endswith(".tmp"):
                    with contextlib.suppress(OSError):
                        if os.lstat(name, dir_fd=self._dir_fd).st_uid == os.geteuid():  # ours only
                            os.unlink(name, dir_fd=self._dir_fd)

    def _load_state(self) -> tuple[Cursor, int, int]:
        try:
            fd = self._open_ours(STATE_NAME, os.O_RDONLY)
            try:
                raw = _read_fd(fd)
            finally:
                os.close(fd)
        except FileNotFoundError:
            return Cursor(), 0, 0
        except OSError as exc:
            raise ServerStartError(
                f"cannot read {os.path.join(self.dir, STATE_NAME)}: {exc.strerror}; fix it or remove it"
            ) from exc
        try:
            doc = orjson.loads(raw)
            if not isinstance(doc, dict) or not isinstance(doc.get("cursor"), dict):
                raise ValueError("it is not an object with a 'cursor'")
            cursor, _ledger = cursor_from_json(doc["cursor"])
            retained_from = doc.get("retained_from", 0)
            evicted = doc.get("evicted", 0)
            if not isinstance(retained_from, int) or retained_from < 0:
                raise ValueError(f"retained_from must be an offset, got {retained_from!r:.40}")
            return cursor, retained_from, evicted if isinstance(evicted, int) else 0
        except (orjson.JSONDecodeError, ValueError) as exc:
            aside = f"{STATE_NAME}.corrupt-{_utc_stamp()}"
            with contextlib.suppress(OSError):
                os.rename(STATE_NAME, aside, src_dir_fd=self._dir_fd, dst_dir_fd=self._dir_fd)
            self.warnings.append(
                f"the delivery position {os.path.join(self.dir, STATE_NAME)} is unusable ({exc}); it was moved "
                f"to {aside} and every retained delivery is offered again (consumers may see ones they handled)"
            )
            return Cursor(), 0, 0

    def _list_segments(self) -> None:
        segments = []
        for name in os.listdir(self._dir_fd):
            m = _SEGMENT_RE.fullmatch(name)
            if m is None:
                continue
            try:
                st = os.lstat(name, dir_fd=self._dir_fd)
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(st.st_mode):
                raise ServerStartError(
                    f"{os.path.join(self.dir, name)} is not a regular file; remove it (only the server's own "
                    "segments belong in the delivery directory)"
                )
            self._check_ours(name, st)
            segments.append(_Segment(int(m.group(1)), name, st.st_size))
        segments.sort(key=lambda s: s.start)
        for prev, nxt in itertools.pairwise(segments):
            if prev.start + prev.size != nxt.start:
                self.warnings.append(
                    f"segments {prev.name} and {nxt.name} of {self.dir} do not meet (bytes "
                    f"{prev.start + prev.size}..{nxt.start} are missing); the deliveries there are lost"
                )
        self._segments = segments
        self._end = segments[-1].start + segments[-1].size if segments else 0

    def _cut_torn_tail(self) -> None:
        """A last line without its newline was being written when the process died: never answered 2xx."""
        if not self._segments:
            return
        seg = self._segments[-1]
        if seg.size == 0:
            return
        fd = open_regular(seg.name, os.O_RDWR, dir_fd=self._dir_fd)
        try:
            pos = seg.size
            while pos > 0:
                step = min(SCAN_CHUNK, pos)
                data = os.pread(fd, step, pos - step)
                nl = data.rfind(b"\n")
                if nl >= 0:
                    keep = pos - step + nl + 1
                    break
                pos -= step
            else:
                keep = 0
            if keep == seg.size:
                return
            torn = os.pread(fd, min(seg.size - keep, SCAN_CHUNK), keep)
            aside = f"torn-{_utc_stamp()}.bin"
            with contextlib.suppress(OSError):
                write_atomic(aside, torn, dir_fd=self._dir_fd)
            os.ftruncate(fd, keep)
            os.fsync(fd)
            self.warnings.append(
                f"cut {seg.size - keep} bytes of a delivery that was being written when the server stopped "
                f"(it was never acknowledged to its sender, who retries it); kept aside in {aside}"
            )
            self._end -= seg.size - keep
            seg.size = keep
        finally:
            os.close(fd)

    def _read_back(self, cursor: Cursor) -> None:
        """Index every retained line; feed the log from the consumer position (seqs as before)."""
        start = self._retained_from
        if not start <= cursor.offset <= self._end:
            # The position is outside what is on disk (its segments were removed by hand, or the state
            # is from another log): resume at the nearest end, numbering above everything handed out.
            resume = start if cursor.offset < start else self._end
            self.warnings.append(
                f"the delivery position (byte {cursor.offset}) is outside the log on disk (bytes "
                f"{start}..{self._end}); delivering from byte {resume}"
            )
            self.log = self._new_log(Cursor(offset=resume, seq=max(cursor.seq, cursor.top) + 1))
        for seg in self._segments:
            if seg.start + seg.size <= start:
                continue
            fd = open_regular(seg.name, os.O_RDONLY, dir_fd=self._dir_fd)
            try:
                pos = max(start, seg.start) - seg.start
                buf, buf_at = b"", seg.start + pos
                while pos < seg.size:
                    data = os.pread(fd, min(SCAN_CHUNK, seg.size - pos), pos)
                    if not data:
                        break
                    pos += len(data)
                    buf += data
                    at = 0
                    while (nl := buf.find(b"\n", at)) >= 0:
                        self._take_line(buf[at : nl + 1], buf_at + at)
                        at = nl + 1
                    buf, buf_at = buf[at:], buf_at + at
                if buf and buf_at >= self.log.head:
                    # Only the last segment can end mid-line, and its tail was cut; this is damage
                    # inside the log: step over it (an ERROR names it) so numbering stays exact.
                    self.log.skip_long_line(buf_at + len(buf))
            finally:
                os.close(fd)
        self.log.finish_drain()

    def _take_line(self, line: bytes, offset: int) -> None:
        if not line.strip():
            if offset == self.log.head:
                self.log.feed(line, at_eof=False)
            return
        end = offset + len(line)
        seq: int | None = None
        if offset >= self.log.head:
            self._scanned = None
            self.log.feed(line, at_eof=False)
            seq = self.log.next_seq - 1
            record = self._scanned
        else:
            record = decode_record(line)
        if record is None:
            return  # a damaged line: an ERROR event in the log names it; nothing to index
        item = _Item(record.id, record.key, record.at, offset, end, record.event, record.received, seq, True)
        item.digest = record.digest
        self._index(item)

    def _index(self, item: _Item) -> None:
        self._order.append(item)
        self._by_id[item.id] = item
        if item.key is not None:
            self._by_key[item.key] = item
        if item.digest is not None:
            self._by_digest.setdefault(item.digest, item)  # the first is the delivery; later ones replays

    def _delete_old_segments(self) -> None:
        floor = min(self._retained_from, self.log.cursor.offset)
        while len(self._segments) > 1 and self._segments[0].start + self._segments[0].size <= floor:
            seg = self._segments.pop(0)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(seg.name, dir_fd=self._dir_fd)

    def _open_active(self) -> None:
        if not self._segments:
            self._segments.append(self._create_segment(self._end))
        self._fd = open_regular(self._segments[-1].name, os.O_WRONLY | os.O_APPEND, dir_fd=self._dir_fd)

    def _create_segment(self, start: int) -> _Segment:
        name = _segment_name(start)
        fd = os.open(
            name,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=self._dir_fd,
        )
        os.close(fd)
        os.fsync(self._dir_fd)  # the new name is durable before anything in it is acknowledged
        return _Segment(start, name, 0)

    # ---------------------------------------------------------------- state file

    def _current_version(self) -> int:
        return self._version + self.log.version

    def _snapshot(self) -> bytes:
        doc = {
            "version": 1,
            "cursor": self.log.snapshot(),
            "retained_from": self._retained_from,
            "evicted": self.counters.evicted,
        }
        return orjson.dumps(doc)

    def _write_state(self) -> None:
        version = self._current_version()
        write_atomic(STATE_NAME, self._snapshot(), new_mode=0o600, dir_fd=self._dir_fd)
        self._written_version = version

    async def persist(self) -> None:
        """Make the position durable (after an acknowledgement, before the tool call returns).

        Raises:
            OSError: it could not be written (the caller says so; the position stays in memory).
        """
        async with self._persist_lock:
            if self._current_version() == self._written_version:
                return
            version = self._current_version()
            data = self._snapshot()
            await trio.to_thread.run_sync(self._write_snapshot, data)
            self._written_version = max(self._written_version, version)
            self._delete_old_segments()

    def _write_snapshot(self, data: bytes) -> None:
        write_atomic(STATE_NAME, data, new_mode=0o600, dir_fd=self._dir_fd)

    # ---------------------------------------------------------------- appending

    def _duplicate(self, index: dict[str, _Item], key: str | None, now: float) -> _Item | None:
        if key is None:
            return None
        item = index.get(key)
        if item is None:
            return None
        window = self.spec.dedupe_window
        if window is not None and now - item.at > window:
            return None  # the window passed: a new delivery with the same content
        return item

    def _unique(self, delivery_id: str) -> str:
        if delivery_id not in self._by_id:
            return delivery_id
        n = 2
        while True:
            suffix = f"-{n}"
            candidate = delivery_id[: 128 - len(suffix)] + suffix
            if candidate not in self._by_id and valid_id(candidate):
                return candidate
            n += 1

    def stage(self, accepted: Accepted) -> Staged | None:
        """Write one delivery (not yet durable), or find the delivery it retries, without waiting.

        The intake's path for a request that arrived whole: it answers the sender once
        ``staged.item.durable`` (a round of the group commit; :attr:`round_hooks` are called
        after each). None when the delivery must wait its turn (a segment is being rolled):
        :meth:`append` then.

        Raises:
            StoreUnavailable: as :meth:`append`.
        """
        if self._append_lock.locked():
            return None
        return self._stage(accepted)

    def _stage(self, accepted: Accepted) -> Staged | None:
        """:meth:`stage` itself; None when the delivery does not fit the active segment (roll first)."""
        self._check_usable()
        now = self._clock()
        dup = self._duplicate(self._by_key, accepted.dedupe_key, now)
        if dup is not None:
            return Staged(dup, duplicate=True)
        replayed = self._duplicate(self._by_digest, accepted.digest, now)
        if replayed is not None:
            return Staged(replayed, duplicate=True, replay=True)
        delivery_id = self._unique(accepted.delivery_id)
        record, line = stored_record(self.spec, accepted, delivery_id, received_at=now)
        if self._segments[-1].size > 0 and self._segments[-1].size + len(line) > self._segment_bytes:
            return None
        offset = self._end
        self._write(line)
        self._prepared[offset] = record
        item = _Item(
            delivery_id,
            accepted.dedupe_key,
            now,
            offset,
            offset + len(line),
            accepted.event,
            record.received,
            digest=accepted.digest,
        )
        self._index(item)
        self._unsynced.append((item, line))
        self._dirty.set()
        self._step("written")
        return Staged(item, duplicate=False)

    async def append(self, accepted: Accepted) -> Stored | Duplicate:
        """Store one delivery durably, or recognise a retry; return once it is on disk.

        Raises:
            StoreUnavailable: the write failed (e.g. disk full) or the log is broken; nothing is
                acknowledged to the sender, who retries.
        """
        staged = self.stage(accepted)
        if staged is None:
            async with self._append_lock:
                staged = self._stage(accepted)
                if staged is None:
                    await self._roll()
                    staged = self._stage(accepted)
        assert staged is not None
        await self._wait_durable(staged.item)
        return self.settle(staged)

    def settle(self, staged: Staged) -> Stored | Duplicate:
        """What a staged delivery became, once ``staged.item.durable``.

        Raises:
            StoreUnavailable: the log broke before the delivery was durable.
        """
        item = staged.item
        if not item.durable:
            self._check_usable()
            raise AssertionError(f"{item.id} settled before it was durable")
        if staged.duplicate:
            self.counters.duplicates += 1
            self.counters.replays += staged.replay
            return Duplicate(item.id, replay=staged.replay)
        assert item.seq is not None
        return Stored(item.id, item.seq)

    @property
    def broken(self) -> str | None:
        """Why the log cannot be written any more (a failed fsync), or None."""
        return self._broken

    def _step(self, step: Step) -> None:
        if self._hook is not None:
            self._hook(step)

    def _check_usable(self) -> None:
        if self._broken is not None:
            raise StoreUnavailable(self._broken, "the delivery log failed; the server must be restarted")

    def writable(self) -> str | None:
        """Why deliveries cannot be written now, or None (for ``/healthz`` and the status).

        After a failed write (a full disk, say) the answer stays "no" until a write succeeds: a
        delivery's, or this probe's, which writes as many bytes as the write that failed to a
        temporary file beside the log and removes it. Never blocks for long (no sync).
        """
        if self._broken is not None:
            return "the delivery log failed (fdatasync); the server must be restarted"
        if self._unwritable is None:
            return None
        name = f".~probe.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(
                name,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
                dir_fd=self._dir_fd,
            )
        except OSError as exc:
            self._unwritable = _trouble(exc)
            return self._unwritable
        try:
            view = memoryview(bytes(min(self._failed_size, PROBE_CAP)))
            while view:
                view = view[os.write(fd, view) :]
        except OSError as exc:
            self._unwritable = _trouble(exc)
        else:
            self._unwritable = None
        finally:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=self._dir_fd)
        return self._unwritable

    def _write(self, line: bytes) -> None:
        assert self._fd is not None
        seg = self._segments[-1]
        view = memoryview(line)
        try:
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as exc:
            # Take back what landed, so no partial line precedes the next one.
            try:
                os.ftruncate(self._fd, seg.size)
            except OSError as undo:
                self._break(
                    f"the log {seg.name} could not be repaired after a failed write ({undo.strerror})"
                )
            trouble = _trouble(exc)
            self._unwritable, self._failed_size = trouble, len(line)
            raise StoreUnavailable(
                f"cannot write to {os.path.join(self.dir, seg.name)}: {exc.strerror}"
                + ("; free disk space" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else ""),
                trouble,
            ) from exc
        self._unwritable = None
        seg.size += len(line)
        self._end += len(line)

    async def _roll(self) -> None:
        """Close the full segment (once its last line is durable) and start the next one."""
        last = self._order[-1] if self._order else None
        if last is not None:
            await self._wait_durable(last)
        try:
            seg = await trio.to_thread.run_sync(self._create_segment, self._end)
        except OSError as exc:
            trouble = _trouble(exc)
            self._unwritable, self._failed_size = trouble, 1
            raise StoreUnavailable(
                f"cannot start a new segment in {self.dir}: {exc.strerror}", trouble
            ) from exc
        old = self._fd
        self._segments.append(seg)
        self._fd = open_regular(seg.name, os.O_WRONLY | os.O_APPEND, dir_fd=self._dir_fd)
        if old is not None:
            os.close(old)

    async def _wait_durable(self, item: _Item) -> None:
        while not item.durable:
            self._check_usable()
            await self._round.wait()
        self._check_usable()

    def _break(self, message: str) -> None:
        if self._broken is None:
            self._broken = message
            log.error("%s: %s", self.name, message)
            self._on_broken(message)
        self._end_round()

    def _end_round(self) -> None:
        round_, self._round = self._round, trio.Event()
        round_.set()
        for hook in self.round_hooks:
            hook()

    async def run(self) -> None:
        """The group commit (a server source, for the server's life): sync, then show and wake."""
        while self._broken is None:
            await self._dirty.wait()
            self._dirty = trio.Event()
            batch, self._unsynced = self._unsynced, []
            fd = self._fd
            if not batch or fd is None:
                continue
            try:
                if self._inline_sync:
                    took = _timed_sync(fd)  # a fast disk: cheaper than the thread hop (INLINE_SYNC_BELOW)
                else:
                    took = await trio.to_thread.run_sync(_timed_sync, fd)
                self._inline_sync = took < INLINE_SYNC_BELOW
            except OSError as exc:
                # After a failed fsync the kernel may have dropped the pages: nothing written since
                # the last good sync can be trusted. Stop; a restart re-reads what is on disk.
                self._break(f"fdatasync of the delivery log failed ({exc.strerror}); the server stops")
                return
            self.counters.syncs += 1
            mark("webhook.synced")
            self._step("synced")
            was_empty = not (self._order and self._order[0].durable)  # durable in order: the oldest tells
            new: list[str] = []
            for item, line in batch:
                self._scanned = None
                self.log.feed(line, at_eof=False)
                item.seq = self.log.next_seq - 1
                item.durable = True
                new.append(item.id)
                self.counters.accepted += 1
                self.counters.last_received = item.received
            if self._evict(self._clock()) is not None or self._version != self._evicted_version:
                # Lazily: a crash before the write re-evicts the same deliveries at start.
                self._evicted_version = self._version
                self._persist_wanted.set()
            if was_empty:
                self._armed.set()  # the age timer had nothing to wait for
            self._end_round()
            self._on_change(new, True)

    # ---------------------------------------------------------------- retention

    def next_expiry(self) -> float | None:
        """When the oldest retained delivery passes ``retain_age`` (Unix seconds), or None."""
        if self.retain_age is None or not self._order:
            return None
        return self._order[0].at + self.retain_age

    async def run_retention(self) -> None:
        """Evict by age when the oldest delivery expires (a timer armed by the deliveries, never a poll)."""
        while True:
            expiry = self.next_expiry()
            if expiry is None:
                await self._armed.wait()
                self._armed = trio.Event()
                continue
            with trio.move_on_after(max(0.0, expiry - self._clock()) + RETENTION_SLACK):
                await self._armed.wait()
                self._armed = trio.Event()
                continue
            if self._evict(self._clock()) is not None or self._current_version() != self._written_version:
                self._persist_wanted.set()
                self._on_change([], True)

    async def run_persister(self) -> None:
        """Write what retention changed, at most once per :data:`PERSIST_DELAY` (an ack writes at once)."""
        while True:
            await self._persist_wanted.wait()
            await trio.sleep(PERSIST_DELAY)
            self._persist_wanted = trio.Event()
            try:
                await self.persist()
            except OSError as exc:
                log.warning("%s: cannot write %s: %s", self.name, STATE_NAME, exc.strerror)

    def _evict(self, now: float) -> Entry | None:
        """Drop what is over the retention bound; a GAP for what was still pending. Returns the GAP."""
        evicted: list[_Item] = []
        reason = "count"
        while self._order and self._order[0].durable:
            head = self._order[0]
            if len(self._order) > self.retain_count:
                reason = "count"
            elif self.retain_age is not None and now - head.at > self.retain_age:
                reason = "age"
            else:
                break
            self._order.popleft()
            if self._by_id.get(head.id) is head:
                del self._by_id[head.id]
            if head.key is not None and self._by_key.get(head.key) is head:
                del self._by_key[head.key]
            if head.digest is not None and self._by_digest.get(head.digest) is head:
                del self._by_digest[head.digest]
            evicted.append(head)
        if not evicted:
            return None
        pending = [i for i in evicted if i.seq is not None and self.log.is_pending(i.seq)]
        seqs = [i.seq for i in evicted if i.seq is not None]
        if seqs:
            self.log.ack_through(max(seqs))
        self._retained_from = self._order[0].offset if self._order else self._end
        self.counters.evicted += len(evicted)
        self._version += 1
        if not pending:
            return None
        self.counters.evicted_unacknowledged += len(pending)
        first, last = pending[0].seq, pending[-1].seq
        bound = (
            f"retain_count {self.retain_count}"
            if reason == "count"
            else f"retain_age {format_duration(self.retain_age or 0)}"
        )
        message = (
            f"{len(pending)} unacknowledged deliveries (seq {first}..{last}) of {self.name!r} fell off the "
            f"retention ({bound}) before anyone acknowledged them; acknowledge deliveries sooner (ack / "
            "ack_through), or raise --retain-count / --retain-age"
        )
        log.warning("%s: %s", self.name, message)
        return self.log.gap_note(
            message, {"count": len(pending), "first_seq": first, "last_seq": last, "reason": reason}
        )

    # ---------------------------------------------------------------- reading

    def _segment_of(self, offset: int) -> _Segment | None:
        i = bisect.bisect_right([s.start for s in self._segments], offset) - 1
        return self._segments[i] if i >= 0 else None

    def read(self, delivery_id: str) -> Record | None:
        """The whole durable delivery ``delivery_id``, or None (unknown, not durable yet, or gone)."""
        item = self._by_id.get(delivery_id)
        if item is None or not item.durable:
            return None
        seg = self._segment_of(item.offset)
        if seg is None:
            return None
        try:
            fd = open_regular(seg.name, os.O_RDONLY, dir_fd=self._dir_fd)
        except OSError:
            return None
        try:
            line = os.pread(fd, item.end - item.offset, item.offset - seg.start)
        finally:
            os.close(fd)
        return decode_record(line)

    def is_pending(self, delivery_id: str) -> bool:
        item = self._by_id.get(delivery_id)
        return item is not None and item.seq is not None and self.log.is_pending(item.seq)

    def seq_of(self, delivery_id: str) -> int | None:
        item = self._by_id.get(delivery_id)
        return item.seq if item is not None and item.durable else None

    def known(self, delivery_id: str) -> bool:
        item = self._by_id.get(delivery_id)
        return item is not None and item.durable

    def pending(self) -> list[Entry]:
        """The oldest ``window`` pending deliveries, oldest first: what ``resources/list`` shows.

        The oldest, not the newest: a listed delivery then stays listed until it is acknowledged
        (only older ones leave the list before it). A delivery that left the list while pending
        and came back while its agent ran would be a new resource to agentd, and a second agent;
        and the list fills in the order routes take deliveries in (rfcs/0374).
        """
        return [e for e in self.log.oldest(self._window) if e.event.get("type") == "DELIVERY"]

    def recent_ids(self, n: int = 5) -> list[str]:
        return [item.id for item in list(self._order)[-n:] if item.durable]

    def body(self) -> bytes:
        """``webhook://NAME/events``: the pending window as an event log."""
        return self.log.body()

    # ---------------------------------------------------------------- acknowledging

    def ack_ids(self, ids: Iterable[str]) -> list[int]:
        """Acknowledge deliveries by id; returns the seqs newly acknowledged.

        Raises:
            AckError: an id is not a retained delivery of this source (nothing is acknowledged).
        """
        seqs = []
        for delivery_id in ids:
            item = self._by_id.get(delivery_id)
            if item is None or not item.durable:
                recent = ", ".join(repr(i) for i in self.recent_ids()) or "(none)"
                raise AckError(
                    f"no delivery {delivery_id!r} in {self.uri} (never received, or past the retention); "
                    f"recent ids: {recent}"
                )
            if item.seq is not None:
                seqs.append(item.seq)
        return self.log.ack_seqs(seqs) if seqs else []

    def ack_seqs(self, seqs: Iterable[int]) -> list[int]:
        """Acknowledge events by seq (deliveries, ERROR and GAP events). Raises :class:`AckError`."""
        return self.log.ack_seqs(seqs)

    def ack_through(self, seq: int) -> int:
        """Acknowledge every pending event up to ``seq``; returns how many."""
        return self.log.ack_through(seq)

    # ---------------------------------------------------------------- status

    def status(self) -> JSONObject:
        c = self.counters
        out: JSONObject = {
            "kind": self.spec.kind,
            "path": self.spec.path,
            "auth": self.spec.describe_auth(),
            "directory": self.dir,
            "pending": self.log.pending_count(),
            "retained": len(self._order),
            "retain_count": self.retain_count,
            "retain_age": format_duration(self.retain_age) if self.retain_age is not None else None,
            "accepted": c.accepted,
            "duplicates": c.duplicates,
            "replays": c.replays,
            "answered": c.answered,
            "refused": {**c.refused},
            "evicted": c.evicted,
            "evicted_unacknowledged": c.evicted_unacknowledged,
            "syncs": c.syncs,
            "last_received": c.last_received,
            "broken": self._broken,
            "unwritable": self._unwritable,
            "warnings": [*self.warnings],
        }
        return out
