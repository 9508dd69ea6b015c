"""Stdio servers launched before agentd's own heavy imports, adopted by their connection later.

A stdio MCP server is usually an interpreter that imports its SDK (~0.5-1.5 s
here), and agentd's own imports (trio, the MCP SDK, pydantic models) take as
long. Launched one after the other, a run waits for both; so the ``agentd``
command starts every stdio server as soon as the configuration is valid
(:func:`launch`, which needs only the standard library) and imports the rest
while the servers start. The first connection of each server then adopts its
process (:meth:`EarlyProcess.adopt`, inside trio) instead of starting one:
the same command, arguments, environment and working directory, its own
session, pipes on all three standard streams, exactly as
:class:`agentd.upstream.stdio.StdioTransport` would have started it.
Reconnects start their processes as before.

A launch that fails (a missing command) is forgotten: the connection's own
start then fails with its usual message. A process that is never adopted
(the run ended first) is killed by :meth:`EarlyProcess.discard`.

**agentd's own servers are forked, not launched** (rfcs/0366). A server
whose command is this interpreter running ``-m agentd serve NAME`` or
``-m agentd.servers NAME`` (what ``command = "agentd"`` becomes) would spend
~0.7-1.2 s of CPU importing the MCP SDK that the supervisor has just
imported. So the ``agentd`` command leaves those out of the early launch,
and the supervisor forks them from itself after its imports and before
trio starts (:func:`fork_server`, while it is single-threaded): the child
takes the pipes, session, working directory, environment and signal
dispositions an exec'd server would have, shows the same command line, and
runs the module as ``python -m`` would. Its connection adopts it like any
early process. Reconnects start their processes as before (exec).
``AGENTD_SERVER_PREFORK=0`` switches the fork off, and a server whose ``env``
sets a ``PYTHON*`` variable is always exec'd (those act when an interpreter
starts, which a fork does not).

**A server that listens on a network port is never forked** (ARCHITECTURE
decision 21, rfcs/0375): the webhook server (its intake always listens) and
any server given ``--http`` or ``--listen``. A fork holds a copy of the
supervisor's memory, its settings and the model's API key included; such a
server faces whoever can reach its port, so it is launched by exec like any
other command, with only the environment it was given.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NoReturn, Protocol

if TYPE_CHECKING:
    from typing import IO

    import trio
    from trio.abc import ReceiveStream, SendStream

#: The variables a stdio server inherits from agentd's environment (the MCP SDK's
#: POSIX list, ``mcp.client.stdio.DEFAULT_INHERITED_ENV_VARS``; a test checks they agree).
INHERITED_ENV_VARS = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")


#: Passed on top of :data:`INHERITED_ENV_VARS`: a server behind a corporate proxy or a private
#: CA needs them to reach the network (``npx``/``uvx`` fetch packages at start-up), and none of
#: them is a credential agentd holds for itself. A server's own ``env`` overrides them.
PASSED_ENV = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "PIP_CERT",
    "UV_NATIVE_TLS",
    "LANG",
    "LC_ALL",
    "TZ",
)


def server_environment(
    extra: Mapping[str, str] | None, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """A server's environment: the inherited safe variables, the proxy and CA settings, then its ``env``."""
    environ = os.environ if environ is None else environ
    env = {k: v for k in INHERITED_ENV_VARS if (v := environ.get(k)) is not None and not v.startswith("()")}
    passed = {k: v for k in PASSED_ENV if (v := environ.get(k))}
    return env | passed | dict(extra or {})


class ChildProcess(Protocol):
    """The parts of ``trio.Process`` the stdio transport uses (an adopted early process has them too)."""

    @property
    def pid(self) -> int: ...
    @property
    def stdin(self) -> SendStream | None: ...
    @property
    def stdout(self) -> ReceiveStream | None: ...
    @property
    def stderr(self) -> ReceiveStream | None: ...
    @property
    def returncode(self) -> int | None: ...
    async def wait(self) -> int: ...


class _Popen(Protocol):
    """What :class:`EarlyProcess` uses of ``subprocess.Popen`` (a forked server has it too)."""

    @property
    def pid(self) -> int: ...
    @property
    def stdin(self) -> IO[bytes] | None: ...
    @property
    def stdout(self) -> IO[bytes] | None: ...
    @property
    def stderr(self) -> IO[bytes] | None: ...
    @property
    def returncode(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...


class EarlyProcess:
    """A server process started before trio (a ``subprocess.Popen``), until its connection adopts it."""

    def __init__(self, popen: _Popen, command: str, args: Sequence[str], *, forked: bool = False) -> None:
        self._popen = popen
        self.forked = forked
        """Forked from the supervisor (:func:`fork_server`), not launched by exec (:func:`launch`)."""
        self.pid = popen.pid
        self.command = command
        self.args = list(args)
        self._adopted = False

    def matches(self, command: str, args: Sequence[str]) -> bool:
        """Whether this is the process a transport for ``command args`` would start."""
        return (command, list(args)) == (self.command, self.args)

    def adopt(self) -> ChildProcess:
        """The process as the transport uses it (``trio.Process``'s surface); call once, inside trio."""
        assert not self._adopted, "an early process is adopted once"
        self._adopted = True
        return _Adopted(self._popen)

    def discard(self) -> None:
        """Kill it (and its process group) if no connection adopted it."""
        if self._adopted:
            return
        self._adopted = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self._popen.wait(timeout=2.0)
        for stream in (self._popen.stdin, self._popen.stdout, self._popen.stderr):
            if stream is not None:
                stream.close()


def launch(
    command: str, args: Sequence[str], *, env: Mapping[str, str] | None, cwd: str | None
) -> EarlyProcess | None:
    """Start a stdio server now, as its transport would; None if it cannot start (the transport says why)."""
    try:
        popen = subprocess.Popen(
            [command, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=server_environment(env),
            cwd=cwd,
            start_new_session=True,
        )
    except (OSError, ValueError):
        return None
    return EarlyProcess(popen, command, args)


class _Adopted:
    """A ``subprocess.Popen`` with the parts of ``trio.Process`` the stdio transport uses."""

    def __init__(self, popen: _Popen) -> None:
        import trio

        self._popen = popen
        self.pid = popen.pid
        streams = []
        for stream in (popen.stdin, popen.stdout, popen.stderr):
            assert stream is not None
            streams.append(trio.lowlevel.FdStream(os.dup(stream.fileno())))
            stream.close()
        self.stdin, self.stdout, self.stderr = streams
        self._waiter: trio.Event | None = None

    @property
    def returncode(self) -> int | None:
        return self._popen.returncode

    async def wait(self) -> int:
        """Wait for the process to exit (any number of waiters); its exit status."""
        import trio

        while self._popen.returncode is None:
            if self._waiter is not None:
                await self._waiter.wait()
                continue
            self._waiter = done = trio.Event()
            try:
                pidfd = os.pidfd_open(self.pid)
                try:
                    await trio.lowlevel.wait_readable(pidfd)
                finally:
                    os.close(pidfd)
                self._popen.wait()  # it exited: this reaps at once
            finally:
                self._waiter = None
                done.set()
        return self._popen.returncode


#: How forking agentd's own servers is switched off ("0": they are exec'd like any server).
SERVER_PREFORK_ENV = "AGENTD_SERVER_PREFORK"

#: The modules whose ``python -m`` run is one of agentd's own servers, with the argument
#: that must follow (``agentd serve NAME``; ``agentd.servers NAME`` needs none).
_OWN_SERVER_MODULES = {"agentd": "serve", "agentd.servers": None}

#: agentd's own servers that always listen on a network port (the webhook server's intake).
_NETWORK_SERVERS = frozenset({"webhook"})

#: Flags that make one of agentd's own servers listen on a network port.
_NETWORK_FLAGS = ("--http", "--listen")

#: Above any descriptor number in use (``closerange`` closes only open ones, in one system call).
_MAX_FD = 1 << 20


def forkable(command: str, args: Sequence[str], env: Mapping[str, str] | None, cwd: str | None) -> bool:
    """Whether this stdio server is agentd's own and may be forked from the supervisor (rfcs/0366).

    Its command must be this very interpreter (what ``command = "agentd"``
    becomes), running ``-m agentd serve NAME`` or ``-m agentd.servers NAME``;
    it must not listen on a network port (:func:`faces_network`); its ``env``
    must set no ``PYTHON*`` variable (they act at an interpreter's start) and
    its ``cwd``, if any, must be a directory (else the exec'd start reports
    the error as usual).
    """
    if os.environ.get(SERVER_PREFORK_ENV) == "0" or command != sys.executable or len(args) < 3:
        return False
    if args[0] != "-m" or args[1] not in _OWN_SERVER_MODULES:
        return False
    needed = _OWN_SERVER_MODULES[args[1]]
    if needed is not None and args[2] != needed:
        return False
    if faces_network(args):
        return False
    if any(key.startswith("PYTHON") for key in env or {}):
        return False
    return cwd is None or os.path.isdir(cwd)


def faces_network(args: Sequence[str]) -> bool:
    """Whether ``-m agentd serve NAME ARGS`` (or ``-m agentd.servers NAME ARGS``) listens on a network
    port: the webhook server always does, any server with ``--http`` or ``--listen`` does."""
    rest = list(args[2:])
    if rest and rest[0] == "serve":
        rest = rest[1:]
    if rest and rest[0] in _NETWORK_SERVERS:
        return True
    return any(arg == flag or arg.startswith(f"{flag}=") for arg in rest for flag in _NETWORK_FLAGS)


class _Forked:
    """A server forked from this process, with the parts of ``subprocess.Popen`` :class:`EarlyProcess` uses."""

    def __init__(self, pid: int, stdin: int, stdout: int, stderr: int) -> None:
        self.pid = pid
        self.stdin: IO[bytes] | None = os.fdopen(stdin, "wb", buffering=0)
        self.stdout: IO[bytes] | None = os.fdopen(stdout, "rb", buffering=0)
        self.stderr: IO[bytes] | None = os.fdopen(stderr, "rb", buffering=0)
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        """Reap it (our own child); ``timeout`` bounds the wait (``subprocess.TimeoutExpired``)."""
        if self.returncode is None:
            if timeout is not None:
                pidfd = os.pidfd_open(self.pid)
                try:
                    if not select.select([pidfd], [], [], timeout)[0]:
                        raise subprocess.TimeoutExpired(str(self.pid), timeout)
                finally:
                    os.close(pidfd)
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


def fork_server(
    command: str, args: Sequence[str], *, env: Mapping[str, str] | None, cwd: str | None
) -> EarlyProcess | None:
    """Fork one of agentd's own servers (:func:`forkable`) from this process; None if it could not be.

    Call only while this process has one thread (a fork copies only the
    calling thread) and after its imports (the child inherits them). The
    child is what ``Popen([command, *args], stdin/stdout/stderr=PIPE,
    env=server_environment(env), cwd=cwd, start_new_session=True)`` would
    start, minus the interpreter's start and imports.
    """
    import threading

    if threading.active_count() != 1:
        return None
    environment = server_environment(env)
    pipes = [os.pipe2(os.O_CLOEXEC) for _ in range(3)]
    for stream in (sys.stdout, sys.stderr):  # nothing buffered here is written twice
        with contextlib.suppress(Exception):
            stream.flush()
    try:
        pid = os.fork()
    except OSError:
        for read, write in pipes:
            os.close(read)
            os.close(write)
        return None
    if pid == 0:  # pragma: no cover - runs in the forked server, which never returns
        _serve_forked(pipes[0][0], pipes[1][1], pipes[2][1], [command, *args], environment, cwd)
    (in_read, in_write), (out_read, out_write), (err_read, err_write) = pipes
    for fd in (in_read, out_write, err_write):
        os.close(fd)
    return EarlyProcess(_Forked(pid, in_write, out_read, err_read), command, args, forked=True)


def _serve_forked(  # pragma: no cover - runs in the forked server
    stdin: int, stdout: int, stderr: int, argv: list[str], env: dict[str, str], cwd: str | None
) -> NoReturn:
    """In the forked server: become what the exec'd command would be, then run its module."""
    import atexit
    import io
    import runpy
    import traceback

    code = 1
    try:
        for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
            os.dup2(fd, target)  # dup2 clears close-on-exec on the copy
        os.closerange(3, _MAX_FD)
        # A fresh interpreter's dispositions (the supervisor has set none before trio runs).
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        os.setsid()
        if cwd is not None:
            os.chdir(cwd)
        atexit._clear()  # the supervisor's handlers are not the server's
        _replace_environment(env)
        retitle(argv, spill=True)  # after the environment: a long command line may take its block
        # Python's standard streams over the new descriptors, as a fresh interpreter makes them.
        sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)))
        sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)))
        sys.stderr = io.TextIOWrapper(
            io.BufferedWriter(io.FileIO(2, "w", closefd=False)),
            errors="backslashreplace",
            line_buffering=True,
        )
        module = argv[2]
        sys.argv = [module, *argv[3:]]  # run_module puts the module's file first, as -m does
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def _replace_environment(env: Mapping[str, str]) -> None:  # pragma: no cover - in a forked server
    """Make ``env`` this process's whole environment, as the kernel shows it too.

    ``os.environ`` is replaced; the block the kernel shows as
    ``/proc/PID/environ`` (the supervisor's, with its credentials) is
    overwritten with ``env`` where it fits and zeroed past it.
    """
    os.environ.clear()
    os.environ.update(env)
    bounds = _stat_range(50)  # env_start, env_end (fields 50 and 51 of /proc/self/stat)
    if bounds is not None:
        block = b"".join(f"{k}={v}".encode(errors="replace") + b"\0" for k, v in env.items())
        _overwrite(*bounds, block)


def _stat_range(index: int) -> tuple[int, int] | None:
    """Two adjacent addresses from ``/proc/self/stat`` (index of the first after the command name)."""
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return int(fields[index - 3]), int(fields[index - 2])
    except (OSError, ValueError, IndexError):
        return None


def _overwrite(start: int, end: int, data: bytes) -> bool:
    """Write ``data`` at ``start`` (cut to fit, NUL-terminated) and zero the rest up to ``end``."""
    import ctypes

    if end - start < 2:
        return False
    data = data[: end - start - 1]
    ctypes.memmove(start, data + b"\0" * (end - start - len(data)), end - start)
    return True


def retitle(title: str | Sequence[str], name: bytes | None = None, *, spill: bool = False) -> bool:
    """Show ``title`` as this process's command line (``ps``, ``/proc/PID/cmdline``); Linux.

    A string is shown as one argument; a sequence as its arguments. The
    kernel reads the command line from the memory that held ``argv`` at exec
    (``arg_start``-``arg_end`` in ``/proc/self/stat``); Python keeps its own
    copies, so that memory is overwritten in place and the rest zeroed. A
    title too long for it is cut, or with ``spill`` written on over the
    environment block that follows (as ``setproctitle(3)`` does: the kernel
    then shows one string, the arguments joined by spaces, and
    ``/proc/PID/environ`` shows what is left of the block). ``name`` also
    sets the process name (``comm``). False when it could not be done.
    """
    import ctypes

    args = _stat_range(48)  # arg_start, arg_end (fields 48 and 49)
    if args is None:
        return False
    parts = [part.encode(errors="replace") for part in ([title] if isinstance(title, str) else title)]
    data = b"\0".join(parts)
    env = _stat_range(50) if spill and len(data) >= args[1] - args[0] else None
    if env is not None and env[0] == args[1]:
        done = _overwrite(args[0], env[1], b" ".join(parts))
    else:
        done = _overwrite(*args, data)
    if done and name is not None:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(15, ctypes.c_char_p(name), 0, 0, 0)  # PR_SET_NAME
    return done


__all__ = [
    "INHERITED_ENV_VARS",
    "PASSED_ENV",
    "SERVER_PREFORK_ENV",
    "EarlyProcess",
    "faces_network",
    "fork_server",
    "forkable",
    "launch",
    "retitle",
    "server_environment",
]
