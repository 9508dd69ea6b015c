"""The webhook store on real files: durable before answering, once per delivery id across restarts,
torn tails cut, retention by count and age with a GAP, acknowledgements kept, segments freed.

The store runs under trio with its group-commit task; time-dependent parts (retention by age, the
dedupe window) read a wall clock built on trio's clock, so ``MockClock`` drives them exactly.
"""

from __future__ import annotations

import math
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import orjson
import pytest
import trio
import trio.testing

from agentd.servers._base import ServerStartError
from agentd.servers._inboxlog import AckError
from agentd.servers.webhook.delivery import Accepted
from agentd.servers.webhook.sources import Credential, SourceSpec
from agentd.servers.webhook.store import DeliveryStore, Duplicate, Stored

SPEC = SourceSpec("github", "github", secret=Credential((b"s" * 20,), "$S"))
T0 = 1_800_000_000.0


def accepted(delivery_id: str, *, key: str | None = "same-as-id", body: object = None) -> Accepted:
    return Accepted(
        delivery_id,
        delivery_id if key == "same-as-id" else key,
        "issues",
        body if body is not None else {"n": delivery_id},
        {"content-type": "application/json"},
    )


def wall() -> Callable[[], float]:
    """A wall clock that moves with trio's clock (virtual under MockClock)."""
    return lambda: T0 + trio.current_time()


def make(tmp_path: Path, spec: SourceSpec = SPEC, **kwargs: object) -> DeliveryStore:
    store = DeliveryStore(spec, str(tmp_path / spec.name), clock=kwargs.pop("clock", wall()), **kwargs)  # type: ignore[arg-type]
    store.open()
    return store


@asynccontextmanager
async def running(store: DeliveryStore, *, retention: bool = False) -> AsyncIterator[DeliveryStore]:
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.run)
            if retention:
                nursery.start_soon(store.run_retention)
                nursery.start_soon(store.run_persister)
            yield store
            nursery.cancel_scope.cancel()
    finally:
        store.close()


def events(store: DeliveryStore) -> list[dict[str, object]]:
    return orjson.loads(store.body())["events"]  # type: ignore[no-any-return]


def segments(store_dir: Path) -> list[str]:
    return sorted(p.name for p in store_dir.iterdir() if p.name.startswith("seg-"))


async def test_a_delivery_is_durable_numbered_shown_and_readable(tmp_path: Path) -> None:
    async with running(make(tmp_path)) as store:
        assert await store.append(accepted("d-1")) == Stored("d-1", 1)
        assert await store.append(accepted("d-1")) == Duplicate("d-1")
        assert await store.append(accepted("d-2")) == Stored("d-2", 2)
        shown = events(store)
        assert [(e["seq"], e["type"], e["id"], e["delivery_uri"]) for e in shown] == [
            (1, "DELIVERY", "d-1", "webhook://github/event/d-1"),
            (2, "DELIVERY", "d-2", "webhook://github/event/d-2"),
        ]
        record = store.read("d-2")
        assert record is not None
        assert record.body == {"n": "d-2"}
        assert [e.id for e in store.pending()] == ["d-1", "d-2"]
        assert (store.counters.accepted, store.counters.duplicates) == (2, 1)
    lines = (tmp_path / "github" / "seg-00000000000000000000.jsonl").read_bytes().splitlines()
    assert [orjson.loads(line)["id"] for line in lines] == ["d-1", "d-2"]  # the duplicate was not written


async def test_concurrent_deliveries_share_syncs_and_a_racing_retry_waits_for_the_original(
    tmp_path: Path,
) -> None:
    results: list[Stored | Duplicate] = []
    async with running(make(tmp_path)) as store:
        async with trio.open_nursery() as nursery:
            for i in range(20):
                nursery.start_soon(lambda i=i: _append_into(store, accepted(f"c-{i}"), results))
            nursery.start_soon(lambda: _append_into(store, accepted("c-0"), results))
        stored = [r for r in results if isinstance(r, Stored)]
        assert sorted(r.seq for r in stored) == list(range(1, 21))
        assert [r for r in results if isinstance(r, Duplicate)] == [Duplicate("c-0")]
        assert store.log.pending_count() == 20


async def _append_into(store: DeliveryStore, a: Accepted, out: list[Stored | Duplicate]) -> None:
    out.append(await store.append(a))


async def test_dedupe_positions_and_acks_survive_a_restart(tmp_path: Path) -> None:
    async with running(make(tmp_path)) as store:
        for i in range(1, 4):
            await store.append(accepted(f"r-{i}"))
        assert store.ack_ids(["r-2"]) == [2]
        await store.persist()
    async with running(make(tmp_path)) as store:
        assert await store.append(accepted("r-1")) == Duplicate("r-1")  # still recognised
        assert [(e["seq"], e["id"]) for e in events(store)] == [(1, "r-1"), (3, "r-3")]  # same seqs
        assert not store.is_pending("r-2")
        assert store.read("r-2") is not None  # acknowledged, still retained (reads, dedupe)
        assert await store.append(accepted("r-4")) == Stored("r-4", 4)
        assert store.ack_through(3) == 2
        await store.persist()
    async with running(make(tmp_path)) as store:
        assert [e["id"] for e in events(store)] == ["r-4"]
        assert await store.append(accepted("r-3")) == Duplicate("r-3")  # acknowledged ones dedupe too


async def test_a_torn_last_line_is_cut_kept_aside_and_the_log_goes_on(tmp_path: Path) -> None:
    async with running(make(tmp_path)) as store:
        await store.append(accepted("t-1"))
    seg = tmp_path / "github" / "seg-00000000000000000000.jsonl"
    whole = seg.read_bytes()
    torn = b'{"v":1,"id":"t-2","key":"t-2","source":"git'  # a crash mid-write: never answered 2xx
    with seg.open("ab") as f:
        f.write(torn)
    store = make(tmp_path)
    assert any(f"cut {len(torn)} bytes" in w for w in store.warnings), store.warnings
    assert seg.read_bytes() == whole
    (aside,) = [p for p in (tmp_path / "github").iterdir() if p.name.startswith("torn-")]
    assert aside.read_bytes().startswith(b'{"v":1,"id":"t-2"')
    async with running(store):
        assert await store.append(accepted("t-2")) == Stored("t-2", 2)  # the sender's retry is new
        assert [e["id"] for e in events(store)] == ["t-1", "t-2"]


async def test_a_damaged_line_inside_the_log_becomes_an_error_event_and_numbering_holds(
    tmp_path: Path,
) -> None:
    async with running(make(tmp_path)) as store:
        for i in range(1, 4):
            await store.append(accepted(f"x-{i}"))
    seg = tmp_path / "github" / "seg-00000000000000000000.jsonl"
    lines = seg.read_bytes().splitlines(keepends=True)
    lines[1] = b"#" * (len(lines[1]) - 1) + b"\n"  # same length: offsets keep
    seg.write_bytes(b"".join(lines))
    async with running(make(tmp_path)) as store:
        shown = events(store)
        assert [(e["seq"], e["type"]) for e in shown] == [(1, "DELIVERY"), (2, "ERROR"), (3, "DELIVERY")]
        assert "cannot be read (damaged on disk)" in str(shown[1]["message"])


async def test_retention_by_count_names_what_fell_off_unacknowledged(tmp_path: Path) -> None:
    async with running(make(tmp_path, retain_count=3)) as store:
        for i in range(1, 4):
            await store.append(accepted(f"k-{i}"))
        store.ack_ids(["k-1"])
        await store.append(accepted("k-4"))  # k-1 (acknowledged) falls off: no GAP
        assert [e["type"] for e in events(store)] == ["DELIVERY"] * 3
        await store.append(accepted("k-5"))
        await store.append(accepted("k-6"))  # k-2, k-3 fall off unacknowledged
        shown = events(store)
        gaps = [
            (e["seq"], e["count"], e["first_seq"], e["last_seq"], e["reason"])
            for e in shown
            if e["type"] == "GAP"
        ]
        assert gaps == [(6, 1, 2, 2, "count"), (8, 1, 3, 3, "count")]  # one per eviction
        assert [e["id"] for e in shown if e["type"] == "DELIVERY"] == ["k-4", "k-5", "k-6"]
        assert store.read("k-2") is None
        assert await store.append(accepted("k-1")) == Stored("k-1", 9)  # past the dedupe horizon: new
        with pytest.raises(
            AckError,
            match=r"no delivery 'k-2' in webhook://github/events \(never received, or past the retention\)",
        ):
            store.ack_ids(["k-2"])
        assert store.counters.evicted_unacknowledged == 3  # k-2, k-3, then k-4 (for k-1's return)


async def test_retention_by_age_wakes_on_time_and_frees_whole_segments(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # Time moves only when the test says: waiting for an fsync thread must not age anything.
    autojump_clock.autojump_threshold = math.inf
    aged = trio.Event()
    store = make(
        tmp_path,
        retain_age=3600.0,
        segment_bytes=300,
        on_change=lambda new, listing: aged.set() if not new else None,
    )
    store_dir = tmp_path / "github"
    async with running(store, retention=True):
        for i in range(1, 5):
            await store.append(accepted(f"a-{i}"))
        assert len(segments(store_dir)) == 4  # each delivery fills a 300-byte segment
        store.ack_ids(["a-1", "a-2"])
        await store.persist()
        autojump_clock.jump(1800)
        await store.append(accepted("a-5"))
        autojump_clock.jump(1799)
        await trio.testing.wait_all_tasks_blocked()
        assert not aged.is_set()  # not yet 3600 s
        autojump_clock.jump(2)  # a-1..a-4 are past 3600 s; a-5 is 1801 s old
        await aged.wait()
        await store.persist()
        assert [e["id"] for e in events(store) if e["type"] == "DELIVERY"] == ["a-5"]
        gap = next(e for e in events(store) if e["type"] == "GAP")
        assert (gap["count"], gap["first_seq"], gap["last_seq"], gap["reason"]) == (2, 3, 4, "age")
        (left,) = segments(store_dir)  # the four old ones deleted
    state = orjson.loads((store_dir / "state.json").read_bytes())
    assert left == f"seg-{state['retained_from']:020d}.jsonl"
    assert state["retained_from"] > 0
    async with running(make(tmp_path, retain_age=3600.0, segment_bytes=300)) as again:
        assert [e["id"] for e in events(again) if e["type"] == "DELIVERY"] == ["a-5"]


async def test_a_dedupe_window_lets_a_later_identical_delivery_through_with_its_own_id(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    spec = SourceSpec("deploys", "generic", token=Credential((b"t" * 20,), "$T"), dedupe_window=300.0)
    async with running(make(tmp_path, spec)) as store:
        assert await store.append(accepted("run-1", key="key:run-1")) == Stored("run-1", 1)
        await trio.sleep(299)
        assert await store.append(accepted("run-1", key="key:run-1")) == Duplicate("run-1")
        await trio.sleep(2)
        assert await store.append(accepted("run-1", key="key:run-1")) == Stored("run-1-2", 2)


async def test_a_second_server_on_the_same_directory_is_refused(tmp_path: Path) -> None:
    first = make(tmp_path)
    try:
        with pytest.raises(ServerStartError, match=r"already served by another `agentd serve webhook`"):
            make(tmp_path)
    finally:
        first.close()


async def test_a_corrupt_state_file_is_moved_aside_and_every_retained_delivery_offered_again(
    tmp_path: Path,
) -> None:
    async with running(make(tmp_path)) as store:
        await store.append(accepted("s-1"))
        store.ack_ids(["s-1"])
        await store.persist()
    (tmp_path / "github" / "state.json").write_text("{not json")
    async with running(make(tmp_path)) as store:
        assert any("is unusable" in w and "offered again" in w for w in store.warnings)
        assert [e["id"] for e in events(store)] == ["s-1"]
        assert [p.name for p in (tmp_path / "github").iterdir() if ".corrupt-" in p.name]


async def test_the_directory_is_the_user_s_own(tmp_path: Path) -> None:
    store = make(tmp_path)
    try:
        assert os.stat(tmp_path / "github").st_mode & 0o777 == 0o700
        assert (tmp_path / "github" / "seg-00000000000000000000.jsonl").stat().st_mode & 0o777 == 0o600
    finally:
        store.close()


async def test_the_list_shows_the_oldest_pending_so_a_listed_delivery_stays_until_acknowledged(
    tmp_path: Path,
) -> None:
    """``resources/list`` shows the oldest ``window`` pending deliveries: one listed leaves the list
    only when it is acknowledged (a newest-first list dropped it under newer arrivals and showed it
    again later, while its agent ran: a second agent for it, issue 37's burst test)."""
    async with running(make(tmp_path, window=2)) as store:
        for n in range(1, 5):
            await store.append(accepted(f"d-{n}"))
        assert [e.id for e in store.pending()] == ["d-1", "d-2"]
        await store.append(accepted("d-5"))  # newer arrivals do not push a listed one out
        assert [e.id for e in store.pending()] == ["d-1", "d-2"]
        store.ack_ids(["d-2"])  # out of order: d-1 stays, the next oldest comes in
        assert [e.id for e in store.pending()] == ["d-1", "d-3"]
        store.ack_ids(["d-1", "d-3"])
        assert [e.id for e in store.pending()] == ["d-4", "d-5"]
