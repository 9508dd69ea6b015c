"""The reactive path: push → delivered into a warm session, and a 10,000-update storm.

Run: ``/work/venv/bin/python bench/bench_reactive.py [--quick]`` (about 30-45 s).

**Latency.** The bundled memo server runs once, over Streamable HTTP
(``agentd serve memo --http 127.0.0.1:0``), so three clients share it:

* agentd ``--mode reactive`` (``--mcp-http``), subscribed to ``memo://notes``
  with a *continue* route into the warm session ``s``, ``debounce = 0``;
* the floor: an SDK client in this process listening on ``memo://notes``;
* the trigger: an SDK client in this process that calls ``memo_set``.

Per sample, t0 is taken just before ``memo_set``; then, all in this process
with ``perf_counter``: the floor's ``ResourceUpdated`` arrives; agentd's
``resource.updated`` and ``session.deliver`` telemetry lines arrive (read from
its stderr pipe, so they include a pipe write and read each); then its
``model.call`` line (the warm child got the input, its script model answered
and its usage report reached the reactor: an upper bound on "the child
received its input", which cannot be observed from outside). The figure the
goal is about is ``session.deliver - floor`` per sample (paired, same push),
so the SDK's own notify latency, HTTP included, cancels out. It still
includes agentd's telemetry write and our read of it, so it overstates the
reactor's own cost.

**Storm.** ``bench/_storm_server.py`` over stdio (agentd's usual transport)
with 100 URIs, subscribed as ``storm://*`` (one listen stream) and routed
into one warm session. Each round, the server publishes 10,000 updates
round-robin over the 100 URIs (triggered through a FIFO). Checked: every
URI's last update is followed by a delivery that names it (so the session
re-reads the latest state), counted from the telemetry; agentd's RSS and USS
before, after each round and its peak (sampled every 500 telemetry lines).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil
import trio
from _util import (
    ENV,
    PY,
    REPO,
    STEP_TIMEOUT,
    MiB,
    ZygoteLost,
    fmt,
    machine_note,
    p50,
    pct,
    run_agentd,
    table,
    uss,
    write_script,
)
from mcp import Client

#: Samples discarded before timing (first pushes build the SDK's lazy validators).
WARMUP = 10

LISTENER = """
import sys, trio
from mcp import Client
async def main():
    async with Client(sys.argv[1]) as c, c.listen(resource_subscriptions=["memo://notes"]) as sub:
        sys.stdout.write("ready\\n"); sys.stdout.flush()
        async for _ in sub:
            sys.stdout.write("u\\n"); sys.stdout.flush()
trio.run(main)
"""

#: Start-up only: agentd subscribes in the background after ``reactor.start``
#: and announces it only with ``--verbose`` (which would add a telemetry line
#: to the measured path), so the bench pokes the memo server and waits this
#: long for agentd to see the change before poking again.
PROBE_WAIT = 0.5

SESSION_CONFIG = """
mode = "reactive"
model = "{model}"
instruction = "bench"
subscribe = ["{server}:{glob}"]

[[routes]]
name = "bench"
match = "{glob}"
disposition = "continue"
session = "s"
debounce = "{debounce}"
reread_on_start = false
{extra}
"""


def config(
    tmp: Path, name: str, *, server: str, glob: str, debounce: str, queue_cap: int | None = None
) -> str:
    model = write_script(tmp / f"{name}.json", [{"text": "NO_REPLY"}])
    path = tmp / f"{name}.toml"
    extra = "" if queue_cap is None else f"queue_cap = {queue_cap}"
    path.write_text(
        SESSION_CONFIG.format(model=model, server=server, glob=glob, debounce=debounce, extra=extra)
    )
    return str(path)


@contextlib.asynccontextmanager
async def memo_http() -> AsyncIterator[str]:
    """``agentd serve memo --http 127.0.0.1:0``: its URL once it listens; terminated and reaped on exit."""
    async with trio.open_nursery() as nursery:
        proc = await trio.lowlevel.open_process(
            [PY, "-m", "agentd", "serve", "memo", "--http", "127.0.0.1:0"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=ENV,
        )
        try:
            assert proc.stderr is not None
            buf = b""
            with trio.fail_after(STEP_TIMEOUT):
                while (m := re.search(rb"listening on (\S+)", buf)) is None:
                    chunk = await proc.stderr.receive_some(4096)
                    if not chunk:
                        raise RuntimeError(
                            f"memo server ended before listening: {buf.decode(errors='replace')}"
                        )
                    buf += chunk

            async def drain(stream: Any) -> None:
                while await stream.receive_some(65536):
                    pass

            nursery.start_soon(drain, proc.stderr)
            yield m.group(1).decode()
        finally:
            proc.terminate()
            with trio.fail_after(STEP_TIMEOUT):
                await proc.wait()
            nursery.cancel_scope.cancel()


async def latency(tmp: Path, n: int) -> None:
    async with memo_http() as url:
        cfg = config(tmp, "latency", server="memo", glob="memo://notes", debounce="0")
        async with run_agentd(["--config", cfg, "--mcp-http", f"memo={url}"]) as a:
            await a.wait_for("reactor.start")
            rows = await _samples(a, url, n)
            await a.stop_and_wait()
    floor0, floor, upd, deliver, child = rows
    added = [d - f for d, f in zip(deliver, floor, strict=True)]
    added_upd = [u - f for u, f in zip(upd, floor, strict=True)]
    added_child = [c - f for c, f in zip(child, floor, strict=True)]
    added_in = [d - f for d, f in zip(deliver, floor0, strict=True)]
    reactor = [d - u for d, u in zip(deliver, upd, strict=True)]
    us = 1e6
    table(
        f"push -> warm session (memo over HTTP, continue route, debounce 0); µs from memo_set start; n={len(floor)}",
        ["arrival here of", "p50 µs", "p95 µs"],
        [
            ["floor: SDK listener in this process", fmt(p50(floor0) * us, 0), fmt(pct(floor0, 0.95) * us, 0)],
            [
                "floor: SDK listener in its own process, one line per event on a pipe",
                fmt(p50(floor) * us, 0),
                fmt(pct(floor, 0.95) * us, 0),
            ],
            ["agentd resource.updated line", fmt(p50(upd) * us, 0), fmt(pct(upd, 0.95) * us, 0)],
            ["agentd session.deliver line", fmt(p50(deliver) * us, 0), fmt(pct(deliver, 0.95) * us, 0)],
            [
                "agentd model.call line (child got input + 1 self-MCP trip)",
                fmt(p50(child) * us, 0),
                fmt(pct(child, 0.95) * us, 0),
            ],
        ],
    )
    table(
        "added over the SDK's own notify (paired per push, vs the own-process listener: same pipe hop); µs",
        ["added by agentd up to", "p50 µs", "p95 µs"],
        [
            [
                "resource.updated (upstream task -> reactor)",
                fmt(p50(added_upd) * us, 0),
                fmt(pct(added_upd, 0.95) * us, 0),
            ],
            ["session.deliver (goal <= 100 µs p50)", fmt(p50(added) * us, 0), fmt(pct(added, 0.95) * us, 0)],
            [
                "model.call (upper bound on the child's receipt)",
                fmt(p50(added_child) * us, 0),
                fmt(pct(added_child, 0.95) * us, 0),
            ],
            [
                "reactor only: session.deliver - resource.updated (0 when one read holds both lines)",
                fmt(p50(reactor) * us, 0),
                fmt(pct(reactor, 0.95) * us, 0),
            ],
            [
                "session.deliver vs the in-process listener (floor without a pipe hop)",
                fmt(p50(added_in) * us, 0),
                fmt(pct(added_in, 0.95) * us, 0),
            ],
        ],
    )
    v = p50(added) * us
    print(f"goal <= 100 µs added (p50, to session.deliver): {'met' if v <= 100 else 'NOT met'} ({v:.0f} µs)")


async def _samples(a: Any, url: str, n: int) -> tuple[list[float], ...]:
    async with Client(url) as trigger:
        # The first change agentd sees starts the warm session s (its first delivery).
        with trio.fail_after(STEP_TIMEOUT):
            while True:
                mark = len(a.lines)
                await trigger.call_tool("memo_set", {"key": "k", "value": "probe"})
                with trio.move_on_after(PROBE_WAIT):
                    await a.wait_for("resource.updated", after=mark)
                    break
        await a.wait_for("turn.end")
    remote = await trio.lowlevel.open_process(
        [PY, "-c", LISTENER, url], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=ENV
    )
    assert remote.stdout is not None
    with trio.fail_after(STEP_TIMEOUT):
        if not (await remote.stdout.receive_some(64)).startswith(b"ready"):
            raise RuntimeError("the out-of-process floor listener did not start")
    try:
        return await _samples_with(a, url, n, remote)
    finally:
        remote.kill()
        with trio.CancelScope(shield=True):
            await remote.wait()


async def _samples_with(a: Any, url: str, n: int, remote: trio.Process) -> tuple[list[float], ...]:
    floor: list[float] = []
    floor_proc: list[float] = []
    upd: list[float] = []
    deliver: list[float] = []
    child: list[float] = []
    assert remote.stdout is not None
    remote_out = remote.stdout
    async with Client(url) as trigger, Client(url) as listener:
        pending = b""
        async with listener.listen(resource_subscriptions=["memo://notes"]) as sub:
            events = sub.__aiter__()
            for i in range(WARMUP + n):
                mark = len(a.lines)
                got: dict[str, float] = {}

                async def wait_floor(got: dict[str, float] = got) -> None:
                    await events.__anext__()
                    got["floor"] = time.perf_counter()

                async def wait_remote(got: dict[str, float] = got) -> None:
                    nonlocal pending
                    while b"u" not in pending:
                        pending += await remote_out.receive_some(64)
                    got["proc"] = time.perf_counter()
                    pending = pending[pending.index(b"u") + 1 :]

                t0 = time.perf_counter()
                with trio.fail_after(STEP_TIMEOUT):
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(wait_floor)
                        nursery.start_soon(wait_remote)
                        await trigger.call_tool("memo_set", {"key": "k", "value": i})
                        ir, r = await a.wait_for("resource.updated", after=mark)
                        idl, d = await a.wait_for(
                            "session.deliver", lambda e: e.get("session") == "s", after=ir
                        )
                        im, m = await a.wait_for("model.call", after=idl)
                        await a.wait_for("turn.end", after=im)
                if i >= WARMUP:
                    floor.append(got["floor"] - t0)
                    floor_proc.append(got["proc"] - t0)
                    upd.append(r.t - t0)
                    deliver.append(d.t - t0)
                    child.append(m.t - t0)
    return floor, floor_proc, upd, deliver, child


async def storm(
    tmp: Path, rounds: int, updates: int, n_uris: int, debounce: str, queue_cap: int | None
) -> None:
    tmp = tmp / f"storm-{queue_cap}"
    tmp.mkdir()
    fifo = tmp / "storm.fifo"
    os.mkfifo(fifo)
    progress = Progress(tmp / "storm.progress")
    cfg = config(tmp, "storm", server="storm", glob="storm://*", debounce=debounce, queue_cap=queue_cap)
    server = (
        f"storm={PY} {REPO / 'bench' / '_storm_server.py'} --uris {n_uris} --trigger {fifo}"
        f" --ready {tmp / 'storm.progress'} --expect {n_uris}"
    )
    drop = {"model.call", "subagent.started"}
    peak = {"rss": 0}
    proc_box: dict[str, psutil.Process] = {}

    def sample(e: dict[str, Any], _n: list[int] = [0]) -> bool:  # noqa: B006 - a counter across calls
        _n[0] += 1
        if _n[0] % 500 == 0 and "p" in proc_box:
            with contextlib.suppress(psutil.Error):
                peak["rss"] = max(peak["rss"], proc_box["p"].memory_info().rss)
        return e.get("event") not in drop

    results: list[list[object]] = []
    mem: list[tuple[str, int, int]] = []
    async with run_agentd(["--config", cfg, "--mcp-stdio", server], keep=sample) as a:
        proc_box["p"] = psutil.Process(a.proc.pid)
        await progress.wait_line("ready")
        wfd = os.open(fifo, os.O_WRONLY)
        try:
            mem.append(("after start-up", proc_box["p"].memory_info().rss, uss(a.proc.pid)))
            for r in range(rounds):
                mark = len(a.lines)
                t0 = time.perf_counter()
                os.write(wfd, f"{updates}\n".encode())
                await progress.wait_line("done")
                published = time.perf_counter() - t0
                last, lost = await _all_delivered(a, mark, n_uris)
                dt = last - t0
                seg = [ln.ev for ln in a.lines[mark:]]
                received = sum(1 for e in seg if e["event"] == "resource.updated")
                deliveries = [e for e in seg if e["event"] == "route.deliver"]
                turns = sum(1 for e in seg if e["event"] == "turn.end")
                uris = {u for e in deliveries for u in e["uris"]}
                mem.append((f"after round {r + 1}", proc_box["p"].memory_info().rss, uss(a.proc.pid)))
                dropped = sum(1 for e in seg if e["event"] == "route.dropped")
                results.append(
                    [
                        r + 1,
                        updates,
                        fmt(published * 1000, 0),
                        received,
                        dropped,
                        len(deliveries),
                        turns,
                        len(uris),
                        len(lost),
                        fmt(dt * 1000, 0),
                    ]
                )
        finally:
            os.close(wfd)
            await progress.aclose()
        after_rounds = len(a.lines)
        await a.stop_and_wait()
        await a.wait_eof()
        bad = _undelivered(a)
    table(
        f"storm: {updates} updates over {n_uris} URIs per round, continue route, debounce {debounce}, "
        f"queue_cap {queue_cap if queue_cap is not None else 'unset (default)'}",
        [
            "round",
            "published",
            "server publish ms",
            "received by agentd",
            "dropped at queue cap",
            "deliveries",
            "turns",
            "distinct URIs delivered",
            "URIs whose last change is lost",
            "trigger -> quiet ms",
        ],
        results,
    )
    table(
        "agentd memory during the storm (MiB)",
        ["when", "RSS", "USS"],
        [[w, fmt(rss / MiB, 1), fmt(u / MiB, 1)] for w, rss, u in mem]
        + [["peak RSS seen (every 500 lines)", fmt(peak["rss"] / MiB, 1), "-"]],
    )
    growth = (mem[-1][1] - mem[1][1]) / MiB if len(mem) > 2 else float("nan")
    print(
        f"RSS growth from round 1 to round {rounds}: {growth:+.1f} MiB; "
        f"whole run: URIs whose last update before the drain had no later delivery: {len(bad)} {sorted(bad)[:5]}"
    )
    late = sum(1 for ln in a.lines[after_rounds:] if ln.ev["event"] == "resource.updated")
    if late:
        print(f"  ({late} updates reached agentd after the bench saw the round quiet, before shutdown)")


class SessionLost(RuntimeError):
    """The session's child died mid-storm (a known agentd bug; reported, not hidden)."""


class Progress:
    """The storm server's progress lines (``ready``, ``done N``) read from its FIFO."""

    def __init__(self, path: Path) -> None:
        os.mkfifo(path)
        # O_RDWR: the read end never sees EOF before the server opens its end.
        self._stream = trio.lowlevel.FdStream(os.open(path, os.O_RDWR | os.O_NONBLOCK))
        self._buf = b""

    async def wait_line(self, prefix: str) -> str:
        with trio.fail_after(STEP_TIMEOUT):
            while True:
                line, nl, rest = self._buf.partition(b"\n")
                if nl:
                    self._buf = rest
                    if line.decode().startswith(prefix):
                        return line.decode()
                    continue
                self._buf += await self._stream.receive_some(256)

    async def aclose(self) -> None:
        await self._stream.aclose()


def _covered(a: Any, mark: int) -> tuple[set[str], set[str], set[str]]:
    """After ``mark``: (URIs updated, URIs whose last update has a later delivery, URIs whose last update was dropped).

    A dropped last update is lost for good: no later change will deliver that URI.
    """
    last_update: dict[str, int] = {}
    last_dropped: dict[str, bool] = {}
    last_deliver: dict[str, int] = {}
    for i in range(mark, len(a.lines)):
        e = a.lines[i].ev
        if e["event"] == "resource.updated":
            last_update[e["uri"]] = i
            last_dropped[e["uri"]] = str(e.get("outcome") or "").startswith("dropped")
        elif e["event"] == "route.deliver":
            for u in e["uris"]:
                last_deliver[u] = i
    done = {u for u, i in last_update.items() if last_deliver.get(u, -1) > i}
    lost = {u for u in last_update if u not in done and last_dropped[u]}
    return set(last_update), done, lost


async def _all_delivered(a: Any, mark: int, n_uris: int) -> tuple[float, set[str]]:
    """Wait until all n_uris URIs were updated since mark, each last update delivered or lost, session idle.

    Returns (arrival time of the last delivery, lost URIs). Checked on each telemetry wake-up (no sleeping).
    """
    with trio.move_on_after(STEP_TIMEOUT):
        while True:
            seen, done, lost = _covered(a, mark)
            tail = [ln for ln in a.lines[mark:] if ln.ev["event"] in ("route.deliver", "turn.end")]
            idle = bool(tail) and tail[-1].ev["event"] == "turn.end"
            if len(seen) == n_uris and done | lost == seen and idle:
                return max(ln.t for ln in tail if ln.ev["event"] == "route.deliver"), lost
            if a._eof:
                raise RuntimeError("agentd ended during the storm:\n" + "\n".join(a.raw[-20:]))
            if any(ln.ev["event"] in ("subagent.exit", "zygote.degraded") for ln in a.lines[mark:]):
                raise SessionLost(
                    "the warm session's child died during the storm "
                    f"({[ln.ev for ln in a.lines[mark:] if ln.ev['event'] in ('subagent.exit', 'zygote.degraded')]}); "
                    "see bench/README.md, Findings 1-2 (zygote killed by PR_SET_PDEATHSIG ~10 s after start; "
                    "a continue route stays busy after its session crashes)"
                )
            await a._changed.wait()
    dump = Path(tempfile.gettempdir()) / "bench_reactive_storm_failure.ndjson"
    dump.write_text("\n".join([json.dumps(ln.ev) for ln in a.lines] + a.raw))
    counts: dict[str, int] = {}
    for ln in a.lines[mark:]:
        counts[ln.ev["event"]] = counts.get(ln.ev["event"], 0) + 1
    raise RuntimeError(
        f"not every URI's last update was delivered within {STEP_TIMEOUT:g}s: updated {len(seen)}, "
        f"delivered after their last update {len(done)}, session idle {idle}; events since the round began: "
        f"{counts}; last lines: {[ln.ev for ln in a.lines[-3:]]}; telemetry and stderr in {dump}"
    )


def _undelivered(a: Any) -> set[str]:
    """URIs whose last update (before the drain began) has no later delivery."""
    end = next((i for i, ln in enumerate(a.lines) if ln.ev["event"] == "drain.start"), len(a.lines))
    last_update: dict[str, int] = {}
    last_deliver: dict[str, int] = {}
    for i, ln in enumerate(a.lines):
        e = ln.ev
        if e["event"] == "resource.updated" and i < end:
            last_update[e["uri"]] = i
        elif e["event"] == "route.deliver":
            for u in e["uris"]:
                last_deliver[u] = i
    return {u for u, i in last_update.items() if last_deliver.get(u, -1) < i}


WAKE_CONFIG = """
mode = "reactive"
model = "openai:gpt-4o-mini"
instruction = "bench"
subscribe = ["memo:memo://notes"]

[[routes]]
name = "bench"
match = "memo://notes"
disposition = "{disposition}"
{session}
debounce = "0"
reread_on_start = false
"""


async def wake(
    tmp: Path, n: int, disposition: str, timeline: Path | None = None
) -> list[tuple[float, float]]:
    """A memo change → the model request of the agent it wakes, at a loopback ``openai:`` provider.

    ``spawn``: a fresh agent per change (forked from the zygote); ``continue``:
    a turn of the warm session ``s`` (a spawn sample starts once the previous
    agent exited). Returns (floor, request) per sample:
    the arrival of the SDK's own notification at an in-process listener, and
    of agentd's request at the fake provider, both after ``memo_set`` started.
    """
    from _providers import TIMELINE_ENV, fake_provider, provider_env
    from _providers import mark as timeline_mark

    from tests.fakes.provider_server import openai_reply

    arrived = trio.Event()
    stamps: list[float] = []

    def answer(request: Any) -> Any:
        nonlocal arrived
        stamps.append(time.perf_counter())
        timeline_mark("provider.received")
        arrived.set()
        return openai_reply("NO_REPLY")

    samples: list[tuple[float, float]] = []
    async with fake_provider("openai", None) as (_fake, server), memo_http() as url:
        server._handler = answer
        cfg = tmp / f"wake-{disposition}.toml"
        session = 'session = "s"' if disposition == "continue" else ""
        cfg.write_text(WAKE_CONFIG.format(disposition=disposition, session=session))
        env = provider_env("openai", server.base_url, tmp)
        if timeline is not None:
            env[TIMELINE_ENV] = str(timeline)
        async with run_agentd(["--config", str(cfg), "--mcp-http", f"memo={url}"], env=env) as a:
            await a.wait_for("reactor.start")
            async with (
                Client(url) as trigger,
                Client(url) as listener,
                listener.listen(resource_subscriptions=["memo://notes"]) as sub,
            ):
                events = sub.__aiter__()
                for i in range(WARMUP + n):
                    arrived = trio.Event()
                    before = len(stamps)
                    mark = len(a.lines)
                    got: dict[str, float] = {}

                    async def wait_floor(got: dict[str, float] = got) -> None:
                        await events.__anext__()
                        got["floor"] = time.perf_counter()
                        timeline_mark("floor.notified")

                    timeline_mark("bench.t0")
                    t0 = time.perf_counter()
                    with trio.fail_after(STEP_TIMEOUT):
                        async with trio.open_nursery() as inner:
                            inner.start_soon(wait_floor)
                            await trigger.call_tool("memo_set", {"key": "k", "value": i})
                            while len(stamps) == before:
                                await arrived.wait()
                            await a.wait_for("turn.end", after=mark)
                            if disposition == "spawn":
                                # The next change finds no agent running (its exit is not
                                # part of the next sample), as a change that comes alone.
                                await a.wait_for("subagent.exit", after=mark)
                    if i >= WARMUP:
                        samples.append((got["floor"] - t0, stamps[before] - t0))
            await a.stop_and_wait()
    return samples


async def wake_main(n: int, timeline: str | None) -> None:
    print(f"bench_reactive --wake: {machine_note()}; n={n} per route (+{WARMUP} warm-up)")
    rows = []
    with tempfile.TemporaryDirectory(prefix="agentd-bench-") as tmp:
        for disposition in ("spawn", "continue"):
            path = None
            if timeline:
                from _providers import reopen_timeline

                path = Path(f"{timeline}.{disposition}")
                reopen_timeline(path)
            got = await wake(Path(tmp), n, disposition, path)
            if path is not None:
                from _timeline import report

                report(path, f"wake, {disposition} route", skip=WARMUP)
            floor = [f for f, _ in got]
            request = [r for _, r in got]
            added = [r - f for f, r in got]
            rows.append(
                [
                    f"{disposition} route",
                    len(got),
                    fmt(p50(request) * 1000),
                    fmt(pct(request, 0.95) * 1000),
                    fmt(p50(floor) * 1000),
                    fmt(p50(added) * 1000),
                ]
            )
    print(f"load average at the end: {machine_note()}")
    table(
        "memo change -> the woken agent's model request at a loopback openai: provider (memo over HTTP, "
        "debounce 0); ms from memo_set start",
        ["route", "n", "request p50", "request p95", "floor: SDK notify in-process p50", "added p50"],
        rows,
    )


async def main(quick: bool) -> None:
    print(f"bench_reactive: {machine_note()}")
    with tempfile.TemporaryDirectory(prefix="agentd-bench-") as tmp:
        try:
            await latency(Path(tmp), 60 if quick else 150)
        except* ZygoteLost as group:
            print(f"latency: NOT measured: {group.exceptions[0]}")
        # As configured by default (queue_cap unset), then with the queue sized to the 100 watched URIs.
        for rounds, cap in ((1, None), (2 if quick else 3, 100)):
            try:
                await storm(Path(tmp), rounds, 10_000, 100, "0", cap)
            except* SessionLost as group:
                print(f"storm with queue_cap {cap}: NOT measured: {group.exceptions[0]}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer samples and rounds")
    ap.add_argument(
        "--wake",
        action="store_true",
        help="change -> model request of the woken agent, spawn and continue routes",
    )
    ap.add_argument("-n", type=int, default=40, help="--wake: samples per route (default 40)")
    ap.add_argument(
        "--timeline",
        metavar="FILE",
        help="--wake: write agentd's timeline (AGENTD_TIMELINE) to FILE.ROUTE and print its stages",
    )
    args = ap.parse_args()
    if args.wake:
        trio.run(wake_main, args.n, args.timeline)
    else:
        trio.run(main, args.quick)
