"""The reactor's change path: a resource change into the router, due deliveries out to sessions and agents.

Also the clock's fires (a timer route's event, or the schedule's root). The
part owns no state: the queues and debounces are the router's, the agents
the agent table's (through the spawner), the notices waiting for a slot the
notice desk's.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import assert_never

from agentd.events import (
    ResourceChanged,
)
from agentd.observe.counters import RunCounters
from agentd.observe.telemetry import Telemetry
from agentd.supervisor.loop.notices import NoticeDesk
from agentd.supervisor.loop.readiness import Readiness
from agentd.supervisor.loop.runstatus import RunStatus
from agentd.supervisor.loop.seams import Clock, Phase, WatchHooks
from agentd.supervisor.loop.spawner import Spawner
from agentd.supervisor.loop.subagents import SubagentDesk, agent_id_of
from agentd.triggers import mode as modes
from agentd.triggers.router import (
    ContinueDelivery,
    PushOutcome,
    QueuedEvent,
    Route,
    Router,
    SpawnDelivery,
    metric_route,
)


@dataclass(frozen=True, slots=True, eq=False)
class Delivery:
    """The reactor's change path: a resource change into the router, due deliveries out to sessions and agents."""

    router: Router
    status: RunStatus
    readiness: Readiness
    counters: RunCounters
    spawner: Spawner
    notices: NoticeDesk
    watches: WatchHooks | None
    handles: Callable[[Route, str], bool] | None
    telemetry: Telemetry
    clock: Clock | None
    """A clock source for timer routes and schedule fires, if any."""
    driver: modes.Driver
    """The mode's driver (the schedule's fires)."""
    subagents: SubagentDesk | None = None
    """Started agents' records: a delivery of ``agent://ID`` carries the agent's result (rfcs/0370)."""

    def resource_changed(self, ev: ResourceChanged, now: float) -> None:
        if self.handles is not None:
            route = self.router.first_match(ev.uri)
            if route is not None and not self.handles(route, ev.uri):
                # Another replica owns this key (rfcs/0213); it gets the same update.
                self.telemetry.emit("shard.skipped", server=ev.server, uri=ev.uri, route=route.id)
                self.counters.activity.decision(now, ev.uri, route.id, "skipped:shard")
                return
        if ev.startup:
            owner = self.router.first_match(ev.uri)
            if owner is not None and not owner.spec.reread_on_start:
                # The route opted out of the start-up re-read (rfcs/0130).
                self.telemetry.emit("resource.reread_skipped", server=ev.server, uri=ev.uri, route=owner.id)
                self.counters.activity.decision(now, ev.uri, owner.id, "skipped:reread_on_start")
                return
        result = self.router.ingest(
            QueuedEvent(uri=ev.uri, server=ev.server, etag=ev.etag, kind=ev.kind, first_seen=now), now
        )
        self.telemetry.emit(
            "resource.updated",
            server=ev.server,
            uri=ev.uri,
            kind=ev.kind,
            route=result.route_id,
            outcome=None if result.outcome is None else result.outcome.value,
            **({"startup": True} if ev.startup else {}),
            **({"reason": result.reason} if result.reason is not None else {}),
        )
        activity = self.counters.activity
        if result.route_id is None:
            self.counters.unroute()
            activity.decision(now, ev.uri, None, "unrouted")
            return
        label = metric_route(result.route_id, result.route_kind)
        if result.reason is not None:
            self.counters.drop_on(label)
            activity.decision(now, ev.uri, result.route_id, f"dropped:{result.reason}")
        elif result.outcome is not None:
            activity.decision(now, ev.uri, result.route_id, result.outcome.value)
        self.counters.route(label)
        outcome = result.outcome
        if outcome is PushOutcome.COALESCED:
            self.counters.coalesce(label)
            self.telemetry.emit("route.coalesced", route=result.route_id, uri=ev.uri)
        elif result.reason is not None:
            # One vocabulary: the router's reason, and the URI that was lost
            # (under drop_oldest that is the oldest queued one, not this one).
            # Counted by the router's on_drop (with the drops of removed routes).
            self.telemetry.emit(
                "route.dropped",
                route=result.route_id,
                uri=result.dropped_uri,
                reason=result.reason,
                **({"incoming": ev.uri} if result.dropped_uri != ev.uri else {}),
            )
        elif outcome is PushOutcome.BLOCKED:
            self.telemetry.emit("route.blocked", route=result.route_id, uri=ev.uri)
        elif outcome is PushOutcome.DEFERRED:
            # The route's queue is full: the change waits aside and is queued as room frees (rfcs/0372).
            self.telemetry.emit("route.deferred", route=result.route_id, uri=ev.uri)
        else:
            self.telemetry.emit("route.enqueued", route=result.route_id, uri=ev.uri)

    def deliver(self, now: float) -> None:
        deliveries = self.router.take_deliveries(
            now,
            session_idle=self.spawner.session_idle,
            may_spawn=self.status.may_start_work,
            draining=self.status.phase is not Phase.RUNNING or not self.readiness.open,
        )
        for d in deliveries:
            match d:
                case SpawnDelivery():
                    self.telemetry.observe("event_to_agent", now - d.event.first_seen, route=d.route_id)
                    self.telemetry.emit("route.deliver", route=d.route_id, uris=[d.event.uri])
                    agent = self.spawner.spawn(now, role="spawn", instruction=d.instruction, route=d.route_id)
                    agent.started_for([d.event])
                    agent.woken(d.route_id, (d.event.uri,), now)
                    self.counters.activity.decision(now, d.event.uri, d.route_id, "delivered", agent.id)
                    self.counters.activity.wake(now, d.route_id)
                    agent.record_delivery()
                case ContinueDelivery():
                    self._continue(d, now)
                case _:
                    assert_never(d)
        if self.notices.route_notices:
            self.notices.spawn_route_notices(now)

    def _continue(self, d: ContinueDelivery, now: float) -> None:
        uris = [e.uri for e in d.events]
        self.telemetry.emit("route.deliver", route=d.route_id, uris=uris)
        match d.kind:
            case "watch":
                # A watch re-reads and filters on its own task; the owning
                # session only hears of it as a notice (see the notice desk).
                self.router.on_session_idle(d.session)
                if self.watches is not None:
                    self.watches.on_changed(d.route_id, uris)
            case "stage":
                # Same for a staged declared route: its notices come back as RouteNotice.
                self.router.on_session_idle(d.session)
                if self.watches is not None:
                    self.watches.on_route_changed(d.route_id, [(e.uri, e.server) for e in d.events])
            case "declared" | "added" | "self":
                oldest = min(e.first_seen for e in d.events) if d.events else now
                self.telemetry.observe("event_to_agent", now - oldest, route=metric_route(d.route_id, d.kind))
                desk = self.subagents
                finished = [e.uri for e in d.events if agent_id_of(e.uri) is not None] if desk else []
                text = render_delivery(d.events, desk.describe if desk is not None else None, now)
                agent = self.spawner.deliver_to_session(
                    now, d.session, text, route=d.route_id, origin=d.events
                )
                if desk is not None and finished:
                    desk.delivered(agent, finished)
                for e, route in zip(d.events, d.event_routes or (d.route_id,) * len(d.events), strict=False):
                    self.counters.activity.decision(now, e.uri, route, "delivered", agent.id)
                self.counters.activity.wake(now, d.route_id)
            case _:
                assert_never(d.kind)

    def clock_fire(self, now: float) -> None:
        assert self.clock is not None
        self.clock.fire(now, _dt.datetime.now(_dt.UTC))
        self.telemetry.emit("timer.fire")
        if isinstance(self.driver, modes.Schedule) and self.router.timer_route is None:
            for action in self.driver.on_fire(self.status.view(now), now):
                if isinstance(action, modes.SpawnRoot):
                    self.spawner.spawn_root(now)
                else:
                    self.telemetry.emit("timer.coalesced", reason="previous root still running")
        else:
            timer = self.router.timer_route
            if self.handles is not None and timer is not None and not self.handles(timer, timer.id):
                return  # another replica owns this timer route's fires
            self.router.ingest_timer(now)


def render_delivery(
    events: list[QueuedEvent],
    describe: Callable[[str, float], str | None] | None = None,
    now: float = 0.0,
) -> str:
    """The user turn a continue delivery becomes.

    ``describe``: the lines of a URI that is a finished agent (its status and
    result, rfcs/0370), in place of the plain line; other URIs are listed.
    """
    lines: list[str] = []
    finished: list[str] = []
    for e in events:
        said = describe(e.uri, now) if describe is not None else None
        if said is not None:
            finished.append(said)
            continue
        tag = "possibly changed" if e.kind == "synthetic" else e.kind
        server = f" on {e.server}" if e.server else ""
        lines.append(f"- {e.uri}{server} ({tag})")
    parts: list[str] = []
    if finished:
        parts.append("These agents you started have ended (oldest first):\n" + "\n".join(finished))
    if lines:
        parts.append(
            "These resources changed (re-read what you need; act on the current state):\n" + "\n".join(lines)
        )
    return "\n\n".join(parts)
