"""File access for the bundled servers that cannot be turned against the host.

Every path a bundled server reads or writes may be swapped by someone else
(another local user in a shared directory, a sync tool, a writer agent) for a
symlink, a FIFO, a device or a socket. Opening such a path the naive way either
writes *through* a symlink into a file the server never meant to touch, or
blocks the event loop forever (a FIFO with no writer or no reader). So:

* the last path component is never followed (``O_NOFOLLOW``);
* every open is non-blocking (``O_NONBLOCK``: a FIFO fails at once with
  ``ENXIO`` or is refused after ``fstat``, it never blocks), and the opened
  descriptor must be a regular file (``S_ISREG`` on ``fstat``, not a racy
  ``stat`` of the path);
* atomic rewrites go through a temporary file created with ``O_EXCL`` under a
  random name (a planted symlink at a predictable temp name cannot redirect
  the write), keep the mode of the file they replace (a 0600 notes file stays
  0600), and refuse to replace anything that is not a regular file.

Errors are :class:`UnsafePath` (an ``OSError``, so callers that already turn
``OSError`` into a clear message keep working); its message names the path,
what it is, and what to do.

API::

    open_regular(path, flags)            -> fd of a regular file (O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
    read_regular(path, limit=None)       -> bytes; FileNotFoundError when absent
    append_regular(path, data, mode)     one write() on O_APPEND; creates the file with ``mode``
    write_atomic(path, data, new_mode)   temp + fsync + rename + dir fsync, mode preserved
    copy_regular(src, dst)               dst replaced atomically with src's bytes
    describe_kind(st_mode)               "a FIFO", "a directory", ... for messages

Each takes an optional ``dir_fd``: ``path`` is then a name inside that open
directory (the inbox keeps working in the directory it locked even if the
path is moved away and a new directory appears in its place).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from typing import Final

__all__ = [
    "DEFAULT_NEW_MODE",
    "UnsafePath",
    "append_regular",
    "copy_regular",
    "describe_kind",
    "open_regular",
    "read_regular",
    "write_atomic",
]

#: Mode of a file a bundled server creates (before the umask), unless the caller says otherwise.
DEFAULT_NEW_MODE: Final = 0o644

_READ_CHUNK: Final = 1 << 20


class UnsafePath(OSError):
    """A path that is not a regular file (or is a symlink) where one is required."""


_KINDS: Final = (
    (stat.S_ISLNK, "a symlink"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISREG, "a regular file"),
)


def describe_kind(mode: int) -> str:
    """What a ``st_mode`` is, for messages: ``"a FIFO"``, ``"a symlink"``, ..."""
    for is_kind, kind in _KINDS:
        if is_kind(mode):
            return kind
    return "not a regular file"


def _refuse(path: str, what: str) -> UnsafePath:
    return UnsafePath(
        errno.EINVAL,
        f"{path} is {what}, not a regular file; refusing to use it "
        "(replace it with a regular file, or point the server elsewhere)",
        path,
    )


def open_regular(
    path: str,
    flags: int,
    mode: int = DEFAULT_NEW_MODE,
    *,
    dir_fd: int | None = None,
    shown: str | None = None,
) -> int:
    """Open ``path`` without following a final symlink and without blocking; it must be a regular file.

    ``flags`` are the access flags (``os.O_RDONLY``, ``os.O_WRONLY | os.O_APPEND | os.O_CREAT``, ...);
    ``O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC`` are added. The returned descriptor is blocking again
    (harmless for regular files, and what callers expect). ``shown`` is the path messages name
    (default ``path``; useful with ``dir_fd``).

    Raises:
        FileNotFoundError: it does not exist (and ``O_CREAT`` was not given).
        UnsafePath: it is a symlink, FIFO, device, socket or directory.
        OSError: any other open error.
    """
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refuse(shown or path, "a symlink") from exc
        if exc.errno in (errno.ENXIO, errno.EISDIR):
            # ENXIO: a FIFO opened for writing with no reader (O_NONBLOCK), or a socket.
            try:
                kind = describe_kind(os.lstat(path, dir_fd=dir_fd).st_mode)
            except OSError:
                kind = "not a regular file"
            raise _refuse(shown or path, kind) from exc
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(shown or path, describe_kind(st.st_mode))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: str, limit: int | None = None, *, dir_fd: int | None = None) -> bytes:
    """The contents of the regular file ``path`` (at most ``limit`` bytes when given).

    Raises:
        FileNotFoundError: it does not exist.
        UnsafePath: it is not a regular file.
    """
    fd = open_regular(path, os.O_RDONLY, dir_fd=dir_fd)
    try:
        chunks: list[bytes] = []
        total = 0
        while limit is None or total < limit:
            want = _READ_CHUNK if limit is None else min(_READ_CHUNK, limit - total)
            chunk = os.read(fd, want)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def append_regular(
    path: str,
    data: bytes,
    mode: int = DEFAULT_NEW_MODE,
    *,
    dir_fd: int | None = None,
    shown: str | None = None,
) -> None:
    """Append ``data`` with one ``write`` on ``O_APPEND`` (never interleaves with other appenders).

    Creates the file with ``mode`` (before the umask) when absent.

    Raises:
        UnsafePath: the path is a symlink, FIFO, device, ... (nothing is written).
        OSError: the write failed, or was short (the message says how much landed).
    """
    fd = open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode, dir_fd=dir_fd, shown=shown)
    try:
        written = os.write(fd, data)
        if written != len(data):
            raise OSError(
                errno.EIO, f"only {written} of {len(data)} bytes were appended to {path}; check free space"
            )
    finally:
        os.close(fd)


def _existing_mode(path: str, dir_fd: int | None = None) -> int | None:
    """Permission bits of the regular file at ``path``; None when absent.

    Raises:
        UnsafePath: something other than a regular file is there.
    """
    try:
        st = os.lstat(path, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(path, describe_kind(st.st_mode))
    return stat.S_IMODE(st.st_mode)


def write_atomic(
    path: str, data: bytes, *, new_mode: int = DEFAULT_NEW_MODE, dir_fd: int | None = None
) -> None:
    """Replace ``path`` with ``data`` so a reader sees the old or the new file, never a mix.

    temp file (``.~NAME.RANDOM.tmp``, ``O_EXCL | O_NOFOLLOW``) in the same
    directory -> write -> fsync -> rename -> fsync(dir). An existing file's
    permission bits are kept; a new file gets ``new_mode`` (minus the umask).

    Raises:
        UnsafePath: ``path`` exists and is not a regular file (a symlink is not
            replaced either: the caller named a file, not a link to one).
        OSError: the write, fsync or rename failed (no temp file is left).
    """
    if dir_fd is None:
        directory = os.path.dirname(os.path.abspath(path))
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        name = os.path.basename(path)
    else:
        dfd, name = dir_fd, path
    try:
        keep = _existing_mode(name, dfd)
        tmp = f".~{name.lstrip('.~')}.{secrets.token_hex(6)}.tmp"
        fd = os.open(
            tmp,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600 if keep is not None else new_mode,
            dir_fd=dfd,
        )
        try:
            try:
                if keep is not None:
                    os.fchmod(fd, keep)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            if keep is None:
                _existing_mode(name, dfd)  # refuse a symlink planted since the first check
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=dfd)
            raise
        os.fsync(dfd)
    finally:
        if dir_fd is None:
            os.close(dfd)


def copy_regular(src: str, dst: str, *, dir_fd: int | None = None) -> None:
    """Replace ``dst`` with the bytes of the regular file ``src`` (atomically, never through a symlink)."""
    write_atomic(dst, read_regular(src, dir_fd=dir_fd), dir_fd=dir_fd)
