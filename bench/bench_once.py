"""``agentd --mode once`` start → result, against the bare SDK floor, in the same run.

Run: ``/work/venv/bin/python bench/bench_once.py [-n 5]`` (about 20-30 s).

agentd: the whole command, wall time from exec to exit (exit code 0 checked):
``python -m agentd --mode once --model script:S --mcp-stdio 'memo=python -m agentd serve memo' TEXT``,
where the script makes one ``memo__memo_set`` call and then answers.

Floors, interleaved with the agentd runs so they see the same machine load:

* ``sdk in-process``: this process (``mcp`` already imported) starts the same
  memo server with ``mcp.Client(StdioServerParameters(...))`` and makes one
  ``call_tool("memo_set")``: the cost of the server plus one call.
* ``sdk fresh process``: the same as a fresh ``python -c`` (interpreter start
  and ``import mcp`` included): the floor of any Python CLI doing this job.

The phase table splits agentd's median run by telemetry arrival time.

``--providers`` (about 2 min) runs the same command with ``openai:`` and
``anthropic:`` models against a loopback fake provider (one tool call, then
the answer: two model requests), with this checkout's code and with the code
of ``--prev-ref`` (default: the merge base with ``main``), runs of the two
alternating; and with ``bedrock:`` (the official SDK) on this checkout's
code. It reports the whole command, ``supervisor.start`` → the root's
``subagent.spawn`` (start-up: zygote and memo server ready) and spawn →
first ``model.call``, the last two from agentd's own timestamps (ms).
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
from _util import ENV, PY, REPO, STEP_TIMEOUT, fmt, machine_note, p50, run_agentd, table, write_script
from mcp import Client, StdioServerParameters

SERVER = [PY, "-m", "agentd", "serve", "memo"]

FLOOR_SCRIPT = f"""
import trio
from mcp import Client, StdioServerParameters
async def main():
    async with Client(StdioServerParameters(command={SERVER[0]!r}, args={SERVER[1:]!r})) as c:
        r = await c.call_tool("memo_set", {{"key": "task", "value": "bench"}})
        assert not r.is_error, r
trio.run(main)
"""

PHASES = [
    ("supervisor.start", "interpreter + agentd imports"),
    ("subagent.spawn", "zygote + memo server ready, root spawned"),
    ("model.call", "child forked, self-MCP connected, 1st model call"),
    ("tool.call", "memo__memo_set through the supervisor"),
    ("turn.end", "2nd model call, answer"),
    ("supervisor.exit", "reactor done (root answered)"),
    ("exit", "teardown: kill ladder, server and zygote stop, interpreter exit"),
]


async def run_agentd_once(model: str, env: dict[str, str] | None = None) -> tuple[float, dict[str, float]]:
    """One ``agentd --mode once``; returns (wall seconds, first arrival of each telemetry event in s).

    ``ts:EVENT`` keys hold agentd's own timestamp of each event's first
    occurrence (Unix seconds, millisecond resolution): arrival here can batch
    lines that were written apart.
    """
    args = ["--mode", "once", "--model", model, "--mcp-stdio", "memo=" + " ".join(SERVER), "save it"]
    t0 = time.perf_counter()
    async with run_agentd(args, env=env) as a:
        with trio.fail_after(STEP_TIMEOUT):
            code = await a.proc.wait()
        wall = time.perf_counter() - t0
        await a.wait_eof()
    if code != 0:
        raise RuntimeError(f"agentd --mode once exited {code}:\n" + "\n".join(a.raw[-20:]))
    firsts: dict[str, float] = {"exit": wall}
    for ln in a.lines:
        firsts.setdefault(ln.ev["event"], ln.t - t0)
        if "ts" in ln.ev:
            firsts.setdefault("ts:" + ln.ev["event"], _unix(ln.ev["ts"]))
    return wall, firsts


def _unix(ts: str) -> float:
    import datetime as dt

    return dt.datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


async def sdk_in_process() -> float:
    t0 = time.perf_counter()
    with trio.fail_after(STEP_TIMEOUT):
        async with Client(StdioServerParameters(command=SERVER[0], args=SERVER[1:], env=ENV)) as client:
            result = await client.call_tool("memo_set", {"key": "task", "value": "bench"})
    if result.is_error:
        raise RuntimeError(f"memo_set failed: {result}")
    return time.perf_counter() - t0


async def sdk_fresh_process() -> float:
    t0 = time.perf_counter()
    with trio.fail_after(STEP_TIMEOUT):
        await trio.run_process([PY, "-c", FLOOR_SCRIPT], env=ENV, stdin=subprocess.DEVNULL)
    return time.perf_counter() - t0


async def main(n: int) -> None:
    print(f"bench_once: {machine_note()}; n={n} (+1 warm-up each)")
    agentd: list[float] = []
    phases: list[dict[str, float]] = []
    inproc: list[float] = []
    fresh: list[float] = []
    with tempfile.TemporaryDirectory(prefix="agentd-bench-") as tmp:
        model = write_script(
            Path(tmp) / "once.json",
            [
                {
                    "tool_calls": [
                        {"name": "memo__memo_set", "arguments": {"key": "task", "value": "{instruction}"}}
                    ]
                },
                {"text": "saved: {last_tool_result}"},
            ],
            then="stop",
        )
        for i in range(n + 1):
            wall, firsts = await run_agentd_once(model)
            a = await sdk_in_process()
            b = await sdk_fresh_process()
            if i:
                agentd.append(wall)
                phases.append(firsts)
                inproc.append(a)
                fresh.append(b)
    ref = p50(fresh)
    table(
        "agentd --mode once (script model, one memo_set over stdio) vs the SDK doing the same; ms",
        ["what", "n", "p50 ms", "min ms", "max ms", "x sdk fresh process"],
        [
            [
                name,
                len(xs),
                fmt(p50(xs) * 1000, 0),
                fmt(min(xs) * 1000, 0),
                fmt(max(xs) * 1000, 0),
                fmt(p50(xs) / ref),
            ]
            for name, xs in (
                ("agentd --mode once (whole command)", agentd),
                ("floor: sdk fresh process (python -c, server, 1 call)", fresh),
                ("floor: sdk in-process (server start + 1 call)", inproc),
            )
        ],
    )
    rows = []
    prev = 0.0
    for event, what in PHASES:
        at = p50([f[event] for f in phases if event in f])
        rows.append([event, what, fmt(at * 1000, 0), fmt((at - prev) * 1000, 0)])
        prev = at
    table(
        "where agentd's time goes (median first arrival of each telemetry event)",
        ["event", "phase", "at ms", "+ms"],
        rows,
    )
    print(f"agentd overhead over the fresh-process SDK floor: {(p50(agentd) - ref) * 1000:.0f} ms (p50)")


async def providers_main(n: int, prev_ref: str | None) -> None:
    from _providers import SPECS, code_env, fake_provider, merge_base, previous_code, provider_env

    from tests.fakes.provider_server import anthropic_reply, openai_reply

    ref = prev_ref or merge_base()
    print(
        f"bench_once --providers: {machine_note()}; n={n} per side (+1 warm-up each); previous code: {ref[:12]}"
    )
    walls: dict[tuple[str, str], list[float]] = {}
    spawn_to_call: dict[tuple[str, str], list[float]] = {}
    start_to_spawn: dict[tuple[str, str], list[float]] = {}

    def replies(provider: str) -> list[Any]:
        if provider == "openai":
            call = ("c1", "memo__memo_set", '{"key": "task", "value": "bench"}')
            return [openai_reply(tool_calls=[call]), openai_reply("saved")]
        return [
            anthropic_reply(None, tool_uses=[("t1", "memo__memo_set", {"key": "task", "value": "bench"})]),
            anthropic_reply("saved"),
        ]

    async def once(provider: str, side: str, code: dict[str, str], tmp: Path, record: bool) -> None:
        async with fake_provider(provider, replies(provider)) as (_fake, server):
            env = {**code, **provider_env(provider, server.base_url, tmp)}
            wall, firsts = await run_agentd_once(SPECS[provider], env)
        if record:
            walls.setdefault((provider, side), []).append(wall)
            spawn_to_call.setdefault((provider, side), []).append(
                firsts["ts:model.call"] - firsts["ts:subagent.spawn"]
            )
            start_to_spawn.setdefault((provider, side), []).append(
                firsts["ts:subagent.spawn"] - firsts["ts:supervisor.start"]
            )

    with tempfile.TemporaryDirectory(prefix="agentd-bench-") as tmp, previous_code(ref) as prev:
        sides = [("this", code_env(REPO)), ("previous", code_env(prev))]
        for i in range(n + 1):
            for provider in ("openai", "anthropic"):
                for side, code in sides if i % 2 == 0 else sides[::-1]:
                    await once(provider, side, code, Path(tmp), record=i > 0)
            await once("bedrock", "this", sides[0][1], Path(tmp), record=i > 0)

    rows = []
    for (provider, side), xs in walls.items():
        base = walls.get((provider, "previous"), xs)
        calls = spawn_to_call[(provider, side)]
        starts = start_to_spawn[(provider, side)]
        rows.append(
            [
                SPECS[provider].split(":")[0] + ":",
                side,
                len(xs),
                fmt(p50(xs) * 1000, 0),
                fmt(min(xs) * 1000, 0),
                fmt(p50(xs) / p50(base)),
                fmt(p50(starts) * 1000, 0),
                fmt(p50(calls) * 1000, 1),
            ]
        )
    table(
        "agentd --mode once against a loopback provider (tool call + answer); ms; ratio = p50 / previous code's p50",
        [
            "model",
            "code",
            "n",
            "p50 ms",
            "min ms",
            "x previous",
            "start -> root spawned ms",
            "spawn -> 1st model.call ms",
        ],
        rows,
    )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("-n", type=int, default=5, help="timed repetitions of each (default 5)")
    ap.add_argument(
        "--providers", action="store_true", help="openai:/anthropic: vs the previous code, and bedrock:"
    )
    ap.add_argument(
        "--prev-ref", help="--providers: the commit to compare with (default: merge base with main)"
    )
    args = ap.parse_args()
    if args.providers:
        trio.run(providers_main, args.n, args.prev_ref)
    else:
        trio.run(main, args.n)
