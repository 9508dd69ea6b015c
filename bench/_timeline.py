"""The stages of one spawn or wake from an ``AGENTD_TIMELINE`` file (see :mod:`agentd.observe.timeline`).

The benchmark marks the start of each sample (``bench.t0``) and the
provider's receipt (``provider.received``) in the same file; every process
of agentd's tree adds its own marks. Per sample (the lines from one
``bench.t0`` to the next), the first line of each stage is taken: its time
after ``bench.t0`` and its process's CPU time. :func:`report` prints each
stage's median time, the median step from the stage before, and the median
CPU time its process spent in that step when both stages are in the same
process (so a step's wall time beyond its CPU time is waiting: for the
other side, or for a core on a shared machine).
"""

from __future__ import annotations

import statistics
from pathlib import Path

from _util import fmt, table


def samples(path: Path, skip: int = 0) -> list[dict[str, tuple[float, float, str]]]:
    """Per sample (after the first ``skip``): stage → (ms after its ``bench.t0``, CPU s, pid)."""
    out: list[dict[str, tuple[float, float, str]]] = []
    current: dict[str, tuple[float, float, str]] | None = None
    t0 = 0.0
    for line in path.read_text().splitlines():
        parts = line.split(" ", 4)
        if len(parts) < 4:
            continue
        t, cpu, pid, name = float(parts[0]), float(parts[1]), parts[2], parts[3]
        if name == "bench.t0":
            current = {}
            out.append(current)
            t0 = t
            continue
        if current is not None and name not in current:
            current[name] = ((t - t0) * 1000, cpu, pid)
    return out[skip:]


def report(path: Path, title: str, skip: int = 0) -> str:
    """Print and return each stage's median time after the sample's start, step and CPU step."""
    got = samples(path, skip)
    times: dict[str, list[float]] = {}
    for s in got:
        for name, (ms, _, _) in s.items():
            times.setdefault(name, []).append(ms)
    order = sorted(times, key=lambda n: statistics.median(times[n]))
    rows = []
    prev_name = ""
    prev = 0.0
    for name in order:
        med = statistics.median(times[name])
        cpu = [
            (s[name][1] - s[prev_name][1]) * 1000
            for s in got
            if name in s and prev_name in s and s[name][2] == s[prev_name][2]
        ]
        rows.append(
            [name, len(times[name]), fmt(med), fmt(med - prev), fmt(statistics.median(cpu)) if cpu else ""]
        )
        prev_name, prev = name, med
    return table(
        f"{title} (n={len(got)}; ms after the sample's start; cpu: the step's CPU time in its process)",
        ["stage", "n", "p50", "step", "cpu"],
        rows,
    )
