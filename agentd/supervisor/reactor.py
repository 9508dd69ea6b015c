"""The one reactor: a single trio task that owns the driver, router, tree and timers.

This module holds the loop and the dispatch; the handlers live beside it,
grouped by job (see :mod:`agentd.supervisor.reactorcore` for the map), and the
parts that own state of their own are objects it holds: the agent table
(``agents.py``), the sessions' routes (``sessionroutes.py``); it is given
the run's counters (``agentd.counters``), which subscriptions are wanted and
why (``subscriptions.py``, pure) and what performs the declared ones
(``declared.py``); the exit rules live in the drivers.

Every other task (MCP connections, child channels, the signal watcher, the
health endpoint, the self-MCP handlers) only *sends* typed events
(:mod:`agentd.events`) into one memory channel. The reactor is the
single consumer. Its only wait is a receive bounded by the nearest deadline
(route debounce, loop re-entry, clock fire, budget deadline, drain grace), so
a reactive daemon with nothing to do makes no wakeups at all.

State machine of the process (:class:`Phase`)::

    RUNNING --first SIGTERM/SIGINT--> DRAINING --all agents gone--> exit 0
    DRAINING --grace elapsed / second signal--> exit 143 (children killed)

Handlers are synchronous: anything that needs I/O (spawning, killing,
subscribing) is handed to a task that reports back through the channel.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, assert_never

import trio

from agentd.events import (
    CatalogChanged,
    ChildExited,
    HealthProbe,
    ReactorEvent,
    ResourceChanged,
    RouteNotice,
    SelfSubscribe,
    SelfUnsubscribe,
    ServerState,
    ServerStateChanged,
    SignalReceived,
    SubscriptionStateChanged,
    TurnEnded,
    UsageReported,
    WatchNotice,
    WatchRouteAdd,
    WatchRouteRemove,
    WatchSession,
    ZygoteStateChanged,
)
from agentd.exitcodes import ExitCode
from agentd.supervisor.agents import Agent, AgentPhase
from agentd.supervisor.delivery import render_delivery
from agentd.supervisor.drain import REAP_EXIT_WAIT, REAP_KILL_WAIT, Drain
from agentd.supervisor.seams import (
    EVENT_BUFFER,
    Clock,
    Declared,
    Hooks,
    Phase,
    SessionResume,
    WatchHooks,
    open_channel,
)
from agentd.triggers import mode as modes

__all__ = [
    "EVENT_BUFFER",
    "REAP_EXIT_WAIT",
    "REAP_KILL_WAIT",
    "Agent",
    "AgentPhase",
    "Clock",
    "Declared",
    "Hooks",
    "Phase",
    "Reactor",
    "SessionResume",
    "WatchHooks",
    "open_channel",
    "render_delivery",
]


class Reactor(Drain):
    """Runs one event loop over its owned parts; the mode's driver decides when it ends.

    Owned parts: the agent table (:class:`~agentd.supervisor.agents.AgentTable`)
    and the sessions' own routes (:class:`~agentd.supervisor.sessionroutes.SessionRoutes`).
    Everything else it is given, among them the counters ``/metrics`` and
    ``supervisor.exit`` read and the subscriptions component.

    Args:
        driver: the mode's driver (exit predicates).
        router: the reactive router (pure).
        budget: the tree-wide budget.
        governor: the restart governor.
        hooks: I/O the reactor triggers.
        telemetry: NDJSON events and counters.
        instruction: the root instruction (once/loop/schedule).
        grace: drain grace period in seconds.
        mode: the mode (for telemetry).
        session: loop's session mode (``warm`` keeps the root between shifts).
        clock: a clock source for timer routes and schedule fires, if any.
        required: names of required servers.
        channel: the reactor's channel (send, receive); created if not given.
            Create it first when other parts need its sending end.
        watches: the watch manager, if watches are available.
        staged: declared routes with a watch stage, by route id (rfcs/0078).
        declared: what performs the declared subscriptions, if any.
        subscriptions: which upstream subscriptions are wanted and why (the
            pure component the declared shell shares); none declared if not given.
        journals: the session journals (``--state-dir``), if any.
        handles: ``--shard``: whether this replica handles an update a route matched.
        counters: the run's counter set (created if not given; the app creates
            it first and gives it to the router's ``on_drop`` and the upstreams too).
    """

    async def run(self, *, server_states: Mapping[str, ServerState] | None = None) -> ExitCode:
        """Turn until the driver's exit predicate fires; returns the exit code.

        Args:
            server_states: where each upstream server's first connection
                attempt left it (the reactor starts from what the servers are now).
        """
        self.readiness.on_server_states(server_states or {})
        now = trio.current_time()
        self._start(now)
        self.readiness.report()  # ready before any event (no required server, nothing declared)
        while True:
            code = self.driver.exit_predicate(self.view(now))
            if code is not None:
                self.status.stop(code)
                return code
            deadline = self._next_deadline()
            event: ReactorEvent | None = None
            with trio.move_on_at(deadline):
                event = await self._recv.receive()
            now = trio.current_time()
            if event is not None:
                self.handle(event, now)
            self._on_time(now)
            self.readiness.report()

    def _next_deadline(self) -> float:
        status = self.status
        timers = status.running and self.readiness.open
        candidates = [
            # Nothing is delivered while draining (or before the required
            # servers are up), so a debounce armed by a change meanwhile must
            # not bound the wait (it would spin the loop hot).
            self.router.next_deadline() if timers else None,
            status.reenter_at,
            status.drain_deadline,
            self.budget.next_deadline(),
            self.clock.next_fire() if self.clock is not None and timers else None,
        ]
        present = [c for c in candidates if c is not None]
        return min(present) if present else float("inf")

    def _start(self, now: float) -> None:
        self.telemetry.emit("reactor.start", mode=self.mode)
        self._maybe_start(now)

    def _maybe_start(self, now: float) -> None:
        """Run the driver's ``on_start`` once every required server is connected (rfcs/0135).

        Until then no root starts, no clock fires and no route delivers: an
        agent must never run without the tools of a server declared required.
        A required server that never connects ends the run with exit 6 (its
        ``FAILED`` state), whatever the mode.
        """
        if not self.readiness.open_gate():
            return
        for action in self.driver.on_start(self.view(now)):
            if isinstance(action, modes.SpawnRoot):
                self._spawn_root(now)
        pending, self._startup_notices = self._startup_notices, {}
        for notices in pending.values():
            for notice in notices:
                self._notice(notice, now)

    def _on_time(self, now: float) -> None:
        status = self.status
        if status.drain_deadline is not None and now >= status.drain_deadline and self.live_agents():
            self.telemetry.emit(
                "drain.timeout", grace_s=self.grace, agents=[a.id for a in self.live_agents()]
            )
            self.hooks.kill_all()
            status.force_exit()
            return
        if self.budget.deadline_reached(now):
            self.telemetry.emit("budget.deadline")
            return
        if status.reentry_due(now):
            self._reenter(now)
        if (
            self.clock is not None
            and status.running
            and self.readiness.open
            and now >= self.clock.next_fire()
        ):
            self._clock_fire(now)
        self._deliver(now)
        self.backpressure.apply()

    def handle(self, event: ReactorEvent, now: float) -> None:
        """Apply one event (synchronous; never blocks)."""
        match event:
            case ResourceChanged():
                self._resource_changed(event, now)
            case UsageReported():
                self._usage(event, now)
            case TurnEnded():
                self._turn_end(event, now)
            case SelfSubscribe() | SelfUnsubscribe() | WatchSession() | WatchRouteAdd() | WatchRouteRemove():
                self._self_tool(event)
            case ChildExited():
                self._child_exited(event, now)
            case SignalReceived():
                self._signal(event, now)
            case ServerStateChanged():
                self._server_state(event)
                if event.state is ServerState.CONNECTED:
                    self._refresh_declared("connected")
                self._maybe_start(now)
            case SubscriptionStateChanged():
                # The connection already wrote subscription.<state> telemetry.
                self.readiness.on_subscription_state(event.server, event.uri, event.state)
                if self._watches is not None:
                    self._watches.on_subscription_state(event)
                    owner = self.router.first_match(event.uri)
                    if event.state == "established" and owner is not None and owner.kind == "stage":
                        self._watches.on_route_subscribed(owner.id, event.server, event.uri)
            case WatchNotice() | RouteNotice():
                self._notice(event, now)
            case CatalogChanged():
                self.telemetry.emit("catalog.changed", server=event.server, uris=len(event.uris))
                self._refresh_declared("catalog")
            case HealthProbe():
                event.reply.set()
            case ZygoteStateChanged():
                self.readiness.on_zygote(
                    (event.reason or "unavailable") if event.state == "degraded" else None
                )
            case _:
                assert_never(event)

    def _refresh_declared(self, reason: Literal["connected", "catalog"]) -> None:
        """Re-expand the declared subscriptions; forget the states of pairs no longer declared."""
        self.readiness.forget(self._declared.refresh(reason))

    def _server_state(self, ev: ServerStateChanged) -> None:
        self.readiness.on_server_state(ev.server, ev.state)
        if ev.state is ServerState.RESTARTING:
            self.counters.server_restart(ev.server)
        self.telemetry.emit(
            "server.state", server=ev.server, state=ev.state.value, attempt=ev.attempt, error=ev.error
        )
        if ev.state is ServerState.FAILED and ev.required:
            self.status.record_required_failed(ev.server, ev.attempt, ev.error)
