"""The reactor's answers to self-tool requests: ``subscribe``, ``unsubscribe`` and the watch routes.

Each request from the hub is answered at once and never raises; an agent's
own subscriptions are released upstream when it exits, unless something
else still needs them; its watch routes go, and the watch manager stops
the watches. The desk owns no state: the routes are the session routes'
(:mod:`agentd.supervisor.routing.sessionroutes`), the reasons a subscription is
wanted the subscriptions component's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import assert_never

from agentd import events
from agentd.core.errors import LimitReached, RouteError
from agentd.events import OWN_SERVER
from agentd.observe.counters import RunCounters
from agentd.observe.telemetry import Telemetry
from agentd.supervisor.loop.agents import Agent, AgentTable
from agentd.supervisor.loop.seams import WatchHooks
from agentd.supervisor.routing.sessionroutes import SessionRoutes
from agentd.supervisor.routing.subscriptions import Subscriptions


@dataclass(frozen=True, slots=True, eq=False)
class SelfToolDesk:
    """The reactor's answers to self-tool requests: ``subscribe``, ``unsubscribe`` and the watch routes."""

    agents: AgentTable
    session_routes: SessionRoutes
    subscriptions: Subscriptions
    watches: WatchHooks | None
    unsubscribe: Callable[[str, str], None]
    telemetry: Telemetry
    counters: RunCounters

    def answer(self, request: events.SelfToolRequest) -> None:
        """A self-tool request from the hub: answered at once, never raises."""
        agent = self.agents.get(request.agent)
        if agent is None:
            unknown = f"unknown agent {request.agent!r}"
            match request:
                case events.SelfUnsubscribe():
                    request.reply.answer(events.Unsubscribed(existed=False, needed=True))
                case events.WatchRouteRemove():
                    request.reply.answer(events.Acknowledged())
                case (
                    events.SelfSubscribe()
                    | events.WatchSession()
                    | events.WatchRouteAdd()
                    | events.AgentStart()
                    | events.AgentLookup()
                ):
                    request.reply.answer(events.Refused(unknown))
                case _:
                    assert_never(request)
            return
        match request:
            case events.SelfSubscribe():
                self._subscribe(agent, request)
            case events.SelfUnsubscribe():
                existed = request.uri in agent.subscriptions
                self._drop_self_route(agent, request.uri)
                # A declared subscription (or another route or watch) still needs
                # the upstream subscription: the hub must keep it, and the URI goes
                # back to its declared route (rfcs/0134).
                needed = request.server is not None and not self.subscriptions.unsubscribed(
                    request.server, request.uri
                )
                request.reply.answer(events.Unsubscribed(existed=existed, needed=needed))
                self.telemetry.emit(
                    "self.unsubscribe", agent=agent.id, uri=request.uri, server=request.server, kept=needed
                )
            case events.WatchSession():
                # Registering makes the agent's id its session name (a watch needs a session).
                session = self.agents.name_session(agent) if request.register else agent.session or agent.id
                request.reply.answer(events.SessionOf(session))
            case events.WatchRouteAdd():
                try:
                    route_id = self.session_routes.add_watch(request.session, request.name, request.uri)
                except (RouteError, ValueError) as exc:  # ValueError: a URI that is no valid match
                    request.reply.answer(events.Refused(str(exc)))
                    return
                request.reply.answer(events.RouteAdded(route_id))
            case events.WatchRouteRemove():
                self.session_routes.remove_watch(request.session, request.name)
                request.reply.answer(events.Acknowledged())
            case events.AgentStart() | events.AgentLookup():
                # The subagent desk answers these (the reactor hands them there).
                request.reply.answer(events.Refused("agent tools are not available here"))
            case _:
                assert_never(request)

    def _subscribe(self, agent: Agent, request: events.SelfSubscribe) -> None:
        refused = self._self_route(agent, request.uri, request.server)
        request.reply.answer(events.Acknowledged() if refused is None else events.Refused(refused))

    def subscribe_own(self, agent: Agent, uri: str) -> str | None:
        """Subscribe ``agent``'s session to one of agentd's own resources (``agent://ID``; rfcs/0370).

        The same self route as :meth:`answer`'s ``subscribe`` (and the same caps), with no
        upstream server behind it. Returns why not (the text the model reads), or None.
        """
        return self._self_route(agent, uri, None)

    def _self_route(self, agent: Agent, uri: str, server: str | None) -> str | None:
        """``agent``'s session's exact self route for ``uri`` (on ``server``; None: agentd's own); why not, or None."""
        session = agent.session or agent.id
        try:
            self.session_routes.subscribe(session, uri)
        except LimitReached as exc:
            # A cap (rfcs/0265): the model is told, the refusal counted, the operator told once per hit.
            self.counters.refuse(exc.limit)
            if exc.first:
                self.telemetry.emit(
                    "limit.reached",
                    limit=exc.limit,
                    value=exc.value,
                    agent=agent.id,
                    session=session,
                    uri=uri,
                )
            return str(exc)
        except (RouteError, ValueError) as exc:  # ValueError: a URI that is no valid match
            return str(exc)
        self.agents.name_session(agent)
        agent.subscribe(uri, server)
        self.telemetry.emit("self.subscribe", agent=agent.id, uri=uri, server=server or OWN_SERVER)
        return None

    def drop_own(self, agent: Agent, uri: str) -> None:
        """``agent`` no longer holds ``uri`` (one of agentd's own: no upstream subscription to release).

        Its change, if queued, was handed over already (a delivery, ``agent_wait``): not a drop.
        """
        if uri in agent.subscriptions:
            agent.unsubscribe(uri)
            self.session_routes.unsubscribe(agent.session or agent.id, uri, withdrawn=True)

    def release(self, agent: Agent) -> None:
        """``agent`` exited: its self routes go, and the upstream subscriptions nothing else needs."""
        for uri in sorted(agent.subscriptions):
            server = self._drop_self_route(agent, uri)
            if server is not None:
                self._release_upstream(agent, server, uri)

    def owns_watches(self, agent: Agent) -> bool:
        """Whether ``agent``'s session has watch routes (it stays warm for them)."""
        return agent.session is not None and self.session_routes.has_session(agent.session)

    def stop_watches(self, session: str) -> None:
        """The session's agent exited: its watch routes go, and the manager stops the watches."""
        names = self.session_routes.drop_session(session)
        if names and self.watches is not None:
            self.watches.on_owner_exited(session)

    def _release_upstream(self, agent: Agent, server: str, uri: str) -> None:
        """The agent that subscribed ``uri`` is gone: drop the upstream subscription unless still needed."""
        for action in self.subscriptions.released([(server, uri)]):
            self.telemetry.emit(
                "self.unsubscribe",
                agent=agent.id,
                uri=action.uri,
                server=action.server,
                reason="owner exited",
            )
            self.unsubscribe(action.server, action.uri)

    def _drop_self_route(self, agent: Agent, uri: str) -> str | None:
        """``agent`` no longer owns ``uri``: its self route goes; returns the server it was on."""
        server = agent.unsubscribe(uri)
        self.session_routes.unsubscribe(agent.session or agent.id, uri)
        return server
