"""Stateful property test of router invariants (hypothesis RuleBasedStateMachine).

Invariants checked after every step:
* no queue exceeds its cap;
* newest wins: a queued URI carries the etag of the last event accepted for it;
* exactly one owner: ingest's route equals a brute-force reference matcher
  (exact first, then longest literal prefix, then order, front before declared);
* continue deliveries never reach a session mid-turn, keep arrival order within
  a delivery and FIFO order per route across deliveries;
* nothing is delivered for a removed route, or while draining.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from agentd.core.errors import RouteError
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

SESSIONS = ("s0", "s1", "s2")
segment = st.sampled_from(["a", "b", "*", "**", "?", "a*", "*b"])
pattern = st.lists(segment, min_size=1, max_size=2).map(lambda segs: "m://" + "/".join(segs))
concrete = st.lists(st.sampled_from(["a", "b", "ab"]), min_size=1, max_size=2).map(
    lambda segs: "m://" + "/".join(segs)
)


def ref_regex(p: str) -> re.Pattern[str]:
    out, i = [], 0
    while i < len(p):
        if p.startswith("**", i):
            j = i
            while j < len(p) and p[j] == "*":
                j += 1
            if (i == 0 or p[i - 1] == "/") and j < len(p) and p[j] == "/":
                out.append("(?:.*/)?")
                i = j + 1
            else:
                out.append(".*")
                i = j
        elif p[i] == "*":
            out.append("[^/]*")
            i += 1
        elif p[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(p[i]))
            i += 1
    return re.compile("".join(out))


class RouterMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.router = Router()
        self.now = 0.0
        self.busy: set[str] = set()
        # route id -> (pattern, is_exact, order key, created_at)
        self.live: dict[str, tuple[str, bool, tuple[int, int], float]] = {}
        self.seq = 0
        self.last_etag: dict[tuple[str, str], str] = {}
        self.last_delivered_first_seen: dict[str, float] = {}
        self.etag_counter = 0

    # -- route table --

    @initialize(sessions=st.lists(st.sampled_from(SESSIONS), min_size=1, max_size=3))
    def catch_all(self, sessions) -> None:
        """Start with broad routes so events find owners often."""
        for i, session in enumerate(sessions):
            disp = Continue(session) if i % 2 == 0 else Spawn(max_inflight=i)
            match = ("m://**", "m://a/*", "m://*")[i]
            route = self.router.add_route(RouteSpec(match, disp, debounce=0.5, queue_cap=3))
            self.live[route.id] = (route.spec.match, route.exact, route.order, self.now)

    @rule(
        p=pattern,
        spawn=st.booleans(),
        session=st.sampled_from(SESSIONS),
        inflight=st.integers(1, 3),
        debounce=st.sampled_from([0.0, 0.5, 1.0]),
        max_wait=st.sampled_from([None, 0.7, 2.0]),
        cap=st.integers(1, 4),
        overflow=st.sampled_from(["coalesce", "drop_oldest", "drop_newest", "block"]),
        front=st.booleans(),
    )
    def add(self, p, spawn, session, inflight, debounce, max_wait, cap, overflow, front) -> None:
        disp = Spawn(max_inflight=inflight) if spawn else Continue(session)
        spec = RouteSpec(p, disp, debounce=debounce, max_wait=max_wait, queue_cap=cap, overflow=overflow)
        route = self.router.add_route(spec, front=front)
        self.live[route.id] = (p, route.exact, route.order, self.now)

    @rule(session=st.sampled_from(SESSIONS), uri=concrete)
    def self_subscribe(self, session, uri) -> None:
        owners = {r.owner for r in self.router.routes() if r.owner and r.glob.literal == uri and r.exact}
        others = owners - {session}
        if others:
            with pytest.raises(
                RouteError, match=re.escape(f"already subscribed by session {next(iter(others))!r}")
            ):
                self.router.add_route(RouteSpec(uri, Continue(session)), owner=session)
            return
        route = self.router.add_route(RouteSpec(uri, Continue(session)), owner=session)
        if route.id not in self.live:
            self.live[route.id] = (uri, True, route.order, self.now)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def remove(self, data) -> None:
        rid = data.draw(st.sampled_from(sorted(self.live)))
        self.router.remove_route(rid)
        del self.live[rid]

    @rule(session=st.sampled_from(SESSIONS))
    def remove_session(self, session) -> None:
        for rid in self.router.remove_session(session):
            del self.live[rid]
        self.busy.discard(session)

    # -- events --

    def reference_owner(self, uri: str) -> str | None:
        exact = [(o, rid) for rid, (p, ex, o, _) in self.live.items() if ex and p == uri]
        if exact:
            return min(exact)[1]
        globs = []
        for rid, (p, ex, o, _) in self.live.items():
            if not ex and ref_regex(p).fullmatch(uri):
                lit = len(re.split(r"[*?]", p, maxsplit=1)[0])
                globs.append((-lit, o, rid))
        return min(globs)[2] if globs else None

    @rule(uri=concrete, dt=st.sampled_from([0.0, 0.1, 0.5]))
    def ingest(self, uri, dt) -> None:
        self.now += dt
        self.etag_counter += 1
        etag = f"e{self.etag_counter}"
        res = self.router.ingest(QueuedEvent(uri, "srv", etag, "updated", self.now), self.now)
        assert res.route_id == self.reference_owner(uri)
        if res.route_id is not None and res.outcome in (
            PushOutcome.ENQUEUED,
            PushOutcome.COALESCED,
            PushOutcome.DROPPED_OLDEST,
            PushOutcome.DEFERRED,
        ):
            route = self.router.get(res.route_id)
            assert route is not None
            queued = route.queue.get(uri)
            if queued is None and uri in route.deferred:  # waiting aside for room (rfcs/0372)
                queued = route.deferred[uri][1]
            assert queued is not None
            assert queued.etag == etag  # newest wins

    @rule(
        dt=st.sampled_from([0.0, 0.3, 1.0, 5.0, 5.0]), draining=st.sampled_from([False, False, False, True])
    )
    def deliver(self, dt, draining) -> None:
        self.now += dt
        busy_before = set(self.busy)
        out = self.router.take_deliveries(
            self.now, session_idle=lambda s: s not in self.busy, may_spawn=lambda: True, draining=draining
        )
        if draining:
            assert out == []
        sessions_seen = set()
        for d in out:
            if isinstance(d, SpawnDelivery):
                rids = [d.route_id]
                events = [d.event]
            else:
                assert isinstance(d, ContinueDelivery)
                assert d.session not in busy_before, "delivered into a session mid-turn"
                assert d.session not in sessions_seen, "two deliveries to one session at once"
                sessions_seen.add(d.session)
                self.busy.add(d.session)
                rids = list(d.event_routes)
                events = d.events
                firsts = [e.first_seen for e in events]
                assert firsts == sorted(firsts), "arrival order broken within a delivery"
            for rid, e in zip(rids, events, strict=True):
                assert rid in self.live, f"delivered for removed route {rid}"
                assert e.first_seen >= self.live[rid][3], "event older than its route"
                prev = self.last_delivered_first_seen.get(rid)
                if isinstance(d, ContinueDelivery):
                    assert prev is None or e.first_seen >= prev, "per-route FIFO broken"
                self.last_delivered_first_seen[rid] = e.first_seen

    @precondition(lambda self: any(r.inflight for r in self.router.routes()))
    @rule(data=st.data())
    def spawn_done(self, data) -> None:
        rid = data.draw(st.sampled_from(sorted(r.id for r in self.router.routes() if r.inflight)))
        self.router.on_spawn_done(rid)

    @precondition(lambda self: self.busy)
    @rule(data=st.data())
    def session_idle(self, data) -> None:
        s = data.draw(st.sampled_from(sorted(self.busy)))
        self.busy.discard(s)
        self.router.on_session_idle(s)

    # -- invariants --

    @invariant()
    def queues_bounded(self) -> None:
        for r in self.router.routes():
            assert len(r.queue) <= r.queue.cap

    @invariant()
    def a_deferred_uri_is_not_also_queued_and_waits_only_behind_a_full_queue(self) -> None:
        for r in self.router.routes():
            assert not any(uri in r.queue for uri in r.deferred)
            if r.deferred:
                assert r.spec.overflow == "coalesce"
                assert len(r.queue) == r.queue.cap or r.ready

    @invariant()
    def table_consistent(self) -> None:
        assert {r.id for r in self.router.routes()} == set(self.live)

    @invariant()
    def blocked_set_is_the_routes_holding_events(self) -> None:
        # Kept incrementally (the reactor reads it after every event): it must
        # always equal the routes that hold block-overflow events.
        assert self.router.blocked_routes() == {r.id for r in self.router.routes() if r.held}

    @invariant()
    def deadline_is_min(self) -> None:
        ds = [r.deadline for r in self.router.routes() if r.deadline is not None]
        assert self.router.next_deadline() == (min(ds) if ds else None)


RouterMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=50, deadline=None)
TestRouterStateful = RouterMachine.TestCase
