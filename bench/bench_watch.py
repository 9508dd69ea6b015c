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
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import orjson
import trio
from pydantic_monty import Monty

from agentd.watches.extract import EventLogExtractor
from agentd.watches.limits import WatchLimits
from agentd.watches.notices import LineDeduper, NoticeBuffer, default_line, object_key
from agentd.watches.sandbox import FilterPool, WatchFilter

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


if __name__ == "__main__":
    main()
