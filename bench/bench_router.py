"""Router and queue micro-benchmarks (run: /work/venv/bin/python bench/bench_router.py).

Routes one event through Router.first_match with 10 / 1,000 / 10,000 routes
(half exact URIs, half globs, realistic shapes) against a bare dict lookup
measured in the same run (the floor), and times RouteQueue push+pop at depth
10 and 10,000. Quick: a few seconds.
"""

from __future__ import annotations

import random
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentd.triggers.router import QueuedEvent, RouteQueue, Router, RouteSpec

REPEAT = 5


def best_ns(stmt, number: int) -> float:
    return min(timeit.repeat(stmt, number=number, repeat=REPEAT)) / number * 1e9


def build(n: int) -> tuple[Router, list[str], dict[str, int]]:
    r = Router()
    floor: dict[str, int] = {}
    uris: list[str] = []
    for i in range(n):
        if i % 2 == 0:
            uri = f"file:///srv/data/team{i % 97}/exact{i}.json"
            r.add_route(RouteSpec(uri))
            floor[uri] = i
            uris.append(uri)
        else:
            shape = i % 4
            if shape == 1:
                r.add_route(RouteSpec(f"file:///srv/data/dir{i}/*.json"))
                uris.append(f"file:///srv/data/dir{i}/item.json")
            else:
                r.add_route(RouteSpec(f"kube-events://watch/ns{i}/**"))
                uris.append(f"kube-events://watch/ns{i}/pods/p-1?namespace=a")
    return r, uris, floor


def main() -> None:
    rng = random.Random(7)
    rows: list[tuple[str, float, float]] = []
    for n in (10, 1_000, 10_000):
        router, uris, floor = build(n)
        glob_uris = [u for u in uris if u not in floor]
        exact_uris = list(floor)
        sample_g = [rng.choice(glob_uris) for _ in range(1000)]
        sample_e = [rng.choice(exact_uris) for _ in range(1000)]
        for uri in sample_g[:50] + sample_e[:50]:
            assert router.first_match(uri) is not None, uri
        fm, get, ing = router.first_match, floor.get, router.ingest
        evs = [QueuedEvent(u, "srv", None, "updated", 0.0) for u in sample_g]
        floor_ns = best_ns(lambda f=get, xs=sample_e: [f(u) for u in xs], 20) / len(sample_e)
        g_ns = best_ns(lambda f=fm, xs=sample_g: [f(u) for u in xs], 20) / len(sample_g)
        e_ns = best_ns(lambda f=fm, xs=sample_e: [f(u) for u in xs], 20) / len(sample_e)
        ingest_ns = best_ns(lambda f=ing, xs=evs: [f(e, 0.0) for e in xs], 5) / len(evs)
        rows.append((f"match glob URI, {n:>6} routes", g_ns, floor_ns))
        rows.append((f"match exact URI, {n:>5} routes", e_ns, floor_ns))
        rows.append((f"ingest (match+push+arm), {n:>6}", ingest_ns, floor_ns))
    # Queue: push a new URI + pop the oldest, at steady depth (loop overhead in both).
    for depth in (10, 10_000):
        q = RouteQueue(cap=depth + 10)
        for i in range(depth):
            q.push(QueuedEvent(f"u{i}", None, None, "updated", 0.0), "coalesce")
        batch = [QueuedEvent(f"n{i}", None, None, "updated", 0.0) for i in range(10_000)]
        push, pop = q.push, q.pop

        def cycle(batch=batch, push=push, pop=pop) -> None:
            for e in batch:
                push(e, "coalesce")
                pop()

        d: dict[str, object] = {f"k{i}": i for i in range(depth)}
        keys = [e.uri for e in batch]

        def dict_floor(d=d, keys=keys) -> None:
            for k in keys:
                d[k] = k
                d.popitem()

        ns = best_ns(cycle, 3) / len(batch)
        rows.append((f"queue push+pop, depth {depth:>6}", ns, best_ns(dict_floor, 3) / len(keys)))
    print(f"{'case':<38}{'ns/op':>10}{'floor ns':>10}{'ratio':>8}")
    for name, ns, fl in rows:
        print(f"{name:<38}{ns:>10.0f}{fl:>10.0f}{ns / fl:>8.1f}")
    print("floor: dict.get of an exact URI (routing); dict set+popitem (queue)")


if __name__ == "__main__":
    main()
