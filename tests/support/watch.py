"""Driving ``tests/mcpservers/watch_server.py`` from tests: server specs, the control FIFO, telemetry.

The watch server is a real MCP server (``mcp`` SDK, stdio) whose resources
change, and whose subscriptions flap or are refused, on command. Commands go
through a FIFO the server reads (see the server's docstring); :class:`Control`
writes them. Nothing here sleeps: a command is one atomic write.
"""

from __future__ import annotations

import errno
import html
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
WATCH_SERVER = REPO / "tests" / "mcpservers" / "watch_server.py"

#: ``resources/read`` mime type of the server's event-log resource.
EVENT_LOG_MIME = "application/vnd.agentd.events+json"


STARTUP_GUARD = 60.0
"""``startup_timeout`` of the servers tests connect to: a guard against a hang, not agentd's
default (15 s); a server's start (``import mcp``, 4 s of CPU idle) on a 2-core machine running
the suite beside other work took longer."""


@dataclass
class Spec:
    """Quacks like ``agentd.config.ServerSpec`` (for :class:`agentd.upstream.Upstream`)."""

    name: str
    command: str | None = None
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    required: bool = False
    transport: str | None = None
    timeout: float | None = None
    startup_timeout: float = STARTUP_GUARD
    protocol: str = "auto"


def server_args(control: Path, *extra: str) -> list[str]:
    """The watch server's argv (after the interpreter), controlled through ``control``."""
    return [str(WATCH_SERVER), "--control", str(control), *extra]


def watch_spec(name: str, control: Path, *extra: str) -> Spec:
    """A stdio spec running the watch server."""
    return Spec(name=name, command=sys.executable, args=server_args(control, *extra))


def mcp_stdio(name: str, control: Path, *extra: str) -> str:
    """An ``agentd --mcp-stdio`` value running the watch server."""
    return " ".join([f"{name}={sys.executable}", *server_args(control, *extra)])


class Control:
    """Writes JSON commands into a running watch server's control FIFO."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def send(self, **command: Any) -> None:
        """Send one command (``op=...``); the server applies it and publishes the change.

        Raises:
            AssertionError: no server has the FIFO open (it has not started, or it died).
        """
        line = (json.dumps(command) + "\n").encode()
        assert len(line) <= 4096, "one command must fit one atomic FIFO write (PIPE_BUF)"
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno in (errno.ENXIO, errno.ENOENT):
                raise AssertionError(f"no watch server is reading {self.path}") from exc
            raise
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    def set(self, key: str, value: Any) -> None:
        self.send(op="set", key=key, value=value)

    def append(self, *events: dict[str, Any], skip: int = 0) -> None:
        self.send(op="append", events=list(events), skip=skip)

    def append_many(self, count: int, *, prefix: str = "o", type: str = "ADDED") -> None:
        self.send(op="append_many", count=count, prefix=prefix, type=type)

    def open(self, gate: str) -> None:
        self.send(op="open", gate=gate)

    def listen(self, mode: str) -> None:
        self.send(op="listen", mode=mode)


def obj(name: str, **extra: Any) -> dict[str, Any]:
    """A Kubernetes-like object named ``name`` (default lines read ``TYPE default/<name>``)."""
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"}, **extra}


def watch_start(name: str, uri: str, on_event: str | None = None) -> dict[str, Any]:
    """A script-model tool call of ``watch_start``."""
    return {"name": "watch_start", "arguments": {"name": name, "uri": uri, "on_event": on_event}}


def memo_loop_args(model: str, memo: Path, *extra: str) -> list[str]:
    """A warm loop agent with the memo server persisting to ``memo``; it stays up between notices."""
    memo_server = f"memo={sys.executable} -m agentd serve memo --file {memo}"
    args = ["--mode", "loop", "--session", "warm", "--interval", "1h", "--verbose", "--model", model]
    return [*args, "--mcp-stdio", memo_server, *extra, "watch my notes"]


def loop_args(model: str, *servers: str, extra: tuple[str, ...] = ()) -> list[str]:
    """``agentd`` arguments for a warm loop agent (it stays up between notices) with ``servers``."""
    args = ["--mode", "loop", "--session", "warm", "--interval", "1h", "--verbose", "--model", model]
    for server in servers:
        args += ["--mcp-stdio", server]
    return [*args, *extra, "watch things"]


def notice_lines(out: str) -> list[list[str]]:
    """The lines of every ``<watch-event>`` block on stdout, unescaped."""
    blocks = []
    for part in out.split("<watch-event ")[1:]:
        body = part.split("\n</watch-event>")[0]
        blocks.append([html.unescape(line) for line in body.split("\n")[1:]])
    return blocks
