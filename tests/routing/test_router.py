"""Router, queues, debounce and deliveries, with time passed in explicitly."""

from __future__ import annotations

import pytest

from agentd.core.errors import RouteError
from agentd.triggers import router as router_module
from agentd.triggers.router import (
    DEFAULT_TEMPLATE,
    TIMER_URI,
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
    render_template,
    validate_template,
)


def ev(uri: str, t: float = 0.0, etag: str | None = None, kind: str = "updated") -> QueuedEvent:
    return QueuedEvent(uri, "srv", etag, kind, t)  # type: ignore[arg-type]


def take(router: Router, now: float, *, idle: bool = True, spawn: bool = True, draining: bool = False):
    return router.take_deliveries(
        now, session_idle=lambda s: idle, may_spawn=lambda: spawn, draining=draining
    )


# ---------------------------------------------------------------- RouteQueue


def test_queue_coalesces_newest_wins_keeping_position_and_age() -> None:
    q = RouteQueue(cap=4)
    assert q.push(ev("a", 1.0, "e1"), "coalesce") is PushOutcome.ENQUEUED
    assert q.push(ev("b", 2.0), "coalesce") is PushOutcome.ENQUEUED
    assert q.push(ev("a", 3.0, "e2", "synthetic"), "coalesce") is PushOutcome.COALESCED
    assert q.peek_uris() == ["a", "b"]
    first = q.pop()
    assert first == QueuedEvent("a", "srv", "e2", "synthetic", 1.0)
    assert len(q) == 1


@pytest.mark.parametrize(
    ("overflow", "outcome", "uris"),
    [
        ("coalesce", PushOutcome.DROPPED_NEWEST, ["a", "b"]),
        ("drop_newest", PushOutcome.DROPPED_NEWEST, ["a", "b"]),
        ("drop_oldest", PushOutcome.DROPPED_OLDEST, ["b", "c"]),
        ("block", PushOutcome.BLOCKED, ["a", "b"]),
    ],
)
def test_queue_overflow(overflow, outcome, uris) -> None:
    q = RouteQueue(cap=2)
    q.push(ev("a"), overflow)
    q.push(ev("b"), overflow)
    assert q.push(ev("c"), overflow) is outcome
    assert q.peek_uris() == uris
    # A URI already queued always coalesces, even at cap.
    assert q.push(ev(uris[0], 9.0), overflow) is PushOutcome.COALESCED


def test_queue_discard_is_lazy_and_order_survives_requeue() -> None:
    q = RouteQueue(cap=8)
    for u in "abc":
        q.push(ev(u), "coalesce")
    assert q.discard("a") is not None
    assert q.discard("zz") is None
    q.push(ev("a"), "coalesce")  # back of the line now
    assert q.oldest() == ev("b")
    assert q.peek_uris() == ["b", "c", "a"]
    assert [e.uri for e in q.drain()] == ["b", "c", "a"]
    assert q.pop() is None
    assert q.oldest() is None


def test_queue_deep_fifo() -> None:
    q = RouteQueue(cap=10_000)
    for i in range(10_000):
        q.push(ev(f"u{i}"), "coalesce")
    assert [q.pop().uri for _ in range(3)] == ["u0", "u1", "u2"]  # type: ignore[union-attr]
    assert len(q) == 9_997


def test_queue_rejects_bad_cap() -> None:
    with pytest.raises(ValueError, match=r"queue_cap: 0 is not valid"):
        RouteQueue(0)


# ---------------------------------------------------------------- matching


def test_first_match_precedence() -> None:
    r = Router()
    glob_all = r.add_route(RouteSpec("file:///**"))
    glob_in = r.add_route(RouteSpec("file:///in/*.json"))
    glob_in2 = r.add_route(RouteSpec("file:///in/*.json"))  # same specificity, declared later
    exact = r.add_route(RouteSpec("file:///in/a.json"))
    assert [glob_all.id, glob_in.id, glob_in2.id, exact.id] == ["r0", "r1", "r2", "r3"]
    assert r.first_match("file:///in/a.json") is exact
    assert r.first_match("file:///in/b.json") is glob_in
    assert r.first_match("file:///in/x/b.json") is glob_all
    assert r.first_match("http://elsewhere") is None
    r.remove_route("r1")
    assert r.first_match("file:///in/b.json") is glob_in2


def test_query_string_uris_route_exactly() -> None:
    r = Router()
    ns_a = r.add_route(RouteSpec("kube-events://watch/pods\\?namespace=a"))
    any_ns = r.add_route(RouteSpec("kube-events://watch/pods\\?namespace=*"))
    literal = r.add_route(RouteSpec("kube-events://watch/svc?namespace=b", exact=True))
    assert ns_a.exact
    assert r.first_match("kube-events://watch/pods?namespace=a") is ns_a
    assert r.first_match("kube-events://watch/pods?namespace=b") is any_ns
    assert r.first_match("kube-events://watch/svc?namespace=b") is literal
    assert r.first_match("kube-events://watch/svcXnamespace=b") is None


def test_unrouted_is_counted_and_dropped() -> None:
    r = Router()
    res = r.ingest(ev("mem://nobody"), 0.0)
    assert (res.route_id, res.outcome) == (None, None)
    assert r.counters()["unrouted"] == 1
    assert r.next_deadline() is None


# ---------------------------------------------------------------- self-subscribe


def test_self_subscribe_owns_exactly_and_goes_first() -> None:
    r = Router()
    declared = r.add_route(RouteSpec("mem://a"))
    mine = r.add_route(RouteSpec("mem://a", Continue("s1")), owner="s1")
    assert mine.id == "self:s1:mem://a"
    assert r.first_match("mem://a") is mine
    assert r.add_route(RouteSpec("mem://a", Continue("s1")), owner="s1") is mine  # idempotent
    with pytest.raises(
        RouteError, match=r"'mem://a' is already subscribed by session 's1' \(route 'self:s1:mem://a'\)"
    ):
        r.add_route(RouteSpec("mem://a", Continue("s2")), owner="s2")
    assert r.routes_for_session("s1") == [mine]
    assert r.remove_session("s1") == ["self:s1:mem://a"]
    assert r.first_match("mem://a") is declared
    # Once released, another session may take it.
    r.add_route(RouteSpec("mem://a", Continue("s2")), owner="s2")


def test_self_subscribe_treats_query_string_literally() -> None:
    r = Router()
    route = r.add_route(RouteSpec("kube://pods?ns=a", Continue("s")), owner="s")
    assert route.exact
    assert r.first_match("kube://pods?ns=a") is route
    assert r.first_match("kube://podsXns=a") is None


def test_route_table_errors() -> None:
    r = Router()
    r.add_route(RouteSpec("mem://a", route_id="x"))
    with pytest.raises(RouteError, match=r"route id 'x' is already in use"):
        r.add_route(RouteSpec("mem://b", route_id="x"))
    with pytest.raises(RouteError, match=r"no route 'nope': known routes are \['x'\]"):
        r.remove_route("nope")
    with pytest.raises(RouteError, match=r"no timer route is declared: declare one route with timer=True"):
        r.ingest_timer(0.0)
    r.add_route(RouteSpec("", timer=True, route_id="tick"))
    with pytest.raises(RouteError, match=r"there is already a timer route \('tick'\)"):
        r.add_route(RouteSpec("", timer=True))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"debounce": -1}, r"debounce: -1 is not valid: give seconds >= 0"),
        ({"max_wait": -0.5}, r"max_wait: -0.5 is not valid"),
        ({"queue_cap": 0}, r"queue_cap: 0 is not valid"),
        (
            {"overflow": "spill"},
            r"overflow: 'spill' is not valid: use one of coalesce, drop_oldest, drop_newest, block",
        ),
        ({"disposition": "spawn"}, r"disposition: 'spawn' is not valid"),
    ],
)
def test_spec_validation(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        RouteSpec("mem://a", **kwargs)


def test_disposition_validation() -> None:
    with pytest.raises(ValueError, match=r"max_inflight: 0 is not valid"):
        Spawn(max_inflight=0)
    with pytest.raises(ValueError, match=r"continue session: '' is not valid"):
        Continue("")


# ---------------------------------------------------------------- templates


def test_templates() -> None:
    validate_template("uri={uri} server={server} etag={etag} kind={kind} {{literal}}")
    with pytest.raises(
        ValueError, match=r"unknown placeholder \{path\}: use only \{etag\}, \{kind\}, \{server\}, \{uri\}"
    ):
        validate_template("look at {path}")
    with pytest.raises(ValueError, match=r"placeholder \{uri\} takes no conversion or format spec"):
        validate_template("{uri!r}")
    with pytest.raises(ValueError, match=r"write literal braces as '\{\{' and '\}\}'"):
        validate_template("oops {uri")
    with pytest.raises(ValueError, match=r"unknown placeholder"):
        Spawn(template="{nope}")
    assert (
        render_template("{uri}|{server}|{etag}|{kind}", QueuedEvent("u", None, None, "timer", 0))
        == "u|none|none|timer"
    )
    validate_template(DEFAULT_TEMPLATE)


# ---------------------------------------------------------------- debounce


def test_trailing_debounce_rearms_on_each_event() -> None:
    r = Router()
    r.add_route(RouteSpec("mem://*", Spawn(), debounce=0.25))
    r.ingest(ev("mem://a", 10.0, "1"), 10.0)
    assert r.next_deadline() == 10.25
    r.ingest(ev("mem://a", 10.2, "2"), 10.2)
    assert r.next_deadline() == pytest.approx(10.45)
    assert take(r, 10.44) == []
    out = take(r, 10.45)
    assert len(out) == 1
    d = out[0]
    assert isinstance(d, SpawnDelivery)
    assert d.event == QueuedEvent("mem://a", "srv", "2", "updated", 10.0)
    assert d.instruction == DEFAULT_TEMPLATE.format(uri="mem://a", server="srv", etag="2", kind="updated")
    assert r.counters()["coalesced"] == 1
    assert r.next_deadline() is None


def test_max_wait_caps_a_chatty_burst() -> None:
    r = Router()
    r.add_route(RouteSpec("mem://*", Spawn(), debounce=1.0, max_wait=2.5))
    for t in (0.0, 0.9, 1.8, 2.7):
        r.ingest(ev("mem://a", t), t)
    assert r.next_deadline() == 2.5  # min(2.7 + 1.0, 0.0 + 2.5)
    assert len(take(r, 2.5)) == 1
    # The next burst gets a fresh max_wait window.
    r.ingest(ev("mem://a", 3.0), 3.0)
    assert r.next_deadline() == 4.0


def test_spawn_inflight_limit_and_done_redelivers_without_new_debounce() -> None:
    r = Router()
    route = r.add_route(RouteSpec("mem://*", Spawn(max_inflight=2, template="go {uri}"), debounce=0.5))
    for i, u in enumerate("abcd"):
        r.ingest(ev(f"mem://{u}", float(i)), float(i))
    out = take(r, 3.5)
    assert [d.instruction for d in out] == ["go mem://a", "go mem://b"]  # type: ignore[union-attr]
    assert route.inflight == 2
    assert take(r, 3.6) == []
    assert r.next_deadline() is None  # waits for capacity, not time
    r.on_spawn_done(route.id)
    out = take(r, 3.7)
    assert [d.event.uri for d in out] == ["mem://c"]  # type: ignore[union-attr]
    r.on_spawn_done("removed-meanwhile")  # ignored


def test_may_spawn_false_holds_spawns() -> None:
    r = Router()
    r.add_route(RouteSpec("mem://*", Spawn(), debounce=0))
    r.ingest(ev("mem://a"), 0.0)
    assert take(r, 0.0, spawn=False) == []
    assert len(take(r, 1.0)) == 1


def test_continue_delivers_the_set_only_when_idle() -> None:
    r = Router()
    r.add_route(RouteSpec("mem://x/*", Continue("s"), debounce=0.1))
    r.add_route(RouteSpec("mem://y", Continue("s"), debounce=0.1), owner="s")
    r.ingest(ev("mem://x/1", 0.0), 0.0)
    r.ingest(ev("mem://y", 0.05), 0.05)
    r.ingest(ev("mem://x/2", 0.06), 0.06)
    assert take(r, 1.0, idle=False) == []  # mid-turn: nothing
    out = take(r, 1.0)
    assert len(out) == 1
    d = out[0]
    assert isinstance(d, ContinueDelivery)
    assert d.session == "s"
    assert [e.uri for e in d.events] == ["mem://x/1", "mem://y", "mem://x/2"]  # arrival order
    assert d.event_routes == ("r0", "self:s:mem://y", "r0")
    # The router treats the session as busy until it says it is idle.
    r.ingest(ev("mem://x/3", 1.1), 1.1)
    assert take(r, 5.0) == []
    assert r.session_busy("s")
    r.on_session_idle("s")
    assert [e.uri for e in take(r, 5.0)[0].events] == ["mem://x/3"]  # type: ignore[union-attr]


def test_nothing_delivered_while_draining() -> None:
    r = Router()
    r.add_route(RouteSpec("mem://*", Spawn(), debounce=0))
    r.add_route(RouteSpec("c://*", Continue("s"), debounce=0))
    r.ingest(ev("mem://a"), 0.0)
    r.ingest(ev("c://a"), 0.0)
    assert take(r, 1.0, draining=True) == []


def test_remove_route_drops_and_counts() -> None:
    r = Router()
    r.add_route(RouteSpec("mem://*", Spawn(), debounce=1.0))
    r.ingest(ev("mem://a"), 0.0)
    r.ingest(ev("mem://b"), 0.0)
    r.remove_route("r0")
    assert take(r, 5.0) == []
    assert r.next_deadline() is None
    c = r.counters()
    assert (c["dropped_events"], c["dropped_events.route_removed"]) == (2, 2)


def test_overflow_counters_and_reasons() -> None:
    r = Router()
    r.add_route(RouteSpec("c://*", queue_cap=1))
    r.add_route(RouteSpec("n://*", queue_cap=1, overflow="drop_newest"))
    r.add_route(RouteSpec("o://*", queue_cap=1, overflow="drop_oldest"))
    for p in "cno":
        r.ingest(ev(f"{p}://1"), 0.0)
    res = r.ingest(ev("c://2"), 0.0)  # coalesce keeps it aside (rfcs/0372): no drop
    assert (res.outcome, res.dropped_uri, res.reason) == (PushOutcome.DEFERRED, None, None)
    res = r.ingest(ev("n://2"), 0.0)
    assert (res.outcome, res.dropped_uri, res.reason) == (PushOutcome.DROPPED_NEWEST, "n://2", "drop_newest")
    res = r.ingest(ev("o://2"), 0.0)
    assert (res.outcome, res.dropped_uri, res.reason) == (PushOutcome.DROPPED_OLDEST, "o://1", "drop_oldest")
    c = r.counters()
    assert (c["dropped_events"], c["deferred"]) == (2, 1)
    assert (
        c["dropped_events.coalesce_cap"],
        c["dropped_events.drop_newest"],
        c["dropped_events.drop_oldest"],
    ) == (0, 1, 1)


def test_a_burst_past_a_coalesce_queue_is_deferred_and_every_uri_delivered_once() -> None:
    # rfcs/0372: a change that will never come again (one webhook delivery) is not stranded.
    r = Router()
    route = r.add_route(RouteSpec("d://*", Spawn(max_inflight=2), queue_cap=3, debounce=0))
    outcomes = [r.ingest(ev(f"d://{n}"), 0.0).outcome for n in range(50)]
    assert outcomes.count(PushOutcome.ENQUEUED) == 3
    assert outcomes.count(PushOutcome.DEFERRED) == 47
    assert r.ingest(ev("d://40", etag="newer"), 0.0).outcome is PushOutcome.COALESCED  # newest wins aside
    delivered: list[tuple[str, str | None]] = []
    while True:
        out = take(r, 0.0)
        if not out:
            break
        for d in out:
            assert isinstance(d, SpawnDelivery)
            delivered.append((d.event.uri, d.event.etag))
            r.on_spawn_done(route.id)
    assert [u for u, _ in delivered] == [f"d://{n}" for n in range(50)]  # each once, in arrival order
    assert dict(delivered)["d://40"] == "newer"
    assert (r.counters()["dropped_events"], len(route.deferred), len(route.queue)) == (0, 0, 0)


def test_past_the_deferred_bound_a_coalesce_route_drops_with_its_reason(monkeypatch) -> None:
    monkeypatch.setattr(router_module, "MAX_DEFERRED", 2)
    r = Router()
    r.add_route(RouteSpec("d://*", queue_cap=1))
    results = [r.ingest(ev(f"d://{n}"), 0.0) for n in range(4)]
    assert [x.outcome for x in results] == [
        PushOutcome.ENQUEUED,
        PushOutcome.DEFERRED,
        PushOutcome.DEFERRED,
        PushOutcome.DROPPED_NEWEST,
    ]
    assert (results[3].reason, results[3].dropped_uri) == ("coalesce_cap", "d://3")
    assert r.counters()["dropped_events.coalesce_cap"] == 1


def test_block_holds_events_and_reports_the_route() -> None:
    r = Router()
    route = r.add_route(RouteSpec("b://*", Spawn(max_inflight=1), queue_cap=1, overflow="block", debounce=0))
    r.ingest(ev("b://1"), 0.0)
    assert r.ingest(ev("b://2"), 0.0).outcome is PushOutcome.BLOCKED
    assert r.ingest(ev("b://3"), 0.0).outcome is PushOutcome.BLOCKED
    assert r.ingest(ev("b://2", etag="new"), 0.0).outcome is PushOutcome.BLOCKED  # coalesced while held
    assert r.blocked_routes() == {route.id}
    assert [d.event.uri for d in take(r, 0.0)] == ["b://1"]  # type: ignore[union-attr]
    assert route.queue.peek_uris() == ["b://2"]  # refilled from held
    assert r.blocked_routes() == {route.id}  # b://3 still held
    r.on_spawn_done(route.id)
    out = take(r, 0.0)
    assert [(d.event.uri, d.event.etag) for d in out] == [("b://2", "new")]  # type: ignore[union-attr]
    assert r.blocked_routes() == frozenset()
    r.on_spawn_done(route.id)
    assert [d.event.uri for d in take(r, 0.0)] == ["b://3"]  # type: ignore[union-attr]
    assert r.counters()["dropped_events"] == 0


def test_block_names_the_servers_to_pause_and_a_removed_route_is_unblocked() -> None:
    r = Router()
    route = r.add_route(RouteSpec("b://*", Spawn(max_inflight=1), queue_cap=1, overflow="block", debounce=0))
    r.ingest(QueuedEvent("b://1", "one", None, "updated", 0.0), 0.0)
    r.ingest(QueuedEvent("b://2", "one", None, "updated", 0.0), 0.0)
    r.ingest(QueuedEvent("b://3", "two", None, "updated", 0.0), 0.0)
    assert r.held_servers(route.id) == {"one", "two"}  # b://1 is queued, not held
    assert r.held_servers("nope") == frozenset()
    r.remove_route(route.id)
    assert r.blocked_routes() == frozenset()
    assert r.counters()["dropped_events.route_removed"] == 3


def test_timer_route_coalesces_fires() -> None:
    r = Router()
    tr = r.add_route(RouteSpec("", Spawn(max_inflight=1), timer=True, debounce=0))
    assert r.timer_route is tr
    r.ingest_timer(5.0)
    assert r.ingest_timer(6.0).outcome is PushOutcome.COALESCED
    out = take(r, 6.0)
    assert len(out) == 1
    d = out[0]
    assert isinstance(d, SpawnDelivery)
    assert (d.event.uri, d.event.kind, d.event.first_seen) == (TIMER_URI, "timer", 5.0)
    assert r.first_match(TIMER_URI) is None  # not part of URI matching


def test_default_queue_cap_follows_watched_uris() -> None:
    r = Router()
    assert r.add_route(RouteSpec("a://*")).queue.cap == 16
    assert r.add_route(RouteSpec("b://*"), watched_uris=40).queue.cap == 40
    assert r.add_route(RouteSpec("c://*", queue_cap=3), watched_uris=40).queue.cap == 3


def test_default_route_for() -> None:
    assert default_route_for("mem://a", "reactive", None).disposition == Spawn()
    assert default_route_for("mem://a", "schedule", None).disposition == Spawn()
    warm = default_route_for("mem://a?x", "loop", "root")
    assert warm.disposition == Continue("root")
    assert warm.exact
