"""The zygote: a pre-warmed template process that forks agent children.

A fresh interpreter that imports trio and mcp costs ~430 ms here; a fork of a
process that already did costs a few milliseconds and shares its pages
copy-on-write. The supervisor starts one zygote at startup (and a new one
whenever the current one stops answering) and asks it for children over a
``SOCK_SEQPACKET`` control socket:

supervisor → zygote
    one message per spawn: JSON ``{"agent": ID}`` plus, as ``SCM_RIGHTS``,
    the child's ends of its two fresh socketpairs (its MCP channel, then its
    control channel).
zygote → supervisor
    ``{"ready": PID}`` once warm; ``{"spare": PID}`` per spare child forked
    (rfcs/0230); ``{"spawned": ID, "pid": PID}`` per spawn (a fork, or the spare);
    ``{"error": ID, "errno": N, "message": TEXT}`` when a spawn failed (a
    ``fork()`` refused by the kernel, e.g. EAGAIN under a pids limit: the
    zygote reports it and keeps serving); ``{"exited": ID, "pid": PID,
    "returncode": RC}`` when it reaps a child (negative RC: killed by that signal).

The zygote is plain synchronous Python (it must never run trio: forking a
running event loop is unsafe) and waits in ``selectors`` on the control
socket, a SIGCHLD wakeup pipe and its children's release sockets: no
timers, no polling.

**The spare** (rfcs/0230). A forked child's first pass over its start-up
path copies ~1,600 pages it shares with the zygote (6-8 ms of CPU). So the
zygote keeps one child forked ahead of need, which has run that path once
without I/O (:func:`agentd.agent.child.warm_start`) and waits on a private
socketpair; a spawn request's two fds go to it, and the answer is its pid.
Each child closes its end of a socket to the zygote after its first model
call (or exits): only then is the next spare forked, so its warm-up never
competes with a request. Without a spare the zygote forks as before. The supervisor
starts it in a session of its own, so a signal sent to the supervisor's
process group (a terminal's Ctrl-C, ``kill -- -PGID``, systemd's
``KillMode=control-group``, ``tini -g``) reaches the supervisor only, which
then drains. Each child gets ``PR_SET_PDEATHSIG(SIGKILL)`` and its own
process group: if the supervisor is SIGKILLed, the zygote sees its control
socket close and exits, and every agent child (whose death signal is tied to
the zygote) dies with it: no orphan survives.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import selectors
import signal
import socket
import sys

import orjson
import trio

from agentd.observe.timeline import mark

_PR_SET_PDEATHSIG = 1

#: Largest control message (spawn requests are tiny: the payload travels on the child's own socket).
MAX_CONTROL_MESSAGE = 4096


def set_pdeathsig(sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent thread dies (Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: best effort
        pass


#: Environment variable naming the model specs the children will use (a JSON
#: list), so the zygote prepares their providers before it forks.
PREWARM_MODELS_ENV = "AGENTD_PREWARM_MODELS"


def prewarm() -> None:
    """Import everything a child needs, so forks inherit it for free."""
    import mcp
    import mcp.client.client  # noqa: F401
    import mcp_types  # noqa: F401

    import agentd.agent.child
    import agentd.agent.loop
    import agentd.agent.transcript
    import agentd.models
    import agentd.observe.tracing
    import agentd.selfmcp.transport

    # A cloud SDK (bedrock:/vertex:) takes seconds to import: before "ready",
    # where the supervisor's generous start-up bound applies, never in a spawn.
    agentd.models.prewarm(_prewarm_specs(), http=False)

    # The SDK does much of its work lazily (imports, pydantic validators built
    # on first use): one in-process self-MCP exchange here makes every forked
    # child start with that work already done.
    trio.run(_rehearse)


async def _rehearse() -> None:
    import mcp_types as types
    from mcp import Client

    from agentd.selfmcp import protocol
    from agentd.selfmcp.server import build_server, text_result
    from agentd.selfmcp.transport import stream_transport

    class _Hub:
        def tools_for(self, agent: str) -> list[types.Tool]:
            return [types.Tool(name="rehearsal", input_schema={"type": "object"})]

        async def call(self, agent: str, name: str, arguments: dict[str, object]) -> types.CallToolResult:
            return text_result("{}")

    # The control frames' validators are built lazily too.
    for frame in (
        protocol.UsageReport(id=1, input_tokens=0, output_tokens=0),
        protocol.TurnEnd(id=2, status="completed", text="", idle=True),
        protocol.ChildEvent(event="model.retry", fields={"attempt": 1}),
    ):
        protocol.parse_child_frame(protocol.encode(frame)[:-1])
    for answer in (
        protocol.UsageVerdict(id=1, proceed=True),
        protocol.NextTurn(id=2, action="exit"),
        protocol.SpawnPayload(agent="a", model="script:x", instruction=""),
    ):
        protocol.parse_supervisor_frame(protocol.encode(answer)[:-1])

    a, b = trio.socket.socketpair()
    server = build_server("rehearsal", _Hub())
    async with trio.open_nursery() as nursery:

        async def serve() -> None:
            async with stream_transport(trio.SocketStream(a)) as (read, write):
                await server.run(read, write, server.create_initialization_options())

        nursery.start_soon(serve)
        async with Client(stream_transport(trio.SocketStream(b)), mode="2026-07-28", cache=None) as client:
            await client.call_tool("rehearsal", {"input_tokens": 0})
            await client.call_tool("rehearsal", {"input_tokens": 0})
        nursery.cancel_scope.cancel()


def _prewarm_specs() -> list[str]:
    specs = orjson.loads(os.environ.get(PREWARM_MODELS_ENV) or "[]")
    return [str(s) for s in specs] if isinstance(specs, list) else []


def prewarm_http() -> None:
    """The HTTP providers' TLS context and transport, the price database, one rehearsed call (~0.4 s).

    Done right after the zygote said "ready": the supervisor's start-up goes
    on meanwhile (servers, endpoints), and a spawn request that arrives
    sooner waits at most this long.
    """
    import agentd.models
    from agentd.models.rehearsal import rehearse

    agentd.models.prewarm(_prewarm_specs(), sdks=False)
    # One loopback model call per wire API: a child's first real call runs warm.
    # trio.run installs its own signal wakeup fd: lend it ours' place meanwhile
    # (no child exists yet, so no SIGCHLD can be missed) and take it back after.
    wakeup = signal.set_wakeup_fd(-1)
    try:
        trio.run(rehearse, _prewarm_specs())
    finally:
        signal.set_wakeup_fd(wakeup)


def _detach(ctl: socket.socket, held: list[socket.socket]) -> None:
    """In a forked process: leave the zygote's plumbing (its sockets, signals), own group."""
    ctl.close()
    for sock in held:
        sock.close()
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)
    set_pdeathsig()
    os.setpgid(0, 0)


def _child(
    ctl: socket.socket, held: list[socket.socket], fds: list[int], release: socket.socket, agent: str
) -> None:
    """In a child forked for a spawn request: detach from the zygote's plumbing and run the agent."""
    mark("child.forked", agent)
    _detach(ctl, held)
    _run(fds[0], fds[1], release, agent)


class _Spare:
    """A child forked ahead of need: it has paid its copy-on-write faults and waits for its agent.

    ``sock`` is the zygote's end of their private socketpair: the spawn
    request's fds travel over it, and once the spare is an agent it closes its
    end after its first model call (or exits): the zygote then forks the next
    spare, when its warm-up no longer competes with that first request.
    """

    def __init__(self, pid: int, sock: socket.socket) -> None:
        self.pid = pid
        self.sock = sock
        self.ready = False
        """It said its warm-up is done (until then a spawn request forks directly)."""


def _fork_spare(ctl: socket.socket, held: list[socket.socket]) -> _Spare | None:
    """Fork a spare (None: the kernel refused the fork; the next spawn forks directly)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    gc.freeze()  # what the zygote allocated since the last fork stays shared too
    try:
        pid = os.fork()
    except OSError:
        ours.close()
        theirs.close()
        return None
    if pid == 0:
        try:
            ours.close()
            _spare(ctl, held, theirs, os.getppid())
        finally:
            os._exit(1)  # never back into the zygote's loop, never its interpreter teardown
    theirs.close()
    return _Spare(pid, ours)


def _spare(ctl: socket.socket, held: list[socket.socket], sock: socket.socket, zygote: int) -> None:
    """In a spare: detach, warm up the child's start-up path, wait for an agent, run it."""
    _detach(ctl, held)
    if os.getppid() != zygote:
        os._exit(0)  # the zygote died before the death signal was set
    from agentd.agent.child import warm_start

    # Only a head start: whatever fails here runs (and fails properly) in the agent.
    with contextlib.suppress(Exception):
        warm_start(_prewarm_specs())
    try:
        sock.send(b"ready")
        msg, fds, _flags, _addr = socket.recv_fds(sock, MAX_CONTROL_MESSAGE, 2)
    except OSError:
        msg, fds = b"", []
    agent = _agent_of(msg) if msg else None
    if agent is None or len(fds) != 2:
        os._exit(0)  # the zygote is gone: never an agent
    mark("child.assigned", agent)
    _run(fds[0], fds[1], sock, agent)


def _run(mcp_fd: int, control_fd: int, release: socket.socket, agent: str) -> None:
    """Take the spawn payload and run the agent (``release`` closed after its first model call)."""
    from agentd.agent.child import read_spawn_payload, run_child

    mcp_sock = socket.socket(fileno=mcp_fd)
    control_sock = socket.socket(fileno=control_fd)
    try:
        payload = read_spawn_payload(control_sock)
        mark("child.payload", agent)
        rc = run_child(payload, mcp_sock, control_sock, release=release.close)
    except BaseException as exc:
        print(f"agentd child {agent}: {type(exc).__name__}: {exc}", file=sys.stderr)
        rc = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)


def serve(ctl: socket.socket) -> None:
    """Fork children on request until the supervisor closes the control socket."""
    rpipe, wpipe = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wpipe)
    # A handler (not SIG_IGN) so SIGCHLD is delivered and wakes the pipe.
    signal.signal(signal.SIGCHLD, lambda *_: None)
    # The supervisor owns shutdown. It starts us in a session of our own, so
    # a terminal's Ctrl-C does not reach us; ignoring SIGINT keeps that true
    # for a zygote someone started in the foreground by hand.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    agents: dict[int, str] = {}
    #: Our ends of the release sockets of agents before their first model call
    #: (and of the spare): no forked process keeps a copy.
    held: list[socket.socket] = []
    sel = selectors.DefaultSelector()
    sel.register(ctl, selectors.EVENT_READ, "ctl")
    sel.register(rpipe, selectors.EVENT_READ, "chld")
    ctl.send(orjson.dumps({"ready": os.getpid()}))
    prewarm_http()
    # Every object that exists now is the template's: frozen, it is never traversed
    # by a child's collector (nor ours), so a child's first collections cost
    # microseconds instead of walking (and copying the pages of) the whole heap.
    gc.collect()
    gc.freeze()
    spare: _Spare | None = None

    def new_spare() -> _Spare | None:
        forked = _fork_spare(ctl, held)
        if forked is not None:
            held.append(forked.sock)
            sel.register(forked.sock, selectors.EVENT_READ, "spare")
            _send(ctl, {"spare": forked.pid})  # the supervisor makes sure it never outlives the tree
        return forked

    def drop(sock: socket.socket) -> None:
        with contextlib.suppress(KeyError, ValueError):
            sel.unregister(sock)
        with contextlib.suppress(ValueError):
            held.remove(sock)
        sock.close()

    spare = new_spare()
    while True:
        for key, _ in sel.select():
            if key.data == "chld":
                with contextlib.suppress(BlockingIOError):
                    os.read(rpipe, 4096)
                unused = _reap(ctl, agents)
                if spare is not None and spare.pid in unused:
                    drop(spare.sock)
                    spare = None  # it died unused: the next spawn forks directly
                continue
            if key.data == "spare":
                if spare is None or key.fileobj is not spare.sock:
                    continue  # stale: it was dropped or handed over earlier in this batch
                try:
                    said = spare.sock.recv(16)
                except OSError:
                    said = b""
                if said:
                    spare.ready = True
                else:
                    drop(spare.sock)  # it died before its warm-up ended
                    spare = None
                continue
            if key.data == "release":
                # An agent made its first model call (or exited): warm the next spare now.
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                drop(sock)
                if spare is None:
                    spare = new_spare()
                continue
            try:
                msg, fds, _flags, _addr = socket.recv_fds(ctl, MAX_CONTROL_MESSAGE, 4)
            except ConnectionError:
                msg, fds = b"", []
            if not msg:
                return  # the supervisor is gone: exiting takes the children with us
            agent = _agent_of(msg)
            mark("zygote.request", agent or "")
            if len(fds) != 2 or agent is None:
                for fd in fds:
                    os.close(fd)
                _send(
                    ctl,
                    {"error": agent, "errno": 0, "message": "spawn request needs an agent id and two fds"},
                )
                continue
            got: tuple[int, socket.socket] | None = None
            if spare is not None and spare.ready:
                # A spare still warming is kept for the next request: this one forks directly.
                sel.unregister(spare.sock)
                got = _hand_over(spare, msg, fds)
                if got is None:
                    drop(spare.sock)  # it died unused: reaped as a spare
                spare = None
            if got is None:
                release, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                try:
                    pid = os.fork()
                except OSError as exc:
                    # EAGAIN under a pids limit, ENOMEM: report it and keep serving;
                    # the supervisor decides (a fresh interpreter, or a new zygote).
                    for fd in fds:
                        os.close(fd)
                    release.close()
                    theirs.close()
                    _send(ctl, {"error": agent, "errno": exc.errno, "message": f"fork failed: {exc}"})
                    continue
                if pid == 0:
                    try:
                        release.close()
                        _child(ctl, held, fds, theirs, agent)
                    finally:
                        os._exit(1)  # never back into the zygote's loop, never its interpreter teardown
                theirs.close()
                held.append(release)
                got = (pid, release)
            pid, release = got
            sel.register(release, selectors.EVENT_READ, "release")
            for fd in fds:
                os.close(fd)
            agents[pid] = agent
            _send(ctl, {"spawned": agent, "pid": pid})


def _hand_over(spare: _Spare | None, msg: bytes, fds: list[int]) -> tuple[int, socket.socket] | None:
    """Give the spawn request's fds to ``spare``: its pid and release socket, or None (none, or it died)."""
    if spare is None:
        return None
    try:
        socket.send_fds(spare.sock, [msg], fds)
    except OSError:
        return None
    return spare.pid, spare.sock


def _agent_of(msg: bytes) -> str | None:
    try:
        req = orjson.loads(msg)
    except orjson.JSONDecodeError:
        return None
    agent = req.get("agent") if isinstance(req, dict) else None
    return agent if isinstance(agent, str) else None


def _send(ctl: socket.socket, msg: dict[str, object]) -> None:
    with contextlib.suppress(OSError):
        ctl.send(orjson.dumps(msg))


def _reap(ctl: socket.socket, agents: dict[int, str]) -> set[int]:
    """Reap exited children and report the agents among them; returns the others' pids (spares)."""
    unused: set[int] = set()
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return unused
        if pid == 0:
            return unused
        agent = agents.pop(pid, None)
        if agent is None:
            unused.add(pid)  # a spare that never got an agent: nothing to report
            continue
        rc = os.waitstatus_to_exitcode(status)
        try:
            ctl.send(orjson.dumps({"exited": agent, "pid": pid, "returncode": rc}))
        except OSError:
            return unused


def main(argv: list[str] | None = None) -> int:
    """``python -P -m agentd.agent.zygote FD SUPERVISOR_PID``."""
    args = sys.argv[1:] if argv is None else argv
    # Two ways to learn that the supervisor is gone, and either takes every
    # child with us (their death signal is tied to our main thread, which
    # forked them): the control socket's EOF, and a death signal. The kernel
    # fires PR_SET_PDEATHSIG when the *thread* that forked us exits; the
    # supervisor forks us from its main thread, which lives as long as it
    # does. SIGKILL reaches us even while we are stopped, when no EOF can.
    set_pdeathsig()
    if len(args) > 1 and os.getppid() != int(args[1]):
        os._exit(0)  # the supervisor died before the death signal was set
    run(socket.socket(fileno=int(args[0])))
    # Skip interpreter teardown (~0.2 s of module finalisation): nothing to flush.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run(ctl: socket.socket) -> None:
    """Warm up and serve ``ctl`` until the supervisor closes it (a fresh zygote, or one forked from the supervisor)."""
    prewarm()
    serve(ctl)


if __name__ == "__main__":
    raise SystemExit(main())
