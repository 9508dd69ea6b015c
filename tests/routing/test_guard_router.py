"""The router's inflight accounting never goes below zero (docs/testing.md)."""

from __future__ import annotations

from agentd.triggers.router import (
    Continue,
    ContinueDelivery,
    PushOutcome,
    QueuedEvent,
    Router,
    RouteSpec,
    Spawn,
    SpawnDelivery,
)


def ev(uri: str, t: float = 0.0) -> QueuedEvent:
    return QueuedEvent(uri, "srv", None, "updated", t)


def spawned(router: Router, now: float) -> list[str]:
    out = router.take_deliveries(now, session_idle=lambda _s: True, may_spawn=lambda: True, draining=False)
    return [d.event.uri for d in out if isinstance(d, SpawnDelivery)]


def test_a_spawn_done_with_nothing_inflight_frees_no_extra_slot() -> None:
    router = Router()
    route = router.add_route(RouteSpec("file:///in/*", Spawn(max_inflight=1), debounce=0.0, route_id="r"))
    # A late or duplicate done (the agent was counted already) must be ignored.
    router.on_spawn_done("r")
    router.on_spawn_done("r")
    assert route.inflight == 0
    for name in ("a", "b", "c"):
        router.ingest(ev(f"file:///in/{name}"), 0.0)
    assert spawned(router, 0.0) == ["file:///in/a"]  # one slot, not three
    assert route.inflight == 1
    router.on_spawn_done("r")
    assert spawned(router, 1.0) == ["file:///in/b"]
    router.on_spawn_done("r")
    router.on_spawn_done("r")  # one too many
    assert spawned(router, 2.0) == ["file:///in/c"]
    assert route.inflight == 1
    router.on_spawn_done("r")
    router.on_spawn_done("r")
    assert route.inflight == 0


def test_a_spawn_done_for_a_removed_route_is_ignored() -> None:
    router = Router()
    router.add_route(RouteSpec("file:///in/*", Spawn(max_inflight=1), debounce=0.0, route_id="r"))
    router.remove_route("r")
    router.on_spawn_done("r")
    assert router.get("r") is None


# -- block overflow, coalescing, drops: what the queue holds and what the router counts ------------


def _take(router: Router, now: float) -> list[str]:
    return spawned(router, now)


def test_a_full_block_route_holds_changes_newest_wins_and_refills_them_in_arrival_order() -> None:
    router = Router()
    route = router.add_route(
        RouteSpec("n://*", Spawn(max_inflight=1), debounce=0.0, queue_cap=2, overflow="block", route_id="r")
    )
    for uri in ("n://a", "n://b"):
        assert (
            router.ingest(QueuedEvent(uri, "s1", None, "updated", 0.0), 0.0).outcome is PushOutcome.ENQUEUED
        )
    # Full: the next URIs are held, the later one ("n://c" after "n://z") refilled last.
    z = router.ingest(QueuedEvent("n://z", "s1", "e1", "updated", 1.0), 1.0)
    assert (z.outcome, z.dropped_uri, z.reason) == (PushOutcome.BLOCKED, None, None)
    router.ingest(QueuedEvent("n://c", "s1", None, "updated", 2.0), 2.0)
    # A newer change to a held URI replaces it in place (its age and its turn kept).
    router.ingest(QueuedEvent("n://z", "s2", "e2", "created", 3.0), 3.0)
    assert router.counters()["blocked"] == 3
    assert router.blocked_routes() == frozenset({"r"})
    assert router.held_servers("r") == frozenset({"s1", "s2"})
    # A change to a queued URI while the route is blocked coalesces; it is not held.
    assert (
        router.ingest(QueuedEvent("n://a", "s1", "e3", "updated", 4.0), 4.0).outcome is PushOutcome.COALESCED
    )
    assert (
        router.ingest(QueuedEvent("n://a", "s1", "e4", "updated", 4.5), 4.5).outcome is PushOutcome.COALESCED
    )
    assert router.counters()["coalesced"] == 2
    assert route.queue.get("n://a") == QueuedEvent("n://a", "s1", "e4", "updated", 0.0)
    assert route.queue.get("n://zz") is None
    assert _take(router, 5.0) == ["n://a"]
    # One slot freed: the oldest held change moves in, the other stays held.
    assert route.queue.peek_uris() == ["n://b", "n://z"]
    assert route.queue.get("n://z") == QueuedEvent("n://z", "s2", "e2", "created", 1.0)
    assert router.blocked_routes() == frozenset({"r"})
    assert router.held_servers("r") == frozenset({"s1"})
    router.on_spawn_done("r")
    assert _take(router, 6.0) == ["n://b"]
    assert route.queue.peek_uris() == ["n://z", "n://c"]
    assert router.blocked_routes() == frozenset()  # nothing held: the servers may resume
    assert router.held_servers("r") == frozenset()


def test_only_a_full_drop_oldest_route_drops_and_names_what_it_dropped() -> None:
    router = Router()
    router.add_route(
        RouteSpec("n://*", Spawn(), debounce=0.0, queue_cap=2, overflow="drop_oldest", route_id="r")
    )
    first = router.ingest(ev("n://a"), 0.0)
    assert (first.outcome, first.dropped_uri, first.reason) == (PushOutcome.ENQUEUED, None, None)
    router.ingest(ev("n://b"), 0.0)
    again = router.ingest(ev("n://a"), 0.0)  # queued already: coalesced, nothing dropped
    assert (again.outcome, again.dropped_uri, again.reason) == (PushOutcome.COALESCED, None, None)
    full = router.ingest(ev("n://c"), 0.0)
    assert (full.outcome, full.dropped_uri, full.reason) == (
        PushOutcome.DROPPED_OLDEST,
        "n://a",
        "drop_oldest",
    )
    assert router.counters()["dropped_events.drop_oldest"] == 1


def test_a_dropped_change_does_not_push_the_debounce_back() -> None:
    router = Router()
    router.add_route(
        RouteSpec("n://*", Spawn(), debounce=10.0, queue_cap=1, overflow="drop_newest", route_id="r")
    )
    router.ingest(ev("n://a"), 0.0)
    assert router.next_deadline() == 10.0
    dropped = router.ingest(ev("n://b"), 5.0)
    assert (dropped.outcome, dropped.dropped_uri, dropped.reason) == (
        PushOutcome.DROPPED_NEWEST,
        "n://b",
        "drop_newest",
    )
    assert router.next_deadline() == 10.0
    router.ingest(ev("n://a"), 6.0)  # a coalesced change does re-arm it
    assert router.next_deadline() == 16.0


def test_a_sessions_routes_are_delivered_in_arrival_order_across_routes() -> None:
    router = Router()
    router.add_route(RouteSpec("x://*", Continue("ops"), debounce=0.0, route_id="r1"))
    router.add_route(RouteSpec("y://*", Continue("ops"), debounce=0.0, route_id="r2"))
    for uri in ("y://p", "y://q", "x://a"):
        router.ingest(ev(uri), 0.0)
    (delivery,) = router.take_deliveries(
        0.0, session_idle=lambda _s: True, may_spawn=lambda: True, draining=False
    )
    assert isinstance(delivery, ContinueDelivery)
    assert [e.uri for e in delivery.events] == ["y://p", "y://q", "x://a"]
    assert delivery.event_routes == ("r2", "r2", "r1")
    assert delivery.route_id == "r2"


def test_held_changes_refilled_into_a_session_keep_their_arrival_order() -> None:
    router = Router()
    router.add_route(
        RouteSpec("x://*", Continue("ops"), debounce=0.0, queue_cap=1, overflow="block", route_id="r1")
    )
    router.add_route(RouteSpec("y://*", Continue("ops"), debounce=0.0, route_id="r2"))
    router.ingest(ev("x://a"), 0.0)
    router.ingest(ev("x://b"), 0.0)  # held: r1 is full
    router.ingest(ev("y://p"), 0.0)
    idle = {"ops": True}
    first = router.take_deliveries(0.0, session_idle=idle.get, may_spawn=lambda: True, draining=False)
    assert [e.uri for d in first if isinstance(d, ContinueDelivery) for e in d.events] == ["x://a", "y://p"]
    router.ingest(ev("y://q"), 1.0)
    router.on_session_idle("ops")
    second = router.take_deliveries(1.0, session_idle=idle.get, may_spawn=lambda: True, draining=False)
    # x://b arrived before y://q: refilled with its own arrival number, it comes first.
    assert [e.uri for d in second if isinstance(d, ContinueDelivery) for e in d.events] == ["x://b", "y://q"]
