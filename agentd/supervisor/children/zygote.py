"""The zygote client: start a zygote, ask it to fork an agent, read what it says.

The zygote (:mod:`agentd.agent.zygote`) is a pre-warmed interpreter that
forks agent children on request; :class:`~agentd.supervisor.children.tree.Tree`
decides when to use, retire and replace one.
"""

from __future__ import annotations

import array
import contextlib
import enum
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

import orjson
import trio

from agentd.agent.prefork import PreforkedZygote
from agentd.observe.timeline import mark

#: Time for the zygote to import trio, mcp and the agent code (~0.5 s here); generous for slow disks.
ZYGOTE_READY_TIMEOUT = 30.0

#: Seconds between failed starts of a replacement zygote (the last repeats):
#: a zygote that cannot start (out of memory, out of pids) is retried without
#: burning the CPU the fallback children need.
ZYGOTE_RESTART_BACKOFF = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)

#: Time for the kernel to deliver SIGKILL and the zygote to reap; only an
#: unkillable (D-state) process runs this out.
KILL_TIMEOUT = 2.0

#: How the zygote starts; its control socket's fd and the supervisor's pid are appended.
ZYGOTE_COMMAND: tuple[str, ...] = (sys.executable, "-P", "-m", "agentd.agent.zygote")


def parent_of(pid: int) -> int | None:
    """The parent pid of ``pid`` from ``/proc`` (None when it is gone or unreadable).

    Read after ``pidfd_open``: the open pidfd pins the process, so a parent that
    matches proves the pidfd is the process the zygote named.
    """
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            for line in status:
                if line.startswith(b"PPid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


class ZygoteState(enum.Enum):
    """Lifecycle of one zygote process."""

    READY = "ready"
    """Warm and answering: spawns fork here."""
    RETIRED = "retired"
    """Stopped answering, failed a fork or exited: asked for nothing more; killed
    once the last child it forked is gone."""
    STOPPED = "stopped"
    """Killed (or exited) and its control socket closed."""


class SpawnFailed(Exception):
    """A spawn attempt did not produce a running child within its bound."""


class ZygoteUnusable(SpawnFailed):
    """The zygote could not fork this child: retire it and start a fresh interpreter instead."""


class ZygoteProcess:
    """The zygote's process, started from the supervisor's main thread.

    Not a ``trio.Process``: trio forks from a worker thread, and a death
    signal (``PR_SET_PDEATHSIG``) fires when the *thread* that forked exits;
    forked from the main thread, the zygote's death signal fires only when
    the supervisor is gone. The fork and exec block the reactor for a few
    milliseconds, once per zygote.
    """

    def __init__(self, popen: subprocess.Popen[bytes] | int, nursery: trio.Nursery) -> None:
        """``popen``: the started interpreter, or the pid of a zygote forked from this process (rfcs/0365)."""
        self._popen = popen if isinstance(popen, subprocess.Popen) else None
        self.pid = popen.pid if isinstance(popen, subprocess.Popen) else popen
        self._returncode: int | None = None
        self._exited = trio.Event()
        nursery.start_soon(self._watch)

    async def _watch(self) -> None:
        await wait_exited(self.pid)
        # It exited: this reaps at once.
        if self._popen is not None:
            self._returncode = self._popen.wait()
        else:
            self._returncode = _reap(self.pid)
        self._exited.set()

    @property
    def returncode(self) -> int | None:
        return self._returncode

    def kill(self) -> None:
        if self._returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    async def wait(self) -> None:
        await self._exited.wait()


def _reap(pid: int) -> int:
    """Reap ``pid``, a child of this process that has exited (its pidfd said so: never blocks)."""
    _pid, status = os.waitpid(pid, os.WNOHANG)
    return os.waitstatus_to_exitcode(status)


async def wait_exited(pid: int) -> None:
    """Wait until process ``pid`` (a child of this process) exits, without reaping it.

    Shielded: a process the tree started must be reaped, even at shutdown.
    """
    pidfd = os.pidfd_open(pid)
    try:
        with trio.CancelScope(shield=True):
            await trio.lowlevel.wait_readable(pidfd)
    finally:
        os.close(pidfd)


@dataclass(eq=False)
class Zygote:
    """One zygote process and its control socket."""

    proc: ZygoteProcess
    ctl: trio.socket.SocketType
    pid: int
    state: ZygoteState = ZygoteState.READY
    pending: dict[str, trio.MemorySendChannel[tuple[str, int | str]]] = field(default_factory=dict)
    """Spawn requests waiting for the zygote's answer, by agent id."""
    children: set[str] = field(default_factory=set)
    """Agents it forked whose channels are still open."""
    spare: tuple[int, int] | None = None
    """Its spare child, not an agent yet (rfcs/0230): (pid, pidfd). It dies with the
    zygote (its death signal); the tree waits for that when it stops."""

    def forget_spare(self, pid: int | None = None) -> None:
        """The spare became an agent (``pid``), or another replaced it (None): stop watching it."""
        if self.spare is not None and (pid is None or self.spare[0] == pid):
            os.close(self.spare[1])
            self.spare = None

    async def kill_spare(self) -> None:
        """SIGKILL the spare (by its pidfd: never another process) and wait until it is gone (bounded)."""
        if self.spare is None:
            return
        _pid, fd = self.spare
        self.spare = None  # this call owns the pidfd now: a message read meanwhile cannot close it
        try:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            with trio.move_on_after(KILL_TIMEOUT):
                await trio.lowlevel.wait_readable(fd)
        finally:
            os.close(fd)

    async def fork(self, agent: str, fds: tuple[socket.socket, socket.socket]) -> int:
        """Ask this zygote to fork ``agent``; its pid, or ZygoteUnusable (fork failed, zygote gone)."""
        send, recv = trio.open_memory_channel[tuple[str, int | str]](1)
        self.pending[agent] = send
        try:
            try:
                mark("tree.fork_request", agent)
                await self.ctl.sendmsg(
                    [orjson.dumps({"agent": agent})],
                    [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds_message(*(s.fileno() for s in fds)))],
                )
            except OSError as exc:
                raise ZygoteUnusable(f"the zygote (pid {self.pid}) is gone: {exc}") from None
            kind, value = await recv.receive()
        finally:
            self.pending.pop(agent, None)
        if kind == "spawned":
            mark("tree.forked", agent)
            return int(value)
        raise ZygoteUnusable(f"the zygote (pid {self.pid}) could not fork: {value}")


async def start_zygote(
    nursery: trio.Nursery,
    env: Mapping[str, str],
    forward_stderr: Callable[[trio.abc.ReceiveStream, str], Awaitable[None]],
) -> Zygote:
    """Start a zygote and wait for its ``ready``; raises SpawnFailed when it does not come."""
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        # From this (the main) thread, so the zygote's death signal is tied
        # to the supervisor's life; in a session of its own, so a signal to
        # the supervisor's process group does not reach it.
        popen = subprocess.Popen(  # noqa: ASYNC220 (see above: a few ms, once per zygote)
            [*ZYGOTE_COMMAND, str(child.fileno()), str(os.getpid())],
            pass_fds=(child.fileno(),),
            start_new_session=True,
            stderr=subprocess.PIPE,
            env={**os.environ, **env} if env else None,
        )
    except OSError as exc:  # EAGAIN under a pids limit, ENOMEM
        parent.close()
        raise SpawnFailed(f"could not start the zygote: {exc}") from None
    finally:
        child.close()
    assert popen.stderr is not None
    stderr_fd = os.dup(popen.stderr.fileno())
    popen.stderr.close()
    return await _ready(nursery, ZygoteProcess(popen, nursery), parent, stderr_fd, forward_stderr)


async def adopt_zygote(
    nursery: trio.Nursery,
    forked: PreforkedZygote,
    forward_stderr: Callable[[trio.abc.ReceiveStream, str], Awaitable[None]],
) -> Zygote:
    """The zygote forked from this process before trio started (rfcs/0365): wait for its ``ready``."""
    return await _ready(
        nursery, ZygoteProcess(forked.pid, nursery), forked.control, forked.stderr_fd, forward_stderr
    )


async def _ready(
    nursery: trio.Nursery,
    proc: ZygoteProcess,
    parent: socket.socket,
    stderr_fd: int,
    forward_stderr: Callable[[trio.abc.ReceiveStream, str], Awaitable[None]],
) -> Zygote:
    """Forward the zygote's stderr and wait for its ``ready``; raises SpawnFailed when it does not come."""
    nursery.start_soon(forward_stderr, trio.lowlevel.FdStream(stderr_fd), "zygote")
    ctl = trio.socket.from_stdlib_socket(parent)
    first = b""
    try:
        with trio.move_on_after(ZYGOTE_READY_TIMEOUT):
            with contextlib.suppress(OSError):
                first = await ctl.recv(4096)
    except BaseException:
        # Cancelled while it starts (the run ended): a zygote nobody adopts must not outlive the
        # run, and its shielded exit watcher would keep the tree's nursery open until it does.
        ctl.close()
        proc.kill()
        raise
    try:
        pid = int(orjson.loads(first)["ready"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        ctl.close()
        proc.kill()
        with trio.CancelScope(shield=True), trio.move_on_after(KILL_TIMEOUT):
            await proc.wait()
        why = "exited during start-up (see its stderr above)" if first == b"" else f"said {first[:200]!r}"
        raise SpawnFailed(f"the zygote {why}, or was not ready within {ZYGOTE_READY_TIMEOUT:g}s") from None
    z = Zygote(proc=proc, ctl=ctl, pid=pid)
    return z


def fds_message(*fds: int) -> bytes:
    return array.array("i", fds).tobytes()
