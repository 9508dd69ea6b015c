"""The zygote: a pre-warmed template process that forks agent children.

A fresh interpreter that imports trio and mcp costs ~430 ms here; a fork of a
process that already did costs a few milliseconds and shares its pages
copy-on-write. The supervisor starts one zygote at startup and asks it for
children over a ``SOCK_SEQPACKET`` control socket:

supervisor → zygote
    one message per spawn: JSON ``{"agent": ID}`` plus, as ``SCM_RIGHTS``,
    the child's end of a fresh socketpair (its private self-MCP channel).
zygote → supervisor
    ``{"ready": PID}`` once warm; ``{"spawned": ID, "pid": PID}`` per fork;
    ``{"exited": ID, "pid": PID, "returncode": RC}`` when it reaps a child
    (negative RC: killed by that signal).

The zygote is plain synchronous Python (it must never run trio: forking a
running event loop is unsafe) and waits in ``selectors`` on the control
socket and a SIGCHLD wakeup pipe: no timers, no polling. Each child gets
``PR_SET_PDEATHSIG(SIGKILL)`` and its own process group: if the supervisor
is SIGKILLed, the
zygote sees its control socket close and exits, and every agent child
(whose death signal is tied to the zygote) dies with it: no orphan survives.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import selectors
import signal
import socket
import sys

import orjson
import trio

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
    import agentd.models
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

    from agentd.selfmcp.protocol import USAGE_TOOL
    from agentd.selfmcp.server import build_server, text_result
    from agentd.selfmcp.transport import stream_transport

    class _Hub:
        def tools_for(self, agent: str) -> list[types.Tool]:
            return [types.Tool(name=USAGE_TOOL, input_schema={"type": "object"})]

        async def call(self, agent: str, name: str, arguments: dict[str, object]) -> types.CallToolResult:
            return text_result('{"continue": true}')

    a, b = trio.socket.socketpair()
    server = build_server("rehearsal", _Hub())
    async with trio.open_nursery() as nursery:

        async def serve() -> None:
            async with stream_transport(trio.SocketStream(a)) as (read, write):
                await server.run(read, write, server.create_initialization_options())

        nursery.start_soon(serve)
        async with Client(stream_transport(trio.SocketStream(b)), mode="2026-07-28", cache=None) as client:
            await client.call_tool(USAGE_TOOL, {"input_tokens": 0})
            await client.call_tool(USAGE_TOOL, {"input_tokens": 0})
        nursery.cancel_scope.cancel()


def _prewarm_specs() -> list[str]:
    specs = orjson.loads(os.environ.get(PREWARM_MODELS_ENV) or "[]")
    return [str(s) for s in specs] if isinstance(specs, list) else []


def prewarm_http() -> None:
    """The HTTP providers' TLS context and transport, and the price database (~0.35 s).

    Done right after the zygote said "ready": the supervisor's start-up goes
    on meanwhile (servers, endpoints), and a spawn request that arrives
    sooner waits at most this long.
    """
    import agentd.models

    agentd.models.prewarm(_prewarm_specs(), sdks=False)


def _child(ctl: socket.socket, fd: int, agent: str) -> None:
    """In the forked child: detach from the zygote's plumbing and run the agent."""
    ctl.close()
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)
    set_pdeathsig()
    os.setpgid(0, 0)
    from agentd.agent.child import read_payload, run_child

    sock = socket.socket(fileno=fd)
    try:
        payload = read_payload(sock)
        rc = run_child(payload, sock)
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
    # The supervisor owns shutdown: a Ctrl-C in the terminal reaches the
    # whole foreground group, and the zygote must not die before the drain.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    agents: dict[int, str] = {}
    sel = selectors.DefaultSelector()
    sel.register(ctl, selectors.EVENT_READ, "ctl")
    sel.register(rpipe, selectors.EVENT_READ, "chld")
    ctl.send(orjson.dumps({"ready": os.getpid()}))
    prewarm_http()
    while True:
        for key, _ in sel.select():
            if key.data == "chld":
                with contextlib.suppress(BlockingIOError):
                    os.read(rpipe, 4096)
                _reap(ctl, agents)
                continue
            try:
                msg, fds, _flags, _addr = socket.recv_fds(ctl, MAX_CONTROL_MESSAGE, 4)
            except ConnectionError:
                msg, fds = b"", []
            if not msg:
                return  # the supervisor is gone: exiting takes the children with us
            req = orjson.loads(msg)
            agent = str(req["agent"])
            if len(fds) != 1:
                for fd in fds:
                    os.close(fd)
                ctl.send(orjson.dumps({"error": agent, "message": "spawn request without exactly one fd"}))
                continue
            pid = os.fork()
            if pid == 0:
                _child(ctl, fds[0], agent)
            os.close(fds[0])
            agents[pid] = agent
            ctl.send(orjson.dumps({"spawned": agent, "pid": pid}))


def _reap(ctl: socket.socket, agents: dict[int, str]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        rc = os.waitstatus_to_exitcode(status)
        agent = agents.pop(pid, "?")
        try:
            ctl.send(orjson.dumps({"exited": agent, "pid": pid, "returncode": rc}))
        except OSError:
            return


def main(argv: list[str] | None = None) -> int:
    """``python -m agentd.agent.zygote FD``."""
    args = sys.argv[1:] if argv is None else argv
    # No PR_SET_PDEATHSIG here: the supervisor starts us from a trio worker
    # thread, and the kernel fires it when that *thread* exits (trio retires
    # idle workers after ~10 s). The control socket's EOF is our signal that
    # the supervisor is gone; exiting then takes every child with us (theirs
    # is tied to our main thread, which forked them).
    ctl = socket.socket(fileno=int(args[0]))
    prewarm()
    serve(ctl)
    # Skip interpreter teardown (~0.2 s of module finalisation): nothing to flush.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main())
