"""The reactor's notice glue: watch notices into their sessions, staged routes' notices into sessions or fresh agents.

A watch or a staged declared route (rfcs/0078) re-reads and filters on the
watch manager's tasks; what comes back is a notice, delivered here: into
the owning session now (idle), after its turn (busy), or by starting it;
a staged spawn route starts one agent per free ``max_inflight`` slot with
every notice it queued. Part of the reactor (see :mod:`agentd.supervisor.reactorcore`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import assert_never

from agentd.events import (
    Notice,
    RouteNotice,
    WatchNotice,
)
from agentd.supervisor.agents import Agent, AgentPhase
from agentd.supervisor.reactorcore import ReactorCore
from agentd.triggers.router import (
    QueuedEvent,
    render_template,
)


class Notices(ReactorCore):
    """The reactor's notice glue: watch notices into their sessions, staged routes' notices into sessions or fresh agents."""

    def queue_startup_notices(self, notices: list[WatchNotice]) -> None:
        """Notices to deliver as the reactor starts (call before :meth:`run`).

        A notice for the session of the agent the driver starts first (the
        warm loop root) becomes part of that agent's first turn, so a restart
        costs no extra turn; any other is delivered like a watch notice.
        """
        for notice in notices:
            self._startup_notices.setdefault(notice.session, []).append(notice)

    def _stop_watches(self, session: str) -> None:
        """The session's agent exited: its watch routes go, and the manager stops the watches."""
        names = self.session_routes.drop_session(session)
        if names and self._watches is not None:
            self._watches.on_owner_exited(session, self.uri_needed)

    def _notice(self, ev: Notice, now: float) -> None:
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
            started = self._deliver_to_session(now, ev.session, ev.text, route=route)
            started.notice_turn = [ev]
            return
        if agent.phase is AgentPhase.IDLE and agent.held is not None:
            self.telemetry.emit(
                "session.deliver", session=ev.session, route=route, agent=agent.id, watch=ev.watch
            )
            agent.notice_turn = [ev]
            self._real_work(agent)
            self._resume(agent, ev.text, now)
        elif agent.busy:
            agent.notices.append(ev)  # one follow-up turn carries every notice queued meanwhile
        else:
            self.telemetry.emit("watch.notice_dropped", **fields, reason=f"agent {agent.phase.value}")

    def _route_notice(self, ev: RouteNotice, now: float) -> None:
        """A staged route's notice: a turn of its session (continue) or a fresh agent (spawn)."""
        staged = self._staged.get(ev.route)
        if staged is None or self.router.get(ev.route) is None:
            self.telemetry.emit(
                "watch.notice_dropped", route=ev.route, uri=ev.uri, reason="the route is gone"
            )
            return
        if staged.disposition == "continue":
            self._watch_notice(replace(ev, session=staged.session), now)
            return
        self.route_notices.setdefault(ev.route, []).append(ev)
        self._spawn_route_notices(now)

    def _spawn_route_notices(self, now: float) -> None:
        """Start one agent per staged spawn route with a free slot, carrying every notice it queued.

        A route's slots are its ``max_inflight``: agents it started that have
        not ended their last turn (the router's rule for spawn routes).
        """
        for route_id, pending in list(self.route_notices.items()):
            staged = self._staged[route_id]
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
                for a in self.live_agents()
                if a.route == route_id and a.role == "spawn" and a.phase is not AgentPhase.EXITING
            )
            if running >= staged.max_inflight:
                continue  # a slot frees at an agent's last turn end; _deliver calls again
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
            agent = self._spawn(
                now, role="spawn", instruction=f"{head}\n\n{body}" if head else body, route=route_id
            )
            agent.notice_turn = list(pending)

    def _resume_with_notices(self, agent: Agent, now: float) -> None:
        pending, agent.notices = agent.notices, []
        self.telemetry.emit(
            "session.deliver",
            session=agent.session,
            route=None,
            agent=agent.id,
            watch=[n.watch for n in pending],
        )
        agent.notice_turn = pending
        self._real_work(agent)
        self._resume(agent, "\n\n".join(n.text for n in pending), now)
