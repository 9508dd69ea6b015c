"""The state directory (``--state-dir DIR``): what lives where, and its one owner.

Layout::

    DIR/.agentd.lock        flock held by the one agentd using DIR (its pid inside)
    DIR/watches.json        watch state (``--watch-state`` overrides the path)
    DIR/sessions/*.journal  one journal per warm session (:mod:`agentd.state.journal`)
    DIR/oauth/*.json        OAuth token caches (:mod:`agentd.upstream.auth`)

The directory and its subdirectories are agentd's user's alone: owned by it
and writable by nobody else, or refused (exit 2, by ``agentd check`` too);
what agentd creates is mode 0700. Every file in it is opened through
:mod:`agentd.state.files` (no link followed, regular files only, reads bounded).

Nothing is created when the settings are validated (``agentd check`` runs
beside a live daemon): the directory is made and locked at start by
:func:`claim`. A second agentd on the same directory exits 2: two writers of
one journal would interleave records. On Kubernetes each replica of the
StatefulSet gets its own volume, so its own directory.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from agentd.core.errors import ConfigError, StateFileError
from agentd.state import files
from agentd.state.filelock import lock_exclusively as lock_exclusively  # re-exported

LOCK_NAME: Final = ".agentd.lock"
WATCH_STATE_NAME: Final = "watches.json"
SESSIONS_NAME: Final = "sessions"
#: The OAuth token caches (:mod:`agentd.upstream.auth`).
OAUTH_NAME: Final = "oauth"
#: The directories agentd keeps inside the state directory (each checked like it).
SUBDIRECTORIES: Final = (SESSIONS_NAME, OAUTH_NAME)
#: Ceiling of ``--session-max-tokens``: a restored conversation (about 4 characters
#: a token) must fit one spawn payload (64 MiB) even with JSON escaping.
MAX_SESSION_TOKENS: Final = 2_000_000


def refusal(path: Path) -> str | None:
    """Why ``path`` cannot be a state directory (checked without creating anything), or None.

    Refused (rfcs/0275): not a directory; owned by another user or writable by
    its group or others (the directory itself, or ``sessions/`` / ``oauth/``
    in it, which must also be real directories); a lock file another user owns.
    A link or FIFO in the lock file's place is not refused: :func:`claim`
    moves it aside.
    """
    try:
        st = path.stat()
    except FileNotFoundError:
        parent = path.parent
        if not parent.is_dir():
            return (
                f"neither it nor its parent {str(parent)!r} exists; create the directory or pick another path"
            )
        return None
    except OSError as exc:
        return f"cannot look at it ({exc.strerror or exc}); fix its permissions or pick another path"
    if not stat.S_ISDIR(st.st_mode):
        return "it exists and is not a directory; give a directory (agentd creates it if missing)"
    problem = files.directory_problem(path, st)
    if problem is not None:
        return f"it {problem}"
    for name in SUBDIRECTORIES:
        sub = path / name
        problem = files.subdirectory_problem(sub)
        if problem is not None:
            return f"its subdirectory {str(sub)!r} {problem}"
    lock = path / LOCK_NAME
    try:
        lst = os.lstat(lock)
    except OSError:
        return None
    if stat.S_ISREG(lst.st_mode) and lst.st_uid != os.geteuid():
        return (
            f"its lock file {str(lock)!r} is owned by {files.user(lst.st_uid)}, not by agentd's user "
            f"({files.user(os.geteuid())}); remove it (agentd makes its own)"
        )
    return None


@dataclass
class StateDir:
    """A claimed state directory; :meth:`release` (or the process exiting) lets it go.

    Attributes:
        path: the directory.
        moved_aside: what :func:`claim` moved out of the lock file's place (reported once
            telemetry is up, as ``state.moved_aside``).
    """

    path: Path
    _fd: int
    moved_aside: tuple[files.MovedAside, ...] = ()

    @property
    def watch_state(self) -> Path:
        return self.path / WATCH_STATE_NAME

    @property
    def sessions(self) -> Path:
        return self.path / SESSIONS_NAME

    def release(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)


def claim(path: Path) -> StateDir:
    """Create ``path`` (0700) if needed and become its one owner (``flock``, held for the process's life).

    The lock file is opened without following a link: a link, FIFO or
    directory in its place is moved aside (``.unsafe-STAMP``), never written
    through.

    Raises:
        ConfigError: (exit 2) it is refused (:func:`refusal`), cannot be created
            or locked, or another agentd holds it.
    """
    why = refusal(path)
    if why is not None:
        raise ConfigError("--state-dir", str(path), why)
    try:
        if not path.exists():
            files.make_private_dir(path)
        for name in SUBDIRECTORIES:
            files.make_private_dir(path / name)
        fd, moved = files.replace_if_not_a_file(path / LOCK_NAME, os.O_RDWR | os.O_CREAT)
    except StateFileError as exc:
        raise ConfigError("--state-dir", str(path), f"{exc}; {_FIX}") from None
    except OSError as exc:
        raise ConfigError(
            "--state-dir", str(path), f"cannot create or lock it ({exc.strerror or exc}); fix its permissions"
        ) from None
    lock_exclusively(fd, "--state-dir", path, "give each agentd (each replica) its own state directory")
    return StateDir(path, fd, () if moved is None else (moved,))


_FIX = "make the state directory agentd's alone (`chmod 700 DIR`), or pick another path"


__all__ = [
    "LOCK_NAME",
    "MAX_SESSION_TOKENS",
    "OAUTH_NAME",
    "SESSIONS_NAME",
    "WATCH_STATE_NAME",
    "StateDir",
    "claim",
    "lock_exclusively",
    "refusal",
]
