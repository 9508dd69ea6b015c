"""What everything that keeps state on disk shares: one exclusive, non-blocking lock on a
state file, and the directory fsync that makes a rename durable.

The session journals' state directory and the watch-state file are each owned by
one agentd at a time: the owner holds ``flock(LOCK_EX | LOCK_NB)`` on a lock file
and writes its pid there, so a second agentd is refused at once with a message
that names the first.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from agentd.core.durations import ascii_int
from agentd.core.errors import ConfigError


def lock_exclusively(fd: int, setting: str, path: Path, fix: str) -> None:
    """Take the exclusive lock of the open lock file ``fd`` at once, and write this process's pid in it.

    Raises:
        ConfigError: (exit 2) another process holds it: the message names its pid
            (what it wrote) and ends with ``fix``; ``fd`` is closed.
    """
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        try:  # what another process wrote: a pid in ASCII digits, or nothing agentd repeats
            owner = f"pid {ascii_int(holder)}"
        except ValueError:
            owner = "another process"
        raise ConfigError(setting, str(path), f"another agentd ({owner}) is using it; {fix}") from None
    with contextlib.suppress(OSError):  # a full disk must not stop a start: the pid is a courtesy
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)


def fsync_dir(directory: Path) -> None:
    """Flush ``directory``'s entries to disk: a file renamed into it survives a power loss.

    Raises:
        OSError: the directory cannot be opened or flushed.
    """
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


__all__ = ["fsync_dir", "lock_exclusively"]
