"""The one reactor: a single trio task that owns the driver, router, tree and timers.

Size: this module is over 600 lines on purpose: it is the one place every
event is applied, and its handlers share the reactor's state (phase, budget,
agents, routes). Parts that own state of their own live beside it: the agent
table (``agents.py``), the sessions' routes (``sessionroutes.py``), declared
subscriptions (``declared.py``); the exit rules live in the drivers.

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

import datetime as _dt
import enum
import signal as _signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Literal, Protocol, assert_never

import trio

from agentd.counters import RunCounters
from agentd.errors import RouteError
from agentd.events import (
    CatalogChanged,
    ChildExited,
    HealthProbe,
    Notice,
    ReactorEvent,
    Refused,
    ResourceChanged,
    RouteAdded,
    RouteNotice,
    RouteRemoved,
    SelfSubscribe,
    SelfToolRequest,
    SelfUnsubscribe,
    ServerState,
    ServerStateChanged,
    SessionOf,
    SignalReceived,
    Subscribed,
    SubscriptionStateChanged,
    TurnEnded,
    Unsubscribed,
    UsageReported,
    WatchNotice,
    WatchRouteAdd,
    WatchRouteRemove,
    WatchSession,
    ZygoteStateChanged,
)
from agentd.exitcodes import ExitCode, TerminalStatus, code_for_status
from agentd.metrics import MetricsSnapshot
from agentd.selfmcp.protocol import NextTurn, StopReason, UsageVerdict
from agentd.supervisor.agents import Agent, AgentPhase, AgentRole, AgentTable
from agentd.supervisor.budget import Budget
from agentd.supervisor.governor import RestartGovernor
from agentd.supervisor.sessionroutes import SessionRoutes
from agentd.telemetry import Telemetry
from agentd.tracing import active as active_tracing
from agentd.triggers import mode as modes
from agentd.triggers.router import (
    ContinueDelivery,
    PushOutcome,
    QueuedEvent,
    Route,
    Router,
    SpawnDelivery,
    render_template,
)
from agentd.triggers.timer import CronSource, IntervalSource
from agentd.watches.stage import StagedRoute

__all__ = ["Agent", "AgentPhase", "Hooks", "Phase", "Reactor", "WatchHooks", "render_delivery"]

#: After the run ended, seconds an agent that was told to exit gets to do so
#: before the kill ladder: an agent exits within milliseconds of its answer.
REAP_EXIT_WAIT = 2.0

#: After the kill ladder started, seconds to wait for the remaining exits: the
#: tree's SIGTERM wait (2 s) plus its SIGKILL wait (2 s) plus slack.
REAP_KILL_WAIT = 5.0

#: Capacity of the reactor's channel. Producers block when it is full, which
#: is the backpressure a notification storm needs; the reactor drains it at
#: memory-channel speed (~5 µs per event).
EVENT_BUFFER = 4096


class Phase(enum.Enum):
    """The process lifecycle."""

    RUNNING = "running"
    """Normal operation: triggers armed, agents start."""
    DRAINING = "draining"
    """A signal arrived: no new work; running turns finish; idle sessions exit."""
    STOPPED = "stopped"
    """The exit predicate fired; the reactor returned its code."""


@dataclass
class Hooks:
    """I/O the reactor asks for without awaiting it (each runs in a task)."""

    spawn: Callable[[Agent], None]
    """Start the agent's child process (through the tree's chokepoint)."""
    kill_all: Callable[[], None]
    """Kill every agent (drain timed out / second signal)."""
    unsubscribe: Callable[[str, str], None]
    """Drop the upstream subscription to (server, uri)."""
    publish: Callable[[Agent, TerminalStatus, str, bool], None]
    """Publish a turn's result on stdout (not called for NO_REPLY turns)."""
    pause: Callable[[str, bool], None] = lambda server, paused: None
    """Stop (True) or resume (False) reading ``server``'s update streams (``block`` overflow, rfcs/0131)."""
    readiness: Callable[[bool, str], None] = lambda ready, reason: None
    """The ``/readyz`` answer, at start and on every flip (the service manager hears it, rfcs/0162)."""
    draining: Callable[[], None] = lambda: None
    """The first signal started the drain (the service manager hears it, rfcs/0162)."""


class SessionResume(Protocol):
    """What the reactor asks the session journals (:mod:`agentd.state.sessions`); sync, never blocks."""

    def resumable(self, session: str) -> tuple[tuple[str, str | None], ...] | None:
        """A journaled session's self-subscriptions ``(uri, server)``, or None: start it fresh."""
        ...

    def reserved(self, name: str) -> bool:
        """``name`` is a journaled session: no new agent may take it as its id."""
        ...

    def end(self, session: str) -> None:
        """The session is over (its agent exited while agentd runs on): forget its journal."""
        ...


class WatchHooks(Protocol):
    """What the reactor tells the watch manager (sync; the manager never blocks the reactor)."""

    def on_changed(self, route_id: str, uris: list[str]) -> None:
        """A watch route is due: re-read these URIs."""
        ...

    def on_subscription_state(self, ev: SubscriptionStateChanged) -> None:
        """A subscription changed state (``watch.*`` telemetry, failure notices)."""
        ...

    def on_owner_exited(self, session: str, needed: Callable[[str, str], bool]) -> None:
        """The session's agent is gone: stop its watches (routes already removed)."""
        ...

    def needs(self, server: str, uri: str) -> bool:
        """Whether a live watch still needs the upstream subscription to ``uri``."""
        ...

    def on_route_subscribed(self, route_id: str, server: str, uri: str) -> None:
        """A URI of staged route ``route_id`` is subscribed: take the stage's baseline read now."""
        ...

    def on_route_changed(self, route_id: str, changes: list[tuple[str, str | None]]) -> None:
        """Staged route ``route_id`` is due: re-read these ``(uri, server)`` through its stages."""
        ...


class Declared(Protocol):
    """The declared subscriptions (:class:`agentd.supervisor.declared.DeclaredSubscriptions`)."""

    @property
    def pairs(self) -> set[tuple[str, str]]:
        """(server, uri) of every declared subscription (globs expanded)."""
        ...

    @property
    def unresolved(self) -> Mapping[str, str]:
        """Patterns that resolve to nothing now -> why."""
        ...

    @property
    def unresolved_required(self) -> frozenset[str]:
        """The unresolved patterns that name a required server."""
        ...

    def refresh(self, reason: Literal["start", "connected", "catalog"]) -> list[tuple[str, str]]:
        """Re-resolve and (re)subscribe; returns the pairs no longer declared."""
        ...


class _NoDeclared:
    """No declared subscriptions."""

    pairs: set[tuple[str, str]] = set()  # noqa: RUF012 - never mutated
    unresolved: Mapping[str, str] = {}
    unresolved_required: frozenset[str] = frozenset()

    def refresh(self, reason: Literal["start", "connected", "catalog"]) -> list[tuple[str, str]]:
        return []


Clock = IntervalSource | CronSource
"""A clock source for timer routes and schedule fires."""


class Reactor:
    """Runs one event loop over its owned parts; the mode's driver decides when it ends.

    Owned parts: the agent table (:class:`~agentd.supervisor.agents.AgentTable`),
    the sessions' own routes (:class:`~agentd.supervisor.sessionroutes.SessionRoutes`),
    and the counters ``/metrics`` reads. Everything else it is given.

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
        declared: the declared subscriptions, if any.
        journals: the session journals (``--state-dir``), if any.
        handles: ``--shard``: whether this replica handles an update a route matched.
        counters: the run's counter set (created if not given; the app creates
            it first and gives it to the router's ``on_drop`` and the upstreams too).
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
        required: frozenset[str] = frozenset(),
        channel: tuple[trio.MemorySendChannel[ReactorEvent], trio.MemoryReceiveChannel[ReactorEvent]]
        | None = None,
        watches: WatchHooks | None = None,
        staged: Mapping[str, StagedRoute] | None = None,
        declared: Declared | None = None,
        journals: SessionResume | None = None,
        handles: Callable[[Route, str], bool] | None = None,
        counters: RunCounters | None = None,
    ) -> None:
        self.driver = driver
        self.router = router
        self.budget = budget
        self.governor = governor
        self.hooks = hooks
        self.telemetry = telemetry
        self.instruction = instruction
        self.grace = grace
        self.mode = mode
        self.session_mode = session
        self.clock = clock
        self.required = required
        self.send, self._recv = channel or open_channel()
        self._watches = watches
        self._staged: Mapping[str, StagedRoute] = staged or {}
        self._declared: Declared = declared or _NoDeclared()
        self.session_routes = SessionRoutes(router)
        self.journals = journals
        """The session journals (``--state-dir``; rfcs/0210)."""
        self.handles = handles
        """``--shard``: whether this replica handles an update a route matched (rfcs/0213)."""
        # Unnamed agents use their id as session name: skip ids a watch or a journal holds.
        self.agents = AgentTable(
            reserved=lambda name: (
                self.session_routes.has_session(name) or (journals is not None and journals.reserved(name))
            )
        )
        self.phase = Phase.RUNNING
        self.drain_deadline: float | None = None
        self.reenter_at: float | None = None
        self.forced_exit: ExitCode | None = None
        self.fatal_infra: str | None = None
        self.required_failed: str | None = None
        self.required_failed_error: str | None = None
        """Why :attr:`required_failed` ended the run, for the user (exit 6, rfcs/0135)."""
        self.breaker_open = False
        self.root_status: TerminalStatus | None = None
        self.root_text = ""
        self.server_states: dict[str, ServerState] = {}
        self.zygote_problem: str | None = None
        """Why the agent zygote is unusable (None: ready, or not used); readiness reports it."""
        self.subscription_states: dict[tuple[str, str], str] = {}
        self.budget_reported = False
        self.exit_code: ExitCode | None = None
        self._reported_ready: bool | None = None
        self.counters = counters if counters is not None else RunCounters()
        """The run's counts: ``/metrics`` and ``supervisor.exit`` read this one object."""
        self.started = False
        """The driver's ``on_start`` ran (once every required server had connected, rfcs/0135)."""
        self.open = not required
        """Every required server has connected once: roots, clock fires and deliveries may start."""
        self.paused: dict[str, set[str]] = {}
        """Server -> the blocked routes it is paused for (``block`` overflow, rfcs/0131)."""
        self._blocked: frozenset[str] = frozenset()
        self._waiting_reported = False
        self.route_notices: dict[str, list[RouteNotice]] = {}
        """Spawn-route notices waiting for a free ``max_inflight`` slot, by route id."""
        self._startup_notices: dict[str | None, list[Notice]] = {}
        """Notices known before the first turn (the watch restore), by session: the first turn
        of a session the reactor starts itself carries them (see :meth:`queue_startup_notices`)."""

    # -- views ------------------------------------------------------------------

    @property
    def declared(self) -> set[tuple[str, str]]:
        """(server, uri) of every declared subscription (globs expanded against the catalogs)."""
        return self._declared.pairs

    def live_agents(self) -> list[Agent]:
        return self.agents.live()

    def view(self, now: float) -> modes.SupervisorView:
        """What the driver may read."""
        live = self.live_agents()
        return modes.SupervisorView(
            draining=self.phase is Phase.DRAINING,
            drain_timed_out=self.forced_exit is ExitCode.DRAIN_TIMEOUT,
            children_running=len(live),
            turns_running=sum(1 for a in live if a.busy),
            warm_sessions=sum(1 for a in live if a.warm),
            budget_spent=self.budget.spent(),
            deadline_reached=self.budget.deadline_reached(now),
            fatal_infra=self.fatal_infra is not None,
            required_server_failed=self.required_failed is not None,
            breaker_open=self.breaker_open,
            root_status=self.root_status,
            root_partial=bool(self.root_text.strip()),
        )

    def ready(self) -> tuple[bool, str]:
        """Readiness: required servers connected, declared subscriptions established, not draining."""
        if self.phase is not Phase.RUNNING:
            return False, "draining"
        for name in self.required:
            if self.server_states.get(name) is not ServerState.CONNECTED:
                return (
                    False,
                    f"required server {name!r} is {self.server_states.get(name, ServerState.STARTING).value}",
                )
        bad = [f"{s}:{u}" for (s, u), st in self.subscription_states.items() if st != "established"]
        # A declared subscription with no state at all was released or never
        # made: the daemon would be deaf to it, so it is not ready either.
        bad += [f"{s}:{u}" for (s, u) in self.declared if (s, u) not in self.subscription_states]
        if bad:
            return False, f"subscriptions not established: {', '.join(sorted(bad)[:5])}"
        if self._declared.unresolved_required:
            pattern = sorted(self._declared.unresolved_required)[0]
            return (
                False,
                f"declared subscription {pattern!r} resolves to nothing: {self._declared.unresolved[pattern]}",
            )
        if self.zygote_problem is not None:
            return (
                False,
                f"agent zygote degraded ({self.zygote_problem}); agents start as fresh interpreters "
                "until its replacement is ready",
            )
        return True, "ok"

    def _report_readiness(self) -> None:
        """Write ``ready.changed`` when the ``/readyz`` answer flips (not on every reason change).

        Written by the reactor after it applied the event, so whoever reads it
        (an operator, a test) knows the next ``/readyz`` gives that answer.
        """
        ready, reason = self.ready()
        if ready != self._reported_ready:
            self._reported_ready = ready
            self.telemetry.emit("ready.changed", ready=ready, reason=reason)
            self.hooks.readiness(ready, reason)

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
            draining=self.phase is not Phase.RUNNING,
            server_state=dict(self.server_states),
            subscription_state={k: v for k, v in self.subscription_states.items() if v != "pending"},  # type: ignore[misc]
            subscriptions_unresolved=len(self._declared.unresolved),
            histograms=self.telemetry.histograms.snapshot(),
        )

    # -- the loop ---------------------------------------------------------------

    async def run(self, *, server_states: Mapping[str, ServerState] | None = None) -> ExitCode:
        """Turn until the driver's exit predicate fires; returns the exit code.

        Args:
            server_states: where each upstream server's first connection
                attempt left it (the reactor starts from what the servers are now).
        """
        self.server_states.update(server_states or {})
        now = trio.current_time()
        self._start(now)
        self._report_readiness()  # ready before any event (no required server, nothing declared)
        while True:
            code = self.driver.exit_predicate(self.view(now))
            if code is not None:
                self.phase = Phase.STOPPED
                self.exit_code = code
                return code
            deadline = self._next_deadline()
            event: ReactorEvent | None = None
            with trio.move_on_at(deadline):
                event = await self._recv.receive()
            now = trio.current_time()
            if event is not None:
                self.handle(event, now)
            self._on_time(now)
            self._report_readiness()

    async def reap(self) -> None:
        """After :meth:`run` returned: every spawned agent gets its ``subagent.exit`` (bounded).

        Agents told to exit get :data:`REAP_EXIT_WAIT` to do so; anything
        still running (mid-turn when the run ended: deadline, a failed
        required server, a second signal ...) is killed through the tree's
        kill ladder and awaited for at most :data:`REAP_KILL_WAIT`. An agent
        whose exit is not seen even then is reported with ``returncode``
        None, so ``subagent.spawn`` and ``subagent.exit`` always pair up.
        """
        code = self.exit_code
        self._release_idle()
        killing = any(a.phase is not AgentPhase.EXITING for a in self.live_agents())
        if killing:
            self.hooks.kill_all()
        deadline = trio.current_time() + (REAP_KILL_WAIT if killing else REAP_EXIT_WAIT)
        while self.live_agents():
            event: ReactorEvent | None = None
            with trio.move_on_at(deadline):
                event = await self._recv.receive()
            if event is None:
                if killing:
                    break
                killing = True
                self.hooks.kill_all()
                deadline = trio.current_time() + REAP_KILL_WAIT
                continue
            match event:
                case ChildExited():
                    self._reaped(event, code)
                case UsageReported():
                    event.reply.answer(UsageVerdict(id=event.report.id, proceed=False, reason="draining"))
                case TurnEnded():
                    agent = self.agents.get(event.agent)
                    if agent is not None and agent.phase in (AgentPhase.STARTING, AgentPhase.TURN):
                        agent.exiting()  # TURN -> EXITING
                    event.reply.answer(NextTurn(id=event.end.id, action="exit"))
                case SelfSubscribe() | WatchSession() | WatchRouteAdd():
                    event.reply.answer(Refused("agentd is stopping"))
                case SelfUnsubscribe():
                    event.reply.answer(Unsubscribed(existed=False, needed=True))
                case WatchRouteRemove():
                    event.reply.answer(RouteRemoved(needed=True))
                case HealthProbe():
                    event.reply.set()
                case _:
                    pass  # nothing else matters once the run ended
        for agent in self.live_agents():
            self._reaped(ChildExited(agent=agent.id, pid=-1, returncode=None), code)

    def _reaped(self, ev: ChildExited, code: ExitCode | None) -> None:
        """An agent's exit after the run ended: telemetry only (no routes, no restarts)."""
        agent = self.agents.get(ev.agent)
        if agent is None or not agent.alive:
            return
        was = agent.exited()
        stopped = was in (AgentPhase.STARTING, AgentPhase.TURN) or agent.status is None
        status: TerminalStatus
        if stopped:
            status = "deadline" if code is ExitCode.DEADLINE else "crashed"
        else:
            status = agent.status or "completed"
        self.telemetry.emit(
            "subagent.exit",
            agent=agent.id,
            status=status,
            returncode=ev.returncode,
            exit_code=int(code_for_status(status, partial=bool(agent.text.strip()))),
            **({"stopped": True} if stopped else {}),
        )

    def _next_deadline(self) -> float:
        timers = self.phase is Phase.RUNNING and self.open
        candidates = [
            # Nothing is delivered while draining (or before the required
            # servers are up), so a debounce armed by a change meanwhile must
            # not bound the wait (it would spin the loop hot).
            self.router.next_deadline() if timers else None,
            self.reenter_at,
            self.drain_deadline,
            self.budget.next_deadline(),
            self.clock.next_fire() if self.clock is not None and timers else None,
        ]
        present = [c for c in candidates if c is not None]
        return min(present) if present else float("inf")

    # -- start and time -----------------------------------------------------------

    def queue_startup_notices(self, notices: list[WatchNotice]) -> None:
        """Notices to deliver as the reactor starts (call before :meth:`run`).

        A notice for the session of the agent the driver starts first (the
        warm loop root) becomes part of that agent's first turn, so a restart
        costs no extra turn; any other is delivered like a watch notice.
        """
        for notice in notices:
            self._startup_notices.setdefault(notice.session, []).append(notice)

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
        if self.started:
            return
        waiting = sorted(n for n in self.required if self.server_states.get(n) is not ServerState.CONNECTED)
        if waiting:
            if not self._waiting_reported:
                self._waiting_reported = True
                self.telemetry.emit(
                    "reactor.waiting",
                    servers=waiting,
                    note="required servers are not connected: no agent starts until they are",
                )
            return
        self.open = self.started = True
        for action in self.driver.on_start(self.view(now)):
            if isinstance(action, modes.SpawnRoot):
                self._spawn_root(now)
        pending, self._startup_notices = self._startup_notices, {}
        for notices in pending.values():
            for notice in notices:
                self._notice(notice, now)

    def _on_time(self, now: float) -> None:
        if self.drain_deadline is not None and now >= self.drain_deadline and self.live_agents():
            self.telemetry.emit(
                "drain.timeout", grace_s=self.grace, agents=[a.id for a in self.live_agents()]
            )
            self.hooks.kill_all()
            self.forced_exit = ExitCode.DRAIN_TIMEOUT
            return
        if self.budget.deadline_reached(now):
            self.telemetry.emit("budget.deadline")
            return
        if self.reenter_at is not None and now >= self.reenter_at:
            self.reenter_at = None
            self._reenter(now)
        if (
            self.clock is not None
            and self.phase is Phase.RUNNING
            and self.open
            and now >= self.clock.next_fire()
        ):
            self._clock_fire(now)
        self._deliver(now)
        self._apply_backpressure()

    def _apply_backpressure(self) -> None:
        """Pause the servers feeding a ``block`` route whose queue is full; resume them once it has room."""
        blocked = self.router.blocked_routes()
        if not blocked and not self._blocked:
            return  # the common case: nothing is blocked, nothing to resume
        # Every server whose events a blocked route holds is paused, including
        # one whose first event arrived after the route blocked.
        for route_id in sorted(blocked):
            for server in sorted(self.router.held_servers(route_id)):
                routes = self.paused.setdefault(server, set())
                if route_id in routes:
                    continue
                if not routes:
                    self.hooks.pause(server, True)
                    self.telemetry.emit("upstream.paused", server=server, route=route_id)
                routes.add(route_id)
        for route_id in sorted(self._blocked - blocked):
            for server in sorted(self.paused):
                routes = self.paused[server]
                routes.discard(route_id)
                if not routes:
                    del self.paused[server]
                    self.hooks.pause(server, False)
                    self.telemetry.emit("upstream.resumed", server=server, route=route_id)
        self._blocked = blocked

    def _clock_fire(self, now: float) -> None:
        assert self.clock is not None
        self.clock.fire(now, _dt.datetime.now(_dt.UTC))
        self.telemetry.emit("timer.fire")
        if isinstance(self.driver, modes.Schedule) and self.router.timer_route is None:
            for action in self.driver.on_fire(self.view(now), now):
                if isinstance(action, modes.SpawnRoot):
                    self._spawn_root(now)
                else:
                    self.telemetry.emit("timer.coalesced", reason="previous root still running")
        else:
            timer = self.router.timer_route
            if self.handles is not None and timer is not None and not self.handles(timer, timer.id):
                return  # another replica owns this timer route's fires
            self.router.ingest_timer(now)

    # -- event handling -------------------------------------------------------------

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
                self.subscription_states[(event.server, event.uri)] = event.state
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
                self.zygote_problem = (event.reason or "unavailable") if event.state == "degraded" else None
            case _:
                assert_never(event)

    def _refresh_declared(self, reason: Literal["connected", "catalog"]) -> None:
        """Re-expand the declared subscriptions; forget the states of pairs no longer declared."""
        for pair in self._declared.refresh(reason):
            self.subscription_states.pop(pair, None)

    def _resource_changed(self, ev: ResourceChanged, now: float) -> None:
        if self.handles is not None:
            route = self.router.first_match(ev.uri)
            if route is not None and not self.handles(route, ev.uri):
                # Another replica owns this key (rfcs/0213); it gets the same update.
                self.telemetry.emit("shard.skipped", server=ev.server, uri=ev.uri, route=route.id)
                return
        if ev.startup:
            owner = self.router.first_match(ev.uri)
            if owner is not None and not owner.spec.reread_on_start:
                # The route opted out of the start-up re-read (rfcs/0130).
                self.telemetry.emit("resource.reread_skipped", server=ev.server, uri=ev.uri, route=owner.id)
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
        if result.route_id is None:
            self.counters.unroute()
            return
        self.counters.route(result.route_id)
        outcome = result.outcome
        if outcome is PushOutcome.COALESCED:
            self.counters.coalesce(result.route_id)
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
        else:
            self.telemetry.emit("route.enqueued", route=result.route_id, uri=ev.uri)

    def _deliver(self, now: float) -> None:
        deliveries = self.router.take_deliveries(
            now,
            session_idle=self._session_idle,
            may_spawn=lambda: self.phase is Phase.RUNNING and self.budget.spent() is None,
            draining=self.phase is not Phase.RUNNING or not self.open,
        )
        for d in deliveries:
            match d:
                case SpawnDelivery():
                    self.telemetry.observe("event_to_agent", now - d.event.first_seen, route=d.route_id)
                    self.telemetry.emit("route.deliver", route=d.route_id, uris=[d.event.uri])
                    agent = self._spawn(now, role="spawn", instruction=d.instruction, route=d.route_id)
                    agent.origin = [d.event]
                case ContinueDelivery():
                    self._continue(d, now)
                case _:
                    assert_never(d)
        if self.route_notices:
            self._spawn_route_notices(now)

    def _continue(self, d: ContinueDelivery, now: float) -> None:
        uris = [e.uri for e in d.events]
        self.telemetry.emit("route.deliver", route=d.route_id, uris=uris)
        match d.kind:
            case "watch":
                # A watch re-reads and filters on its own task; the owning
                # session only hears of it as a notice (see _notice).
                self.router.on_session_idle(d.session)
                if self._watches is not None:
                    self._watches.on_changed(d.route_id, uris)
            case "stage":
                # Same for a staged declared route: its notices come back as RouteNotice.
                self.router.on_session_idle(d.session)
                if self._watches is not None:
                    self._watches.on_route_changed(d.route_id, [(e.uri, e.server) for e in d.events])
            case "declared" | "self":
                oldest = min(e.first_seen for e in d.events) if d.events else now
                self.telemetry.observe("event_to_agent", now - oldest, route=d.route_id)
                self._deliver_to_session(
                    now, d.session, render_delivery(d.events), route=d.route_id, origin=d.events
                )
            case _:
                assert_never(d.kind)

    def _session_idle(self, session: str) -> bool:
        agent = self.agents.session_agent(session)
        # A named session that does not run yet starts on delivery.
        return agent is None or agent.phase is AgentPhase.IDLE

    def _deliver_to_session(
        self,
        now: float,
        session: str,
        text: str,
        *,
        route: str | None,
        origin: list[QueuedEvent] | None = None,
    ) -> Agent:
        """Give ``session`` a turn with ``text``: start it if no agent holds it, else resume it."""
        agent = self.agents.session_agent(session)
        if agent is None:
            instruction = f"{self.instruction}\n\n{text}" if self.instruction else text
            if self.journals is not None and self.journals.resumable(session) is not None:
                instruction = text  # the journal holds the first instruction; the delivery follows it
            started = self._spawn(
                now, role="session", instruction=instruction, route=route, session=session, warm=True
            )
            started.origin = list(origin or ())
            self.telemetry.emit("session.deliver", session=session, route=route, started=True)
            return started
        self.telemetry.emit("session.deliver", session=session, route=route, agent=agent.id)
        self._real_work(agent)
        self._resume(agent, text, now)
        return agent

    def _real_work(self, agent: Agent) -> None:
        """A delivery reached ``agent``: for the warm loop root that is real work (resets the idle backoff)."""
        if agent.role == "root" and isinstance(self.driver, modes.Loop):
            self.driver.on_delivery()

    def _resume(self, agent: Agent, text: str, now: float) -> None:
        """Answer an idle agent's held turn end with its next input (IDLE -> TURN)."""
        held = agent.resume()
        agent.turn_started_at = now
        if held is not None:
            # The next turn's trace context (tracing on): the child's tool calls carry it.
            tracing = active_tracing()
            traceparent = tracing.traceparent(agent.id) if tracing is not None else None
            held.reply.answer(
                NextTurn(id=held.end.id, action="continue", input=text, traceparent=traceparent)
            )

    # -- agents -----------------------------------------------------------------------

    def _spawn_root(self, now: float) -> None:
        warm = self.mode == "loop" and self.session_mode == "warm"
        session = "root" if warm else None
        folded = self._startup_notices.pop(session, []) if session is not None else []
        # The restore notice rides in the root's first turn: one turn, not two.
        instruction = "\n\n".join(t for t in [self.instruction, *(n.text for n in folded)] if t)
        agent = self._spawn(now, role="root", instruction=instruction, warm=warm, session=session)
        if folded:
            agent.notice_turn = folded
            self.telemetry.emit(
                "session.deliver",
                session=session,
                route=None,
                agent=agent.id,
                watch=[n.watch for n in folded],
            )

    def _spawn(
        self,
        now: float,
        *,
        role: AgentRole,
        instruction: str,
        route: str | None = None,
        session: str | None = None,
        warm: bool = False,
    ) -> Agent:
        agent = self.agents.new(
            role=role, instruction=instruction, route=route, session=session, warm=warm, now=now
        )
        restored = self.journals.resumable(session) if self.journals is not None and session else None
        for uri, server in restored or ():
            # A restored session owns the self-subscriptions it had (their routes exist already).
            agent.subscriptions.add(uri)
            if server:
                agent.subscription_servers[uri] = server
        self.telemetry.emit("subagent.spawn", agent=agent.id, role=role, route=route, session=session)
        self.hooks.spawn(agent)
        return agent

    def _refuse(self, ev: UsageReported | TurnEnded, agent: Agent | None) -> None:
        """A report that cannot happen in the agent's phase (only a broken child sends one): stop it.

        Nothing of the report is applied; the child is told to stop (usage)
        or exit (turn end). The channel's protocol rules make this
        unreachable for an honest child; it is the reactor's own guard.
        """
        kind = "usage" if isinstance(ev, UsageReported) else "turn_end"
        self.telemetry.emit(
            "reactor.refused",
            agent=ev.agent,
            report=kind,
            phase=agent.phase.value if agent is not None else "unknown",
        )
        if isinstance(ev, UsageReported):
            ev.reply.answer(UsageVerdict(id=ev.report.id, proceed=False, reason="draining"))
        else:
            ev.reply.answer(NextTurn(id=ev.end.id, action="exit"))

    def _usage(self, ev: UsageReported, now: float) -> None:
        agent = self.agents.get(ev.agent)
        if agent is None or not agent.busy:
            self._refuse(ev, agent)
            return
        report = ev.report
        agent.begin_turn()  # STARTING -> TURN
        self.budget.charge(
            input_tokens=report.input_tokens,
            output_tokens=report.output_tokens,
            steps=report.steps,
            cost_usd=report.cost_usd,
        )
        self.counters.model_call(
            input_tokens=report.input_tokens,
            output_tokens=report.output_tokens,
            cached_input_tokens=report.cached_input_tokens,
            cache_creation_input_tokens=report.cache_creation_input_tokens,
            priced=report.cost_usd is not None,
        )
        self.telemetry.observe(
            "model_call", report.latency_ms / 1000, route=agent.route, provider=report.provider
        )
        self.telemetry.step(
            "assistant",
            agent=agent.id,
            route=agent.route,
            session=agent.session,
            text=report.text,
            tool_calls=report.tool_calls,
            provider=report.provider,
            model=report.model,
            latency_ms=report.latency_ms,
            input_tokens=report.input_tokens,
            output_tokens=report.output_tokens,
            cached_input_tokens=report.cached_input_tokens,
            cost_usd=report.cost_usd,
        )
        self.telemetry.emit(
            "model.call",
            agent=agent.id,
            provider=report.provider,
            model=report.model,
            input_tokens=report.input_tokens,
            output_tokens=report.output_tokens,
            cached_input_tokens=report.cached_input_tokens,
            cache_creation_input_tokens=report.cache_creation_input_tokens,
            cost_usd="unknown" if report.cost_usd is None else report.cost_usd,
            latency_ms=round(report.latency_ms, 3),
        )
        spent = self.budget.spent()
        if spent is not None and not self.budget_reported:
            self.budget_reported = True
            self.telemetry.emit("budget.exhausted", kind=spent, budget=self.budget.snapshot())
            # Nothing new will start, so idle warm sessions must exit too, or
            # the budget exit predicate (nothing running) never fires.
            self._release_idle()
        # The USD ceiling ends turns exactly as the token ceiling does (exhausted_tokens).
        reason: StopReason | None = "tokens" if spent == "usd" else spent
        if reason is None and self.budget.deadline_reached(now):
            reason = "deadline"
        ev.reply.answer(UsageVerdict(id=report.id, proceed=reason is None, reason=reason))

    def _turn_end(self, ev: TurnEnded, now: float) -> None:
        agent = self.agents.get(ev.agent)
        if agent is None or not agent.busy:
            self._refuse(ev, agent)
            return
        end = ev.end
        status: TerminalStatus = end.status
        text = end.text
        idle = end.idle
        agent.turns += 1
        agent.status = status
        agent.text = text
        if end.fatal_infra:
            self.fatal_infra = end.fatal_infra
            self.telemetry.emit("model.fatal", agent=agent.id, error=self.fatal_infra)
        answered, agent.notice_turn = agent.notice_turn, []
        if idle and status == "completed":
            self.telemetry.emit(
                "reply.suppressed",
                agent=agent.id,
                route=agent.route,
                **(
                    {"watch": [n.watch for n in answered], "uri": [n.uri for n in answered]}
                    if answered
                    else {}
                ),
            )
        elif text or status != "completed":
            self.hooks.publish(agent, status, text, idle)
        self.telemetry.observe("turn", now - agent.turn_started_at, route=agent.route)
        self.counters.turn()
        self.telemetry.emit("turn.end", agent=agent.id, status=status, route=agent.route, idle=idle)
        if self._should_hold(agent, status):
            agent.hold(ev)  # TURN -> IDLE
        else:
            agent.exiting()  # TURN -> EXITING
            ev.reply.answer(NextTurn(id=end.id, action="exit"))
        self._after_terminal(agent, status, idle, now)
        if agent.notices and agent.phase is AgentPhase.IDLE and agent.held is not None:
            self._resume_with_notices(agent, now)

    def _should_hold(self, agent: Agent, status: TerminalStatus) -> bool:
        if self.phase is not Phase.RUNNING or self.budget.spent() is not None or self.fatal_infra:
            return False
        watched = self._owns_watches(agent)
        if status in ("crashed", "refused", "deadline") and not agent.subscriptions and not watched:
            return False
        return agent.warm or bool(agent.subscriptions) or watched

    def _owns_watches(self, agent: Agent) -> bool:
        return agent.session is not None and self.session_routes.has_session(agent.session)

    def _after_terminal(self, agent: Agent, status: TerminalStatus, idle: bool, now: float) -> None:
        if agent.role == "root":
            self.root_status = status
            self.root_text = agent.text
            disposition = self.driver.on_root_terminal(self.view(now), status, idle=idle, now=now)
            self._apply_disposition(agent, disposition, now)
        elif agent.role == "spawn" and agent.route is not None and not agent.slot_released:
            # The event this agent was spawned for is handled once its first
            # turn ends, even if it stays warm for its own subscriptions or
            # watches: the route's inflight slot is free again.
            agent.slot_released = True
            self.router.on_spawn_done(agent.route)
        if agent.session is not None and agent.phase is AgentPhase.IDLE:
            self.router.on_session_idle(agent.session)

    def _apply_disposition(self, agent: Agent, disposition: modes.RootDisposition, now: float) -> None:
        match disposition:
            case modes.ReEnterAfter():
                self.reenter_at = now + disposition.delay
                self.telemetry.emit("loop.reenter", after_s=disposition.delay)
            case modes.Restart():
                if self.governor.record_restart(now):
                    self.counters.agent_restart()
                    delay = self.governor.restart_delay()
                    self.telemetry.emit("subagent.restart", agent=agent.id, after_s=delay)
                    # The governor's backoff (0.5 s, 1 s, 2 s ...): a crashing root must
                    # not be restarted hot until the breaker trips.
                    self.reenter_at = now + delay
                else:
                    self.breaker_open = True
                    self.telemetry.emit("governor.breaker_open", agent=agent.id)
            case modes.Done() | modes.Quiesce():
                pass
            case _:
                assert_never(disposition)

    def _reenter(self, now: float) -> None:
        """A re-entry is due: the driver says whether the warm root continues or a fresh root starts."""
        if self.phase is not Phase.RUNNING or self.budget.spent() is not None:
            return
        root = self.agents.session_agent("root")
        action = self.driver.reentry() if isinstance(self.driver, modes.Loop) else modes.SpawnRoot()
        if isinstance(action, modes.ContinueRoot) and root is not None and root.phase is AgentPhase.IDLE:
            self.telemetry.emit("loop.shift", agent=root.id, warm=True)
            self._resume(root, self.instruction, now)
            return
        if root is not None:
            return  # still busy: the next terminal status decides again
        self.telemetry.emit("loop.shift", warm=False)
        self._spawn_root(now)

    def _child_exited(self, ev: ChildExited, now: float) -> None:
        agent = self.agents.get(ev.agent)
        if agent is None or not agent.alive:
            return
        was = agent.exited()
        if agent.notices:
            self.telemetry.emit(
                "watch.notice_dropped",
                agent=agent.id,
                watch=[n.watch for n in agent.notices],
                reason="agent exited",
            )
            agent.notices.clear()
        if agent.session is not None and self.agents.release_session(agent):
            if ev.spawned:
                # A session whose agent never started keeps its watches: the
                # notice it was started for starts it again (below).
                self._stop_watches(agent.session)
                if (
                    self.journals is not None
                    and self.phase is Phase.RUNNING
                    and self.budget.spent() is None
                    and self.fatal_infra is None
                ):
                    self.journals.end(agent.session)  # over for good; a drain or a kill keeps it
            # The router must not keep a dead session marked busy: the next
            # delivery for it starts a new session.
            self.router.on_session_idle(agent.session)
        for uri in sorted(agent.subscriptions):
            self._drop_self_route(agent, uri)
            self._release_upstream(agent, uri)
        crashed = was in (AgentPhase.STARTING, AgentPhase.TURN) or (
            was is AgentPhase.IDLE and self.phase is Phase.RUNNING and ev.returncode not in (0, None)
        )
        status: TerminalStatus = "crashed" if crashed else (agent.status or "completed")
        self.telemetry.emit(
            "subagent.exit",
            agent=agent.id,
            status=status,
            returncode=ev.returncode,
            exit_code=int(code_for_status(status, partial=bool(agent.text.strip()))),
            reason=ev.reason,
        )
        if crashed:
            agent.status = "crashed"
            self._after_terminal(agent, "crashed", False, now)
            if not ev.spawned:
                self._requeue(agent, now)
            # Routed agents are not restarted (the next change re-triggers the
            # route: at-least-once by re-read), but every crash counts against
            # the restart intensity, so a crash loop opens the breaker (exit 1)
            # instead of spinning forever.
            if agent.role != "root" and self.phase is Phase.RUNNING and not self.governor.record_restart(now):
                self.breaker_open = True
                self.telemetry.emit("governor.breaker_open", agent=agent.id, route=agent.route)

    def _requeue(self, agent: Agent, now: float) -> None:
        """An agent whose process never started: queue what it was started for again (at-least-once)."""
        origin, agent.origin = agent.origin, []
        for queued in origin:
            result = self.router.ingest(queued, now)
            self.telemetry.emit("route.requeued", agent=agent.id, route=result.route_id, uri=queued.uri)
        notices, agent.notice_turn = agent.notice_turn, []
        for notice in notices:
            self.telemetry.emit("route.requeued", agent=agent.id, session=notice.session, watch=notice.watch)
            self._notice(notice, now)

    # -- self tools -------------------------------------------------------------------

    def _self_tool(self, request: SelfToolRequest) -> None:
        """A self-tool request from the hub: answered at once, never raises."""
        agent = self.agents.get(request.agent)
        if agent is None:
            unknown = f"unknown agent {request.agent!r}"
            match request:
                case SelfUnsubscribe():
                    request.reply.answer(Unsubscribed(existed=False, needed=True))
                case WatchRouteRemove():
                    request.reply.answer(RouteRemoved(needed=True))
                case SelfSubscribe() | WatchSession() | WatchRouteAdd():
                    request.reply.answer(Refused(unknown))
                case _:
                    assert_never(request)
            return
        match request:
            case SelfSubscribe():
                self._subscribe(agent, request)
            case SelfUnsubscribe():
                existed = request.uri in agent.subscriptions
                self._drop_self_route(agent, request.uri)
                agent.subscription_servers.pop(request.uri, None)
                # A declared subscription (or another route or watch) still needs
                # the upstream subscription: the hub must keep it, and the URI goes
                # back to its declared route (rfcs/0134).
                needed = request.server is not None and self.uri_needed(request.server, request.uri)
                request.reply.answer(Unsubscribed(existed=existed, needed=needed))
                self.telemetry.emit(
                    "self.unsubscribe", agent=agent.id, uri=request.uri, server=request.server, kept=needed
                )
            case WatchSession():
                # Registering makes the agent's id its session name (a watch needs a session).
                session = self.agents.name_session(agent) if request.register else agent.session or agent.id
                request.reply.answer(SessionOf(session))
            case WatchRouteAdd():
                try:
                    route_id = self.session_routes.add_watch(request.session, request.name, request.uri)
                except (RouteError, ValueError) as exc:  # ValueError: a URI that is no valid match
                    request.reply.answer(Refused(str(exc)))
                    return
                request.reply.answer(RouteAdded(route_id))
            case WatchRouteRemove():
                self.session_routes.remove_watch(request.session, request.name)
                request.reply.answer(RouteRemoved(needed=self.uri_needed(request.server, request.uri)))
            case _:
                assert_never(request)

    def _subscribe(self, agent: Agent, request: SelfSubscribe) -> None:
        session = agent.session or agent.id
        try:
            self.session_routes.subscribe(session, request.uri)
        except (RouteError, ValueError) as exc:  # ValueError: a URI that is no valid match
            request.reply.answer(Refused(str(exc)))
            return
        self.agents.name_session(agent)
        agent.subscriptions.add(request.uri)
        agent.subscription_servers[request.uri] = request.server
        self.telemetry.emit("self.subscribe", agent=agent.id, uri=request.uri, server=request.server)
        request.reply.answer(Subscribed())

    def uri_needed(self, server: str, uri: str) -> bool:
        """Whether a route or a declared subscription other than a watch still needs ``uri``."""
        return (server, uri) in self.declared or self.session_routes.routed(uri)

    # -- watches ----------------------------------------------------------------------

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
            if self.phase is not Phase.RUNNING or self.budget.spent() is not None:
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
            if self.phase is not Phase.RUNNING or self.budget.spent() is not None:
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

    def _release_upstream(self, agent: Agent, uri: str) -> None:
        """The agent that subscribed ``uri`` is gone: drop the upstream subscription unless still needed."""
        server = agent.subscription_servers.pop(uri, None)
        if server is None or self.uri_needed(server, uri):
            return
        if self._watches is not None and self._watches.needs(server, uri):
            return
        self.telemetry.emit("self.unsubscribe", agent=agent.id, uri=uri, server=server, reason="owner exited")
        self.hooks.unsubscribe(server, uri)

    def _drop_self_route(self, agent: Agent, uri: str) -> None:
        agent.subscriptions.discard(uri)
        self.session_routes.unsubscribe(agent.session or agent.id, uri)

    # -- signals and servers ------------------------------------------------------------

    def _signal(self, ev: SignalReceived, now: float) -> None:
        name = _signal.Signals(ev.signum).name
        if self.phase is Phase.DRAINING:
            self.telemetry.emit("drain.abort", signal=name)
            self.hooks.kill_all()
            self.forced_exit = ExitCode.DRAIN_TIMEOUT
            return
        self.phase = Phase.DRAINING
        self.drain_deadline = now + self.grace
        self.reenter_at = None
        self.telemetry.emit("drain.start", signal=name, grace_s=self.grace, agents=len(self.live_agents()))
        self.hooks.draining()
        self._release_idle()

    def _release_idle(self) -> None:
        """Tell every idle agent (its turn-end held) to exit."""
        for agent in self.live_agents():
            if agent.phase is AgentPhase.IDLE and agent.held is not None:
                held = agent.exiting()  # IDLE -> EXITING
                if held is not None:
                    held.reply.answer(NextTurn(id=held.end.id, action="exit"))

    def _server_state(self, ev: ServerStateChanged) -> None:
        self.server_states[ev.server] = ev.state
        if ev.state is ServerState.RESTARTING:
            self.counters.server_restart(ev.server)
        self.telemetry.emit(
            "server.state", server=ev.server, state=ev.state.value, attempt=ev.attempt, error=ev.error
        )
        if ev.state is ServerState.FAILED and ev.required:
            self.required_failed = ev.server
            self.required_failed_error = (
                f"required server {ev.server!r} could not be started or reconnected after {ev.attempt} "
                f"attempts (last error: {ev.error}); fix its command or URL, or drop `required` if agentd "
                "may run without it"
            )


def open_channel() -> tuple[trio.MemorySendChannel[ReactorEvent], trio.MemoryReceiveChannel[ReactorEvent]]:
    """The reactor's channel (create it first: the upstreams, hub and tree send into it)."""
    return trio.open_memory_channel[ReactorEvent](EVENT_BUFFER)


def render_delivery(events: list[QueuedEvent]) -> str:
    """The user turn a continue delivery becomes."""
    lines = ["These resources changed (re-read what you need; act on the current state):"]
    for e in events:
        tag = "possibly changed" if e.kind == "synthetic" else e.kind
        server = f" on {e.server}" if e.server else ""
        lines.append(f"- {e.uri}{server} ({tag})")
    return "\n".join(lines)
