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
and at start): a regular file (never a directory, a device such as
``/dev/zero`` or a FIFO) that is missing, empty, or agentd watch state. A file
that is something else is refused, never renamed or overwritten: pointing
``--watch-state`` at the wrong file must not destroy it.

Format (JSON, versioned)::

    {"version": 1, "watches": [{"name": "cm", "uri": "kcp-events://...",
      "on_event": "..." | null, "owner": "<session id>" | null,
      "baseline": {...} | null}]}

``baseline`` is :meth:`agentd.watches.extract.EventLogExtractor.baseline` or
:meth:`~agentd.watches.extract.StateExtractor.baseline` output.

Failures of agentd's own file never stop the daemon: :func:`load` moves a
corrupt state file aside and carries on empty (with a warning); a directory
that is read-only, full or gone raises :class:`WatchStateError`, which the
supervisor reports before running with watches in memory only.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import secrets
import stat
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, TypeAlias

import orjson

from agentd.errors import ConfigError
from agentd.errors import WatchStateError as WatchStateError  # re-exported
from agentd.filelock import fsync_dir, lock_exclusively
from agentd.jsonvalue import JSONObject

#: The file format written (and the newest one read).
STATE_FORMAT_VERSION: Final = 1

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
# corruption) is agentd's and may be moved aside; anything else is not agentd's.
_OWN_PREFIX = re.compile(rb'\A\s*\{\s*"version"\s*:')

_FILE_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
)

_NOT_OURS_FIX = (
    "agentd never overwrites or moves a file it did not write; point --watch-state at a new path "
    "(the file is created on the first watch) or remove that file"
)


def _not_a_file(mode: int) -> str | None:
    for test, kind in _FILE_KINDS:
        if test(mode):
            return kind
    return None if stat.S_ISREG(mode) else "not a regular file"


def _foreign(raw: bytes) -> str | None:
    """Why ``raw`` is not agentd watch state (valid or corrupt), or None when it is agentd's."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return None if _OWN_PREFIX.match(raw) else f"it is not JSON ({exc})"
    if isinstance(doc, dict) and "version" in doc and "watches" in doc:
        return None
    shape = f"an object with keys {sorted(doc)[:5]!r}" if isinstance(doc, dict) else type(doc).__name__
    return f'it is JSON {shape}, not {{"version": 1, "watches": [...]}}'


def refusal(path: Path | str) -> str | None:
    """Why agentd must not use ``path`` as its ``--watch-state`` file, or None when it may.

    It may when the path is missing (created on the first watch), an empty
    regular file, or a regular file of agentd watch state (a corrupt one
    included: :func:`load` moves that aside). Not: a directory, a device, a
    FIFO or socket (reading ``/dev/zero`` would never end), or a regular file
    with other content. Reads the file; changes nothing.
    """
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot inspect it ({exc.strerror or exc}); fix the path or its permissions"
    kind = _not_a_file(mode)
    if kind is not None:
        return (
            f"is {kind}, not a regular file; give the path of a file agentd may create and replace "
            "(it is created on the first watch)"
        )
    try:
        raw = path.read_bytes()
    except OSError as exc:
        return f"cannot read it ({exc.strerror or exc}); fix its permissions or point --watch-state elsewhere"
    if not raw.strip():
        return None
    why = _foreign(raw)
    return None if why is None else f"exists and is not an agentd watch-state file ({why}); {_NOT_OURS_FIX}"


class StateLock:
    """The advisory lock :func:`claim` holds on a state file for the life of the process."""

    def __init__(self, path: Path, fd: int | None) -> None:
        self.path = path
        self._fd = fd

    @property
    def held(self) -> bool:
        """Whether the lock is held (False when the directory did not allow a lock file)."""
        return self._fd is not None

    def release(self) -> None:
        """Let go of the lock (the process exiting does the same)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


def claim(path: Path | str) -> StateLock:
    """Make this process the one owner of ``path``; remove temp files crashed writers left.

    Takes ``flock(LOCK_EX | LOCK_NB)`` on :func:`lock_path` and writes this
    pid into it. A directory where no lock file can be made (read-only, full)
    gives an unheld lock: the state cannot be written there anyway, and the
    supervisor reports that at the first save and keeps watches in memory.

    Raises:
        ConfigError: (exit 2) another process holds the lock, or the path is
            refused (:func:`refusal`).
    """
    path = Path(path)
    why = refusal(path)
    if why is not None:
        raise ConfigError("--watch-state", str(path), why)
    lock = lock_path(path)
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        return StateLock(path, None)
    lock_exclusively(
        fd,
        "--watch-state",
        path,
        f"it holds {str(lock)!r}; give each agentd its own --watch-state file, or stop the other one first",
    )
    for leftover in leftover_temps(path):
        with contextlib.suppress(OSError):
            leftover.unlink()
    return StateLock(path, fd)


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
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
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


def load(path: Path | str, *, now: float | None = None) -> tuple[list[WatchSpec], list[str]]:
    """Read the state file; return ``(specs, warnings)``.

    * A missing or empty file is an empty state (first start).
    * agentd's own file gone bad (cut short, wrong types) is renamed to
      ``PATH.corrupt-<UTC timestamp>`` and loading continues empty; the warning
      names both paths.
    * A path that is not a regular file, or a file that is not agentd watch
      state, is refused (:func:`refusal`) and left untouched.
    * A spec that is invalid on its own, or a repeated ``(owner, name)``, is
      skipped with a warning; the others load.

    Args:
        path: The ``--watch-state`` path.
        now: Wall-clock seconds for the corrupt file's name (default: now).

    Raises:
        WatchStateError: the file exists but cannot be read, is refused, or was
            written by a newer agentd (it is left alone so a downgrade loses nothing).
    """
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return [], []
    except OSError as exc:
        raise _unavailable("read", path, exc) from exc
    kind = _not_a_file(mode)
    if kind is not None:
        raise WatchStateError(
            f"--watch-state {str(path)!r} is {kind}, not a regular file; it is left untouched"
        )
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return [], []
    except OSError as exc:
        raise _unavailable("read", path, exc) from exc
    if not raw.strip():
        return [], []  # e.g. created with `touch` by the operator: nothing saved yet
    foreign = _foreign(raw)
    if foreign is not None:
        raise WatchStateError(
            f"--watch-state file {str(path)!r} is not an agentd watch-state file ({foreign}); "
            f"it is left untouched; {_NOT_OURS_FIX}"
        )
    try:
        doc = orjson.loads(raw)
        if not isinstance(doc, dict) or not isinstance(doc.get("watches"), list):
            raise ValueError('expected {"version": 1, "watches": [...]}')
        version = doc.get("version")
        if not isinstance(version, int) or isinstance(version, bool):
            raise ValueError(f"version is {version!r}, expected an integer")
    except ValueError as exc:  # orjson.JSONDecodeError is a ValueError
        return [], [_move_aside(path, str(exc), now)]
    if version > STATE_FORMAT_VERSION:
        raise WatchStateError(
            f"--watch-state file {str(path)!r} has format version {version}, newer than this agentd "
            f"understands ({STATE_FORMAT_VERSION}); it is left untouched; fix: run a newer agentd "
            "or point --watch-state elsewhere"
        )
    specs: list[WatchSpec] = []
    warnings: list[str] = []
    seen: set[tuple[str | None, str]] = set()
    for i, entry in enumerate(doc["watches"]):
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


def _move_aside(path: Path, problem: str, now: float | None) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
    try:
        os.replace(path, target)
    except OSError as exc:
        return (
            f"--watch-state file {str(path)!r} is not valid watch state ({problem}) and could not be moved "
            f"aside ({exc.strerror or exc}); starting with no saved watches"
        )
    return (
        f"--watch-state file {str(path)!r} is not valid watch state ({problem}); moved it to "
        f"{str(target)!r} and started with no saved watches"
    )


class WatchStateFile:
    """A ``--watch-state`` path with :func:`load` / :func:`save` bound to it."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def load(self, *, now: float | None = None) -> tuple[list[WatchSpec], list[str]]:
        """See :func:`load`."""
        return load(self.path, now=now)

    def save(self, specs: Iterable[WatchSpec]) -> None:
        """See :func:`save`."""
        save(self.path, specs)


def specs_by_key(specs: Iterable[WatchSpec]) -> Mapping[tuple[str | None, str], WatchSpec]:
    """Index specs by ``(owner, name)``, the key a watch is unique by."""
    return {(s.owner, s.name): s for s in specs}
