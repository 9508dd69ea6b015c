"""Who the inbox belongs to, its files, and the one server that drains it.

The agent's name and the file names derived from it (:class:`Names`); the
drainer lock (``flock`` plus the two sentinels, :class:`DrainerLock`); the
directory as the server holds it (:class:`InboxDir`); the Syncthing check
that keeps this host's files on this host. The layout of the directory and
why the ``.~`` prefix: docs/inbox.md.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

import orjson
import psutil

from agentd.servers._base import ConfigError, ServerStartError
from agentd.servers._safefs import UnsafePath, describe_kind, open_regular, read_regular, write_atomic

SYNCTHING_IGNORE_LINE: Final = "(?d).~*"
#: The ``.stignore`` line that keeps the hooks' sentinel on its own host.
SYNCTHING_SENTINEL_LINE: Final = "(?d).*.watcher-active"
_NAME_RE: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def valid_agent(name: str) -> bool:
    return bool(_NAME_RE.fullmatch(name)) and len(name) <= 128


def resolve_agent(flag: str | None, env: dict[str, str] | os._Environ[str], home: str) -> str:
    """``--agent`` > ``$AGENTD_INBOX_AGENT`` > ``~/.agentd/inbox-agent``.

    Raises:
        ConfigError: no identity found, or it is not a valid name.
    """
    if flag:
        source, name = "--agent", flag
    elif env.get("AGENTD_INBOX_AGENT"):
        source, name = "AGENTD_INBOX_AGENT", env["AGENTD_INBOX_AGENT"]
    else:
        path = os.path.join(home, ".agentd", "inbox-agent")
        try:
            name = read_regular(path, 4096).decode("utf-8", "replace").splitlines()[0].strip()
        except (OSError, IndexError):
            raise ConfigError(
                "--agent",
                None,
                f"no inbox identity: pass --agent NAME, set AGENTD_INBOX_AGENT, or write the name to {path}",
            ) from None
        source = path
    if not valid_agent(name):
        raise ConfigError(source, name, "use letters, digits, '_', '.', '-' (not starting with '.')")
    return name


@dataclass(frozen=True, slots=True)
class Names:
    """The file names of one agent's inbox (inside the inbox directory)."""

    agent: str

    @property
    def inbox(self) -> str:
        return f"{self.agent}.inbox"

    @property
    def cursor(self) -> str:
        return f".~{self.agent}.cursor"

    @property
    def lock(self) -> str:
        return f".~{self.agent}.lock"

    @property
    def sentinel(self) -> str:
        return f".~{self.agent}.watcher-active"

    @property
    def hook_sentinel(self) -> str:
        """The mcp-watcher contract's sentinel: hooks stand down while it names a live watcher."""
        return f".{self.agent}.watcher-active"

    # names an earlier agentd used (read once, then replaced)
    @property
    def legacy_hwm(self) -> str:
        return f".{self.agent}.hwm"

    @property
    def legacy_state(self) -> str:
        return f".{self.agent}.state"

    @property
    def legacy_lock(self) -> str:
        return f".{self.agent}.lock"


# --------------------------------------------------------------------------- single drainer


def process_start_time(pid: int) -> float | None:
    """The process's start time (seconds since the epoch), or None if it does not exist."""
    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
        return None


def sentinel_is_live(info: dict[str, object]) -> bool:
    """Whether a sentinel's owner still runs *on this host* (pid alive with the same start time).

    A sentinel from another host is never live here: it can only have come
    through a sync tool or a shared file system, where the flock is what
    decides (see :class:`DrainerLock`).
    """
    if info.get("host") not in (None, socket.gethostname()):
        return False
    pid = info.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    started = process_start_time(pid)
    recorded = info.get("start_time")
    if started is None:
        return False
    return not (isinstance(recorded, int | float) and abs(started - recorded) > 1.0)


def sentinel_is_mine(info: dict[str, object]) -> bool:
    """Whether a sentinel names this process (its pid, on this host)."""
    return info.get("pid") == os.getpid() and info.get("host") in (None, socket.gethostname())


class DrainerLock:
    """Hold one inbox: ``flock`` on its lock file (inside ``dir_fd``), and the two sentinels.

    The host-local sentinel (``.~AGENT.watcher-active``) and the hooks'
    (``.AGENT.watcher-active``) hold the same JSON. At start, either one
    naming a live process on this host refuses the start; one from another
    host is reported (:attr:`foreign`) and one whose process is gone is taken
    over (:attr:`took_over`); both are then written. :meth:`release` removes
    the ones that still name this process.
    """

    def __init__(self, dir_fd: int, directory: str, names: Names) -> None:
        self.dir_fd = dir_fd
        self.directory = directory
        self.names = names
        self.inbox = os.path.join(directory, names.inbox)
        self.sentinel_path = os.path.join(directory, names.sentinel)
        self.hook_sentinel_path = os.path.join(directory, names.hook_sentinel)
        self._fds: list[int] = []
        self._content = b""
        self.took_over: dict[str, object] | None = None
        """A sentinel of a process that is gone found at start (a SIGKILLed server's: taken over)."""
        self.foreign: dict[str, object] | None = None
        """A sentinel from another host found at start (reported, then replaced)."""

    def _read_sentinel(self, name: str) -> dict[str, object] | None:
        try:
            info = orjson.loads(read_regular(name, 64 * 1024, dir_fd=self.dir_fd))
        except (OSError, orjson.JSONDecodeError):
            return None
        return info if isinstance(info, dict) else None

    def _flock(self, name: str, *, create: bool) -> int | None:
        flags = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | (os.O_CREAT if create else 0)
        try:
            fd = os.open(name, flags, 0o600, dir_fd=self.dir_fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ServerStartError(
                    f"{os.path.join(self.directory, name)} is a symlink; remove it (the lock file must be a "
                    "regular file in the inbox directory)"
                ) from exc
            raise ServerStartError(
                f"cannot open the lock file {os.path.join(self.directory, name)}: {exc.strerror}"
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            for sentinel in (self.names.sentinel, self.names.hook_sentinel):
                info = self._read_sentinel(sentinel)
                if info is not None:
                    raise ServerStartError(self._busy_message(info, sentinel)) from None
            raise ServerStartError(self._busy_message(None, self.names.sentinel)) from None
        return fd

    def acquire(self) -> None:
        """Take the inbox or raise :class:`ServerStartError` naming the current holder."""
        fd = self._flock(self.names.lock, create=True)
        assert fd is not None
        self._fds.append(fd)
        try:
            legacy = self._flock(self.names.legacy_lock, create=False)  # an older agentd's server
            if legacy is not None:
                self._fds.append(legacy)
            for sentinel in (self.names.sentinel, self.names.hook_sentinel):
                info = self._read_sentinel(sentinel)
                if info is None or sentinel_is_mine(info):
                    continue
                if sentinel_is_live(info):
                    # Another watcher on this host (one that does not take our lock: the
                    # mcp-watcher, say) delivers this inbox: two would deliver everything twice.
                    raise ServerStartError(self._busy_message(info, sentinel))
                if info.get("host") not in (None, socket.gethostname()):
                    self.foreign = self.foreign or info
                else:
                    self.took_over = self.took_over or info
            self._content = orjson.dumps(
                {
                    "pid": os.getpid(),
                    "start_time": psutil.Process().create_time(),
                    "host": socket.gethostname(),
                    "since": datetime.now(UTC).isoformat(),
                    "inbox": self.inbox,
                }
            )
            # The host-local one first: a server that dies between the two leaves a sentinel
            # its successor can tell is stale, never only the hooks' one.
            self._write_sentinel(self.names.sentinel)
            self._write_sentinel(self.names.hook_sentinel)
        except BaseException:
            self._close()
            raise

    def _write_sentinel(self, name: str) -> None:
        try:
            write_atomic(name, self._content, dir_fd=self.dir_fd)
        except UnsafePath as exc:
            try:
                kind = describe_kind(os.lstat(name, dir_fd=self.dir_fd).st_mode)
            except OSError:
                kind = "not a regular file"
            raise ServerStartError(
                f"{os.path.join(self.directory, name)} is {kind}, not a regular file; remove it "
                "(the server writes its sentinel there)"
            ) from exc

    def _busy_message(self, info: dict[str, object] | None, sentinel: str) -> str:
        who = f"pid {info.get('pid')} on {info.get('host')}" if info else "another process"
        return (
            f"{self.inbox} is already drained by {who} (sentinel {os.path.join(self.directory, sentinel)}); "
            "stop that server first, or serve another inbox with --agent"
        )

    def _close(self) -> None:
        for fd in self._fds:
            os.close(fd)  # releases the flock
        self._fds.clear()

    def release(self) -> None:
        if not self._fds:
            return
        # The hooks' one first: while the host-local one remains, the inbox still reads as held.
        for sentinel in (self.names.hook_sentinel, self.names.sentinel):
            info = self._read_sentinel(sentinel)
            if info is not None and sentinel_is_mine(info):
                with contextlib.suppress(OSError):
                    os.unlink(sentinel, dir_fd=self.dir_fd)
        self._close()


def syncthing_warning(directory: str) -> str | None:
    """If ``directory`` is inside a Syncthing folder whose ``.stignore`` does not skip ``.~*``: what to add."""
    d = os.path.abspath(directory)
    while True:
        if os.path.lexists(os.path.join(d, ".stfolder")):
            stignore = os.path.join(d, ".stignore")
            try:
                text = read_regular(stignore, 1 << 20).decode("utf-8", "replace")
            except OSError:
                text = ""
            missing = [
                line
                for line, pattern in (
                    (SYNCTHING_IGNORE_LINE, ".~"),
                    (SYNCTHING_SENTINEL_LINE, "watcher-active"),
                )
                if pattern not in text
            ]
            if not missing:
                return None
            lines = " and ".join(repr(line) for line in missing)
            return (
                f"{directory} is inside the Syncthing folder {d}: add the line{'s' if len(missing) > 1 else ''} "
                f"{lines} to {stignore} so this host's inbox position, lock and sentinels stay on this host (a "
                "position synced from another host would make this server repeat or skip acknowledgements, and "
                "a sentinel synced there would make that host's hooks stand down)"
            )
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent


# --------------------------------------------------------------------------- the directory held


class InboxDir:
    """The inbox directory as this server holds it: an fd on it and its drainer lock.

    Every file is opened relative to :attr:`fd`, never by path again, so a
    directory moved away is not followed by accident; when it is replaced,
    :meth:`take_over` swaps in the new one's fd and lock together.
    """

    def __init__(self, path: str, names: Names) -> None:
        self.path = path
        self.names = names
        self.inbox_path = os.path.join(path, names.inbox)
        self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.lock = DrainerLock(self.fd, path, names)

    @classmethod
    def claim(cls, path: str, names: Names) -> InboxDir:
        """Open the directory and take its inbox; raises :class:`ServerStartError` naming the holder."""
        held = cls(path, names)
        try:
            held.lock.acquire()
        except BaseException:
            os.close(held.fd)
            raise
        return held

    def open_inbox(self, dir_fd: int | None = None) -> int:
        """Open the inbox file for reading (in ``dir_fd``, default :attr:`fd`); raises what :func:`open_regular` raises."""
        return open_regular(self.names.inbox, os.O_RDONLY, dir_fd=self.fd if dir_fd is None else dir_fd)

    def remove_stale_temporaries(self) -> None:
        """Drop temporaries a writer SIGKILLed mid-write left; we hold the lock, so nobody else writes them."""
        agent = self.names.agent
        prefixes = (f".~{agent}.cursor.", f".~{agent}.watcher-active.")
        with contextlib.suppress(OSError):
            for name in os.listdir(self.fd):
                if name.startswith(prefixes) and name.endswith(".tmp"):
                    with contextlib.suppress(OSError):
                        os.unlink(name, dir_fd=self.fd)

    def take_over(self, new: InboxDir) -> None:
        """The directory was replaced and ``new`` (claimed) holds the new one: use it, give the old one up."""
        old_fd, old_lock = self.fd, self.lock
        self.fd, self.lock = new.fd, new.lock
        old_lock.release()
        os.close(old_fd)

    def release(self) -> None:
        """Give the inbox up: the sentinels that still name this process go, then the lock and the fd."""
        self.lock.release()
        with contextlib.suppress(OSError):
            os.close(self.fd)
