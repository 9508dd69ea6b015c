"""Child processes: the spawn chokepoint, the zygote client, the kill ladder.

Every agent child starts through :meth:`Tree.spawn` (the one chokepoint).
The fast path asks the zygote (:mod:`agentd.agent.zygote`) to fork; without a
zygote a fresh interpreter runs ``python -m agentd.agent.child``. Either way
the supervisor keeps one end of a socketpair: the child's private self-MCP
channel. When a child dies its end closes, so the supervisor learns at once
(a stream read returning EOF, not a timer) and posts
:class:`~agentd.supervisor.events.ChildExited` into the reactor's channel.

Shutdown contract (:meth:`Tree.terminate`): SIGTERM to the child's process
group, wait at most :data:`TERM_TIMEOUT`, then SIGKILL, wait at most
:data:`KILL_TIMEOUT`; all inside a shielded cancel scope so a cancelled
supervisor still leaves no child behind.
"""

from __future__ import annotations

import contextlib
import enum
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
import trio

from agentd.supervisor.events import ChildExited, ReactorEvent
from agentd.telemetry import Telemetry

#: Time for the zygote to import trio, mcp and the agent code (~0.5 s here); generous for slow disks.
ZYGOTE_READY_TIMEOUT = 30.0

#: Time a child gets to exit after SIGTERM before SIGKILL. Children hold no
#: state worth saving, so this only lets them close sockets cleanly.
TERM_TIMEOUT = 2.0

#: Time for the kernel to deliver SIGKILL and the zygote to reap; only an
#: unkillable (D-state) process runs this out.
KILL_TIMEOUT = 2.0

#: After a child's channel closes, how long to wait for the zygote's report of
#: its exit status before reporting it unknown.
EXIT_STATUS_WAIT = 1.0


class ChildState(enum.Enum):
    """Lifecycle of one agent child process (as the tree sees it)."""

    STARTING = "starting"
    """Spawn requested; no pid yet."""
    RUNNING = "running"
    """The process exists and its channel is open."""
    STOPPING = "stopping"
    """The kill ladder is running."""
    EXITED = "exited"
    """The channel closed; the process is gone (or going)."""


@dataclass
class ChildProc:
    """One agent child process."""

    agent: str
    state: ChildState = ChildState.STARTING
    pid: int | None = None
    returncode: int | None = None
    pid_known: trio.Event = field(default_factory=trio.Event)
    exited: trio.Event = field(default_factory=trio.Event)
    status_known: trio.Event = field(default_factory=trio.Event)
    spawned_at: float = 0.0


ServeChild = Callable[[str, trio.SocketStream], Awaitable[None]]
"""Serves one child's self-MCP channel until it closes (provided by the supervisor)."""


class Tree:
    """Owns every agent child process.

    Args:
        events: the reactor's channel; :class:`ChildExited` goes there.
        serve_child: serves a child's self-MCP channel until EOF.
        telemetry: for ``subagent.spawn`` / kill events.
        use_zygote: fork from a pre-warmed zygote (fast) or start fresh interpreters.
        zygote_env: variables added to the zygote's environment (what it should prewarm).
    """

    def __init__(
        self,
        *,
        events: trio.MemorySendChannel[ReactorEvent],
        serve_child: ServeChild,
        telemetry: Telemetry,
        use_zygote: bool = True,
        zygote_env: Mapping[str, str] | None = None,
    ) -> None:
        self._events = events
        self._serve_child = serve_child
        self._telemetry = telemetry
        self.use_zygote = use_zygote
        self._zygote_env = dict(zygote_env or {})
        self.children: dict[str, ChildProc] = {}
        self._nursery: trio.Nursery | None = None
        self._ctl: trio.socket.SocketType | None = None
        self._zygote: trio.Process | None = None
        self.zygote_pid: int | None = None

    # -- lifecycle -----------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start the zygote (when enabled) and serve children until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                if self.use_zygote:
                    await self._start_zygote(nursery)
                task_status.started()
                await trio.sleep_forever()
            finally:
                with trio.CancelScope(shield=True):
                    await self.terminate_all()
                    await self._stop_zygote()

    async def _start_zygote(self, nursery: trio.Nursery) -> None:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._zygote = await trio.lowlevel.open_process(
                [sys.executable, "-m", "agentd.agent.zygote", str(child.fileno())],
                pass_fds=(child.fileno(),),
                start_new_session=False,
                env={**os.environ, **self._zygote_env} if self._zygote_env else None,
            )
        finally:
            child.close()
        self._ctl = trio.socket.from_stdlib_socket(parent)
        with trio.fail_after(ZYGOTE_READY_TIMEOUT):
            first = await self._ctl.recv(4096)
        if not first:
            raise RuntimeError("the agent zygote exited during start-up; see its stderr above")
        self.zygote_pid = int(orjson.loads(first)["ready"])
        nursery.start_soon(self._read_zygote)

    async def _read_zygote(self) -> None:
        assert self._ctl is not None
        while True:
            try:
                msg = await self._ctl.recv(4096)
            except OSError:
                msg = b""
            if not msg:
                # The zygote died: fall back to fresh interpreters for new spawns.
                self._telemetry.emit("supervisor.zygote_lost")
                self.use_zygote = False
                return
            data = orjson.loads(msg)
            if "spawned" in data:
                child = self.children.get(data["spawned"])
                if child is not None:
                    child.pid = int(data["pid"])
                    child.pid_known.set()
            elif "exited" in data:
                child = self.children.get(data["exited"])
                if child is not None:
                    child.returncode = int(data["returncode"])
                    child.status_known.set()

    async def _stop_zygote(self) -> None:
        if self._ctl is not None:
            self._ctl.close()
            self._ctl = None
        if self._zygote is not None:
            with trio.move_on_after(TERM_TIMEOUT):
                await self._zygote.wait()
            if self._zygote.returncode is None:
                self._zygote.kill()
                with trio.move_on_after(KILL_TIMEOUT):
                    await self._zygote.wait()

    # -- the spawn chokepoint --------------------------------------------------

    def spawn(self, agent: str, payload: dict[str, Any]) -> ChildProc:
        """Start agent child ``agent`` with ``payload`` (never blocks; the I/O runs in a task)."""
        if self._nursery is None:
            raise RuntimeError("Tree.spawn before Tree.run started")
        if agent in self.children:
            raise ValueError(f"agent id {agent!r} already used")
        child = ChildProc(agent=agent, spawned_at=trio.current_time())
        self.children[agent] = child
        self._nursery.start_soon(self._spawn_and_serve, child, payload)
        return child

    async def _spawn_and_serve(self, child: ChildProc, payload: dict[str, Any]) -> None:
        parent, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        proc: trio.Process | None = None
        try:
            if self.use_zygote and self._ctl is not None:
                await self._ctl.sendmsg(
                    [orjson.dumps({"agent": child.agent})],
                    [(socket.SOL_SOCKET, socket.SCM_RIGHTS, _fds(theirs.fileno()))],
                )
                theirs.close()
                await child.pid_known.wait()
            else:
                proc = await trio.lowlevel.open_process(
                    [sys.executable, "-m", "agentd.agent.child", str(theirs.fileno())],
                    pass_fds=(theirs.fileno(),),
                )
                theirs.close()
                child.pid = proc.pid
                child.pid_known.set()
        except BaseException:
            theirs.close()
            parent.close()
            child.state = ChildState.EXITED
            child.exited.set()
            self._events.send_nowait(ChildExited(agent=child.agent, pid=-1, returncode=None))
            raise
        child.state = ChildState.RUNNING
        self._telemetry.emit(
            "subagent.started",
            agent=child.agent,
            pid=child.pid,
            zygote=proc is None,
            spawn_ms=round((trio.current_time() - child.spawned_at) * 1000, 3),
        )
        stream = trio.SocketStream(trio.socket.from_stdlib_socket(parent))
        try:
            await stream.send_all(orjson.dumps(payload) + b"\n")
            await self._serve_child(child.agent, stream)
            # The child closed its channel (it exited or died): its status is
            # on its way from the zygote. On cancellation we skip this wait:
            # the zygote reader is going down too, and the status is only
            # informational.
            with trio.move_on_after(EXIT_STATUS_WAIT):
                if proc is not None:
                    await proc.wait()
                    child.returncode = proc.returncode
                    child.status_known.set()
                else:
                    await child.status_known.wait()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            with trio.CancelScope(shield=True):
                await stream.aclose()
                child.state = ChildState.EXITED
                if proc is not None and proc.returncode is not None:
                    child.returncode = proc.returncode
                child.exited.set()
                await self._events.send(
                    ChildExited(agent=child.agent, pid=child.pid or -1, returncode=child.returncode)
                )

    # -- the kill ladder -------------------------------------------------------

    async def terminate(self, child: ChildProc) -> None:
        """SIGTERM the child's process group, wait, SIGKILL, wait: bounded and shielded."""
        with trio.CancelScope(shield=True):
            if child.state is ChildState.EXITED:
                return
            child.state = ChildState.STOPPING
            with trio.move_on_after(TERM_TIMEOUT):
                await child.pid_known.wait()
            if child.pid is None:
                return
            _signal_group(child.pid, signal.SIGTERM)
            with trio.move_on_after(TERM_TIMEOUT):
                await child.exited.wait()
            if not child.exited.is_set():
                _signal_group(child.pid, signal.SIGKILL)
                with trio.move_on_after(KILL_TIMEOUT):
                    await child.exited.wait()

    async def terminate_all(self) -> None:
        """Run the kill ladder on every live child at once."""
        live = [c for c in self.children.values() if c.state is not ChildState.EXITED]
        if not live:
            return
        async with trio.open_nursery() as nursery:
            for child in live:
                nursery.start_soon(self.terminate, child)

    def live_count(self) -> int:
        """Children whose channel is still open."""
        return sum(1 for c in self.children.values() if c.state is not ChildState.EXITED)


def _fds(*fds: int) -> bytes:
    import array

    return array.array("i", fds).tobytes()


def _signal_group(pid: int, sig: int) -> None:
    """Signal the child's process group (it leads its own), or the pid if the group is not set up yet."""
    try:
        os.killpg(pid, sig)
        return
    except (ProcessLookupError, PermissionError):
        pass
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


__all__ = ["ChildProc", "ChildState", "Tree"]
