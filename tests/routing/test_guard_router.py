"""The router's inflight accounting never goes below zero (docs/testing.md)."""

from __future__ import annotations

import pytest

from agentd.core.errors import RouteError
from agentd.triggers.router import (
    DEFAULT_TIMER_TEMPLATE,
    MIN_QUEUE_CAP,
    Continue,
    ContinueDelivery,
    PushOutcome,
    QueuedEvent,
    RouteQueue,
    Router,
    RouteSpec,
    Spawn,
    SpawnDelivery,
    default_route_for,
    metric_route,
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


# -- the route table: defaults, validation, ownership, caps --------------------------------------


def test_an_unrouted_uri_gets_an_exact_route_continue_in_a_warm_loop_else_spawn() -> None:
    warm = default_route_for("n://a*", "loop", "main")
    assert (warm.disposition, warm.exact) == (Continue("main"), True)
    for mode, session in (("loop", None), ("reactive", "main"), ("reactive", None)):
        spec = default_route_for("n://a*", mode, session)  # type: ignore[arg-type]
        assert (spec.disposition, spec.exact) == (Spawn(), True)
    # Exact: the "*" in a concrete URI is a character, not a wildcard.
    router = Router()
    router.add_route(default_route_for("n://a*", "reactive"))
    assert router.first_match("n://a*") is not None
    assert router.first_match("n://ab") is None


def test_an_exact_spec_matches_only_its_literal_uri() -> None:
    router = Router()
    router.add_route(RouteSpec("n://a?", exact=True, route_id="lit"))
    assert router.first_match("n://a?") is not None
    assert router.first_match("n://ab") is None


def test_routes_are_counted_under_their_id_when_configured_and_their_kind_when_made_by_sessions() -> None:
    assert [metric_route("r1", k) for k in ("declared", "stage", "self", "watch")] == [
        "r1",
        "r1",
        "self",
        "watch",
    ]


def test_route_settings_at_their_edges() -> None:
    assert RouteSpec("n://*", max_wait=0.0).max_wait == 0.0
    assert RouteSpec("n://*", max_wait=0.5).max_wait == 0.5
    with pytest.raises(ValueError, match=r"^max_inflight: True is not valid: give a whole number >= 1$"):
        Spawn(max_inflight=True)
    with pytest.raises(ValueError, match=r"^max_inflight: 1.5 is not valid"):
        Spawn(max_inflight=1.5)  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=r"^continue session: '' is not valid: name the session to deliver into$"
    ):
        Continue("")


def test_one_uri_has_one_owner_and_each_session_counts_its_own_routes() -> None:
    router = Router()
    router.add_route(RouteSpec("n://a"), owner="s1")
    router.add_route(RouteSpec("n://b"), owner="s1")
    router.add_route(RouteSpec("n://c"), owner="s2")
    with pytest.raises(
        RouteError,
        match=r"^'n://a' is already subscribed by session 's1' \(route 'self:s1:n://a'\): one URI has exactly one "
        r"owner; ask that session to unsubscribe first$",
    ):
        router.add_route(RouteSpec("n://a"), owner="s2")
    with pytest.raises(
        RouteError, match=r"^route 'agentd://timer': a self-subscribe route cannot be the timer route$"
    ):
        router.add_route(RouteSpec("agentd://timer", timer=True), owner="s1")
    assert (router.owned("s1"), router.owned("s2"), router.owned("s3"), router.owned()) == (2, 1, 0, 3)
    router.remove_route("self:s1:n://a")
    assert (router.owned("s1"), router.owned()) == (1, 2)
    router.remove_route("self:s1:n://b")
    assert (router.owned("s1"), router.owned()) == (0, 1)
    # A declared route removed counts against no session.
    router.add_route(RouteSpec("d://*", route_id="d"))
    router.remove_route("d")
    assert router.owned() == 1


def test_generated_route_ids_say_declared_or_front() -> None:
    router = Router()
    assert router.add_route(RouteSpec("a://*")).id == "r0"
    assert router.add_route(RouteSpec("b://*"), front=True).id == "f0"
    assert router.add_route(RouteSpec("c://*"), front=True).id == "f1"
    assert router.add_route(RouteSpec("d://*")).id == "r1"
    # A front route wins over a declared one of the same pattern.
    router.add_route(RouteSpec("a://*"), front=True)
    route = router.first_match("a://x")
    assert route is not None
    assert route.id == "f2"


def test_a_removed_route_is_not_due_and_a_new_timer_route_may_follow() -> None:
    router = Router()
    router.add_route(RouteSpec("agentd://timer", timer=True, debounce=5.0, route_id="t"))
    router.ingest_timer(0.0)
    route = router.remove_route("t")
    assert (route.deadline, route.first_armed, route.ready) == (None, None, False)
    assert router.timer_route is None
    assert router.next_deadline() is None
    with pytest.raises(
        RouteError, match=r"^a clock fire arrived but no timer route is declared: declare one route"
    ):
        router.ingest_timer(1.0)
    router.add_route(RouteSpec("agentd://timer", timer=True, debounce=0.0, route_id="t2"))
    router.ingest_timer(2.0)
    (delivery,) = router.take_deliveries(
        2.0, session_idle=lambda _s: True, may_spawn=lambda: True, draining=False
    )
    assert isinstance(delivery, SpawnDelivery)
    assert delivery.instruction == DEFAULT_TIMER_TEMPLATE


def test_the_default_queue_cap_follows_the_watched_uris_and_never_drops_what_is_queued() -> None:
    router = Router()
    route = router.add_route(RouteSpec("n://*", route_id="r"))
    assert route.queue.cap == MIN_QUEUE_CAP
    router.set_watched("r", 100)
    assert route.queue.cap == 100
    for i in range(40):
        router.ingest(ev(f"n://{i}"), 0.0)
    router.set_watched("r", 20)
    assert route.queue.cap == 40  # never below what is queued
    router.set_watched("r", 1)
    assert route.queue.cap == 40
    fixed = router.add_route(RouteSpec("m://*", queue_cap=3, route_id="m"))
    router.set_watched("m", 100)
    assert fixed.queue.cap == 3  # an explicit queue_cap stays
    router.set_watched("gone", 100)  # an unknown route: nothing
    assert router.add_route(RouteSpec("w://*"), watched_uris=50).queue.cap == 50


def test_counters_add_up_from_zero() -> None:
    drops: list[tuple[str, int]] = []
    router = Router(on_drop=lambda reason, n: drops.append((reason, n)))
    assert router.counters()["blocked"] == 0
    router.ingest(ev("x://nowhere"), 0.0)
    router.ingest(ev("x://nowhere"), 0.0)
    assert router.counters()["unrouted"] == 2
    router.add_route(RouteSpec("n://*", queue_cap=1, overflow="drop_newest", route_id="r"))
    router.ingest(ev("n://a"), 0.0)
    router.ingest(ev("n://b"), 0.0)
    router.ingest(ev("n://c"), 0.0)
    assert router.counters()["dropped_events.drop_newest"] == 2
    router.remove_route("r")  # one queued event lost with it
    assert drops == [("drop_newest", 1), ("drop_newest", 1), ("route_removed", 1)]
    assert router.counters()["dropped_events"] == 3


def test_a_route_not_yet_due_does_not_hold_back_the_routes_after_it() -> None:
    router = Router()
    router.add_route(RouteSpec("a://*", debounce=10.0, route_id="slow"))
    router.add_route(RouteSpec("b://*", debounce=0.0, route_id="fast"))
    router.add_route(RouteSpec("c://*", debounce=0.0, route_id="idle"))
    router.add_route(RouteSpec("d://*", debounce=0.0, route_id="last"))
    router.ingest(ev("a://1"), 0.0)
    router.ingest(ev("b://1"), 0.0)
    router.ingest(ev("d://1"), 0.0)
    assert sorted(spawned(router, 1.0)) == ["b://1", "d://1"]


def test_a_session_busy_on_one_route_does_not_hold_back_another_session() -> None:
    router = Router()
    router.add_route(RouteSpec("a://*", Continue("s1"), debounce=0.0, route_id="r1"))
    router.add_route(RouteSpec("b://*", Continue("s2"), debounce=0.0, route_id="r2"))
    router.ingest(ev("a://1"), 0.0)
    router.ingest(ev("b://1"), 0.0)
    out = router.take_deliveries(
        0.0, session_idle=lambda s: s == "s2", may_spawn=lambda: True, draining=False
    )
    assert [(d.session, d.route_id) for d in out if isinstance(d, ContinueDelivery)] == [("s2", "r2")]
    # s1 is still due once it is idle.
    out = router.take_deliveries(1.0, session_idle=lambda _s: True, may_spawn=lambda: True, draining=False)
    assert [(d.session, d.route_id) for d in out if isinstance(d, ContinueDelivery)] == [("s1", "r1")]


def test_a_freed_slot_makes_a_route_due_only_when_it_has_queued_changes_and_no_debounce_pending() -> None:
    router = Router()
    route = router.add_route(RouteSpec("n://*", Spawn(max_inflight=1), debounce=0.0, route_id="r"))
    router.ingest(ev("n://a"), 0.0)
    assert spawned(router, 0.0) == ["n://a"]
    assert not route.ready
    router.on_spawn_done("r")
    assert not route.ready  # nothing queued: not due
    router.ingest(ev("n://b"), 1.0)
    assert spawned(router, 1.0) == ["n://b"]
    router.ingest(ev("n://c"), 2.0)  # queued behind the busy slot; its debounce (0) is due at 2.0
    assert spawned(router, 2.0) == []
    router.on_spawn_done("r")
    assert route.ready
    assert spawned(router, 2.0) == ["n://c"]


def test_a_removed_session_is_no_longer_busy() -> None:
    router = Router()
    router.add_route(RouteSpec("a://*", Continue("s1"), debounce=0.0, route_id="r1"))
    router.ingest(ev("a://1"), 0.0)
    router.take_deliveries(0.0, session_idle=lambda _s: True, may_spawn=lambda: True, draining=False)
    assert router.session_busy("s1")
    router.remove_session("s1")
    assert not router.session_busy("s1")


def test_a_standalone_queue_numbers_its_arrivals_from_one() -> None:
    q = RouteQueue(4)
    for uri in ("n://a", "n://b", "n://c"):
        q.push(ev(uri), "coalesce")
    assert [order for order, _ in q.drain_with_order()] == [1, 2, 3]
    q.push(ev("n://d"), "coalesce", 10)
    q.push(ev("n://e"), "coalesce")
    assert [order for order, _ in q.drain_with_order()] == [10, 4]


def test_an_exact_match_is_not_read_as_a_glob_even_where_a_glob_could_not_be_read() -> None:
    spec = RouteSpec("n://a\\", exact=True)  # a lone backslash: no glob, but a fine URI
    router = Router()
    router.add_route(spec)
    assert router.first_match("n://a\\") is not None
    with pytest.raises(ValueError, match="ends in a lone backslash"):
        RouteSpec("n://a\\")


def test_a_template_is_checked_past_its_literal_braces() -> None:
    with pytest.raises(ValueError, match=r"unknown placeholder \{bad\}"):
        Spawn(template="a }} b {bad}")
    assert Spawn(template="{{literal}} {uri}").template == "{{literal}} {uri}"
