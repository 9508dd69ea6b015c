"""Shared helpers for the supervisor benchmarks (``bench_spawn``, ``bench_once``, ``bench_reactive``, ``bench_idle``).

Nothing here sleeps to wait for a condition: followers of a child's output
wake on each chunk read and tests of a condition happen on that wake-up.
Latencies are taken with :func:`time.perf_counter` in *this* process when a
line or event arrives, so a floor measured by this process and agentd's own
figure share the same clock and the same wake-up costs.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import trio

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
ENV = {**os.environ, "PYTHONPATH": str(REPO)}

#: How long any single awaited step of a benchmark may take before the
#: benchmark fails loudly instead of hanging (a normal step takes < 1 s).
STEP_TIMEOUT = 30.0

MiB = 1024 * 1024


# ----------------------------------------------------------------------------- statistics


def pct(xs: Sequence[float], p: float) -> float:
    """The ``p`` quantile (0..1) by nearest rank; NaN for no samples."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(p * (len(s) - 1))))]


def p50(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def fmt(x: float, digits: int = 2) -> str:
    if x != x:  # NaN
        return "-"
    return f"{x:.{digits}f}"


def table(title: str, header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A small fixed-width table (also valid Markdown), printed and returned."""
    cells = [[str(c) for c in header], *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]

    def line(r: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |"

    out = [f"\n{title}", line(cells[0]), "| " + " | ".join("-" * w for w in widths) + " |"]
    out += [line(r) for r in cells[1:]]
    text = "\n".join(out)
    print(text, flush=True)
    return text


def machine_note() -> str:
    """Load average at the time of the run (the machine is shared: say how busy it was)."""
    la = os.getloadavg()
    return f"load average {la[0]:.2f} {la[1]:.2f} {la[2]:.2f} on {os.cpu_count()} cores"


# ----------------------------------------------------------------------------- process metrics


def uss(pid: int) -> int:
    """Private (unique set) memory of ``pid`` in bytes: what killing it gives back."""
    return int(psutil.Process(pid).memory_full_info().uss)


def thread_switches(pid: int) -> dict[int, tuple[int, int]]:
    """Per thread of ``pid``: (voluntary, involuntary) context switches.

    ``psutil.Process.num_ctx_switches`` reads ``/proc/PID/status``, which
    counts the main thread only; a wake-up in a worker thread must count too.
    """
    out: dict[int, tuple[int, int]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return out
    for tid in tids:
        try:
            text = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        vol = invol = 0
        for ln in text.splitlines():
            if ln.startswith("voluntary_ctxt_switches:"):
                vol = int(ln.split()[1])
            elif ln.startswith("nonvoluntary_ctxt_switches:"):
                invol = int(ln.split()[1])
        out[int(tid)] = (vol, invol)
    return out


@dataclass(frozen=True)
class Usage:
    """CPU seconds and per-thread context switches of one process at one instant."""

    cpu_s: float
    threads: dict[int, tuple[int, int]]

    @staticmethod
    def of(pid: int) -> Usage:
        t = psutil.Process(pid).cpu_times()
        return Usage(t.user + t.system, thread_switches(pid))


@dataclass(frozen=True)
class UsageDelta:
    """What a process did between two :class:`Usage` snapshots."""

    cpu_s: float
    vol: int
    """Voluntary switches (wake-ups after a wait) of threads alive at both ends, plus those of new threads."""
    invol: int
    threads_started: int
    threads_exited: int
    """Threads gone by the end (their last switches are not visible: each exit is at least one wake-up)."""

    @staticmethod
    def between(before: Usage, after: Usage) -> UsageDelta:
        vol = invol = 0
        for tid, (v, i) in after.threads.items():
            v0, i0 = before.threads.get(tid, (0, 0))
            vol += v - v0
            invol += i - i0
        started = len(set(after.threads) - set(before.threads))
        exited = len(set(before.threads) - set(after.threads))
        return UsageDelta(after.cpu_s - before.cpu_s, vol, invol, started, exited)


# ----------------------------------------------------------------------------- files


def write_script(path: Path, turns: list[dict[str, Any]], then: str = "no_reply") -> str:
    """Write a ``script:`` model file; returns the model spec."""
    path.write_text(json.dumps({"turns": turns, "then": then}))
    return f"script:{path}"


# ----------------------------------------------------------------------------- a running agentd


class ZygoteLost(RuntimeError):
    """agentd reported ``zygote.degraded`` while a benchmark waited (see bench/README.md, Findings)."""


@dataclass
class Line:
    """One telemetry event and the perf_counter time its line was read here."""

    t: float
    ev: dict[str, Any]


@dataclass
class Agentd:
    """A running ``agentd`` with its NDJSON telemetry followed as it arrives."""

    proc: trio.Process
    lines: list[Line] = field(default_factory=list)
    stdout: bytearray = field(default_factory=bytearray)
    raw: list[str] = field(default_factory=list)
    keep: Callable[[dict[str, Any]], bool] = lambda e: True
    zygote_lost: dict[str, Any] | None = None
    """The ``zygote.degraded`` event, once seen: waits then raise :class:`ZygoteLost`."""
    _changed: trio.Event = field(default_factory=trio.Event)
    _eof: bool = False

    async def _pump_stderr(self) -> None:
        assert self.proc.stderr is not None
        buf = b""
        while chunk := await self.proc.stderr.receive_some(1 << 20):
            now = time.perf_counter()
            buf += chunk
            *done, buf = buf.split(b"\n")
            for raw in done:
                try:
                    ev = json.loads(raw)
                except ValueError:
                    self.raw.append(raw.decode(errors="replace"))
                    continue
                if ev.get("event") == "zygote.degraded":
                    self.zygote_lost = ev
                if self.keep(ev):
                    self.lines.append(Line(now, ev))
            self._wake()
        self._eof = True
        self._wake()

    async def _pump_stdout(self) -> None:
        assert self.proc.stdout is not None
        while chunk := await self.proc.stdout.receive_some(1 << 16):
            self.stdout += chunk
            self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def count(self, name: str, pred: Callable[[dict[str, Any]], bool] = lambda e: True) -> int:
        return sum(1 for ln in self.lines if ln.ev.get("event") == name and pred(ln.ev))

    async def wait_for(
        self,
        name: str,
        pred: Callable[[dict[str, Any]], bool] = lambda e: True,
        *,
        after: int = 0,
        timeout: float = STEP_TIMEOUT,
    ) -> tuple[int, Line]:
        """Wait for the first event ``name`` matching ``pred`` at index ≥ ``after``; returns (index, line)."""
        i = after
        with trio.fail_after(timeout):
            while True:
                while i < len(self.lines):
                    ln = self.lines[i]
                    if ln.ev.get("event") == name and pred(ln.ev):
                        return i, ln
                    i += 1
                if self._eof:
                    raise RuntimeError(f"agentd ended before {name!r}:\n" + "\n".join(self.raw[-20:]))
                if self.zygote_lost is not None:
                    raise ZygoteLost(
                        f"agentd lost its zygote ({self.zygote_lost['ts']}) while waiting for {name!r}: "
                        "its agent children died with it (bench/README.md, Findings 1)"
                    )
                await self._changed.wait()

    async def wait_eof(self, timeout: float = STEP_TIMEOUT) -> None:
        """Wait until every telemetry line has been read (stderr closed)."""
        with trio.fail_after(timeout):
            while not self._eof:
                await self._changed.wait()

    def stop(self) -> None:
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)

    async def stop_and_wait(self, timeout: float = STEP_TIMEOUT) -> int:
        """SIGTERM, then the exit code once the process ended (bounded by ``timeout``)."""
        self.stop()
        with trio.fail_after(timeout):
            return await self.proc.wait()


class run_agentd:
    """``async with run_agentd(args) as a:``: start ``python -m agentd ARGS``; always reaped on exit.

    ``cwd`` (default: this checkout) comes first on ``python -m``'s import
    path: the package it holds is the one that runs, whatever ``PYTHONPATH`` says.
    """

    def __init__(
        self,
        args: Sequence[str],
        *,
        keep: Callable[[dict[str, Any]], bool] | None = None,
        env: dict[str, str] | None = None,
        cwd: Path = REPO,
    ) -> None:
        self.args = [PY, "-m", "agentd", *args]
        self.keep = keep
        self.env = {**ENV, **(env or {})}
        self.cwd = cwd

    async def __aenter__(self) -> Agentd:
        self._cm = trio.open_nursery()
        nursery = await self._cm.__aenter__()
        proc = await trio.lowlevel.open_process(
            self.args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self.env,
            cwd=str(self.cwd),
        )
        self.a = Agentd(proc)
        if self.keep is not None:
            self.a.keep = self.keep
        nursery.start_soon(self.a._pump_stderr)
        nursery.start_soon(self.a._pump_stdout)
        return self.a

    async def __aexit__(self, *exc: object) -> bool | None:
        proc = self.a.proc
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            with trio.CancelScope(shield=True), trio.move_on_after(10):
                await proc.wait()
        if proc.returncode is None:
            proc.kill()
            with trio.CancelScope(shield=True):
                await proc.wait()
        return await self._cm.__aexit__(*exc)  # type: ignore[arg-type]


def descendants(pid: int) -> list[psutil.Process]:
    """Every live descendant of ``pid`` (zygote, agent children, MCP servers)."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def role_of(p: psutil.Process) -> str:
    """A short name for a process under agentd, from its command line."""
    try:
        cmd = " ".join(p.cmdline())
    except psutil.Error:
        return "?"
    if "agentd.agent.zygote" in cmd:
        # Children forked from the zygote keep its command line: tell them apart by parent.
        try:
            parent = p.parent()
            forked = parent is not None and "agentd.agent.zygote" in " ".join(parent.cmdline())
        except psutil.Error:
            forked = False
        return "agent" if forked else "zygote"
    if " serve " in cmd and "agentd" in cmd:
        return "server:" + cmd.split("serve", 1)[1].split()[0]
    if cmd.endswith(".py") or ".py " in cmd:
        return "server:" + Path(cmd.split(".py", 1)[0] + ".py").name
    return "agent"
