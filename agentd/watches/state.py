"""The ``--watch-state PATH`` file: watch specs that survive a restart.

Every ``watch_start`` and ``watch_stop`` rewrites the whole file (it is small:
at most a few watches per agent) with the classic atomic sequence:

1. write a uniquely named temp file ``.<name>.<pid>.<random>.tmp`` beside it
   (created exclusively, never shared) and ``fsync`` it,
2. ``rename`` it over the file (atomic on POSIX),
3. ``fsync`` the directory, so the rename itself survives a power cut.

A crash at any step leaves the old file or the new one, never a mix.

One agentd owns a state file: :func:`claim` takes an advisory lock
(``flock``) on ``.<name>.lock`` beside it for the life of the process, and a
second agentd given the same path is refused with a clear error (exit 2);
under the lock, temp files that crashed writers left behind are removed.

The path must be agentd's to use (:func:`refusal`, checked by ``agentd check``
and at start): a regular file of agentd's user (never a link, a directory, a
device such as ``/dev/zero`` or a FIFO) that is missing, empty, or agentd
watch state. A file that is something else is refused, never renamed or
overwritten: pointing ``--watch-state`` at the wrong file must not destroy it.
The default file inside ``--state-dir`` is agentd's alone: there, what is not
a regular file is moved aside instead (rfcs/0275). Every open goes through
:mod:`agentd.state.files` (no link followed, no wait on a FIFO, reads bounded).

Format (JSON, versioned)::

    {"version": 1, "watches": [{"name": "cm", "uri": "kcp-events://...",
      "on_event": "..." | null, "owner": "<session id>" | null,
      "baseline": {...} | null}]}

``baseline`` is :meth:`agentd.watches.extract.EventLogExtractor.baseline` or
:meth:`~agentd.watches.extract.StateExtractor.baseline` output.

Failures of agentd's own file never stop the daemon: :func:`load` moves a
damaged state file aside and carries on with the watches it could read whole
(a write cut short keeps every entry before the cut); a directory that is
read-only, full or gone raises :class:`WatchStateError`, which the supervisor
reports before running with watches in memory only.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal, TypeAlias

import orjson

from agentd.core.errors import ConfigError, NotAFile, NotOurs
from agentd.core.errors import WatchStateError as WatchStateError  # re-exported
from agentd.core.jsonvalue import JSONObject
from agentd.state import files
from agentd.state.filelock import fsync_dir, lock_exclusively

#: The file format written (and the newest one read).
STATE_FORMAT_VERSION: Final = 1
#: Largest watch-state file read: past it the file is damaged (the watches in its first
#: this-many bytes are kept). Far above what agentd writes (a few watches per session,
#: each baseline at most one resource read).
MAX_WATCH_STATE_BYTES: Final = files.MAX_STATE_FILE_BYTES

WriteStep: TypeAlias = Literal["temp-written", "temp-synced", "renamed", "dir-synced"]
"""Points in :func:`save` a test hook can observe (e.g. to simulate a crash)."""


@dataclass(frozen=True, slots=True)
class WatchSpec:
    """What is needed to start a watch again after a restart.

    Attributes:
        name: The watch's name (unique per owner).
        uri: The watched resource URI.
        on_event: The filter source, or ``None`` for default lines.
        owner: The owning session's id, or ``None`` (e.g. a config route).
        baseline: The extractor baseline to resume from, or ``None``.
    """

    name: str
    uri: str
    on_event: str | None = None
    owner: str | None = None
    baseline: JSONObject | None = None

    def to_json(self) -> JSONObject:
        """The spec as it is stored."""
        return {
            "name": self.name,
            "uri": self.uri,
            "on_event": self.on_event,
            "owner": self.owner,
            "baseline": self.baseline,
        }

    @classmethod
    def from_json(cls, data: object) -> WatchSpec:
        """Parse one stored spec.

        Raises:
            ValueError: with a message naming the bad field.
        """
        if not isinstance(data, dict):
            raise ValueError(f"a watch spec must be an object, got {data!r:.80}")
        name, uri = data.get("name"), data.get("uri")
        if not isinstance(name, str) or not name:
            raise ValueError(f"watch spec has name {name!r}; it needs a non-empty string")
        if not isinstance(uri, str) or not uri:
            raise ValueError(f"watch {name!r} has uri {uri!r}; it needs a non-empty string")
        on_event, owner, baseline = data.get("on_event"), data.get("owner"), data.get("baseline")
        if on_event is not None and not isinstance(on_event, str):
            raise ValueError(f"watch {name!r} has on_event {on_event!r:.80}; it must be source text or null")
        if owner is not None and not isinstance(owner, str):
            raise ValueError(f"watch {name!r} has owner {owner!r}; it must be a string or null")
        if baseline is not None and not isinstance(baseline, dict):
            raise ValueError(f"watch {name!r} has baseline {baseline!r:.80}; it must be an object or null")
        return cls(name=name, uri=uri, on_event=on_event, owner=owner, baseline=baseline)


def new_temp_path(path: Path) -> Path:
    """A fresh temp name for one :func:`save`: ``.<name>.<pid>.<random>.tmp`` beside ``path``."""
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp")


def leftover_temps(path: Path) -> list[Path]:
    """Temp files of ``path``'s writers that still exist (a crash mid-write leaves one)."""
    pattern = glob.escape(str(path.with_name(f".{path.name}."))) + "*.tmp"
    return sorted(Path(p) for p in glob.glob(pattern))


def lock_path(path: Path) -> Path:
    """The advisory lock file of ``path``: ``.<name>.lock`` beside it (kept between runs)."""
    return path.with_name(f".{path.name}.lock")


# A file that does not parse but starts like agentd's own (a write cut short by disk
# corruption, or by a hand edit) is agentd's and may be moved aside; anything else is not
# agentd's. agentd writes {"version": ..., "watches": [...]}; either key first is accepted.
_OWN_PREFIX = re.compile(rb'\A\s*\{\s*"(?:version|watches)"\s*:')
#: The start of every file agentd writes (whitespace aside): a file cut inside it is agentd's too.
_OWN_START: Final = b'{"version":'

_NOT_OURS_FIX = (
    "agentd never overwrites or moves a file it did not write; point --watch-state at a new path "
    "(the file is created on the first watch) or remove that file"
)


def _looks_own(raw: bytes) -> bool:
    """Whether bytes that are not valid JSON start like agentd's own watch state."""
    if _OWN_PREFIX.match(raw):
        return True
    squeezed = re.sub(rb"\s+", b"", raw[: 4 * len(_OWN_START)])
    return 0 < len(squeezed) < len(_OWN_START) and _OWN_START.startswith(squeezed)


def _foreign(raw: bytes) -> str | None:
    """Why ``raw`` is not agentd watch state (valid or damaged), or None when it is agentd's."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return None if _looks_own(raw) else f"it is not JSON ({exc})"
    if isinstance(doc, dict) and "version" in doc and "watches" in doc:
        return None
    shape = f"an object with keys {sorted(doc)[:5]!r}" if isinstance(doc, dict) else type(doc).__name__
    return f'it is JSON {shape}, not {{"version": 1, "watches": [...]}}'


def _salvage(raw: bytes) -> list[object]:
    """The whole entries of the ``watches`` list at the start of a file cut short; [] if none.

    A newer format's entries are not guessed at (a damaged file that names a
    newer version keeps nothing).
    """
    text = raw.decode("utf-8", errors="replace")
    version = re.search(r'"version"\s*:\s*(-?[0-9]+)', text)
    if version is not None and int(version.group(1)) > STATE_FORMAT_VERSION:
        return []
    start = re.search(r'"watches"\s*:\s*\[', text)
    if start is None:
        return []
    decoder = json.JSONDecoder()
    entries: list[object] = []
    pos, end = start.end(), len(text)
    while True:
        while pos < end and text[pos] in " \t\r\n":
            pos += 1
        if pos >= end or text[pos] == "]":
            return entries
        try:
            entry, pos = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError):
            return entries  # the entry the cut went through
        entries.append(entry)
        while pos < end and text[pos] in " \t\r\n":
            pos += 1
        if pos >= end or text[pos] != ",":
            return entries
        pos += 1


def _stat_problem(path: Path, *, own_dir: bool) -> str | None:
    """What makes ``path`` unusable before its content is read (not followed when a link), or None."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot inspect it ({exc.strerror or exc}); fix the path or its permissions"
    if not stat.S_ISREG(st.st_mode):
        if own_dir:
            return None  # in the state directory: moved aside by claim()
        if stat.S_ISLNK(st.st_mode):
            return (
                "is a symbolic link, not a regular file; agentd replaces the file by renaming over it, "
                "which would replace the link, not follow it: give the real file's path"
            )
        return (
            f"is {files.kind(st.st_mode)}, not a regular file; give the path of a file agentd may create "
            "and replace (it is created on the first watch)"
        )
    if st.st_uid != os.geteuid():
        return (
            f"is owned by {files.user(st.st_uid)}, not by agentd's user ({files.user(os.geteuid())}); "
            f"{_NOT_OURS_FIX}"
        )
    return None


def refusal(path: Path | str, *, own_dir: bool = False) -> str | None:
    """Why agentd must not use ``path`` as its ``--watch-state`` file, or None when it may.

    It may when the path is missing (created on the first watch), an empty
    regular file, or a regular file of agentd watch state (a damaged one
    included: :func:`load` moves that aside), owned by agentd's user. Not: a
    link, a directory, a device, a FIFO or socket (reading ``/dev/zero`` would
    never end), another user's file, or a regular file with other content.
    With ``own_dir`` (the default file inside ``--state-dir``) what is not a
    regular file is no refusal: :func:`claim` moves it aside. Reads the file
    (never through a link, up to a bound); changes nothing.
    """
    path = Path(path)
    why = _stat_problem(path, own_dir=own_dir)
    if why is not None:
        return why
    try:
        raw = files.read_state_file(path, MAX_WATCH_STATE_BYTES)
    except (FileNotFoundError, NotAFile):
        return None  # gone, or swapped for a FIFO meanwhile: claim() looks again
    except NotOurs as exc:
        return f"{exc.problem}; {_NOT_OURS_FIX}"
    except OSError as exc:
        return f"cannot read it ({exc.strerror or exc}); fix its permissions or point --watch-state elsewhere"
    if not raw.strip():
        return None
    why = _foreign(raw[:MAX_WATCH_STATE_BYTES])
    return None if why is None else f"exists and is not an agentd watch-state file ({why}); {_NOT_OURS_FIX}"


class StateLock:
    """The advisory lock :func:`claim` holds on a state file for the life of the process.

    Attributes:
        path: the state file.
        moved_aside: what :func:`claim` moved out of the way (reported once telemetry is up).
    """

    def __init__(self, path: Path, fd: int | None, moved_aside: tuple[files.MovedAside, ...] = ()) -> None:
        self.path = path
        self._fd = fd
        self.moved_aside = moved_aside

    @property
    def held(self) -> bool:
        """Whether the lock is held (False when the directory did not allow a lock file)."""
        return self._fd is not None

    def release(self) -> None:
        """Let go of the lock (the process exiting does the same)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


def claim(path: Path | str, *, own_dir: bool = False) -> StateLock:
    """Make this process the one owner of ``path``; remove temp files crashed writers left.

    Takes ``flock(LOCK_EX | LOCK_NB)`` on :func:`lock_path` and writes this
    pid into it. A directory where no lock file can be made (read-only, full)
    gives an unheld lock: the state cannot be written there anyway, and the
    supervisor reports that at the first save and keeps watches in memory.
    A link, FIFO or directory in the lock file's place, or (``own_dir``: the
    default file in ``--state-dir``) in the state file's, is moved aside
    (``.unsafe-STAMP``), never written through.

    Raises:
        ConfigError: (exit 2) another process holds the lock, or the path is
            refused (:func:`refusal`).
    """
    path = Path(path)
    why = refusal(path, own_dir=own_dir)
    if why is not None:
        raise ConfigError("--watch-state", str(path), why)
    lock = lock_path(path)
    moved: list[files.MovedAside] = []
    try:
        fd, lock_moved = files.replace_if_not_a_file(lock, os.O_RDWR | os.O_CREAT)
    except NotOurs as exc:
        raise ConfigError("--watch-state", str(path), f"its lock file {exc}") from None
    except OSError:
        return StateLock(path, None)
    if lock_moved is not None:
        moved.append(lock_moved)
    lock_exclusively(
        fd,
        "--watch-state",
        path,
        f"it holds {str(lock)!r}; give each agentd its own --watch-state file, or stop the other one first",
    )
    for leftover in leftover_temps(path):
        with contextlib.suppress(OSError):
            leftover.unlink()
    if own_dir:
        with contextlib.suppress(FileNotFoundError):
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode):
                problem = f"is {files.kind(st.st_mode)}, not a regular file"
                try:
                    moved.append(files.MovedAside(path, files.move_aside(path, files.UNSAFE), problem))
                except OSError as exc:
                    os.close(fd)
                    raise ConfigError(
                        "--state-dir",
                        str(path.parent),
                        f"{str(path)!r} {problem} and cannot be moved aside ({exc.strerror or exc}); remove it",
                    ) from None
    return StateLock(path, fd, tuple(moved))


def encode(specs: Iterable[WatchSpec]) -> bytes:
    """The file's bytes for ``specs``."""
    doc = {"version": STATE_FORMAT_VERSION, "watches": [s.to_json() for s in specs]}
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)


def _unavailable(action: str, path: Path, exc: OSError) -> WatchStateError:
    reason = exc.strerror or str(exc)
    return WatchStateError(
        f"cannot {action} --watch-state file {str(path)!r}: {reason}; watches keep running in memory only "
        f"and will not survive a restart; fix: make {str(path.parent)!r} writable and not full, "
        "or point --watch-state elsewhere"
    )


def save(
    path: Path | str,
    specs: Iterable[WatchSpec],
    *,
    step_hook: Callable[[WriteStep], None] | None = None,
) -> None:
    """Atomically replace the state file with ``specs``.

    Args:
        path: The ``--watch-state`` path.
        specs: Every watch to keep (the file holds exactly these afterwards).
        step_hook: Called after each :data:`WriteStep` (tests inject crashes).

    Raises:
        WatchStateError: the directory is read-only, full or missing; the old
            file is untouched and no temp file is left.
    """
    path = Path(path)
    data = encode(specs)
    tmp = new_temp_path(path)
    hook = step_hook or (lambda _step: None)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            hook("temp-written")
            os.fsync(fd)
        finally:
            os.close(fd)
        hook("temp-synced")
        os.replace(tmp, path)
        hook("renamed")
        fsync_dir(path.parent)
        hook("dir-synced")
    except OSError as exc:
        # If the directory refuses even the unlink, there is nothing more to clean.
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise _unavailable("write", path, exc) from exc


@dataclass
class Loaded:
    """What :func:`load` found.

    Attributes:
        specs: the watches to start again.
        warnings: entries skipped (invalid on their own, repeated), and a damaged
            file that could not be moved aside.
        moved_aside: the damaged file, moved aside (its whole entries are in ``specs``).
    """

    specs: list[WatchSpec] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    moved_aside: files.MovedAside | None = None


def load(path: Path | str, *, now: float | None = None) -> Loaded:
    """Read the state file.

    * A missing or empty file is an empty state (first start).
    * agentd's own file gone bad (cut short, wrong types, over the size bound)
      is renamed to ``PATH.corrupt-<UTC timestamp>`` and loading continues
      with the whole entries that could be read before the damage
      (:attr:`Loaded.moved_aside` names both paths).
    * A path that is not a regular file, another user's file, or a file that
      is not agentd watch state, is refused (:func:`refusal`) and left untouched.
    * A spec that is invalid on its own, or a repeated ``(owner, name)``, is
      skipped with a warning; the others load.

    Args:
        path: The ``--watch-state`` path.
        now: Wall-clock seconds for the damaged file's name (default: now).

    Raises:
        WatchStateError: the file exists but cannot be read, is refused, or was
            written by a newer agentd (it is left alone so a downgrade loses nothing).
    """
    path = Path(path)
    try:
        raw = files.read_state_file(path, MAX_WATCH_STATE_BYTES)
    except FileNotFoundError:
        return Loaded()
    except NotAFile as exc:
        raise WatchStateError(f"--watch-state {str(path)!r} {exc.problem}; it is left untouched") from None
    except NotOurs as exc:
        raise WatchStateError(f"--watch-state {str(path)!r} {exc.problem}; it is left untouched") from None
    except OSError as exc:
        raise _unavailable("read", path, exc) from exc
    oversized = len(raw) > MAX_WATCH_STATE_BYTES
    raw = raw[:MAX_WATCH_STATE_BYTES]
    if not raw.strip():
        return Loaded()  # e.g. created with `touch` by the operator: nothing saved yet
    foreign = _foreign(raw)
    if foreign is not None:
        raise WatchStateError(
            f"--watch-state file {str(path)!r} is not an agentd watch-state file ({foreign}); "
            f"it is left untouched; {_NOT_OURS_FIX}"
        )
    entries: list[object]
    try:
        if oversized:
            raise ValueError(f"it is larger than {MAX_WATCH_STATE_BYTES} bytes, the most agentd reads")
        doc = orjson.loads(raw)
        if not isinstance(doc, dict) or not isinstance(doc.get("watches"), list):
            raise ValueError('expected {"version": 1, "watches": [...]}')
        version = doc.get("version")
        if not isinstance(version, int) or isinstance(version, bool):
            raise ValueError(f"version is {version!r}, expected an integer")
        entries = doc["watches"]
    except ValueError as exc:  # orjson.JSONDecodeError is a ValueError
        out = _damaged(path, str(exc), now)
        out.specs, warnings = _specs(path, _salvage(raw) if _looks_own(raw) else [])
        out.warnings = warnings + out.warnings
        return out
    if version > STATE_FORMAT_VERSION:
        raise WatchStateError(
            f"--watch-state file {str(path)!r} has format version {version}, newer than this agentd "
            f"understands ({STATE_FORMAT_VERSION}); it is left untouched; fix: run a newer agentd "
            "or point --watch-state elsewhere"
        )
    specs, warnings = _specs(path, entries)
    return Loaded(specs, warnings)


def _specs(path: Path, entries: list[object]) -> tuple[list[WatchSpec], list[str]]:
    """The valid, distinct specs among ``entries``, and a warning per skipped one."""
    specs: list[WatchSpec] = []
    warnings: list[str] = []
    seen: set[tuple[str | None, str]] = set()
    for i, entry in enumerate(entries):
        try:
            spec = WatchSpec.from_json(entry)
        except ValueError as exc:
            warnings.append(f"--watch-state {str(path)!r}: skipped watches[{i}]: {exc}")
            continue
        if (spec.owner, spec.name) in seen:
            warnings.append(
                f"--watch-state {str(path)!r}: skipped watches[{i}]: a second watch named {spec.name!r}"
                + (f" for owner {spec.owner!r}" if spec.owner else "")
            )
            continue
        seen.add((spec.owner, spec.name))
        specs.append(spec)
    return specs, warnings


def _damaged(path: Path, problem: str, now: float | None) -> Loaded:
    """Move agentd's own damaged file aside (the one repair rule, rfcs/0275)."""
    problem = f"it is not valid watch state ({problem})"
    try:
        moved_to = files.move_aside(path, files.CORRUPT, now=now)
    except OSError as exc:
        return Loaded(
            warnings=[
                f"--watch-state file {str(path)!r}: {problem}, and it could not be moved aside "
                f"({exc.strerror or exc}); starting with the watches that could be read"
            ]
        )
    return Loaded(moved_aside=files.MovedAside(path, moved_to, problem))


class WatchStateFile:
    """A ``--watch-state`` path with :func:`load` / :func:`save` bound to it."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def load(self, *, now: float | None = None) -> Loaded:
        """See :func:`load`."""
        return load(self.path, now=now)

    def save(self, specs: Iterable[WatchSpec]) -> None:
        """See :func:`save`."""
        save(self.path, specs)


def specs_by_key(specs: Iterable[WatchSpec]) -> Mapping[tuple[str | None, str], WatchSpec]:
    """Index specs by ``(owner, name)``, the key a watch is unique by."""
    return {(s.owner, s.name): s for s in specs}
