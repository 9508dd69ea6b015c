"""Watch stage cost per event, against a bare Monty feed measured in the same run.

Run: /work/venv/bin/python bench/bench_watch.py   (about 10-20 s)

Figures (median of repeated batches, microseconds per event):

* floor, warm       a bare ``feed_run`` in a warm Monty session (the sandbox's own cost)
* floor, fresh      checkout + feed + return (what a per-event session would cost)
* extract           EventLogExtractor.feed of a small read (parse + checks; mostly no new seq)
* stage, sync       extract + WatchFilter.run_sync + dedupe + NoticeBuffer.add
* stage, trio       the same with the filter through trio.to_thread (the reactor's path)
* default lines     extract + default_line + dedupe + buffer, no filter
* throughput        events/s through one watch: 100-event reads, filter on every event,
                    one ``run_batch`` thread hop per read

Then, side by side against a real MCP server over stdio (``tests/mcpservers/watch_server.py``),
in the same run (microseconds per event or call, median of single timings taken round robin):

* bare tool call    ``Upstream.call_tool`` of a read-only tool from trio (the floor)
* filter, no call   one event through ``WatchStage.process_read`` with a filter (the thread hop)
* filter + 1 call   the same filter making one call to that tool through the watch
                    manager's catalog (``call_on_loop``: back onto the event loop, bounded
                    by the run's time left, the same round trip)
"""

from __future__ import annotations

import io
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import trio
from pydantic_monty import Monty

from agentd.watches.extract import EventLogExtractor
from agentd.watches.limits import WatchLimits
from agentd.watches.notices import LineDeduper, NoticeBuffer, default_line, object_key
from agentd.watches.sandbox import FilterPool, WatchFilter
from agentd.watches.stage import WatchStage

REPO = Path(__file__).resolve().parents[1]

FILTER = """
m = event["object"]["metadata"]
f'{event["type"].lower()} {m["namespace"]}/{m["name"]}' if event["type"] != "MODIFIED" else None
"""


def obj(i: int, phase: str) -> dict:
    return {
        "kind": "Bid",
        "metadata": {"name": f"bid-{i}", "namespace": "market", "uid": f"u-{i}", "resourceVersion": str(i)},
        "spec": {"price": i, "cpu": 2, "memory": "4Gi"},
        "status": {"phase": phase},
    }


def read(seqs: range) -> bytes:
    return orjson.dumps(
        {
            "events": [
                {
                    "seq": s,
                    "type": "ADDED" if s % 3 else "MODIFIED",
                    "object": obj(s, "Won"),
                    "old": obj(s, "Deciding"),
                }
                for s in seqs
            ]
        }
    )


def per_call_us(fn: Callable[[], object], n: int, batches: int = 5) -> float:
    results = []
    for _ in range(batches):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        results.append((time.perf_counter() - t) / n * 1e6)
    return statistics.median(results)


def main() -> None:
    event = {
        "watch": "w",
        "uri": "u",
        "type": "ADDED",
        "seq": 1,
        "object": obj(1, "Won"),
        "old": None,
        "changed": None,
    }
    figures: dict[str, float] = {}

    with Monty(min_processes=1, max_processes=4) as monty:
        with monty.checkout(limits={"max_feed_duration_secs": 2.0}, os_policy={"sleep": "zero"}) as s:
            figures["floor, warm (bare feed_run)"] = per_call_us(
                lambda: s.feed_run(FILTER, inputs={"event": event}), 1000
            )

        def fresh() -> object:
            with monty.checkout(limits={"max_feed_duration_secs": 2.0}) as s2:
                return s2.feed_run(FILTER, inputs={"event": event})

        figures["floor, fresh checkout + feed"] = per_call_us(fresh, 200)

    bodies = [read(range(i, i + 1)) for i in range(1, 5001)]
    counter = iter(range(10**9))
    x = EventLogExtractor(0)

    def extract_one() -> object:
        return x.feed(bodies[next(counter) % len(bodies)])

    # Each body is one new seq only once; reuse still parses and compares (the real work).
    figures["extract (one-event read)"] = per_call_us(extract_one, 2000)

    limits = WatchLimits()
    with FilterPool(max_sessions=4) as pool:
        f = WatchFilter(FILTER, pool=pool, limits=limits)
        dedupe = LineDeduper()
        buf = NoticeBuffer()
        seq = iter(range(1, 10**9))
        ext = EventLogExtractor(0)

        def stage_sync() -> None:
            s_ = next(seq)
            for ev in ext.feed(read(range(s_, s_ + 1))):
                out = f.run_sync(ev)
                buf.add(dedupe.admit(object_key(ev), out.lines), now=0.0)
            buf.flush(0.0, force=True)

        figures["stage, sync (extract+filter+notice)"] = per_call_us(stage_sync, 1000)

        ext2 = EventLogExtractor(0)
        seq2 = iter(range(1, 10**9))

        def default_only() -> None:
            s_ = next(seq2)
            for ev in ext2.feed(read(range(s_, s_ + 1))):
                buf.add(dedupe.admit(object_key(ev), [default_line(ev)]), now=0.0)
            buf.flush(0.0, force=True)

        figures["default lines (no filter)"] = per_call_us(default_only, 2000)

        async def trio_path() -> tuple[float, float]:
            ext3 = EventLogExtractor(0)
            n = 1000
            t = time.perf_counter()
            for s_ in range(1, n + 1):
                for ev in ext3.feed(read(range(s_, s_ + 1))):
                    out = await f.run(ev)
                    buf.add(dedupe.admit(object_key(ev), out.lines), now=0.0)
            per_event = (time.perf_counter() - t) / n * 1e6
            # Throughput: 100-event reads through one watch, one thread hop per read.
            ext4 = EventLogExtractor(0)
            total = 0
            t = time.perf_counter()
            for start in range(1, 10001, 100):
                events = ext4.feed(read(range(start, start + 100)))
                for ev, out in zip(events, await f.run_batch(events), strict=True):
                    buf.add(dedupe.admit(object_key(ev), out.lines), now=0.0)
                    total += 1
            return per_event, total / (time.perf_counter() - t)

        per_event, eps = trio.run(trio_path)
        figures["stage, trio (filter via to_thread)"] = per_event
        f.close()

    floor = figures["floor, warm (bare feed_run)"]
    print(f"{'what':40} {'µs/event':>10} {'× warm floor':>13}")
    for name, us in figures.items():
        print(f"{name:40} {us:10.1f} {us / floor:13.2f}")
    print(f"{'throughput, one watch (run_batch/read)':40} {eps:10.0f} events/s")

    calls = trio.run(tool_call_figures)
    bare = calls["bare tool call (Upstream.call_tool)"]
    print(f"\n{'against a real MCP server (stdio)':40} {'µs':>10} {'× bare call':>13}")
    for name, us in calls.items():
        print(f"{name:40} {us:10.1f} {us / bare:13.2f}")


#: The filter of the side-by-side figures: one read-only tool call per event.
CALLING_FILTER = "v = watchy__get_key(key='k')\nf'{event[\"type\"]} {v}'"
#: The same filter without the call.
PLAIN_FILTER = "v = 1\nf'{event[\"type\"]} {v}'"


def median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


async def tool_call_figures(n: int = 1500) -> dict[str, float]:
    """Per-event cost of a filter that calls a read-only tool once, beside the bare call, one run."""
    sys.path.insert(0, str(REPO))
    from agentd.observe.telemetry import Telemetry
    from agentd.upstream import Upstream, resolve_server_for_uri
    from agentd.watches.manager import WatchManager
    from tests.support.watch import watch_spec

    send, recv = trio.open_memory_channel[object](10_000)
    telemetry = Telemetry(stream=io.StringIO())
    figures: dict[str, float] = {}
    scratch = tempfile.TemporaryDirectory(prefix="agentd-bench-watch-")  # the server's control FIFO
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_drain, recv)
        up = Upstream(watch_spec("watchy", Path(scratch.name) / "ctl"), send, telemetry)
        await nursery.start(up.run)
        upstreams = {"watchy": up}
        manager = WatchManager(
            upstreams=upstreams,
            events=send,
            telemetry=telemetry,
            server_for=lambda uri: resolve_server_for_uri(uri, {"watchy": up.catalog()}),
        )
        catalog, denied = manager.filter_catalog()
        for _ in range(50):  # warm the path
            await up.call_tool("get_key", {"key": "k"})

        async def bare() -> None:
            await up.call_tool("get_key", {"key": "k"})

        with FilterPool(max_sessions=4) as pool:
            stages = {
                name: WatchStage(
                    name,
                    "events://log",
                    shape="event-log",
                    filter=WatchFilter(source, pool=pool, catalog=catalog, denied=denied),
                    baseline={"shape": "event-log", "last_seq": 0},
                )
                for name, source in (("plain", PLAIN_FILTER), ("calling", CALLING_FILTER))
            }
            seqs = {name: iter(range(1, 10**9)) for name in stages}

            def one_event(name: str) -> Callable[[], object]:
                async def run() -> None:
                    s_ = next(seqs[name])
                    report = await stages[name].process_read(read(range(s_, s_ + 1)), 0.0)
                    assert report.outcomes[0].kind == "lines", report.outcomes[0]
                    stages[name].flush(0.0, force=True)

                return run

            cases = {
                "bare tool call (Upstream.call_tool)": bare,
                "filter, no call (process_read)": one_event("plain"),
                "filter + 1 read-only tool call": one_event("calling"),
            }
            samples: dict[str, list[float]] = {name: [] for name in cases}
            for fn in cases.values():  # warm each path
                for _ in range(20):
                    await fn()
            # Round robin, one call of each case at a time: the shared machine's load
            # falls on all three alike; the median of single timings drops its spikes.
            for _ in range(n):
                for name, fn in cases.items():
                    t = time.perf_counter()
                    await fn()
                    samples[name].append(time.perf_counter() - t)
            for name in cases:
                figures[name] = median_us(samples[name])
            for stage in stages.values():
                assert stage.filter is not None
                await stage.filter.aclose()
        nursery.cancel_scope.cancel()
    scratch.cleanup()
    return figures


async def _drain(recv: trio.MemoryReceiveChannel[object]) -> None:
    async for _ in recv:
        pass


if __name__ == "__main__":
    main()
