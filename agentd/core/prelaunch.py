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
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
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


class EarlyProcess:
    """A server process started before trio (a ``subprocess.Popen``), until its connection adopts it."""

    def __init__(self, popen: subprocess.Popen[bytes], command: str, args: Sequence[str]) -> None:
        self._popen = popen
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

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
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


__all__ = ["INHERITED_ENV_VARS", "PASSED_ENV", "EarlyProcess", "launch", "server_environment"]
