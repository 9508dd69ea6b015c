"""The one reactor: a single trio task that runs the loop over its parts.

Every other task (MCP connections, child channels, the signal watcher, the
health endpoint, the self-MCP handlers) only *sends* typed events
(:mod:`agentd.events`) into one memory channel. The reactor is the
single consumer. Its only wait is a receive bounded by the nearest deadline
(route debounce, loop re-entry, clock fire, budget deadline, drain grace), so
a reactive daemon with nothing to do makes no wakeups at all.

The reactor composes parts that each own their state and are given their
collaborators when built (nothing is set on them afterwards, and no part
writes another's attributes):

* state with a life of its own: the agent table (``agents.py``), the
  sessions' routes (``sessionroutes.py``), the run status (``runstatus.py``:
  phase, drain, exit facts, the driver's view), readiness (``readiness.py``:
  server, subscription and zygote states, the start gate, ``/readyz``) and
  backpressure (``backpressure.py``);
* handlers by job, frozen dataclasses owning no state beyond what they
  hold for later: the spawner (``spawner.py``), the notice desk
  (``notices.py``), the self-tool desk (``selftools.py``), usage
  (``usage.py``), turns (``turns.py``), delivery (``delivery.py``) and the
  drain (``drain.py``).

The parts call down only (turns → notice desk and self-tool desk → spawner;
delivery → notice desk → spawner; usage and drain → spawner), so no two
parts need each other and none holds a callable back into the reactor: the
steps that need several parts in order (start, the timers after each event,
a server's state) are the reactor's own. The exit rules live in the drivers
(``triggers/mode.py``). See rfcs/0250.

State machine of the process (:class:`Phase`, kept by the run status)::

    RUNNING --first SIGTERM/SIGINT--> DRAINING --all agents gone--> exit 0
    DRAINING --grace elapsed / second signal--> exit 143 (children killed)

Handlers are synchronous: anything that needs I/O (spawning, killing,
subscribing) is handed to a task that reports back through the channel.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Literal, assert_never

import trio

from agentd.core.exitcodes import ExitCode
from agentd.events import (
    AgentLookup,
    AgentStart,
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
    ToolChangedState,
    TurnEnded,
    UsageReported,
    WatchNotice,
    WatchRouteAdd,
    WatchRouteRemove,
    WatchSession,
    ZygoteStateChanged,
)
from agentd.observe.counters import RunCounters
from agentd.observe.metrics import MetricsSnapshot
from agentd.observe.telemetry import Telemetry
from agentd.observe.timeline import mark
from agentd.supervisor.loop.agents import Agent, AgentPhase, AgentTable
from agentd.supervisor.loop.backpressure import Backpressure
from agentd.supervisor.loop.budget import Budget
from agentd.supervisor.loop.delivery import Delivery, render_delivery
from agentd.supervisor.loop.drain import REAP_EXIT_WAIT, REAP_KILL_WAIT, Drain
from agentd.supervisor.loop.governor import RestartGovernor
from agentd.supervisor.loop.notices import NoticeDesk
from agentd.supervisor.loop.readiness import Readiness
from agentd.supervisor.loop.runstatus import RunStatus
from agentd.supervisor.loop.seams import (
    EVENT_BUFFER,
    Clock,
    Declared,
    Hooks,
    NoDeclared,
    Phase,
    SessionResume,
    WatchHooks,
    open_channel,
)
from agentd.supervisor.loop.selftools import SelfToolDesk
from agentd.supervisor.loop.spawner import Spawner
from agentd.supervisor.loop.subagents import OWN_SERVER, ChildCaps, ChildRecords, SubagentDesk, agent_id_of
from agentd.supervisor.loop.turns import Turns
from agentd.supervisor.loop.usage import Usage
from agentd.supervisor.routing.sessionroutes import SessionRoutes, SubscriptionCaps
from agentd.supervisor.routing.subscriptions import Subscriptions
from agentd.triggers import mode as modes
from agentd.triggers.router import Route, Router
from agentd.watches.stage import StagedRoute

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


class Reactor:
    """Runs one event loop over its parts; the mode's driver decides when it ends.

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
        caps: the caps on the sessions' own subscriptions (defaults if not given; rfcs/0265).
        child_caps: how deep agents start agents and how many run (defaults if not given; rfcs/0370).
    """

    def __init__(
        self,
        *,
        driver: modes.Driver,
        router: Router,
        budget: Budget,
        governor: RestartGovernor,
        hooks: Hooks,
        telemetry: Telemetry,
        instruction: str,
        grace: float,
        mode: str,
        session: str,
        clock: Clock | None = None,
        channel: tuple[trio.MemorySendChannel[ReactorEvent], trio.MemoryReceiveChannel[ReactorEvent]]
        | None = None,
        watches: WatchHooks | None = None,
        staged: Mapping[str, StagedRoute] | None = None,
        required: frozenset[str] = frozenset(),
        declared: Declared | None = None,
        subscriptions: Subscriptions | None = None,
        journals: SessionResume | None = None,
        handles: Callable[[Route, str], bool] | None = None,
        counters: RunCounters | None = None,
        caps: SubscriptionCaps | None = None,
        child_caps: ChildCaps | None = None,
    ) -> None:
        self.send, self._recv = channel or open_channel()
        # What the loop itself reads: the exit rules, the router's and budget's deadlines, the clock.
        self.driver, self.router, self.budget, self.telemetry = driver, router, budget, telemetry
        self._mode, self._clock, self._watches = mode, clock, watches
        self._declared: Declared = declared or NoDeclared()
        if subscriptions is None:  # nothing declared: routes alone need subscriptions
            subscriptions = Subscriptions((), router)
        self.subscriptions = subscriptions
        """Which upstream subscriptions are wanted and why (pure; the declared shell shares it)."""
        self.counters = counters if counters is not None else RunCounters()
        """The run's counts: ``/metrics`` and ``supervisor.exit`` read this one object."""
        session_routes = self.session_routes = SessionRoutes(router, caps)
        records = self.records = ChildRecords()
        """What parents may read of the agents they started (rfcs/0370)."""
        # Unnamed agents use their id as session name: skip ids a watch, a journal or a record holds.
        agents = self.agents = AgentTable(
            reserved=lambda name: (
                session_routes.has_session(name)
                or (journals is not None and journals.reserved(name))
                or records.holds(name)
            )
        )
        status = self.status = RunStatus(budget, agents)
        """The run's phase and the facts the driver's exit rules read."""
        self.readiness = Readiness(required, subscriptions, status, telemetry, hooks.readiness)
        """Server, subscription and zygote states; the start gate; ``/readyz``."""
        self.backpressure = Backpressure(router, hooks.pause, telemetry)
        """Which servers are paused for which blocked routes (``block`` overflow, rfcs/0131)."""
        counters = self.counters
        # The parts, each given only what it uses; they call down only:
        # turns -> notices, selftools -> spawner; delivery -> notices -> spawner;
        # usage, drain -> spawner. Steps that need several parts in order are the loop's.
        warm_root = mode == "loop" and session == "warm"
        spawner = self.spawner = Spawner(
            agents, hooks.spawn, driver, journals, telemetry, instruction, warm_root
        )
        notices = self.notices = NoticeDesk(
            spawner, agents, session_routes, status, router, telemetry, staged or {}, instruction
        )
        selftools = self.selftools = SelfToolDesk(
            agents, session_routes, subscriptions, watches, hooks.unsubscribe, telemetry, counters
        )
        subagents = self.subagents = SubagentDesk(
            agents,
            records,
            spawner,
            selftools,
            status,
            budget,
            child_caps or ChildCaps(),
            hooks.kill,
            telemetry,
            counters,
        )
        self.usage = Usage(agents, status, budget, counters, spawner, telemetry)
        self.turns = Turns(
            agents,
            status,
            counters,
            governor,
            driver,
            router,
            spawner,
            notices,
            selftools,
            subagents,
            hooks.publish,
            telemetry,
        )
        self.delivery = Delivery(
            router,
            status,
            self.readiness,
            counters,
            spawner,
            notices,
            watches,
            handles,
            telemetry,
            clock,
            driver,
            subagents,
        )
        self.drain = Drain(
            status,
            agents,
            spawner,
            hooks.kill_all,
            hooks.draining,
            telemetry,
            grace,
            # A parent whose started agents' processes still run (their turns may have ended).
            keeps=subagents.has_live_children,
        )

    # -- the public API (the app, the watch manager, the health endpoint, tests) --

    @property
    def declared(self) -> set[tuple[str, str]]:
        """(server, uri) of every declared subscription (globs expanded against the catalogs)."""
        return self.subscriptions.pairs

    def live_agents(self) -> list[Agent]:
        return self.agents.live()

    def view(self, now: float) -> modes.SupervisorView:
        """What the driver may read."""
        return self.status.view(now)

    def ready(self) -> tuple[bool, str]:
        """Readiness: required servers connected, declared subscriptions established, not draining."""
        return self.readiness.ready()

    def restore_lost(self, lost: list[tuple[str, str]], now: float) -> None:
        """Restored sessions waited on these agents (``(session, agent://ID)``): they were lost in the restart.

        Each completes ``lost`` now; its change is routed as the reactor starts,
        so the session is told in its next turn (call before :meth:`run`).
        """
        for session, uri in lost:
            agent_id = agent_id_of(uri)
            if agent_id is not None:
                self.records.restore_lost(session, agent_id, now)
                self.telemetry.emit("subagent.lost", agent=agent_id, session=session)

    def queue_startup_notices(self, notices: list[WatchNotice]) -> None:
        """Notices to deliver as the reactor starts (call before :meth:`run`).

        A notice for the session of the agent the driver starts first (the
        warm loop root) becomes part of that agent's first turn, so a restart
        costs no extra turn; any other is delivered like a watch notice.
        """
        self.notices.queue_startup(notices)

    def metrics_snapshot(self) -> MetricsSnapshot:
        """A frozen copy of the numbers ``/metrics`` exposes."""
        live = self.live_agents()
        counters = self.counters
        # Declared routes are present from the start, at 0 (a rate over a missing series is no rate).
        declared = [r.id for r in self.router.routes() if r.owner is None]
        return MetricsSnapshot(
            routed={**dict.fromkeys(declared, 0), **counters.routed},
            unrouted=counters.unrouted,
            coalesced={**dict.fromkeys(declared, 0), **counters.coalesced},
            dropped=counters.dropped_by_reason(),
            server_restarts=dict(counters.server_restarts),
            agent_restarts=counters.agent_restarts,
            tokens_input=counters.input_tokens,
            tokens_output=counters.output_tokens,
            tokens_cached_input=counters.cached_input_tokens,
            tokens_cache_creation_input=counters.cache_creation_input_tokens,
            cost_usd=self.budget.usd,
            unpriced_calls=counters.unpriced_calls,
            telemetry_dropped=self.telemetry.dropped,
            subagents_running=len(live),
            warm_sessions=sum(1 for a in live if a.warm or a.subscriptions),
            draining=not self.status.running,
            server_state=dict(self.readiness.server_states),
            subscription_state={
                k: v  # type: ignore[misc]
                for k, v in self.readiness.subscription_states.items()
                if v != "pending"
            },
            subscriptions_unresolved=len(self.subscriptions.unresolved),
            limit_refusals=counters.refusals_by_limit(),
            subscribe_failures={
                **dict.fromkeys(self.readiness.server_states, 0),
                **counters.subscribe_failures,
            },
            histograms=self.telemetry.histograms.snapshot(),
        )

    async def reap(self) -> None:
        """After :meth:`run` returned: every spawned agent gets its ``subagent.exit`` (see :meth:`Drain.reap`)."""
        await self.drain.reap(self._recv)

    # -- the loop --

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
            code = self.driver.exit_predicate(self.status.view(now))
            if code is not None:
                self.status.stop(code)
                return code
            deadline = self._next_deadline()
            event: ReactorEvent | None = None
            mark("reactor.wait")  # a wake's reactor time: from reactor.wake to here (bench_soak)
            with trio.move_on_at(deadline):
                event = await self._recv.receive()
            mark("reactor.wake")
            now = trio.current_time()
            if event is not None:
                self.handle(event, now)
            self._on_time(now)
            self.readiness.report()

    def _next_deadline(self) -> float:
        status = self.status
        timers = status.phase is Phase.RUNNING and self.readiness.open
        candidates = [
            # Nothing is delivered while draining (or before the required
            # servers are up), so a debounce armed by a change meanwhile must
            # not bound the wait (it would spin the loop hot).
            self.router.next_deadline() if timers else None,
            status.reenter_at,
            status.drain_deadline,
            self.budget.next_deadline(),
            self._clock.next_fire() if self._clock is not None and timers else None,
            self.subagents.next_deadline(),
        ]
        present = [c for c in candidates if c is not None]
        return min(present) if present else float("inf")

    def _start(self, now: float) -> None:
        self.telemetry.emit("reactor.start", mode=self._mode)
        self._maybe_start(now)
        self._route_completions(now)  # agents restored sessions waited on, lost in the restart

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
                self.spawner.spawn_root(now, self.notices.take_startup(self.spawner.root_session))
        self.notices.deliver_startup(now)

    def _on_time(self, now: float) -> None:
        status = self.status
        if status.drain_deadline is not None and self.drain.timed_out(now):
            return
        if self.budget.deadline_reached(now):
            self.telemetry.emit("budget.deadline")
            return
        self.subagents.on_time(now)
        self._route_completions(now)
        if status.reenter_at is not None and status.reentry_due(now):
            self.turns.reenter(now)
        if (
            self._clock is not None
            and status.phase is Phase.RUNNING
            and self.readiness.open
            and now >= self._clock.next_fire()
        ):
            self.delivery.clock_fire(now)
        self.delivery.deliver(now)
        self.backpressure.apply()

    def _route_completions(self, now: float) -> None:
        """Each started agent that ended is one change of ``agent://ID``, routed like any server's.

        Only a change some route wants enters the router (a parent that
        subscribed, a declared route over ``agent://``): an agent nobody
        waits for is not an unrouted event.
        """
        for uri in self.records.take_changes():
            if self.router.first_match(uri) is not None:
                self.delivery.resource_changed(ResourceChanged(OWN_SERVER, uri), now)

    def handle(self, event: ReactorEvent, now: float) -> None:
        """Apply one event (synchronous; never blocks)."""
        match event:
            case ResourceChanged():
                self.delivery.resource_changed(event, now)
            case UsageReported():
                self.usage.report(event, now)
            case TurnEnded():
                self.turns.turn_end(event, now)
            case ToolChangedState():
                self.turns.tool_changed_state(event)
            case SelfSubscribe() | SelfUnsubscribe() | WatchSession() | WatchRouteAdd() | WatchRouteRemove():
                self.selftools.answer(event)
            case AgentStart():
                self.subagents.start(event, now)
            case AgentLookup():
                self.subagents.lookup(event, now)
            case ChildExited():
                self.turns.child_exited(event, now)
            case SignalReceived():
                self.drain.signal(event, now)
            case ServerStateChanged():
                self._server_state(event)
                if event.state is ServerState.CONNECTED:
                    self._refresh_declared("connected", now)
                self._maybe_start(now)
            case SubscriptionStateChanged():
                # The connection already wrote subscription.<state> telemetry.
                for uri in event.uris:
                    self.readiness.on_subscription_state(event.server, uri, event.state)
                if self._watches is not None:
                    self._watches.on_subscription_state(event)
                    if event.state == "established":
                        for uri in event.uris:
                            owner = self.router.first_match(uri)
                            if owner is not None and owner.kind == "stage":
                                self._watches.on_route_subscribed(owner.id, event.server, uri)
            case WatchNotice() | RouteNotice():
                self.notices.notice(event, now)
            case CatalogChanged():
                mark("reactor.catalog")
                self.telemetry.emit("catalog.changed", server=event.server, uris=len(event.uris))
                self._refresh_declared("catalog", now)
            case HealthProbe():
                event.reply.set()
            case ZygoteStateChanged():
                self.readiness.on_zygote(
                    (event.reason or "unavailable") if event.state == "degraded" else None
                )
            case _:
                assert_never(event)

    def _refresh_declared(self, reason: Literal["connected", "catalog"], now: float) -> None:
        """Re-expand the declared subscriptions; forget the states of pairs no longer declared.

        A URI that appeared under a declared glob is routed now, as a change
        of kind ``list_changed``, while its subscribe is made (rfcs/0350).
        """
        refreshed = self._declared.refresh(reason)
        self.readiness.forget(refreshed.forgotten)
        for server, uri in refreshed.created:
            self.delivery.resource_changed(ResourceChanged(server, uri, "list_changed"), now)

    def _server_state(self, ev: ServerStateChanged) -> None:
        self.readiness.on_server_state(ev.server, ev.state, ev.error)
        if ev.state is ServerState.RESTARTING:
            self.counters.server_restart(ev.server)
        self.telemetry.emit(
            "server.state", server=ev.server, state=ev.state.value, attempt=ev.attempt, error=ev.error
        )
        if ev.state is ServerState.FAILED and ev.required:
            self.status.record_required_failed(ev.server, ev.attempt, ev.error)
