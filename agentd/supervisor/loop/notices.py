"""The reactor's notice desk: watch notices into their sessions, staged routes' notices into sessions or fresh agents.

A watch or a staged declared route (rfcs/0078) re-reads and filters on the
watch manager's tasks; what comes back is a notice, delivered here: into
the owning session now (idle), after its turn (busy), or by starting it;
a staged spawn route starts one agent per free ``max_inflight`` slot with
every notice it queued. The desk owns the spawn-route notices waiting for a
slot and the notices known before the first turn (the watch restore).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import assert_never

from agentd.events import (
    Notice,
    RouteNotice,
    WatchNotice,
)
from agentd.observe.telemetry import Telemetry
from agentd.supervisor.loop.agents import Agent, AgentPhase, AgentTable
from agentd.supervisor.loop.runstatus import RunStatus
from agentd.supervisor.loop.spawner import Spawner
from agentd.supervisor.routing.sessionroutes import SessionRoutes
from agentd.triggers.router import (
    QueuedEvent,
    Router,
    render_template,
)
from agentd.watches.stage import StagedRoute


@dataclass(frozen=True, slots=True, eq=False)
class NoticeDesk:
    """Delivers watch and staged-route notices; holds those waiting for a slot or for the first turn."""

    spawner: Spawner
    agents: AgentTable
    session_routes: SessionRoutes
    status: RunStatus
    router: Router
    telemetry: Telemetry
    staged: Mapping[str, StagedRoute]
    instruction: str
    route_notices: dict[str, list[RouteNotice]] = field(default_factory=dict, init=False)
    """Spawn-route notices waiting for a free ``max_inflight`` slot, by route id."""
    _startup: dict[str | None, list[Notice]] = field(default_factory=dict, init=False)
    """Notices known before the first turn (the watch restore), by session."""

    def queue_startup(self, notices: list[WatchNotice]) -> None:
        """Notices to deliver as the reactor starts (see :meth:`Reactor.queue_startup_notices`)."""
        for notice in notices:
            self._startup.setdefault(notice.session, []).append(notice)

    def take_startup(self, session: str | None) -> list[Notice]:
        """The start-up notices of ``session`` (the root's: they ride in its first turn)."""
        return self._startup.pop(session, []) if session is not None else []

    def deliver_startup(self, now: float) -> None:
        """Deliver every start-up notice no first turn took (the driver's ``on_start`` ran)."""
        pending = list(self._startup.values())
        self._startup.clear()
        for notices in pending:
            for notice in notices:
                self.notice(notice, now)

    def notice(self, ev: Notice, now: float) -> None:
        match ev:
            case RouteNotice():
                self._route_notice(ev, now)
            case WatchNotice():
                self._watch_notice(ev, now)
            case _:
                assert_never(ev)

    def _watch_notice(self, ev: Notice, now: float) -> None:
        """Deliver a notice into its session: now if idle, after the turn if busy, or start it."""
        fields = {"session": ev.session, "watch": ev.watch or None, "uri": ev.uri or None, "kind": ev.kind}
        route = ev.route if isinstance(ev, RouteNotice) else None
        if route is None and ev.kind == "notice" and ev.watch not in self.session_routes.watches(ev.session):
            self.telemetry.emit("watch.notice_dropped", **fields, reason="the watch was stopped")
            return
        agent = self.agents.session_agent(ev.session)
        if agent is None:
            if not self.status.may_start_work():
                self.telemetry.emit(
                    "watch.notice_dropped", **fields, reason="no new turns (draining or budget)"
                )
                return
            started = self.spawner.deliver_to_session(now, ev.session, ev.text, route=route)
            started.answering([ev])
            return
        if agent.phase is AgentPhase.IDLE and agent.held is not None:
            self.telemetry.emit(
                "session.deliver", session=ev.session, route=route, agent=agent.id, watch=ev.watch
            )
            agent.answering([ev])
            self.spawner.resume(agent, ev.text, now)
        elif agent.busy:
            agent.queue_notice(ev)
        else:
            self.telemetry.emit("watch.notice_dropped", **fields, reason=f"agent {agent.phase.value}")

    def _route_notice(self, ev: RouteNotice, now: float) -> None:
        """A staged route's notice: a turn of its session (continue) or a fresh agent (spawn)."""
        staged = self.staged.get(ev.route)
        if staged is None or self.router.get(ev.route) is None:
            self.telemetry.emit(
                "watch.notice_dropped", route=ev.route, uri=ev.uri, reason="the route is gone"
            )
            return
        if staged.disposition == "continue":
            self._watch_notice(replace(ev, session=staged.session), now)
            return
        self.route_notices.setdefault(ev.route, []).append(ev)
        self.spawn_route_notices(now)

    def spawn_route_notices(self, now: float) -> None:
        """Start one agent per staged spawn route with a free slot, carrying every notice it queued.

        A route's slots are its ``max_inflight``: agents it started that have
        not ended their last turn (the router's rule for spawn routes).
        """
        for route_id, pending in list(self.route_notices.items()):
            staged = self.staged[route_id]
            if not self.status.may_start_work():
                del self.route_notices[route_id]
                self.telemetry.emit(
                    "watch.notice_dropped",
                    route=route_id,
                    uri=[n.uri for n in pending],
                    reason="no new agents (draining or budget)",
                )
                continue
            running = sum(
                1
                for a in self.agents.live()
                if a.route == route_id and a.role == "spawn" and a.phase is not AgentPhase.EXITING
            )
            if running >= staged.max_inflight:
                continue  # a slot frees at an agent's last turn end; the delivery step calls again
            del self.route_notices[route_id]
            first = pending[0]
            head = self.instruction
            if staged.template is not None:
                head = render_template(
                    staged.template,
                    QueuedEvent(
                        uri=first.uri, server=first.server, etag=None, kind="updated", first_seen=now
                    ),
                )
            body = "\n\n".join(n.text for n in pending)
            self.telemetry.emit(
                "route.deliver", route=route_id, uris=[n.uri for n in pending], notices=len(pending)
            )
            agent = self.spawner.spawn(
                now, role="spawn", instruction=f"{head}\n\n{body}" if head else body, route=route_id
            )
            agent.answering(list(pending))
            agent.record_delivery()

    def resume_with_notices(self, agent: Agent, now: float) -> None:
        """The notices that reached ``agent`` mid-turn, as one follow-up turn."""
        pending = agent.take_notices()
        self.telemetry.emit(
            "session.deliver",
            session=agent.session,
            route=None,
            agent=agent.id,
            watch=[n.watch for n in pending],
        )
        agent.answering(pending)
        self.spawner.resume(agent, "\n\n".join(n.text for n in pending), now)
