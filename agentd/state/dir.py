"""The state directory (``--state-dir DIR``): what lives where, and its one owner.

Layout::

    DIR/.agentd.lock        flock held by the one agentd using DIR (its pid inside)
    DIR/watches.json        watch state (``--watch-state`` overrides the path)
    DIR/sessions/*.journal  one journal per warm session (:mod:`agentd.state.journal`)

Nothing is created when the settings are validated (``agentd check`` runs
beside a live daemon): the directory is made and locked at start by
:func:`claim`. A second agentd on the same directory exits 2: two writers of
one journal would interleave records. On Kubernetes each replica of the
StatefulSet gets its own volume, so its own directory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from agentd.errors import ConfigError
from agentd.filelock import lock_exclusively as lock_exclusively  # re-exported

LOCK_NAME: Final = ".agentd.lock"
WATCH_STATE_NAME: Final = "watches.json"
SESSIONS_NAME: Final = "sessions"
#: Ceiling of ``--session-max-tokens``: a restored conversation (about 4 characters
#: a token) must fit one spawn payload (64 MiB) even with JSON escaping.
MAX_SESSION_TOKENS: Final = 2_000_000


def refusal(path: Path) -> str | None:
    """Why ``path`` cannot be a state directory (checked without creating anything), or None."""
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
    import stat

    if not stat.S_ISDIR(st.st_mode):
        return "it exists and is not a directory; give a directory (agentd creates it if missing)"
    return None


@dataclass
class StateDir:
    """A claimed state directory; :meth:`release` (or the process exiting) lets it go."""

    path: Path
    _fd: int

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
    """Create ``path`` if needed and become its one owner (``flock``, held for the process's life).

    Raises:
        ConfigError: (exit 2) it cannot be created or locked, or another agentd holds it.
    """
    why = refusal(path)
    if why is not None:
        raise ConfigError("--state-dir", str(path), why)
    try:
        path.mkdir(mode=0o700, exist_ok=True)
        (path / SESSIONS_NAME).mkdir(mode=0o700, exist_ok=True)
        fd = os.open(path / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise ConfigError(
            "--state-dir", str(path), f"cannot create or lock it ({exc.strerror or exc}); fix its permissions"
        ) from None
    lock_exclusively(fd, "--state-dir", path, "give each agentd (each replica) its own state directory")
    return StateDir(path, fd)


__all__ = ["MAX_SESSION_TOKENS", "StateDir", "claim", "lock_exclusively", "refusal"]
