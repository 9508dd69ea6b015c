"""A once run's root child, forked from the supervisor before its event loop starts.

A ``--mode once`` run starts one agent. Starting a zygote for it means a
second interpreter that imports trio, mcp and the agent code (about 1 s, and
~37 MiB of memory that nothing else uses), then a fork. Instead the
supervisor forks the root's process from itself, right after its own imports
and before ``trio.run`` (while it is still single-threaded, so a fork is
safe): the child shares the supervisor's pages copy-on-write and prepares its
provider (imports, TLS context, prices) on the other core while the
supervisor connects its servers. When the reactor spawns the root, the tree
hands this process its spawn payload (:class:`agentd.supervisor.children.tree.Tree`,
``preforked``); from there it is an ordinary child.

The child's plumbing is the zygote's (:mod:`agentd.agent.zygote`): the
child's ends of its MCP and control socketpairs, its own process group, a
death signal tied to the supervisor's main thread, its stderr on a pipe the
supervisor forwards as ``child.stderr`` telemetry. It closes every other
file descriptor it inherited (an upstream server's pipes, agentd's own
stdout), so nothing the supervisor closes is held open by it. If the
supervisor goes away before the payload, the control channel's EOF ends it.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import signal
import socket
import sys
import threading
from dataclasses import dataclass

#: Above any descriptor number in use (``closerange`` closes only open ones, in one system call).
_MAX_FD = 1 << 20

#: How the prefork is switched off (tests of the zygote path in once mode; "0").
PREFORK_ENV = "AGENTD_ONCE_PREFORK"

#: How the zygote's prefork is switched off (tests of a zygote started as a fresh interpreter; "0").
ZYGOTE_PREFORK_ENV = "AGENTD_ZYGOTE_PREFORK"


@dataclass(frozen=True)
class PreforkedChild:
    """The supervisor's ends of a pre-forked child (it waits for its spawn payload)."""

    pid: int
    mcp: socket.socket
    control: socket.socket
    stderr_fd: int
    """Read end of the pipe the child's stderr goes to."""


@dataclass(frozen=True)
class PreforkedZygote:
    """The supervisor's ends of a zygote forked from it (rfcs/0365)."""

    pid: int
    control: socket.socket
    """The supervisor's end of the zygote's ``SOCK_SEQPACKET`` control socket."""
    stderr_fd: int
    """Read end of the pipe the zygote's stderr goes to."""


def prefork_zygote(model_specs: list[str]) -> PreforkedZygote | None:
    """Fork the first zygote from this process; None when forking here is not safe or is switched off.

    The same rule as :func:`prefork_root`: before any thread starts. The
    zygote inherits every module the supervisor imported (trio, the MCP SDK,
    agentd), so it skips a fresh interpreter's start and imports; it then
    warms up and serves exactly as a zygote started with
    ``python -P -m agentd.agent.zygote`` does (:func:`agentd.agent.zygote.run`).
    A replacement zygote is always a fresh interpreter.
    """
    if threading.active_count() != 1 or os.environ.get(ZYGOTE_PREFORK_ENV) == "0":
        return None
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    err_read, err_write = os.pipe2(os.O_CLOEXEC)
    parent = os.getpid()
    _import_shared()
    for stream in (
        sys.stdout,
        sys.stderr,
    ):  # nothing buffered here is written twice (the zygote flushes at exit)
        with contextlib.suppress(Exception):
            stream.flush()
    gc.freeze()
    try:
        pid = os.fork()
    except OSError:
        ours.close()
        theirs.close()
        os.close(err_read)
        os.close(err_write)
        return None
    if pid == 0:  # pragma: no cover - runs in the forked zygote, which never returns
        _zygote(parent, theirs.detach(), err_write, model_specs)
    theirs.close()
    os.close(err_write)
    return PreforkedZygote(pid=pid, control=ours, stderr_fd=err_read)


def _zygote(parent: int, control_fd: int, stderr_fd: int, model_specs: list[str]) -> None:  # pragma: no cover
    """In the forked zygote: what ``python -P -m agentd.agent.zygote`` would have, then serve."""
    rc = 0
    try:
        # The descriptors a zygote started by Popen has: stdin and stdout inherited,
        # stderr on the pipe the supervisor forwards, its control socket; no other.
        os.dup2(stderr_fd, 2)
        os.closerange(3, control_fd)
        os.closerange(control_fd + 1, _MAX_FD)
        # A fresh interpreter's dispositions (the supervisor has set none before trio runs).
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        from agentd.agent.zygote import PREWARM_MODELS_ENV, run, set_pdeathsig
        from agentd.core.prelaunch import retitle

        set_pdeathsig()
        if os.getppid() != parent:
            os._exit(0)  # the supervisor died before the death signal was set
        os.setsid()  # a session of its own, as the supervisor starts a fresh zygote (start_new_session)
        if not sys.flags.safe_path and sys.path:
            del sys.path[0]  # what -P leaves out: the script's folder or the working directory (rfcs/0114)
        os.environ[PREWARM_MODELS_ENV] = json.dumps(model_specs)
        # Not the supervisor's command line (its servers' commands, which `pkill -f` matches).
        retitle(f"agentd.agent.zygote (forked from agentd pid {parent})", name=b"agentd-zygote")
        run(socket.socket(fileno=control_fd))
    except BaseException as exc:
        print(f"agentd zygote (forked): {type(exc).__name__}: {exc}", file=sys.stderr)
        rc = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(rc)


def prefork_root(model_specs: list[str]) -> PreforkedChild | None:
    """Fork the child that will run the once root; None when forking here is not safe.

    Must be called before any thread starts (a fork copies only the calling
    thread: a lock another thread held would stay held in the child).
    ``model_specs`` are the models it prepares for before its payload arrives.
    """
    if threading.active_count() != 1 or os.environ.get(PREFORK_ENV) == "0":
        return None
    mcp_parent, mcp_child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ctl_parent, ctl_child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    err_read, err_write = os.pipe2(os.O_CLOEXEC)
    parent = os.getpid()
    _import_shared()
    # Objects that exist now are never traversed by the child's collector, so the
    # pages holding them stay shared instead of being copied on the first collection.
    # They stay frozen here too: start-up state, alive for the process's life (rfcs/0367).
    gc.freeze()
    try:
        pid = os.fork()
    except OSError:
        for s in (mcp_parent, mcp_child, ctl_parent, ctl_child):
            s.close()
        os.close(err_read)
        os.close(err_write)
        return None
    if pid == 0:  # pragma: no cover - runs in the forked child, which never returns
        _child(parent, mcp_child.detach(), ctl_child.detach(), err_write, model_specs)
    mcp_child.close()
    ctl_child.close()
    os.close(err_write)
    return PreforkedChild(pid=pid, mcp=mcp_parent, control=ctl_parent, stderr_fd=err_read)


#: Modules both processes import lazily once running (the MCP SDK's tool
#: result validation, anyio's trio backend): imported here, before the fork,
#: their pages are shared instead of built twice (rfcs/0225).
SHARED_LAZY_IMPORTS = (
    "anyio._backends._trio",
    "anyio.streams.stapled",
    "anyio.streams.tls",
    "jsonschema.exceptions",
    "jsonschema.validators",
)


def _import_shared() -> None:
    """Import :data:`SHARED_LAZY_IMPORTS` (a module that is missing is skipped: the run imports it or not)."""
    import importlib

    for name in SHARED_LAZY_IMPORTS:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


def _child(  # pragma: no cover - runs in the forked child
    parent: int, mcp_fd: int, control_fd: int, stderr_fd: int, model_specs: list[str]
) -> None:
    """In the forked child: keep only its own fds, prepare, take the payload, run the agent."""
    rc = 1
    try:
        os.dup2(stderr_fd, 2)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)  # agentd's stdout carries the result: never a child's stray print
        low, high = sorted((mcp_fd, control_fd))
        os.closerange(3, low)
        os.closerange(low + 1, high)
        os.closerange(high + 1, _MAX_FD)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        from agentd.agent.zygote import set_pdeathsig

        set_pdeathsig()
        if os.getppid() != parent:
            os._exit(0)  # the supervisor died before the death signal was set
        os.setpgid(0, 0)
        # Only a head start: what fails here (a cloud SDK's session over a bad
        # AWS_PROFILE) fails again in the run, which reports it properly (exit 4).
        with contextlib.suppress(Exception):
            _prepare(model_specs)
        from agentd.agent.child import read_spawn_payload, run_child

        mcp_sock = socket.socket(fileno=mcp_fd)
        control_sock = socket.socket(fileno=control_fd)
        payload = read_spawn_payload(control_sock)
        rc = run_child(payload, mcp_sock, control_sock)
    except EOFError:
        rc = 0  # the supervisor went away (or did not need us) before the payload
    except BaseException as exc:
        print(f"agentd child (preforked root): {type(exc).__name__}: {exc}", file=sys.stderr)
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(rc)


def _prepare(model_specs: list[str]) -> None:  # pragma: no cover - runs in the forked child
    """What the zygote does before forking, here while the supervisor connects its servers."""
    import trio

    import agentd.agent.child
    import agentd.agent.loop
    import agentd.models
    import agentd.selfmcp.transport
    from agentd.agent.zygote import _rehearse
    from agentd.models.rehearsal import rehearse

    agentd.models.prewarm(model_specs)
    trio.run(_rehearse)
    trio.run(rehearse, model_specs)


__all__ = [
    "PREFORK_ENV",
    "ZYGOTE_PREFORK_ENV",
    "PreforkedChild",
    "PreforkedZygote",
    "prefork_root",
    "prefork_zygote",
]
