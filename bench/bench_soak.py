"""Soak: a spawn route starts agents back to back; does the supervisor stay flat over time?

Run: ``/work/venv/bin/python bench/bench_soak.py [--agents N] [--inflight K] [--prev-ref REF --prev-agents M]``
(10,000 agents: a few minutes; 100,000: ten times that, printed at the end).

**Setup.** ``agentd --mode reactive`` with the bundled memo server over stdio,
one *spawn* route on ``memo://notes`` (debounce 0, ``max_inflight`` K, the
start-up re-read on: it starts the chain), the ``script:`` model. Each agent
calls ``memo_set`` in two turns and then answers ``NO_REPLY``; each
``memo_set`` changes ``memo://notes``, which the route turns into the next
agent. The chain keeps K agents running as fast as the machine sustains
(changes that arrive while K run coalesce into the one queued), with no
driver outside agentd: what is measured is agentd's own steady state. The
telemetry is written at its default level and read by the bench.

**Measured**, sampled each time another 1 % of the agents was spawned
(counted from ``subagent.spawn`` on stderr): the supervisor's RSS, its open
descriptors, the processes of agentd's tree (zygote, its spare, memo, the
agents running), the supervisor's CPU seconds. With ``AGENTD_TIMELINE`` (on
by default, rfcs/0231) the reactor marks each wake (``reactor.wake`` when
its receive returns, ``reactor.wait`` before the next): a wake's reactor
time is the span between the two, wall and the process's CPU; wakes are
assigned to the agent last spawned (``supervisor.spawn``).

**Compared**, the first 10 % of the agents against the last 10 %: RSS at
10 % and at the end; fds and processes (min-max in each window); the median
and p90 wake time; reactor CPU and supervisor CPU per agent. The floor is
the run's own start: the goals (issue 25 item 8) are RSS growth ≤ 2 MiB,
fds and processes flat, the end's median wake within 10 % of the start's.
``--prev-ref REF`` runs the same soak with agentd as of REF for
``--prev-agents`` agents first (a control that shows what growth looks
like: the previous code kept every agent it ever started).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import trio
from _providers import code_env, previous_code
from _util import ENV, PY, REPO, STEP_TIMEOUT, MiB, fmt, machine_note, pct, table, write_script

CONFIG = """
mode = "reactive"
model = "{model}"
instruction = "soak"
subscribe = ["memo:memo://notes"]

[servers.memo]
command = {py}
args = ["-m", "agentd", "serve", "memo", "--file", {notes}]

[[routes]]
name = "soak"
match = "memo://notes"
disposition = "spawn"
max_inflight = {inflight}
debounce = "0s"
"""

#: Each agent writes twice (two changes: the chain grows to K running agents), then says nothing.
TURNS: list[dict[str, Any]] = [
    {"tool_calls": [{"name": "memo__memo_set", "arguments": {"key": "a", "value": 1}}]},
    {"tool_calls": [{"name": "memo__memo_set", "arguments": {"key": "b", "value": 2}}]},
]

#: How long the drain after the last agent may take (K agents finish their turns).
DRAIN_TIMEOUT = 60.0


@dataclass
class Sample:
    """The supervisor and its tree when ``spawned`` agents had been started."""

    spawned: int
    t: float
    rss: int
    fds: int
    procs: int
    cpu_s: float
    tree_cpu_s: float
    """CPU of the supervisor and every process of its tree, reaped children included (the agents
    are the zygote's children): what an agent costs the machine."""


@dataclass
class Wake:
    """One reactor wake: when (the agent last spawned), wall and CPU seconds."""

    agent: int
    wall: float
    cpu: float


@dataclass
class Run:
    label: str
    agents: int
    samples: list[Sample] = field(default_factory=list)
    wakes: list[Wake] = field(default_factory=list)
    exit_code: int | None = None
    exit_event: dict[str, Any] | None = None
    problems: list[str] = field(default_factory=list)
    wall_s: float = 0.0


def tree_cpu(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


def sample(pid: int, spawned: int) -> Sample:
    p = psutil.Process(pid)
    try:
        tree = p.children(recursive=True)
    except psutil.Error:
        tree = []
    with p.oneshot():
        cpu = p.cpu_times()
        return Sample(
            spawned,
            time.perf_counter(),
            p.memory_info().rss,
            p.num_fds(),
            len(tree),
            cpu.user + cpu.system,
            tree_cpu([p, *tree]),
        )


def progress(label: str, s: Sample, started: float) -> None:
    """One line at each 10 %: a run cut short (a long soak on a shared machine) still says how it went."""
    print(
        f"  {label}: {s.spawned:,} agents after {fmt(s.t - started, 0)} s: RSS {fmt(s.rss / MiB, 2)} MiB, "
        f"{s.fds} fds, {s.procs} processes",
        flush=True,
    )


def read_wakes(path: Path, pid: int) -> list[Wake]:
    """The reactor's wakes from the timeline file (lines of the supervisor's pid only)."""
    wakes: list[Wake] = []
    spid = str(pid)
    agent = 0
    woke: tuple[float, float] | None = None
    with path.open() as f:
        for line in f:
            parts = line.split(" ", 4)
            if len(parts) < 4 or parts[2] != spid:
                continue
            name = parts[3].rstrip("\n")
            if name == "supervisor.spawn":
                agent += 1
            elif name == "reactor.wake":
                woke = (float(parts[0]), float(parts[1]))
            elif name == "reactor.wait" and woke is not None:
                wakes.append(Wake(agent, float(parts[0]) - woke[0], float(parts[1]) - woke[1]))
                woke = None
    return wakes


async def soak(
    label: str, agents: int, inflight: int, root: Path, tmp: Path, *, timeline: bool, heap: Path | None = None
) -> Run:
    """Run agentd (the package under ``root``) until it spawned ``agents`` agents; drain; measure."""
    run = Run(label, agents)
    notes = tmp / f"{label}-notes.json"
    notes.write_text("{}")
    model = write_script(tmp / f"{label}-script.json", TURNS, then="no_reply")
    config = tmp / f"{label}.toml"
    config.write_text(
        CONFIG.format(model=model, py=json.dumps(PY), notes=json.dumps(str(notes)), inflight=inflight)
    )
    timeline_path = tmp / f"{label}-timeline.txt"
    env = {**(ENV if root == REPO else code_env(root))}
    if timeline:
        env["AGENTD_TIMELINE"] = str(timeline_path)
    step = max(1, agents // 100)
    command = [PY, "-m", "agentd"]
    if heap is not None:
        await trio.Path(heap).mkdir(parents=True, exist_ok=True)
        command = [PY, str(Path(__file__).with_name("_traced_agentd.py")), str(heap)]
    proc = await trio.lowlevel.open_process(
        [*command, "--config", str(config)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        cwd=str(root),
    )
    spawned = 0
    started = time.perf_counter()
    assert proc.stderr is not None
    try:
        buf = b""
        next_sample = step
        with trio.fail_after(STEP_TIMEOUT + agents):  # generous: an agent takes milliseconds
            while chunk := await proc.stderr.receive_some(1 << 20):
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    if b'"subagent.spawn"' in line:
                        spawned += 1
                        if spawned == 1:
                            run.samples.append(sample(proc.pid, 0))
                        if spawned >= next_sample:
                            run.samples.append(sample(proc.pid, spawned))
                            if spawned % (10 * step) == 0:
                                progress(label, run.samples[-1], started)
                                if heap is not None:
                                    proc.send_signal(signal.SIGUSR2)  # a heap snapshot at each 10 %
                            next_sample += step
                        if spawned == agents:
                            proc.send_signal(signal.SIGTERM)
                    elif b'"supervisor.exit"' in line:
                        run.exit_event = json.loads(line)
                    elif (b'"level":"warning"' in line or b'"level":"error"' in line) and len(
                        run.problems
                    ) < 20:
                        run.problems.append(line.decode(errors="replace")[:300])
                if spawned >= agents and run.exit_event is not None:
                    break
        with trio.fail_after(DRAIN_TIMEOUT):
            while await proc.stderr.receive_some(1 << 20):
                pass
            run.exit_code = await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            with trio.CancelScope(shield=True):
                await proc.wait()
    run.wall_s = time.perf_counter() - started
    if timeline:
        run.wakes = await trio.to_thread.run_sync(read_wakes, timeline_path, proc.pid)
        timeline_path.unlink()
    return run


def window(run: Run, first: bool) -> tuple[int, int]:
    """Agent ordinals of the first or the last 10 % (the very first 1 %, start-up, left out)."""
    tenth = max(1, run.agents // 10)
    return (max(1, run.agents // 100), tenth) if first else (run.agents - tenth, run.agents)


def in_window(run: Run, first: bool) -> list[Sample]:
    lo, hi = window(run, first)
    return [s for s in run.samples if lo <= s.spawned <= hi]


def per_agent_cpu(samples: list[Sample], *, tree: bool = False) -> float:
    if len(samples) < 2 or samples[-1].spawned == samples[0].spawned:
        return float("nan")
    a, b = samples[0], samples[-1]
    spent = (b.tree_cpu_s - a.tree_cpu_s) if tree else (b.cpu_s - a.cpu_s)
    return spent / (b.spawned - a.spawned)


def slope(samples: list[Sample]) -> float:
    """Least-squares RSS bytes per agent over ``samples``."""
    if len(samples) < 3:
        return float("nan")
    xs = [float(s.spawned) for s in samples]
    ys = [float(s.rss) for s in samples]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else float("nan")


def rate(samples: list[Sample]) -> float:
    if len(samples) < 2:
        return float("nan")
    return (samples[-1].spawned - samples[0].spawned) / (samples[-1].t - samples[0].t)


def wake_stats(run: Run, first: bool) -> tuple[float, float, float, float, int]:
    """Median and p90 wake wall time (µs), median CPU (µs), reactor CPU per agent (ms), wakes."""
    lo, hi = window(run, first)
    ws = [w for w in run.wakes if lo <= w.agent < hi]
    if not ws:
        nan = float("nan")
        return nan, nan, nan, nan, 0
    walls = [w.wall * 1e6 for w in ws]
    cpus = [w.cpu * 1e6 for w in ws]
    return (
        statistics.median(walls),
        pct(walls, 0.9),
        statistics.median(cpus),
        sum(cpus) / 1000 / (hi - lo),
        len(ws),
    )


def report(run: Run) -> list[str]:
    out = []
    first, last = in_window(run, True), in_window(run, False)
    at10 = first[-1] if first else None
    end = run.samples[-1] if run.samples else None
    growth = (end.rss - at10.rss) / MiB if at10 and end else float("nan")
    agents_between = (end.spawned - at10.spawned) if at10 and end else 0
    rows = []
    for name, ss in (("first 10 %", first), ("last 10 %", last)):
        if not ss:
            continue
        rows.append(
            [
                name,
                f"{ss[0].spawned:,}-{ss[-1].spawned:,}",
                fmt(ss[-1].rss / MiB, 1),
                f"{min(s.fds for s in ss)}-{max(s.fds for s in ss)}",
                f"{min(s.procs for s in ss)}-{max(s.procs for s in ss)}",
                fmt(rate(ss), 1),
                fmt(per_agent_cpu(ss) * 1000, 2),
                fmt(per_agent_cpu(ss, tree=True) * 1000, 1),
            ]
        )
    out.append(
        table(
            f"{run.label}: {run.agents:,} agents, exit {run.exit_code}, {fmt(run.wall_s, 0)} s",
            [
                "window",
                "agents",
                "RSS at end MiB",
                "fds",
                "processes",
                "agents/s",
                "supervisor CPU ms/agent",
                "tree CPU ms/agent",
            ],
            rows,
        )
    )
    out.append(
        f"RSS growth from 10 % to the end: {fmt(growth, 2)} MiB over {agents_between:,} agents "
        f"({fmt(growth * 1024 * 1024 / max(1, agents_between), 1)} B/agent); goal ≤ 2 MiB"
    )
    deciles = [s for s in run.samples if s.spawned and s.spawned % max(1, run.agents // 10) == 0]
    out.append("RSS MiB at each 10 %: " + ", ".join(f"{s.spawned:,}: {fmt(s.rss / MiB, 1)}" for s in deciles))
    half = [s for s in run.samples if s.spawned >= run.agents // 2]
    out.append(
        f"RSS slope over the second half (least squares, {len(half)} samples): "
        f"{fmt(slope(half), 1)} B/agent, i.e. {fmt(slope(half) * 100_000 / MiB, 2)} MiB per 100,000 agents"
    )
    if run.wakes:
        a = wake_stats(run, True)
        b = wake_stats(run, False)
        out.append(
            table(
                f"{run.label}: a wake's reactor time (timeline marks)",
                ["window", "wakes", "median µs", "p90 µs", "median CPU µs", "reactor CPU ms/agent"],
                [
                    ["first 10 %", a[4], fmt(a[0], 1), fmt(a[1], 1), fmt(a[2], 1), fmt(a[3], 3)],
                    ["last 10 %", b[4], fmt(b[0], 1), fmt(b[1], 1), fmt(b[2], 1), fmt(b[3], 3)],
                    [
                        "last ÷ first",
                        "",
                        fmt(b[0] / a[0], 3),
                        fmt(b[1] / a[1], 3),
                        fmt(b[2] / a[2], 3),
                        fmt(b[3] / a[3], 3),
                    ],
                ],
            )
        )
    if run.exit_event is not None:
        counters = run.exit_event.get("counters", {})
        out.append(
            f"supervisor.exit: turns {counters.get('turns', '-')}, model_calls {counters.get('model_calls')}, "
            f"routed {counters.get('routed')}, coalesced {counters.get('coalesced')}, "
            f"telemetry_dropped {run.exit_event.get('telemetry_dropped')}"
        )
    if run.problems:
        out.append(f"{len(run.problems)} warning/error lines (first shown): {run.problems[0]}")
    for line in out:
        if not line.startswith("\n"):
            print(line, flush=True)
    return out


def report_heap(run: Run, heap: Path) -> None:
    """The Python heap (tracemalloc, after a full collection) beside RSS at each 10 %, and the top growers."""
    import tracemalloc

    rows = (
        [line.split() for line in (heap / "heap.txt").read_text().splitlines()]
        if (heap / "heap.txt").exists()
        else []
    )
    traced = [int(r[1]) for r in rows]
    tenth = max(1, run.agents // 10)
    at = [s for s in run.samples if s.spawned and s.spawned % tenth == 0][1:][: len(traced)]
    print(
        "traced Python heap / RSS MiB at each 10 %: "
        + ", ".join(
            f"{s.spawned:,}: {fmt(t / MiB, 2)} / {fmt(s.rss / MiB, 1)}"
            for s, t in zip(at, traced, strict=False)
        ),
        flush=True,
    )
    print(
        "glibc in use / free in its arenas / RSS -> RSS after malloc_trim(0), MiB: "
        + ", ".join(
            f"{s.spawned:,}: {fmt(int(r[2]) / MiB, 1)} / {fmt(int(r[3]) / MiB, 1)} / "
            f"{fmt(int(r[4]) / MiB, 1)} -> {fmt(int(r[5]) / MiB, 1)}"
            for s, r in zip(at, rows, strict=False)
        ),
        flush=True,
    )
    if len(traced) < 2:
        return
    first = tracemalloc.Snapshot.load(str(heap / "heap-0.pickle"))
    last = tracemalloc.Snapshot.load(str(heap / f"heap-{len(traced) - 1}.pickle"))
    agents_between = at[-1].spawned - at[0].spawned
    print(
        f"heap growth {at[0].spawned:,} -> {at[-1].spawned:,} agents: top 15 by line, then by traceback",
        flush=True,
    )
    for stat in last.compare_to(first, "lineno")[:15]:
        print(
            f"  {stat.size_diff / max(1, agents_between):8.1f} B/agent {stat.count_diff:+7d} blocks  {stat.traceback[0]}"
        )
    for stat in last.compare_to(first, "traceback")[:8]:
        print(f"  {stat.size_diff / max(1, agents_between):8.1f} B/agent {stat.count_diff:+7d} blocks")
        for frame in stat.traceback.format(limit=12):
            print("     " + frame)


@contextlib.contextmanager
def code_root(ref: str | None) -> Iterator[Path]:
    if ref is None:
        yield REPO
        return
    with previous_code(ref) as root:
        yield root


async def main(
    agents: int,
    inflight: int,
    prev_ref: str | None,
    prev_agents: int,
    timeline: bool,
    save: Path | None,
    heap: Path | None,
) -> None:
    print(f"bench_soak: {agents:,} agents, max_inflight {inflight}; {machine_note()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="agentd-soak-") as tmp_s:
        tmp = Path(tmp_s)
        if prev_ref is not None:
            with code_root(prev_ref) as root:
                prev = await soak("previous", prev_agents, inflight, root, tmp, timeline=False)
            report(prev)
        this = await soak("this", agents, inflight, REPO, tmp, timeline=timeline, heap=heap)
        report(this)
        if heap is not None:
            report_heap(this, heap)
    if save is not None:
        await trio.Path(save).write_text(json.dumps([vars(x) for x in this.samples]))
    per_agent = this.wall_s / max(1, agents)
    tree_ms = per_agent_cpu(this.samples, tree=True) * 1000
    cores = os.cpu_count() or 1
    print(
        f"\n{machine_note()} at the end; {fmt(agents / this.wall_s, 1)} agents/s overall: "
        f"100,000 agents would take about {fmt(100_000 * per_agent / 60, 0)} min at this rate; "
        f"agentd's tree spends {fmt(tree_ms, 1)} ms of CPU per agent, so on {cores} idle cores "
        f"about {fmt(100_000 * tree_ms / 1000 / cores / 60, 0)} min",
        flush=True,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=100_000, help="agents to start (default 100,000)")
    parser.add_argument("--inflight", type=int, default=4, help="the route's max_inflight (default 4)")
    parser.add_argument("--prev-ref", help="also run agentd as of this commit first (a control)")
    parser.add_argument(
        "--prev-agents", type=int, default=2_000, help="agents for --prev-ref (default 2,000)"
    )
    parser.add_argument("--no-timeline", action="store_true", help="no AGENTD_TIMELINE (no wake times)")
    parser.add_argument("--save", type=Path, help="write this run's samples (JSON) here")
    parser.add_argument(
        "--heap",
        type=Path,
        help="trace the supervisor's heap (bench/_traced_agentd.py) from 10 %% of the run on and write "
        "a snapshot into this directory at each further 10 %% (slow: a diagnosis, not a measurement)",
    )
    args = parser.parse_args()
    if args.agents < 100:
        parser.error("--agents: give at least 100 (the windows are 10 % each)")
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(
        trio.run(
            main,
            args.agents,
            args.inflight,
            args.prev_ref,
            args.prev_agents,
            not args.no_timeline,
            args.save,
            args.heap,
        )
    )
