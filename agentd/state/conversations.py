"""A once run's conversation, kept so that a later run continues it (``--continue``, ``--resume ID``).

Layout (rfcs/0303)::

    STATE/conversations/<id>.journal    one conversation: the session journal's format
                                        (:mod:`agentd.state.journal`), named by its id

``STATE`` is ``--state-dir``, or without it the per-user state directory
(:func:`default_state_dir`: ``$XDG_STATE_HOME/agentd`` or
``~/.local/state/agentd``, created 0700). A conversation's id is the
``session_id`` the run prints (``--output json``, ``stream-json``): a new
conversation gets a fresh UUID, a continued one keeps its id.

Life of one conversation:

* **save**: when the once root's turn ends, the supervisor rewrites the
  file whole (a temp file, fsync, rename, directory fsync): the turns it
  held, then this one, the oldest dropped past ``--session-max-tokens``
  (:func:`agentd.state.journal.compact`). The rewrite holds ``flock`` on
  the ``conversations`` directory, so two runs that continue one
  conversation at the same time both keep their turn, one after the other.
  ``--ephemeral`` saves nothing. A save that fails (a read-only home in a
  container) is told (``conversation.unsaved``) and never fails the run.
* **continue**: ``--continue`` picks the conversation whose file changed
  last; ``--resume ID`` names one (a unique prefix of its id will do). Its
  turns, compacted to the budget, are the new root's history; the
  instruction follows them. An unknown id, or no conversation at all, is a
  configuration error (exit 2) that says what to do.

Files are opened through :mod:`agentd.state.files` (rfcs/0275): regular
files of agentd's user only, no link followed, reads bounded. A link or FIFO
where a conversation should be is never read, and moved aside
(``.unsafe-STAMP``) at the next save of that id; another user's file is
refused and left alone. A journal with a torn tail is read up to its last
whole turn; a corrupt one is moved aside (``.corrupt-STAMP``) at the next
save, its good turns kept.

Blocking functions: the CLI and :func:`agentd.supervisor.app.run` call
them before the reactor starts, and the supervisor runs :meth:`Conversation.save`
in a worker thread.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import os
import re
import stat
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from agentd.core.errors import ConfigError, NotAFile, StateFileError
from agentd.selfmcp.protocol import MessageFrame
from agentd.state import files
from agentd.state import journal as jf

CONVERSATIONS_NAME: Final = "conversations"
"""The folder of the state directory that holds once runs' conversations."""

#: A conversation id: what ``session_id`` prints (a UUID), also a safe file name.
ID_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")

#: Largest conversation file read: compaction keeps a file near
#: ``--session-max-tokens`` (at most 2M tokens, ~8 MB of text), and one turn
#: is at most a journal record; anything bigger is not agentd's.
MAX_FILE_BYTES: Final = 2 * jf.MAX_RECORD_BYTES

#: How many recent conversations an "unknown id" error names.
SHOWN_RECENT: Final = 3


@dataclass(frozen=True)
class Found:
    """A saved conversation: its id, its file, and when it last changed (epoch seconds)."""

    id: str
    path: Path
    mtime: float

    def describe(self) -> str:
        """``ID (last saved 2026-12-01 16:30 UTC)`` for messages."""
        when = _dt.datetime.fromtimestamp(self.mtime, _dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        return f"{self.id} (last saved {when})"


def default_state_dir(env: Mapping[str, str]) -> Path | None:
    """The per-user state directory: ``$XDG_STATE_HOME/agentd``, else ``~/.local/state/agentd``.

    ``XDG_STATE_HOME`` counts only when it is an absolute path (the XDG base
    directory rules); None when neither it nor a home directory is known.
    """
    xdg = env.get("XDG_STATE_HOME", "")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "agentd"
    home = env.get("HOME") or ""
    if not home:
        try:
            home = str(Path.home())
        except (RuntimeError, KeyError):
            return None
    return Path(home) / ".local" / "state" / "agentd"


def state_root(state_dir: Path | None, env: Mapping[str, str]) -> Path | None:
    """Where conversations live: ``--state-dir``, else the per-user state directory (None: no home)."""
    return state_dir if state_dir is not None else default_state_dir(env)


def folder(root: Path) -> Path:
    """The ``conversations`` folder of the state directory ``root``."""
    return root / CONVERSATIONS_NAME


def _entries(directory: Path) -> Iterator[Found]:
    """Every regular ``<id>.journal`` file in ``directory`` (nothing when it does not exist)."""
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return
    for name in names:
        if not name.endswith(jf.SUFFIX):
            continue
        cid = name[: -len(jf.SUFFIX)]
        if not ID_RE.fullmatch(cid):
            continue
        path = directory / name
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            yield Found(cid, path, st.st_mtime)


def recent(directory: Path, n: int = SHOWN_RECENT) -> list[Found]:
    """The ``n`` conversations saved last, newest first."""
    return sorted(_entries(directory), key=lambda f: (f.mtime, f.id), reverse=True)[:n]


def find(
    root: Path | None, *, resume: str | None, latest: bool, state_flag: str = "--state-dir"
) -> Found | None:
    """The conversation ``--resume ID`` names, or the newest one for ``--continue`` (None: neither asked).

    Raises:
        ConfigError: (exit 2) no state directory, no conversation saved yet,
            an id that names none (or several, as a prefix), each with the fix.
    """
    if resume is None and not latest:
        return None
    setting = "--resume" if resume is not None else "--continue"
    if root is None:
        raise ConfigError(
            setting,
            resume,
            "there is no per-user state directory (no home directory); give --state-dir where the "
            "conversation was saved",
        )
    directory = folder(root)
    newest = recent(directory)
    if resume is None:
        if not newest:
            raise ConfigError(
                "--continue",
                str(directory),
                "no conversation is saved there yet: run agentd once without --continue first (each once "
                f"run saves its conversation), or give the {state_flag} it was saved in",
            )
        return newest[0]
    if not ID_RE.fullmatch(resume):
        raise ConfigError(
            "--resume",
            resume,
            "a session id is letters, digits, '-' and '_': the session_id a run prints with --output json",
        )
    exact = directory / (resume + jf.SUFFIX)
    matches = [f for f in _entries(directory) if f.id == resume or f.id.startswith(resume)]
    for f in matches:
        if f.path == exact:
            return f
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        ids = ", ".join(sorted(f.id for f in matches)[:SHOWN_RECENT])
        raise ConfigError(
            "--resume", resume, f"it starts more than one session id ({ids}, …); give more of it"
        )
    if newest:
        listed = "; ".join(f.describe() for f in newest)
        hint = f"the newest there: {listed}; agentd --continue continues the newest"
    else:
        hint = "no conversation is saved there yet"
    raise ConfigError(
        "--resume",
        resume,
        f"no conversation with this id in {str(directory)!r} ({hint}); check the id and {state_flag}, "
        "or drop --resume to start a new conversation",
    )


def _read(path: Path) -> jf.Contents:
    """A conversation file's contents (:func:`agentd.state.files.read_state_file`, bounded).

    Raises:
        FileNotFoundError: there is none.
        StateFileError: it is not a regular file of agentd's user (never read).
        OSError: it cannot be read, or is larger than :data:`MAX_FILE_BYTES`.
    """
    data = files.read_state_file(path, MAX_FILE_BYTES)
    if len(data) > MAX_FILE_BYTES:
        raise OSError(0, f"larger than {MAX_FILE_BYTES} bytes")
    return jf.parse(data)


@dataclass(frozen=True)
class Saved:
    """What one save did (for telemetry): the turns kept, those compaction dropped, a damaged file moved aside."""

    path: Path
    turns: int
    dropped_turns: int
    moved_aside: Path | None = None
    damage: str = ""


class Conversation:
    """The conversation a once run continues (``history``) and saves (:meth:`save`).

    Args:
        directory: the ``conversations`` folder (created 0700, with its state directory, at the first save).
        session_id: the conversation's id (the run's ``session_id``).
        max_tokens: ``--session-max-tokens``: the budget of the history and of the file.
    """

    def __init__(self, directory: Path, session_id: str, *, max_tokens: int) -> None:
        self.directory = directory
        self.session_id = session_id
        self.max_tokens = max_tokens
        self.path = directory / (session_id + jf.SUFFIX)

    def history(self) -> tuple[tuple[MessageFrame, ...], int, int]:
        """The saved conversation as the model sees it again: (messages, turns, dropped turns).

        Raises:
            ConfigError: (exit 2) the file cannot be read, or holds no turn.
        """
        try:
            contents = _read(self.path)
        except StateFileError as exc:
            raise ConfigError(
                "--resume",
                self.session_id,
                f"its conversation {exc}; start a new conversation (drop --resume / --continue)",
            ) from None
        except OSError as exc:
            raise ConfigError(
                "--resume",
                self.session_id,
                f"its conversation {str(self.path)!r} cannot be read ({exc.strerror or exc}); fix its "
                "permissions, or start a new conversation",
            ) from None
        if not contents.turns:
            raise ConfigError(
                "--resume",
                self.session_id,
                f"its conversation {str(self.path)!r} holds no whole turn ({contents.detail or 'empty'}); "
                "start a new conversation (drop --resume / --continue)",
            )
        turns, dropped = jf.compact(contents.turns, self.max_tokens)
        return tuple(m for t in turns for m in t), len(contents.turns), dropped

    def save(self, messages: Sequence[MessageFrame]) -> Saved:
        """Add one turn to the conversation file (blocking: run it in a worker thread).

        Raises:
            OSError: the directory or the file cannot be made or written.
            StateFileError: the state directory, or a file there, is not agentd's to use
                (another user's, writable by others, a link where a directory should be).
        """
        root = self.directory.parent
        root.parent.mkdir(parents=True, exist_ok=True)  # ~/.local/state: the user's, made as usual
        files.make_private_dir(root)
        files.make_private_dir(self.directory)
        dfd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            # One read-modify-write at a time: two runs continuing this conversation keep both turns.
            fcntl.flock(dfd, fcntl.LOCK_EX)
            return self._save_locked(tuple(messages))
        finally:
            os.close(dfd)  # releases the lock

    def _save_locked(self, turn: tuple[MessageFrame, ...]) -> Saved:
        # A save cut short by SIGKILL leaves its temp file; the rename never happened, so it holds nothing.
        for leftover in self.directory.glob(f".{self.path.name}.*.tmp"):
            with contextlib.suppress(OSError):
                leftover.unlink()
        turns: list[tuple[MessageFrame, ...]] = []
        moved: Path | None = None
        damage = ""
        try:
            contents: jf.Contents | None = _read(self.path)
        except FileNotFoundError:
            contents = None
        except NotAFile as exc:
            # A link, FIFO or directory where ours should be: moved aside, never followed.
            contents = None
            damage = exc.problem
            moved = files.move_aside(self.path, files.UNSAFE)
        if contents is not None:
            turns = list(contents.turns)
            if contents.problem == "corrupt":
                damage = contents.detail
                moved = files.move_aside(self.path, files.CORRUPT)
        turns.append(turn)
        kept, dropped = jf.compact(turns, self.max_tokens)
        jf.write_whole(self.path, self.session_id, kept, ())
        return Saved(self.path, len(kept), dropped, moved, damage)


__all__ = [
    "CONVERSATIONS_NAME",
    "ID_RE",
    "Conversation",
    "Found",
    "Saved",
    "default_state_dir",
    "find",
    "folder",
    "recent",
    "state_root",
]
