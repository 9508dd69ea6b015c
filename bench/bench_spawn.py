"""Subagent spawn → ready, and private memory per idle warm child.

Run: ``/work/venv/bin/python bench/bench_spawn.py [--quick]`` (about 30-40 s; ``--quick`` ~15 s).

The :class:`agentd.supervisor.children.tree.Tree` runs in this process with a minimal
hub (no upstream servers) and a loop standing in for the reactor that answers
the children's usage reports and turn ends. The model is ``script:``.

*Ready* is the arrival here of the child's first usage report (a control
frame, validated by the child's reader task). The child sends it right after
its first model call returns, so with the script model (which answers in
microseconds) it is an **upper bound** on "the child's first model request
was sent": it also includes the script model's answer and one frame from the
child to the supervisor.

Rows:

* ``zygote fork``: agentd's fast path (fork of the pre-warmed zygote).
* ``fresh interpreter``: ``use_zygote=False`` (``python -P -m agentd.agent.child FD FD``),
  the naive way to start a child: the ``python -c "import trio, mcp"`` class.
* floors measured in the same run: ``fork of a warm template`` (a process that
  imported trio and mcp forks; the child writes one byte), ``python -S -c pass``
  and ``python -c "import trio, mcp"`` (each with ``trio.run_process``).

Memory: USS (``psutil memory_full_info().uss``, pages only this process holds)
of warm children held in their ``turn_end`` wait (the state of an idle warm
session), for both spawn paths, against an idle naive child
(``python -c "import trio, mcp; input()"``).

``--providers`` (about 60-90 s) measures instead, per HTTP provider, spawn →
the first model request arriving at a loopback fake provider (and → the
child's first usage message), zygote path, for ``openai:`` and ``anthropic:``
with this checkout's code and with the code of ``--prev-ref`` (default: the
merge base with ``main``), runs of the two alternating in one run; and
``bedrock:`` (the official SDK, SigV4 checked by the fake) with this
checkout's code only; and, per round, a few spawns as fresh interpreters
(``use_zygote=False``, the naive child: the "fresh / this" ratio). Each side
runs in its own process (``--measure``).
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import trio
from _util import (
    ENV,
    PY,
    REPO,
    STEP_TIMEOUT,
    MiB,
    fmt,
    machine_note,
    p50,
    pct,
    table,
    uss,
    write_script,
)

from agentd.events import ChildExited, TurnEnded, UsageReported
from agentd.selfmcp.protocol import NextTurn, SpawnPayload, ToolSpecFrame, UsageVerdict
from agentd.selfmcp.server import serve_child
from agentd.supervisor.hub import SupervisorHub

try:
    from agentd.observe.telemetry import NullTelemetry
    from agentd.supervisor.children.tree import Tree
except ModuleNotFoundError:  # --prev-ref older than the layout of issue 28 (rfcs/0340)
    from agentd.supervisor.tree import Tree  # type: ignore[no-redef]
    from agentd.telemetry import NullTelemetry  # type: ignore[no-redef]

#: Spawns discarded before timing each path (first forks touch cold pages).
WARMUP = 3

TEMPLATE = r"""
import os, sys
import trio, mcp  # the template is warm: children inherit these for free
os.write(1, b"w")
while os.read(0, 1):
    pid = os.fork()
    if pid == 0:
        os.write(1, b"r")
        os._exit(0)
    os.waitpid(pid, 0)
"""


async def _answer(recv: trio.MemoryReceiveChannel[Any], agent: str, *, hold: bool) -> tuple[float, Any]:
    """Follow one child: returns (time its first usage arrived, held turn_end reply or None)."""
    first: float | None = None
    while True:
        with trio.fail_after(STEP_TIMEOUT):
            ev = await recv.receive()
        if isinstance(ev, UsageReported):
            if first is None:
                first = time.perf_counter()
            ev.reply.answer(UsageVerdict(id=ev.report.id, proceed=True))
        elif isinstance(ev, TurnEnded):
            assert first is not None
            if hold:
                return first, ev
            ev.reply.answer(NextTurn(id=ev.end.id, action="exit"))
        elif isinstance(ev, ChildExited) and ev.agent == agent:
            assert first is not None, f"child {agent} exited before its first model call: {ev}"
            return first, None


def tree_and_tools(
    send: trio.MemorySendChannel[Any], *, use_zygote: bool, **extra: Any
) -> tuple[Tree, tuple[ToolSpecFrame, ...]]:
    """A ``Tree`` whose children a ``SupervisorHub`` with no upstream serves, and the hub's tool specs."""
    hub = SupervisorHub(events=send, upstreams={}, telemetry=NullTelemetry())
    tree = Tree(
        events=send,
        serve_child=partial(serve_child, hub),
        telemetry=NullTelemetry(),
        use_zygote=use_zygote,
        **extra,
    )
    return tree, tuple(ToolSpecFrame(**spec) for spec in hub.tool_specs())


async def start_timed(nursery: trio.Nursery, tree: Tree) -> float:
    """Start ``tree`` in ``nursery``; returns how long its start-up took, in s."""
    t0 = time.perf_counter()
    await nursery.start(tree.run)
    return time.perf_counter() - t0


async def until_no_child(tree: Tree, recv: trio.MemoryReceiveChannel[Any]) -> None:
    """Read the tree's events until none of its children is alive (bounded)."""
    with trio.fail_after(STEP_TIMEOUT):
        while tree.live_count():
            await recv.receive()


async def tree_path(use_zygote: bool, n: int, hold: int, model: str) -> tuple[list[float], list[int], float]:
    """Spawn ``n`` children one after another (timed), then ``hold`` idle warm ones (USS).

    Returns (ready latencies in ms, USS of held children in bytes, tree start-up in s).
    """
    send, recv = trio.open_memory_channel[Any](1000)
    tree, tools = tree_and_tools(send, use_zygote=use_zygote)

    def payload(agent: str) -> SpawnPayload:
        return SpawnPayload(agent=agent, model=model, system=None, instruction="hi", tools=tools)

    ready: list[float] = []
    held_uss: list[int] = []
    async with trio.open_nursery() as nursery:
        startup = await start_timed(nursery, tree)
        for i in range(WARMUP + n):
            agent = f"s{i}"
            t0 = time.perf_counter()
            tree.spawn(agent, payload(agent))
            first, _ = await _answer(recv, agent, hold=False)
            if i >= WARMUP:
                ready.append((first - t0) * 1000)
        replies = []
        for i in range(hold):
            agent = f"h{i}"
            tree.spawn(agent, payload(agent))
            _, reply = await _answer(recv, agent, hold=True)
            replies.append(reply)
        for i in range(hold):
            pid = tree.children[f"h{i}"].pid
            assert pid is not None
            held_uss.append(uss(pid))
        for held in replies:
            held.reply.answer(NextTurn(id=held.end.id, action="exit"))
        await until_no_child(tree, recv)
        nursery.cancel_scope.cancel()
    return ready, held_uss, startup


def _expect(got: bytes, want: bytes) -> None:
    if got != want:
        raise RuntimeError(f"floor process said {got!r}, expected {want!r}")


async def fork_floor(n: int) -> list[float]:
    """A warm template (trio and mcp imported) forks; the child writes one byte: request → byte, ms."""
    proc = await trio.lowlevel.open_process(
        [PY, "-c", TEMPLATE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=ENV
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    out: list[float] = []
    try:
        with trio.fail_after(STEP_TIMEOUT):
            _expect(await proc.stdout.receive_some(1), b"w")
        for i in range(WARMUP + n):
            t0 = time.perf_counter()
            await proc.stdin.send_all(b"f")
            with trio.fail_after(STEP_TIMEOUT):
                _expect(await proc.stdout.receive_some(1), b"r")
            if i >= WARMUP:
                out.append((time.perf_counter() - t0) * 1000)
    finally:
        await proc.stdin.aclose()
        with trio.fail_after(STEP_TIMEOUT):
            await proc.wait()
    return out


async def exec_floor(argv: list[str], n: int) -> list[float]:
    out: list[float] = []
    for i in range(1 + n):
        t0 = time.perf_counter()
        await trio.run_process(argv, env=ENV)
        if i >= 1:
            out.append((time.perf_counter() - t0) * 1000)
    return out


async def naive_idle_uss(n: int) -> list[int]:
    """USS of ``python -c "import trio, mcp; input()"`` once it has imported and waits on stdin."""
    out: list[int] = []
    for _ in range(n):
        proc = await trio.lowlevel.open_process(
            [PY, "-c", "import trio, mcp, sys; sys.stdout.write('ready\\n'); sys.stdout.flush(); input()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=ENV,
        )
        assert proc.stdin is not None
        assert proc.stdout is not None
        with trio.fail_after(STEP_TIMEOUT):
            _expect((await proc.stdout.receive_some(64))[:5], b"ready")
        out.append(uss(proc.pid))
        await proc.stdin.send_all(b"\n")
        await proc.stdin.aclose()
        with trio.fail_after(STEP_TIMEOUT):
            await proc.wait()
    return out


async def main(quick: bool) -> None:
    n_fast, n_slow, n_floor = (15, 4, 4) if quick else (40, 8, 8)
    hold = 4 if quick else 8
    print(f"bench_spawn: {machine_note()}; zygote n={n_fast}, fresh n={n_slow}")
    with tempfile.TemporaryDirectory(prefix="agentd-bench-") as tmp:
        model = write_script(Path(tmp) / "script.json", [{"text": "done"}])
        z_ready, z_uss, z_start = await tree_path(True, n_fast, hold, model)
        f_ready, f_uss, _ = await tree_path(False, n_slow, max(2, hold // 4), model)
    fork = await fork_floor(n_fast)
    bare = await exec_floor([PY, "-S", "-c", "pass"], n_fast)
    naive = await exec_floor([PY, "-c", "import trio, mcp"], n_floor)
    naive_uss = await naive_idle_uss(3)

    def row(name: str, xs: list[float], ref: float) -> list[object]:
        return [name, len(xs), fmt(p50(xs)), fmt(pct(xs, 0.95)), fmt(p50(xs) / ref, 2)]

    zp50 = p50(z_ready)
    table(
        "spawn -> first usage message (upper bound on 'first model request sent'); ms; ratio = p50 / zygote p50",
        ["path", "n", "p50 ms", "p95 ms", "x zygote"],
        [
            row("agentd: zygote fork", z_ready, zp50),
            row("agentd: fresh interpreter (use_zygote=False)", f_ready, zp50),
            row("floor: fork of a warm template (trio+mcp imported)", fork, zp50),
            row("floor: python -S -c pass", bare, zp50),
            row('floor: python -c "import trio, mcp"', naive, zp50),
        ],
    )
    print(
        f"zygote start-up (imports + rehearsal): {z_start * 1000:.0f} ms; "
        f"goal p50 <= 10 ms: {'met' if zp50 <= 10 else 'NOT met'} ({zp50:.2f} ms); "
        f"speed-up vs fresh agent child {p50(f_ready) / zp50:.0f}x, "
        f"vs bare 'import trio, mcp' {p50(naive) / zp50:.0f}x (goal >= 40x); "
        f"zygote overhead over the fork floor {zp50 - p50(fork):.2f} ms"
    )

    def mrow(name: str, xs: list[int]) -> list[object]:
        m = [x / MiB for x in xs]
        return [name, len(m), fmt(p50(m)), fmt(max(m)), fmt(p50(m) / (p50(naive_uss) / MiB), 3)]

    table(
        "private memory (USS) per idle process; MiB; ratio = p50 / naive idle child",
        ["process", "n", "p50 MiB", "max MiB", "x naive"],
        [
            mrow("agentd child, zygote fork, held in turn_end", z_uss),
            mrow("agentd child, fresh interpreter, held in turn_end", f_uss),
            mrow('naive idle child: python -c "import trio, mcp; input()"', naive_uss),
        ],
    )
    um = p50(z_uss) / MiB
    print(f"goal <= 8 MiB per idle warm child: {'met' if um <= 8 else 'NOT met'} ({um:.2f} MiB)")


async def provider_spawns(provider: str, n: int, fresh: bool = False) -> dict[str, Any]:
    """In this process's ``agentd``: spawn → first request at the fake, and → first usage, for ``provider``.

    ``fresh``: children start as fresh interpreters (``use_zygote=False``), the naive way.
    """
    with tempfile.TemporaryDirectory(prefix="agentd-bench-") as tmp:
        return await _provider_spawns(provider, n, Path(tmp), fresh)


async def _provider_spawns(provider: str, n: int, tmp: Path, fresh: bool = False) -> dict[str, Any]:
    import inspect
    import os

    from _providers import SPECS, fake_provider, mark, provider_env

    async with fake_provider(provider) as (fake, server):
        os.environ.update(provider_env(provider, server.base_url, tmp))
        send, recv = trio.open_memory_channel[Any](1000)
        extra: dict[str, Any] = {}
        if "zygote_env" in inspect.signature(Tree).parameters:  # the app prewarms the model's provider
            import orjson

            extra["zygote_env"] = {"AGENTD_PREWARM_MODELS": orjson.dumps([SPECS[provider]]).decode()}
        tree, tools = tree_and_tools(send, use_zygote=not fresh, **extra)
        requests: list[float] = []
        usages: list[float] = []
        async with trio.open_nursery() as nursery:
            startup = await start_timed(nursery, tree)
            for i in range((1 if fresh else WARMUP) + n):
                agent = f"p{i}"
                before = len(fake.arrivals)
                mark("bench.t0", agent)
                t0 = time.perf_counter()
                tree.spawn(
                    agent, SpawnPayload(agent=agent, model=SPECS[provider], instruction="hi", tools=tools)
                )
                first, _ = await _answer(recv, agent, hold=False)
                if i >= (1 if fresh else WARMUP):
                    requests.append((fake.arrivals[before] - t0) * 1000)
                    usages.append((first - t0) * 1000)
                # The next spawn finds no agent running: one spawn at a time, its exit not timed.
                await until_no_child(tree, recv)
            await until_no_child(tree, recv)
            nursery.cancel_scope.cancel()
        if fake.bad_signatures:
            raise RuntimeError(f"{fake.bad_signatures} bedrock requests had a bad SigV4 signature")
    return {"request_ms": requests, "usage_ms": usages, "startup_s": startup}


async def providers_main(rounds: int, n: int, prev_ref: str | None) -> None:
    import json
    import sys

    from _providers import code_env, merge_base, previous_code

    ref = prev_ref or merge_base()
    print(
        f"bench_spawn --providers: {machine_note()}; {rounds} rounds x n={n} per side; previous code: {ref[:12]}"
    )
    results: dict[tuple[str, str], dict[str, list[float]]] = {}

    async def measure(provider: str, side: str, env: dict[str, str], fresh: bool = False) -> None:
        count = max(2, n // 4) if fresh else n
        out = await trio.run_process(
            [PY, SELF, "--measure", provider, "-n", str(count), *(["--fresh"] if fresh else [])],
            env=env,
            capture_stdout=True,
            stderr=sys.stderr,
        )
        data = json.loads(out.stdout.decode().strip().splitlines()[-1])
        slot = results.setdefault((provider, side), {"request_ms": [], "usage_ms": [], "startup_s": []})
        slot["request_ms"] += data["request_ms"]
        slot["usage_ms"] += data["usage_ms"]
        slot["startup_s"].append(data["startup_s"])

    with previous_code(ref) as prev:
        new_env, old_env = code_env(REPO), code_env(prev)
        for r in range(rounds):
            for provider in ("openai", "anthropic"):
                sides = [("this", new_env), ("previous", old_env)]
                for side, env in sides if r % 2 == 0 else sides[::-1]:
                    await measure(provider, side, env)
                # The naive child in the same run: a fresh interpreter per spawn.
                await measure(provider, "fresh interpreter", new_env, fresh=True)
        for _ in range(rounds):
            await measure("bedrock", "this", new_env)

    rows = []
    for provider in ("openai", "anthropic", "bedrock"):
        for side in ("this", "previous", "fresh interpreter"):
            got = results.get((provider, side))
            if got is None:
                continue
            base = results.get((provider, "previous"), got)
            naive = results.get((provider, "fresh interpreter"))
            rows.append(
                [
                    SPEC_NAMES[provider],
                    side,
                    len(got["request_ms"]),
                    fmt(p50(got["request_ms"])),
                    fmt(pct(got["request_ms"], 0.95)),
                    fmt(p50(got["usage_ms"])),
                    fmt(p50(got["request_ms"]) / p50(base["request_ms"])),
                    fmt(p50(naive["request_ms"]) / p50(got["request_ms"]), 1) if naive else "-",
                    fmt(p50(got["startup_s"]) * 1000, 0),
                ]
            )
    print(f"load average at the end: {machine_note()}")
    table(
        "spawn -> first model request at a loopback provider (zygote fork, or a fresh interpreter per spawn); "
        "ms; x previous = p50 / previous code's p50; fresh / this = how many times faster than the fresh child",
        [
            "model",
            "code",
            "n",
            "request p50",
            "request p95",
            "usage p50",
            "x previous",
            "fresh / this",
            "tree start ms",
        ],
        rows,
    )


#: This script, run again to measure one side in a process of its own.
SELF = str(Path(__file__).resolve())

#: Short names for the table.
SPEC_NAMES = {"openai": "openai:", "anthropic": "anthropic:", "bedrock": "bedrock: (SDK)"}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (~15 s)")
    ap.add_argument(
        "--providers", action="store_true", help="openai:/anthropic: vs the previous code, and bedrock:"
    )
    ap.add_argument(
        "--rounds", type=int, default=4, help="--providers: alternating rounds per side (default 4)"
    )
    ap.add_argument(
        "-n", type=int, default=8, help="--providers/--measure: timed spawns per round (default 8)"
    )
    ap.add_argument(
        "--prev-ref", help="--providers: the commit to compare with (default: merge base with main)"
    )
    ap.add_argument("--measure", metavar="PROVIDER", help=argparse.SUPPRESS)
    ap.add_argument("--fresh", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument(
        "--timeline",
        metavar="FILE",
        help="with --measure: write agentd's timeline (AGENTD_TIMELINE) to FILE and print its stages",
    )
    args = ap.parse_args()
    if args.measure:
        import json

        if args.timeline:
            from _providers import reopen_timeline

            reopen_timeline(Path(args.timeline))
        got = trio.run(provider_spawns, args.measure, args.n, args.fresh)
        if args.timeline:
            from _timeline import report

            report(Path(args.timeline), f"spawn -> request, {args.measure}:", skip=WARMUP)
        print(json.dumps(got))
    elif args.providers:
        trio.run(providers_main, args.rounds, args.n, args.prev_ref)
    else:
        trio.run(main, args.quick)
