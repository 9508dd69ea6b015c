"""Opening, reading and repairing the files agentd keeps; reading the files a user names.

ARCHITECTURE decision 14 says what the state directory is; rfcs/0275 says
how these functions carry it out. Every file under ``--state-dir`` (and the
``--watch-state`` file) is opened here:

* :func:`directory_problem` / :func:`make_private_dir`: a directory agentd keeps
  state in is owned by agentd's (effective) user and writable by nobody else;
  one agentd creates is mode 0700.
* :func:`open_state_file` / :func:`read_state_file`: ``lstat`` first (a path that
  is not a regular file is never opened), then ``open`` with ``O_NOFOLLOW |
  O_NONBLOCK`` (a link is never followed, a FIFO never blocks) and ``fstat``:
  it must be a regular file owned by agentd's user. A read stops at a bound.
* :func:`replace_if_not_a_file` and :func:`move_aside`: the one repair, a
  rename to ``NAME.<why>-<UTC stamp>`` beside it; the file's bytes (or the
  link, the FIFO) are kept as they were for whoever inspects them.

The rule the owners of each file apply (the format is theirs to recognise):

* not a regular file (a link, FIFO, device, socket or directory) where
  agentd keeps a file: moved aside (``.unsafe-STAMP``), never read;
* agentd's own format, damaged: moved aside (``.corrupt-STAMP``), what could
  be read is kept, the run goes on;
* not agentd's (another user's, or not recognisably its format): refused,
  never read further, written, moved or truncated.

:func:`read_regular_file` is for files the user names (``@FILE``,
``--config``): links are followed (they are the user's), but a FIFO, device,
socket or directory is refused before anything waits on it.

Everything here blocks (file system calls): call it before trio starts or in
a worker thread. Nothing here imports trio.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from agentd.core.errors import NotAFile, NotOurs

#: Largest state file agentd reads (a journal, the watch state): a journal
#: holds at most the session's token budget plus one turn (a record is at most
#: 64 MiB, the spawn payload's cap), so four records' worth is far beyond any
#: file agentd wrote, and a planted multi-gigabyte file costs at most this much memory.
MAX_STATE_FILE_BYTES: Final = 256 * 1024 * 1024

#: What a moved-aside file's new name says: damaged (agentd's own format) or not a regular file.
CORRUPT: Final = "corrupt"
UNSAFE: Final = "unsafe"

#: Flags every state file is opened with: no link followed, no wait on a FIFO, not inherited.
_SAFE_FLAGS: Final = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

#: Read size of one ``os.read`` (a bounded read loops up to its bound).
_CHUNK: Final = 1024 * 1024

_KINDS = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISREG, "a regular file"),
)


def kind(mode: int) -> str:
    """What a ``st_mode`` is, with its article (``"a FIFO (named pipe)"``)."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def user(uid: int) -> str:
    """``uid 1001 (alice)``, or ``uid 1001`` when the name is unknown."""
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (KeyError, ImportError):
        return f"uid {uid}"


def directory_problem(path: Path, st: os.stat_result) -> str | None:
    """Why the directory ``st`` (of ``path``) is not agentd's user's alone, with the fix; or None.

    Refused: owned by another user, or writable by its group or by others
    (whoever can write it can plant the files agentd restores).
    """
    me = os.geteuid()
    mode = stat.S_IMODE(st.st_mode)
    quoted = shlex.quote(str(path))
    if st.st_uid != me:
        return (
            f"is owned by {user(st.st_uid)}, not by agentd's user ({user(me)}), so that user can plant "
            f"the files agentd restores; give a directory of agentd's own, or run `chown {me} {quoted} "
            f"&& chmod 700 {quoted}`"
        )
    writable = [who for who, bit in (("group", stat.S_IWGRP), ("others", stat.S_IWOTH)) if mode & bit]
    if writable:
        return (
            f"is writable by {' and '.join(writable)} (mode {mode:04o}, owner {user(st.st_uid)}), so they "
            f"can plant the files agentd restores; run `chmod 700 {quoted}`"
        )
    return None


def subdirectory_problem(path: Path) -> str | None:
    """Why ``path`` (a directory agentd keeps inside its state directory) cannot be used, or None.

    Missing is fine (agentd creates it, 0700). Not followed when it is a link.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot be looked at ({exc.strerror or exc}); fix its permissions"
    if not stat.S_ISDIR(st.st_mode):
        return f"is {kind(st.st_mode)}, not a directory; remove it (agentd creates the directory, mode 0700)"
    return directory_problem(path, st)


def make_private_dir(path: Path) -> None:
    """Create the directory ``path`` with mode 0700, or check the one there (not following a link).

    Raises:
        NotAFile: something else is there (a link, a file).
        NotOurs: it is another user's, or writable by its group or others.
        OSError: it cannot be created.
    """
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    else:
        os.chmod(path, 0o700)  # the umask may have taken bits away: exactly 0700
        return
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise NotAFile(str(path), kind(st.st_mode))
    problem = directory_problem(path, st)
    if problem is not None:
        raise NotOurs(str(path), problem)


def _check_file(path: Path, st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise NotAFile(str(path), kind(st.st_mode))
    if st.st_uid != os.geteuid():
        raise NotOurs(
            str(path),
            f"is owned by {user(st.st_uid)}, not by agentd's user ({user(os.geteuid())}); agentd neither "
            "reads nor replaces it: remove it if it is not wanted",
        )


def open_state_file(path: Path, flags: int = os.O_RDONLY, mode: int = 0o600) -> int:
    """Open a file agentd keeps: a regular file owned by agentd's user, never through a link.

    ``flags`` may include ``O_CREAT`` (the file is created with ``mode``).
    Nothing but a regular file is ever opened (``lstat`` first); ``O_NOFOLLOW |
    O_NONBLOCK`` and an ``fstat`` of what was opened close the race with a
    swap in between.

    Raises:
        FileNotFoundError: it does not exist (and ``O_CREAT`` was not given).
        NotAFile: it is a link, FIFO, device, socket or directory.
        NotOurs: another user owns it.
        OSError: any other failure to open it.
    """
    try:
        _check_file(path, os.lstat(path))
    except FileNotFoundError:
        if not flags & os.O_CREAT:
            raise
    try:
        fd = os.open(path, flags | _SAFE_FLAGS, mode)
    except OSError as exc:
        with contextlib.suppress(OSError):
            now = os.lstat(path)
            if not stat.S_ISREG(now.st_mode):  # swapped for a link or a FIFO in between
                raise NotAFile(str(path), kind(now.st_mode)) from exc
        raise
    try:
        _check_file(path, os.fstat(fd))
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_bounded(fd: int, limit: int) -> bytes:
    """Up to ``limit + 1`` bytes from ``fd`` (one more than the bound shows it was passed)."""
    parts: list[bytes] = []
    left = limit + 1
    # The first read is sized to the file (one byte more sees its end): ``os.read`` allocates
    # what it is asked for, and most state files are a few KiB.
    want = max(os.fstat(fd).st_size + 1, 4096)
    while left > 0:
        chunk = os.read(fd, min(want, left))
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
        want = _CHUNK
    return b"".join(parts)


def read_state_file(path: Path, limit: int = MAX_STATE_FILE_BYTES) -> bytes:
    """A file agentd keeps (see :func:`open_state_file`), up to ``limit + 1`` bytes.

    More than ``limit`` bytes back means the file is larger than the bound:
    the caller decides (agentd's own file that large is damaged).

    Raises:
        FileNotFoundError, NotAFile, NotOurs, OSError: as :func:`open_state_file`.
    """
    fd = open_state_file(path)
    try:
        return _read_bounded(fd, limit)
    finally:
        os.close(fd)


def read_regular_file(path: Path, limit: int) -> bytes:
    """A file the user names (``@FILE``, ``--config``), up to ``limit + 1`` bytes; links are followed.

    A FIFO, device, socket or directory is refused before it is opened (and
    once more after, by ``fstat``, in case it was swapped): reading a FIFO
    would wait for a writer, a device may never end.

    Raises:
        NotAFile: it is not a regular file (``kind`` says what it is).
        OSError: it cannot be read (missing, permissions).
    """
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise NotAFile(str(path), kind(st.st_mode))
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotAFile(str(path), kind(st.st_mode))
        return _read_bounded(fd, limit)
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class MovedAside:
    """A file moved aside by the repair rule (for its owner to report as ``state.moved_aside``).

    Attributes:
        path: where it was.
        moved_to: where it is now.
        problem: what was wrong (``"is a FIFO (named pipe), not a regular file"``).
    """

    path: Path
    moved_to: Path
    problem: str


def move_aside(path: Path, why: str, *, now: float | None = None) -> Path:
    """Rename ``path`` to ``NAME.<why>-<UTC stamp>`` beside it (``-2``, ``-3`` … when taken); returns the new path.

    The rename moves the directory entry itself: a link is moved, not its
    target; a FIFO is never opened. The directory is agentd's alone, so the
    name found free stays free until the rename.

    Raises:
        OSError: the rename failed (the file is where it was).
    """
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    target = path.with_name(f"{path.name}.{why}-{stamp}")
    n = 1
    while os.path.lexists(target):
        n += 1
        target = path.with_name(f"{path.name}.{why}-{stamp}-{n}")
    os.rename(path, target)
    return target


def replace_if_not_a_file(path: Path, flags: int, mode: int = 0o600) -> tuple[int, MovedAside | None]:
    """Open (or create) the state file ``path``; what is there and not a regular file is moved aside first.

    For files agentd can always make anew (its lock files): a link, FIFO or
    directory in their place is renamed ``NAME.unsafe-STAMP`` and a new file
    is created, never written through.

    Returns:
        The open descriptor, and what was moved aside (None when nothing was).

    Raises:
        NotOurs: another user owns the file (refused, left as it is).
        OSError: it cannot be moved aside or opened.
    """
    try:
        return open_state_file(path, flags, mode), None
    except NotAFile as exc:
        problem = exc.problem
    try:
        moved_to = move_aside(path, UNSAFE)
    except FileNotFoundError:  # another agentd moved it first: its new file is the one to open
        return open_state_file(path, flags, mode), None
    return open_state_file(path, flags, mode), MovedAside(path, moved_to, problem)


__all__ = [
    "CORRUPT",
    "MAX_STATE_FILE_BYTES",
    "UNSAFE",
    "MovedAside",
    "directory_problem",
    "kind",
    "make_private_dir",
    "move_aside",
    "open_state_file",
    "read_regular_file",
    "read_state_file",
    "replace_if_not_a_file",
    "subdirectory_problem",
    "user",
]
