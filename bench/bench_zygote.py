"""A daemon run's start: the zygote forked from the supervisor (rfcs/0365) against a fresh interpreter.

Run: ``/work/venv/bin/python bench/bench_zygote.py [-n 6]`` (about a minute).

Each run is ``agentd --mode reactive`` with the bundled memo server over
stdio and a spawn route on ``memo://notes`` whose start-up re-read starts one
agent (``script:`` model, one answer); after that agent's turn the run is
SIGTERMed and must exit 0. Two variants alternate, run after run: the
zygote forked from the supervisor (the default) and a fresh interpreter
(``AGENTD_ZYGOTE_PREFORK=0``, the code path before rfcs/0365).

Measured per run: the CPU seconds of the whole tree (this process's
``RUSAGE_CHILDREN`` across the run: supervisor, zygote, its spare, the
agent, the memo server, each reaped by its parent), and the wall time from
exec to ``zygote.ready`` and to the agent's ``turn.end``, both from the
telemetry as it arrives. The floor, in the same run: a fresh ``python -c
"import mcp"`` (what a second interpreter for the zygote costs at least).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import trio
from _util import ENV, PY, fmt, machine_note, run_agentd, table, write_script


def tree_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


async def one_run(tmp: Path, forked: bool) -> tuple[float, float, float]:
    """(tree CPU s, exec → zygote.ready s, exec → the agent's turn.end s)."""
    notes = tmp / "notes.json"
    notes.write_text('{"todo": "milk"}')
    model = write_script(tmp / "script.json", [{"text": "done"}])
    args = [
        "--mode", "reactive", "--model", model,
        "--mcp-stdio", f"memo={PY} -m agentd serve memo --file {notes}",
        "--subscribe", "memo:memo://notes", "--route", "memo://notes=spawn:1", "bench",
    ]  # fmt: skip
    env = {} if forked else {"AGENTD_ZYGOTE_PREFORK": "0"}
    cpu0 = tree_cpu()
    t0 = time.perf_counter()
    async with run_agentd(args, env=env) as a:
        _, ready = await a.wait_for("zygote.ready")
        assert ready.ev["forked"] is forked, ready.ev
        _, turn = await a.wait_for("turn.end")
        code = await a.stop_and_wait()
        assert code == 0, code
    return tree_cpu() - cpu0, ready.t - t0, turn.t - t0


async def floor_import() -> float:
    cpu0 = tree_cpu()
    await trio.run_process([PY, "-c", "import mcp"], env=ENV, stdout=subprocess.DEVNULL)
    return tree_cpu() - cpu0


async def main(n: int) -> None:
    print(f"bench_zygote: {machine_note()}; n={n} per variant (+1 warm-up each), alternating")
    results: dict[bool, list[tuple[float, float, float]]] = {True: [], False: []}
    floors: list[float] = []
    with tempfile.TemporaryDirectory() as raw:
        tmp = Path(raw)
        for i in range(n + 1):
            for forked in (True, False):
                got = await one_run(tmp, forked)
                if i:
                    results[forked].append(got)
            if i:
                floors.append(await floor_import())
    rows = []
    for forked, label in (
        (False, "fresh interpreter (AGENTD_ZYGOTE_PREFORK=0)"),
        (True, "forked (rfcs/0365)"),
    ):
        runs = results[forked]
        rows.append(
            [
                label,
                fmt(statistics.median(r[0] for r in runs)),
                f"{fmt(min(r[0] for r in runs))}-{fmt(max(r[0] for r in runs))}",
                fmt(statistics.median(r[1] for r in runs) * 1000, 0),
                fmt(statistics.median(r[2] for r in runs) * 1000, 0),
            ]
        )
    rows.append(['floor: python -c "import mcp"', fmt(statistics.median(floors)), "", "", ""])
    table(
        "a reactive run (memo over stdio, one agent), medians",
        ["zygote", "tree CPU s", "range", "exec → zygote.ready ms", "exec → agent's turn.end ms"],
        rows,
    )
    fresh = statistics.median(r[0] for r in results[False])
    fork = statistics.median(r[0] for r in results[True])
    print(f"forked ÷ fresh, tree CPU: {fmt(fork / fresh)}; saved {fmt(fresh - fork)} CPU-s a run")
    print(f"{machine_note()}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("-n", type=int, default=6, help="runs per variant (default 6)")
    trio.run(main, ap.parse_args().n)
