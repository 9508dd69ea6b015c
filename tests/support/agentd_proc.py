"""Run the real ``agentd`` command in tests and follow its NDJSON telemetry.

No sleeps: tests await telemetry events (or the exit) with a timeout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import trio

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable


def agentd_cmd(*args: str) -> list[str]:
    """The command line of the real CLI (``python -m agentd``)."""
    return [PY, "-m", "agentd", *args]


def script(tmp: Path, turns: list[dict[str, Any]], then: str = "no_reply", name: str = "script.json") -> str:
    """Write a script model file; returns the ``script:`` model spec."""
    path = tmp / name
    path.write_text(json.dumps({"turns": turns, "then": then}))
    return f"script:{path}"


def notes_server(tmp: Path, *extra: str, name: str = "notes") -> str:
    """An ``--mcp-stdio`` value for the SDK-written test server."""
    return f"{name}={PY} {REPO / 'tests/mcpservers/notes_server.py'} --state {tmp / (name + '.json')} {' '.join(extra)}".strip()


#: Bound on one short ``agentd`` command (check, a usage error, a scripted once run):
#: a start is well under a second idle, several seconds on a loaded 2-core machine;
#: this only trips on a hang.
CLI_TIMEOUT = 90.0
EVENT_TIMEOUT = 60.0
"""How long an awaited telemetry event may take: a guard against a hang, not a
performance bound. A passing wait returns as the event arrives; on a busy 2-core CI
machine a zygote start plus a model call took over 20 s, so the bound is generous."""
EXIT_TIMEOUT = 60.0
"""How long agentd may take to exit after it was told to (same reasoning)."""


def run_cli(
    args: Sequence[str],
    *,
    cwd: Path,
    env: dict[str, str] | None = None,
    input: str | None = None,
    stdin: int | None = subprocess.DEVNULL,
) -> subprocess.CompletedProcess[str]:
    """Run ``agentd ARGS`` to its end: no provider keys or ``AGENTD_`` settings inherited.

    stdin is ``/dev/null`` unless ``input`` (a pipe holding it) or ``stdin`` says otherwise.
    """
    inherited = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("AGENTD_") and not k.endswith(("_API_KEY", "_BASE_URL"))
    }
    return subprocess.run(
        agentd_cmd(*args),
        cwd=cwd,
        env={**inherited, "PYTHONPATH": str(REPO), **(env or {})},
        input=input,
        stdin=None if input is not None else stdin,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        check=False,
    )


#: How long wait_exit waits, after the exit, for the stderr pipe's EOF.
EOF_BOUND = 10.0


@dataclass
class Agentd:
    """A running agentd process with its telemetry parsed as it arrives."""

    proc: trio.Process
    events: list[dict[str, Any]] = field(default_factory=list)
    stdout: bytearray = field(default_factory=bytearray)
    raw_stderr: list[str] = field(default_factory=list)
    _changed: trio.Event = field(default_factory=trio.Event)
    stderr_closed: bool = False

    async def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        buf = b""
        while True:
            chunk = await self.proc.stderr.receive_some(65536)
            if not chunk:
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                text = line.decode(errors="replace")
                self.raw_stderr.append(text)
                try:
                    self.events.append(json.loads(text))
                except ValueError:
                    continue
            self._wake()
        self.stderr_closed = True
        self._wake()

    async def _read_stdout(self) -> None:
        if self.proc.stdout is None:
            return  # stdout goes somewhere the test chose
        while True:
            chunk = await self.proc.stdout.receive_some(65536)
            if not chunk:
                break
            self.stdout += chunk
            self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def find(
        self, name: str, pred: Callable[[dict[str, Any]], bool] = lambda e: True
    ) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("event") == name and pred(e)]

    async def wait_event(
        self,
        name: str,
        pred: Callable[[dict[str, Any]], bool] = lambda e: True,
        *,
        timeout: float = EVENT_TIMEOUT,
        count: int = 1,
    ) -> dict[str, Any]:
        """Wait until ``count`` events named ``name`` (matching ``pred``) have arrived; returns the last."""
        with trio.fail_after(timeout):
            while True:
                found = self.find(name, pred)
                if len(found) >= count:
                    return found[count - 1]
                if self.stderr_closed:
                    # No more telemetry can come: fail now, not at the timeout.
                    code = await self.proc.wait()
                    raise AssertionError(f"agentd exited ({code}) before {name!r}:\n{self.tail()}")
                await self._changed.wait()

    async def wait_exit(self, timeout: float = EXIT_TIMEOUT) -> int:
        """Wait for agentd to exit, then for its last telemetry lines to be read.

        The process can be reaped before this side has read what it wrote last
        (``supervisor.exit``): the stderr reader reaching EOF is awaited too
        (bounded: a leftover grandchild could hold the pipe open).
        """
        with trio.fail_after(timeout):
            code = await self.proc.wait()
        with trio.move_on_after(EOF_BOUND):
            while not self.stderr_closed:
                await self._changed.wait()
        return code

    def signal(self, sig: int = signal.SIGTERM) -> None:
        self.proc.send_signal(sig)

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.raw_stderr[-n:])

    @property
    def out(self) -> str:
        return self.stdout.decode(errors="replace")


class run_agentd:
    """``async with run_agentd(args, env=...) as a:`` — start agentd, always reap it.

    ``prefix`` runs it under another program (``["setsid"]``, ``["tini", "-g", "--"]``);
    ``command`` replaces ``python -m agentd`` (e.g. the installed console script);
    ``stdout`` is where its stdout goes (default: a pipe this object reads into ``out``).
    """

    def __init__(
        self,
        args: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        prefix: Sequence[str] = (),
        command: Sequence[str] | None = None,
        stdout: int = subprocess.PIPE,
        preexec_fn: Callable[[], None] | None = None,
    ) -> None:
        self.stdout = stdout
        self.args = list(args)
        self.env = {**os.environ, **(env or {})}
        self.cwd = cwd or REPO
        self.argv = [*prefix, *(command if command is not None else agentd_cmd()), *self.args]
        self.preexec_fn = preexec_fn

    async def __aenter__(self) -> Agentd:
        self._nursery_cm = trio.open_nursery()
        nursery = await self._nursery_cm.__aenter__()
        proc = await trio.lowlevel.open_process(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self.stdout,
            stderr=-1,
            env=self.env,
            cwd=str(self.cwd),
            preexec_fn=self.preexec_fn,
        )
        self.a = Agentd(proc)
        nursery.start_soon(self.a._read_stderr)
        nursery.start_soon(self.a._read_stdout)
        return self.a

    async def __aexit__(self, *exc: object) -> bool | None:
        proc = self.a.proc
        if proc.returncode is None:
            proc.kill()
        with trio.CancelScope(shield=True), trio.move_on_after(10):
            await proc.wait()
        result = await self._nursery_cm.__aexit__(*exc)  # type: ignore[arg-type]
        if exc[0] is None:
            # Every event agentd wrote is declared in agentd/observe/vocabulary.py.
            undeclared = [e for e in self.a.events if e.get("event") == "telemetry.undeclared"]
            assert not undeclared, f"undeclared telemetry: {undeclared}"
        return result


def of(a: Agentd, name: str, **fields: Any) -> list[dict[str, Any]]:
    """Telemetry events named ``name`` whose fields equal ``fields``."""
    return a.find(name, lambda e: all(e.get(k) == v for k, v in fields.items()))


async def drain(a: Agentd, timeout: float = EXIT_TIMEOUT) -> dict[str, Any]:
    """SIGTERM, then a clean exit (0) asserted, with the run's last lines if not.

    Returns the ``supervisor.exit`` event (``{}`` if agentd wrote none).
    """
    a.signal(signal.SIGTERM)
    assert await a.wait_exit(timeout) == 0, a.tail()
    exits = a.find("supervisor.exit")
    return exits[0] if exits else {}


def server_pid(a: Agentd, tmp: Path, name: str) -> int:
    """The pid of server ``name`` (its command line names ``tmp/<name>.json``) under agentd."""
    marker = str(tmp / f"{name}.json")
    for child in psutil.Process(a.proc.pid).children(recursive=True):
        try:
            if marker in child.cmdline() and child.status() != psutil.STATUS_ZOMBIE:
                return child.pid
        except psutil.NoSuchProcess:
            continue
    raise AssertionError(f"no live server {name!r} under agentd")
