"""Child processes: the spawn chokepoint, the zygote client, the kill ladder.

Over 700 lines, one idea: every path of one child's record (spawn, serve, exit, the kill ladder) is bounded here.

The zygote client is ``zygote.py``; the child's control channel is ``channel.py``.

Every agent child starts through :meth:`Tree.spawn` (the one chokepoint).
The supervisor keeps one end of two socketpairs per child: its MCP channel
(served by the hub) and its control channel (served by
:func:`agentd.supervisor.children.channel.serve_control`; the first frame on it is the
spawn payload). When a child dies its ends close, so the supervisor learns at
once (a stream read returning EOF, not a timer) and posts
:class:`~agentd.events.ChildExited` into the reactor's channel.
A child that breaks the control protocol is SIGKILLed and its
``ChildExited`` carries the reason.

Spawning is bounded. The fast path asks the zygote (:mod:`agentd.agent.zygote`)
to fork; it must answer, and the child take its spawn payload, within
``spawn_timeout``. A zygote that does not answer in time (stopped, wedged),
reports a failed ``fork()`` (EAGAIN under a pids limit) or has exited is
*retired*: this spawn and the next ones start fresh interpreters
(``python -P -m agentd.agent.child``, the same bound), a replacement zygote
starts in the background (backoff between failed starts), and the reactor
hears :class:`~agentd.events.ZygoteStateChanged` so readiness
reports it. A retired zygote is killed once the last child it forked is gone
(killing it earlier would take those children with it). So a spawn ends
within two attempts, at most ``2 × spawn_timeout``; if both fail the child
"exits" unspawned and the reactor queues its work again.

Helper processes start with ``-P`` (the working directory is never put on
their import path, so a folder named ``agentd`` in it cannot shadow the
package) and in sessions of their own: a signal to the supervisor's process
group reaches the supervisor only, which then drains them. No orphan
survives a SIGKILLed supervisor: the zygote exits when its control socket
closes and takes its children with it (their death signal is tied to it); a
fresh-interpreter child stops when its control channel closes.

Shutdown contract (:meth:`Tree.terminate`): SIGTERM to the child's process
group, wait at most :data:`TERM_TIMEOUT`, then SIGKILL, wait at most
:data:`KILL_TIMEOUT`; all inside a shielded cancel scope so a cancelled
supervisor still leaves no child behind.
"""

from __future__ import annotations

import contextlib
import enum
import itertools
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

import orjson
import trio

from agentd.agent.prefork import PreforkedChild, PreforkedZygote
from agentd.core.errors import ProtocolError
from agentd.core.jsonvalue import JSONValue, as_object, get_int, loads
from agentd.events import ChildExited, ReactorEvent, ZygoteStateChanged
from agentd.observe.telemetry import Telemetry
from agentd.observe.timeline import mark
from agentd.selfmcp.control import FrameStream
from agentd.selfmcp.protocol import MAX_CHILD_FRAME_BYTES, SpawnPayload
from agentd.supervisor.children.channel import Journal, serve_control
from agentd.supervisor.children.zygote import (
    KILL_TIMEOUT,
    ZYGOTE_COMMAND,
    ZYGOTE_RESTART_BACKOFF,
    SpawnFailed,
    Zygote,
    ZygoteState,
    ZygoteUnusable,
    adopt_zygote,
    parent_of,
    start_zygote,
    wait_exited,
)

#: Default bound on one spawn attempt (the zygote's fork, or a fresh
#: interpreter's start, plus handing over the spawn payload). A fork answers
#: in milliseconds; the bound only trips on a stopped or wedged zygote.
DEFAULT_SPAWN_TIMEOUT = 5.0

#: Time a child gets to exit after SIGTERM before SIGKILL. Children hold no
#: state worth saving, so this only lets them close sockets cleanly.
TERM_TIMEOUT = 2.0

#: After a child's channels close, how long to wait for its exit status (from
#: the zygote, or our own wait) before reporting it unknown and SIGKILLing
#: whatever is left of it (no child outlives its channels).
EXIT_STATUS_WAIT = 1.0

#: Longest line of a child's stderr kept in one ``child.stderr`` event.
STDERR_LINE_CHARS = 2000

#: How a fresh-interpreter child starts; the two channel fds are appended.
#: ``-P``: the working directory never shadows the installed package.
CHILD_COMMAND: tuple[str, ...] = (sys.executable, "-P", "-m", "agentd.agent.child")


class ChildState(enum.Enum):
    """Lifecycle of one agent child process (as the tree sees it)."""

    STARTING = "starting"
    """Spawn requested; no process handed its payload yet."""
    RUNNING = "running"
    """The process exists, took its payload, and its channels are open."""
    STOPPING = "stopping"
    """The kill ladder is running."""
    EXITED = "exited"
    """The channels closed; the process is gone (or going), or never started."""


class _ForkedProcess:
    """A child this process forked itself (a pre-forked root): the surface of ``trio.Process`` the tree uses."""

    def __init__(self, pid: int, nursery: trio.Nursery) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._exited = trio.Event()
        nursery.start_soon(self._watch)

    async def _watch(self) -> None:
        await wait_exited(self.pid)
        _, status = os.waitpid(self.pid, 0)  # noqa: ASYNC222 (it exited: this reaps at once)
        self.returncode = os.waitstatus_to_exitcode(status)
        self._exited.set()

    async def wait(self) -> int | None:
        await self._exited.wait()
        return self.returncode


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
    zygote: Zygote | None = None
    """The zygote that forked it (None: a fresh interpreter)."""
    proc: trio.Process | _ForkedProcess | None = None
    """Its process handle when it is our own child (a fresh interpreter, or pre-forked)."""
    reason: str | None = None
    """Why the supervisor ended it (a broken protocol rule), if it did."""
    journal: Journal | None = None
    """Records its finished turns (a session journal, a once root's conversation), if any."""


ServeChild = Callable[[str, trio.SocketStream], Awaitable[None]]
"""Serves one child's self-MCP channel until it closes (provided by the supervisor)."""


@dataclass
class _Channels:
    mcp: trio.SocketStream
    control: FrameStream


class Tree:
    """Owns every agent child process and the zygote that forks them.

    Args:
        events: the reactor's channel; :class:`ChildExited`, the control
            channel's requests and :class:`ZygoteStateChanged` go there.
        serve_child: serves a child's self-MCP channel until EOF.
        telemetry: for ``subagent.*`` and ``zygote.*`` events.
        use_zygote: fork from a pre-warmed zygote (fast) or start fresh interpreters only.
        spawn_timeout: bound on one spawn attempt, in seconds (``--spawn-timeout``).
        child_command: how a fresh-interpreter child starts (its two channel
            fds are appended); :data:`CHILD_COMMAND` unless a test starts
            its own child that speaks the same protocol.
        zygote_env: variables added to the zygote's environment (the models it prepares for).
        preforked: a child already forked and waiting for its payload
            (:mod:`agentd.agent.prefork`, a once run's root): the first spawn
            takes it instead of forking a new one.
        forked_zygote: the first zygote, forked from the supervisor before
            trio started (rfcs/0365); a replacement is a fresh interpreter.
    """

    def __init__(
        self,
        *,
        events: trio.MemorySendChannel[ReactorEvent],
        serve_child: ServeChild,
        telemetry: Telemetry,
        use_zygote: bool = True,
        spawn_timeout: float = DEFAULT_SPAWN_TIMEOUT,
        child_command: Sequence[str] = CHILD_COMMAND,
        zygote_env: Mapping[str, str] | None = None,
        preforked: PreforkedChild | None = None,
        forked_zygote: PreforkedZygote | None = None,
        lazy_zygote: bool = False,
    ) -> None:
        self._events = events
        self._serve_child = serve_child
        self._telemetry = telemetry
        self.use_zygote = use_zygote
        self.spawn_timeout = spawn_timeout
        self._child_command = tuple(child_command)
        self._zygote_env = dict(zygote_env or {})
        self.children: dict[str, ChildProc] = {}
        """The children whose channels are open (an exited child leaves: :meth:`_forget`)."""
        self._nursery: trio.Nursery | None = None
        self.zygote: Zygote | None = None
        """The zygote spawns fork from (None while it is being replaced)."""
        self._zygotes: list[Zygote] = []
        """Every zygote process still alive (the current one and retired ones)."""
        self._replacing = False
        self._preforked = preforked
        self._forked_zygote = forked_zygote
        self._lazy_zygote = lazy_zygote and not use_zygote
        """No zygote at start (a once run's root is pre-forked); the first agent a root starts starts one."""
        self._zygote_came = trio.Event()

    @property
    def zygote_pid(self) -> int | None:
        return self.zygote.pid if self.zygote is not None else None

    # -- lifecycle -----------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start the zygote (when enabled) and serve children until cancelled.

        A zygote that cannot start does not stop agentd: children start as
        fresh interpreters while a replacement is retried in the background.
        """
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                if self.use_zygote:
                    try:
                        forked = self._forked_zygote is not None
                        self.zygote = await self._start_zygote()
                        self._telemetry.emit(
                            "zygote.ready", pid=self.zygote.pid, replaced=False, forked=forked
                        )
                    except SpawnFailed as exc:
                        self._degrade(str(exc))
                task_status.started()
                await trio.sleep_forever()
            finally:
                with trio.CancelScope(shield=True):
                    await self._kill_everything()

    async def _start_zygote(self) -> Zygote:
        """Start a zygote and wait for its ``ready``; raises SpawnFailed when it does not come."""
        assert self._nursery is not None
        forked, self._forked_zygote = self._forked_zygote, None
        if forked is not None:
            z = await adopt_zygote(self._nursery, forked, self._forward_stderr)
        else:
            z = await start_zygote(self._nursery, self._zygote_env, self._forward_stderr)
        self._zygotes.append(z)
        self._nursery.start_soon(self._read_zygote, z)
        return z

    async def _read_zygote(self, z: Zygote) -> None:
        while True:
            try:
                msg = await z.ctl.recv(4096)
            except (OSError, trio.ClosedResourceError):  # closed by _kill_zygote / _kill_everything
                msg = b""
            if not msg:
                for send in z.pending.values():
                    with contextlib.suppress(trio.WouldBlock):
                        send.send_nowait(("error", "the zygote exited"))
                z.pending.clear()
                if z.state is ZygoteState.READY:
                    self._retire(z, f"the zygote (pid {z.pid}) exited")
                return
            try:
                self._zygote_said(z, loads(msg))
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, trio.WouldBlock):
                continue  # our own zygote never says this; a garbled message is ignored

    def _zygote_said(self, z: Zygote, said: JSONValue) -> None:
        data = as_object(said)
        if data is None:
            return
        if "spare" in data:
            z.forget_spare()
            spare = get_int(data, "spare")
            if spare is not None:
                with contextlib.suppress(OSError):  # it is gone already: nothing to wait for
                    fd = os.pidfd_open(spare)
                    if parent_of(spare) == z.pid:
                        z.spare = (spare, fd)
                    else:  # it died and its pid was reused before we looked: not ours to kill
                        os.close(fd)
                if z.state is ZygoteState.RETIRED and self._nursery is not None:
                    self._nursery.start_soon(z.kill_spare)  # a retired zygote's spare serves nobody
        elif "spawned" in data:
            pid = get_int(data, "pid")
            z.forget_spare(pid if pid is not None else -1)
            send = z.pending.get(str(data["spawned"]))
            if send is not None and pid is not None:
                send.send_nowait(("spawned", pid))
        elif "error" in data:
            send = z.pending.get(str(data["error"]))
            if send is not None:
                send.send_nowait(("error", str(data.get("message", "spawn failed"))))
        elif "exited" in data:
            child = self.children.get(str(data["exited"]))
            returncode = get_int(data, "returncode")
            if (
                child is not None
                and child.zygote is z
                and child.pid == data.get("pid")
                and returncode is not None
            ):
                child.returncode = returncode
                child.status_known.set()

    def _retire(self, z: Zygote, reason: str) -> None:
        """Stop using ``z`` (READY -> RETIRED); degrade readiness and start a replacement."""
        if z.state is not ZygoteState.READY:
            return
        z.state = ZygoteState.RETIRED
        if self.zygote is z:
            self.zygote = None
        assert self._nursery is not None
        self._nursery.start_soon(z.kill_spare)  # an idle spare of a retired zygote holds a pid for nothing
        self._degrade(reason, pid=z.pid)
        self._reap_retired(z)

    def _degrade(self, reason: str, *, pid: int | None = None) -> None:
        """No zygote to fork from: say so, tell the reactor (readiness), start a replacement."""
        assert self._nursery is not None
        self._telemetry.emit(
            "zygote.degraded", pid=pid, reason=reason, fallback="children start as fresh interpreters"
        )
        self._nursery.start_soon(self._events.send, ZygoteStateChanged(state="degraded", reason=reason))
        if not self._replacing:
            self._replacing = True
            self._nursery.start_soon(self._replace_zygote)

    async def _replace_zygote(self) -> None:
        """Start zygotes until one is ready (backoff between failures)."""
        try:
            for attempt in itertools.count(1):
                try:
                    z = await self._start_zygote()
                except SpawnFailed as exc:
                    delay = ZYGOTE_RESTART_BACKOFF[min(attempt, len(ZYGOTE_RESTART_BACKOFF)) - 1]
                    self._telemetry.emit(
                        "zygote.start_failed", attempt=attempt, error=str(exc), retry_in_s=delay
                    )
                    await trio.sleep(delay)
                    continue
                self.zygote = z
                self._zygote_came.set()
                self._zygote_came = trio.Event()
                self._telemetry.emit("zygote.ready", pid=z.pid, replaced=True, forked=False)
                await self._events.send(ZygoteStateChanged(state="ready"))
                return
        finally:
            self._replacing = False

    def _reap_retired(self, z: Zygote) -> None:
        """Kill a retired zygote once no child it forked is left (RETIRED -> STOPPED)."""
        if z.state is ZygoteState.RETIRED and not z.children and self._nursery is not None:
            z.state = ZygoteState.STOPPED
            self._nursery.start_soon(self._kill_zygote, z)

    async def _kill_zygote(self, z: Zygote) -> None:
        with trio.CancelScope(shield=True):
            z.proc.kill()  # SIGKILL: works on a stopped process too
            z.ctl.close()
            with trio.move_on_after(KILL_TIMEOUT):
                await z.proc.wait()
            await z.kill_spare()
            if z in self._zygotes:
                self._zygotes.remove(z)

    async def _kill_everything(self) -> None:
        """The tree stops: SIGKILL every child left and every zygote; reap the zygotes (bounded).

        By now the run is over (its result written, every agent told to exit
        and given its time by the reactor): nothing a child or a zygote still
        holds is worth a polite wait. A child forked by a zygote dies with it
        (its death signal), and its own process group is killed too.
        """
        # Copies: a child's own task may leave the dict while this runs.
        for child in list(self.children.values()):
            if child.state is not ChildState.EXITED and child.pid is not None:
                _signal_group(child.pid, signal.SIGKILL)
        unused = self._preforked
        if unused is not None:  # the run ended before its root started (a required server failed ...)
            self._preforked = None
            _signal_group(unused.pid, signal.SIGKILL)
            for sock in (unused.mcp, unused.control):
                sock.close()
            os.close(unused.stderr_fd)
            with trio.move_on_after(KILL_TIMEOUT):
                await trio.to_thread.run_sync(os.waitpid, unused.pid, 0, abandon_on_cancel=True)
        zygotes = list(self._zygotes)
        for z in zygotes:
            z.state = ZygoteState.STOPPED
            z.proc.kill()
            z.ctl.close()
        with trio.move_on_after(KILL_TIMEOUT):
            for z in zygotes:
                await z.proc.wait()
            for child in list(self.children.values()):
                if child.proc is not None:  # a fresh interpreter: our own child to reap
                    await child.proc.wait()
        for z in zygotes:
            await z.kill_spare()  # bounded; never outlives the tree
            if z in self._zygotes:
                self._zygotes.remove(z)

    # -- the spawn chokepoint --------------------------------------------------

    def spawn(self, agent: str, payload: SpawnPayload, *, journal: Journal | None = None) -> ChildProc:
        """Start agent child ``agent`` with ``payload`` (never blocks; the I/O runs in a task).

        ``journal`` records its finished turns (when ``payload.journal`` asks the child to send them).
        """
        if self._nursery is None:
            raise RuntimeError("Tree.spawn before Tree.run started")
        if agent in self.children:
            raise ValueError(f"agent id {agent!r} is running already")
        child = ChildProc(agent=agent, spawned_at=trio.current_time(), journal=journal)
        self.children[agent] = child
        self._nursery.start_soon(self._spawn_and_serve, child, payload)
        return child

    async def _spawn_and_serve(self, child: ChildProc, payload: SpawnPayload) -> None:
        try:
            channels = await self._start(child, payload)
        except SpawnFailed as exc:
            child.state = ChildState.EXITED
            child.exited.set()
            self._forget(child)
            self._telemetry.emit("subagent.spawn_failed", agent=child.agent, reason=str(exc))
            await self._events.send(
                ChildExited(
                    agent=child.agent, pid=-1, returncode=None, reason=f"spawn failed: {exc}", spawned=False
                )
            )
            return
        except BaseException:
            child.state = ChildState.EXITED
            child.exited.set()
            self._forget(child)
            self._events.send_nowait(ChildExited(agent=child.agent, pid=-1, returncode=None, spawned=False))
            raise
        # Told to stop while it was starting (its pid was not known in time): stop it now.
        stopping = child.state is ChildState.STOPPING
        child.state = ChildState.RUNNING
        if stopping and self._nursery is not None:
            self._nursery.start_soon(self.terminate, child)
        spawn_s = trio.current_time() - child.spawned_at
        self._telemetry.observe("spawn", spawn_s, how="zygote" if child.zygote is not None else "fresh")
        self._telemetry.emit(
            "subagent.started",
            agent=child.agent,
            pid=child.pid,
            zygote=child.zygote is not None,
            spawn_ms=round(spawn_s * 1000, 3),
        )
        try:
            await self._serve(child, channels)
            # Its exit status is on its way (from the zygote, or our own wait).
            # Not shielded: when the tree is stopping nobody needs it.
            with trio.move_on_after(EXIT_STATUS_WAIT):
                if child.proc is not None:
                    await child.proc.wait()
                    child.returncode = child.proc.returncode
                    child.status_known.set()
                else:
                    await child.status_known.wait()
        finally:
            with trio.CancelScope(shield=True):
                await self._finish(child, channels)

    async def _start(self, child: ChildProc, payload: SpawnPayload) -> _Channels:
        """Start the child: by the zygote if it is usable, else (or if that fails) a fresh interpreter."""
        if self._preforked is not None:
            preforked, self._preforked = self._preforked, None
            return await self._adopt(child, payload, preforked)
        if self._lazy_zygote:
            # One interpreter's start for the zygote, then forks: cheaper than a fresh
            # interpreter per agent when a root fans out.
            self._lazy_zygote = False
            self.use_zygote = True
            if not self._replacing and self._nursery is not None:
                self._replacing = True
                self._nursery.start_soon(self._replace_zygote)
        if self.use_zygote and self.zygote is None and self._replacing:
            with trio.move_on_after(self.spawn_timeout):
                await self._zygote_came.wait()
        z = self.zygote
        if self.use_zygote and z is not None and z.state is ZygoteState.READY:
            try:
                return await self._attempt(child, payload, z)
            except ZygoteUnusable as exc:
                self._retire(z, str(exc))
                self._telemetry.emit("subagent.spawn_fallback", agent=child.agent, reason=str(exc))
        return await self._attempt(child, payload, None)

    async def _attempt(self, child: ChildProc, payload: SpawnPayload, z: Zygote | None) -> _Channels:
        """One bounded spawn attempt: a process that took its payload, or SpawnFailed."""
        mcp_parent, mcp_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        ctl_parent, ctl_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        theirs = (mcp_theirs, ctl_theirs)
        pid: int | None = None
        proc: trio.Process | None = None
        done = False
        try:
            with trio.move_on_after(self.spawn_timeout):
                if z is not None:
                    pid = await z.fork(child.agent, theirs)
                    z.children.add(child.agent)
                else:
                    proc = await self._start_fresh(theirs)
                    pid = proc.pid
                    assert proc.stderr is not None
                    assert self._nursery is not None
                    self._nursery.start_soon(self._forward_stderr, proc.stderr, child.agent)
                for sock in theirs:
                    sock.close()
                mcp = trio.SocketStream(trio.socket.from_stdlib_socket(mcp_parent))
                control = FrameStream(
                    trio.SocketStream(trio.socket.from_stdlib_socket(ctl_parent)),
                    max_line=MAX_CHILD_FRAME_BYTES,
                )
                try:
                    await control.send(payload)
                    mark("tree.payload_sent", child.agent)
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    raise SpawnFailed(
                        f"the child (pid {pid}) exited before taking its spawn payload"
                    ) from exc
                done = True
            if not done:
                if z is not None and pid is None:
                    raise ZygoteUnusable(
                        f"the zygote (pid {z.pid}) did not answer a spawn request within "
                        f"{self.spawn_timeout:g}s (stopped or overloaded)"
                    )
                raise SpawnFailed(
                    f"the child (pid {pid}) did not take its spawn payload within {self.spawn_timeout:g}s"
                )
        finally:
            if not done:
                for sock in (*theirs, mcp_parent, ctl_parent):
                    sock.close()
                if pid is not None:
                    _signal_group(pid, signal.SIGKILL)
                if z is not None:
                    z.children.discard(child.agent)
                    self._reap_retired(z)
                if proc is not None:
                    with trio.CancelScope(shield=True), trio.move_on_after(KILL_TIMEOUT):
                        await proc.wait()
        child.pid, child.zygote, child.proc = pid, z, proc
        child.pid_known.set()
        return _Channels(mcp=mcp, control=control)

    async def _adopt(self, child: ChildProc, payload: SpawnPayload, pre: PreforkedChild) -> _Channels:
        """Hand the pre-forked child its payload (bounded, as any spawn attempt); SpawnFailed if it is gone."""
        assert self._nursery is not None
        proc = _ForkedProcess(pre.pid, self._nursery)
        self._nursery.start_soon(self._forward_stderr, trio.lowlevel.FdStream(pre.stderr_fd), child.agent)
        mcp = trio.SocketStream(trio.socket.from_stdlib_socket(pre.mcp))
        control = FrameStream(
            trio.SocketStream(trio.socket.from_stdlib_socket(pre.control)), max_line=MAX_CHILD_FRAME_BYTES
        )
        done = False
        try:
            with trio.move_on_after(self.spawn_timeout):
                await control.send(payload)
                done = True
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            why = f"the pre-forked child (pid {pre.pid}) exited before taking its spawn payload"
            raise SpawnFailed(why) from exc
        finally:
            if not done:
                _signal_group(pre.pid, signal.SIGKILL)
                await mcp.aclose()
                await control.aclose()
        if not done:
            raise SpawnFailed(
                f"the pre-forked child (pid {pre.pid}) did not take its spawn payload within {self.spawn_timeout:g}s"
            )
        child.pid, child.zygote, child.proc = pre.pid, None, proc
        child.pid_known.set()
        return _Channels(mcp=mcp, control=control)

    async def _start_fresh(self, fds: tuple[socket.socket, socket.socket]) -> trio.Process:
        try:
            return await trio.lowlevel.open_process(
                [*self._child_command, *(str(s.fileno()) for s in fds)],
                pass_fds=tuple(s.fileno() for s in fds),
                start_new_session=True,
                stderr=subprocess.PIPE,
            )
        except (OSError, RuntimeError) as exc:
            # EAGAIN under a pids limit, ENOMEM, a missing interpreter; RuntimeError:
            # trio could not start the worker thread that forks (the same limit).
            raise SpawnFailed(f"could not start a fresh interpreter: {exc}") from None

    async def _forward_stderr(self, stream: trio.abc.ReceiveStream, source: str) -> None:
        """A child's stderr (the zygote's, shared by the agents it forks) as ``child.stderr`` telemetry.

        Children never write to agentd's own stderr: what they print (a crash
        traceback) goes through the bounded, rate-limited telemetry writer,
        and no other process can fill the pipe agentd's telemetry goes to.
        """
        buf = b""
        try:
            async with stream:
                while chunk := await stream.receive_some(65536):
                    buf += chunk
                    *lines, buf = buf.split(b"\n")
                    if len(buf) > STDERR_LINE_CHARS:
                        lines.append(buf)
                        buf = b""
                    for line in lines:
                        if line.strip():
                            text = line.decode(errors="replace")[:STDERR_LINE_CHARS]
                            self._telemetry.emit("child.stderr", source=source, line=text)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        if buf.strip():
            self._telemetry.emit(
                "child.stderr", source=source, line=buf.decode(errors="replace")[:STDERR_LINE_CHARS]
            )

    async def _serve(self, child: ChildProc, channels: _Channels) -> None:
        """Serve both channels until either closes; a broken protocol rule kills the child."""
        async with trio.open_nursery() as nursery:

            async def mcp_side() -> None:
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    await self._serve_child(child.agent, channels.mcp)
                nursery.cancel_scope.cancel()

            async def control_side() -> None:
                try:
                    await serve_control(
                        child.agent,
                        channels.control,
                        events=self._events,
                        telemetry=self._telemetry,
                        journal=child.journal,
                    )
                except ProtocolError as exc:
                    child.reason = f"broke the control protocol: {exc}"
                    if child.pid is not None:
                        _signal_group(child.pid, signal.SIGKILL)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    pass
                nursery.cancel_scope.cancel()

            nursery.start_soon(mcp_side)
            nursery.start_soon(control_side)

    async def _finish(self, child: ChildProc, channels: _Channels) -> None:
        """After the channels closed (or the tree stopped): no process left, ChildExited."""
        await channels.mcp.aclose()
        await channels.control.aclose()
        if child.proc is not None and child.proc.returncode is not None:
            child.returncode = child.proc.returncode
            child.status_known.set()
        if not child.status_known.is_set() and child.pid is not None:
            # Its channels are closed but it has not exited (or its zygote cannot
            # tell us): nothing may outlive its channels.
            _signal_group(child.pid, signal.SIGKILL)
            if child.proc is not None:
                with trio.move_on_after(KILL_TIMEOUT):
                    await child.proc.wait()
                child.returncode = child.proc.returncode
        child.state = ChildState.EXITED
        child.exited.set()
        self._forget(child)
        if child.zygote is not None:
            child.zygote.children.discard(child.agent)
            self._reap_retired(child.zygote)
        await self._events.send(
            ChildExited(
                agent=child.agent, pid=child.pid or -1, returncode=child.returncode, reason=child.reason
            )
        )

    def _forget(self, child: ChildProc) -> None:
        """An exited child leaves :attr:`children` (agent ids are never reused).

        A fresh interpreter whose exit status was never collected (an
        unkillable process) stays, so the tree's last wait still reaps it.
        """
        if child.proc is None or child.proc.returncode is not None:
            self.children.pop(child.agent, None)

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


def _signal_group(pid: int, sig: int) -> None:
    """Signal the child's process group (it leads its own), or the pid if the group is not set up yet."""
    try:
        os.killpg(pid, sig)
        return
    except (ProcessLookupError, PermissionError):
        pass
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


__all__ = [
    "CHILD_COMMAND",
    "DEFAULT_SPAWN_TIMEOUT",
    "ZYGOTE_COMMAND",
    "ChildProc",
    "ChildState",
    "SpawnFailed",
    "Tree",
    "Zygote",
    "ZygoteState",
]
