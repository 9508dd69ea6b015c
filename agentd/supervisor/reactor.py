"""The one reactor: a single trio task that owns the driver, router, tree and timers.

Every other task (MCP connections, child channels, the signal watcher, the
health endpoint, the self-MCP handlers) only *sends* typed events
(:mod:`agentd.supervisor.events`) into one memory channel. The reactor is the
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

import contextlib
import enum
import signal as _signal
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

import trio

from agentd.exitcodes import ExitCode, TerminalStatus, code_for_status
from agentd.selfmcp.protocol import NextTurn, StopReason, UsageVerdict
from agentd.supervisor.budget import Budget
from agentd.supervisor.events import (
    CatalogChanged,
    ChildExited,
    ChildMessage,
    HealthProbe,
    ReactorEvent,
    Reply,
    ResourceChanged,
    ServerState,
    ServerStateChanged,
    SignalReceived,
    SubscriptionStateChanged,
    TurnEnded,
    UsageReported,
    WatchNotice,
    ZygoteStateChanged,
)
from agentd.supervisor.governor import RestartGovernor
from agentd.supervisor.routes import StagedRoute
from agentd.telemetry import Telemetry
from agentd.tracing import active as active_tracing
from agentd.triggers import mode as modes
from agentd.triggers.router import (
    ContinueDelivery,
    PushOutcome,
    QueuedEvent,
    Router,
    SpawnDelivery,
    render_template,
)

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


class AgentPhase(enum.Enum):
    """An agent as the reactor sees it."""

    STARTING = "starting"
    """Spawned; no turn boundary reached yet (it is running its first turn)."""
    TURN = "turn"
    """Mid-turn: model and tool calls in flight."""
    IDLE = "idle"
    """Warm and waiting for a delivery; its turn-end call is held open."""
    EXITING = "exiting"
    """Told to exit (or being killed)."""
    EXITED = "exited"
    """Its process is gone."""


AgentRole = Literal["root", "spawn", "session"]


@dataclass
class Agent:
    """One agent child, as the reactor tracks it."""

    id: str
    role: AgentRole
    instruction: str
    route: str | None = None
    """Owning route id (spawn-route agents and route sessions)."""
    session: str | None = None
    """Session name when this agent is a warm session (``root`` for loop --session warm)."""
    warm: bool = False
    """Held between turns instead of exiting."""
    phase: AgentPhase = AgentPhase.STARTING
    held: TurnEnded | None = None
    """Its pending turn end while IDLE (answered with the next delivery, or exit)."""
    status: TerminalStatus | None = None
    text: str = ""
    turns: int = 0
    subscriptions: set[str] = field(default_factory=set)
    subscription_servers: dict[str, str] = field(default_factory=dict)
    """Which server each self-subscription is on (to release it when the agent exits)."""
    slot_released: bool = False
    """Spawn agents: the route's inflight slot was given back (at the first terminal status)."""
    started_at: float = 0.0
    turn_started_at: float = 0.0
    """When its current turn's input was handed over (turn duration is measured from it)."""
    notices: list[WatchNotice] = field(default_factory=list)
    """Watch notices that arrived mid-turn: all of them become ONE follow-up turn."""
    notice_turn: list[WatchNotice] = field(default_factory=list)
    """The notices the current turn answers (for ``reply.suppressed`` telemetry)."""
    origin: list[QueuedEvent] = field(default_factory=list)
    """The routed changes it was started for: queued again if its spawn fails."""


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


class WatchHooks(Protocol):
    """What the reactor tells the watch manager (sync; the manager never blocks the reactor)."""

    @property
    def limits(self) -> Any: ...

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


@dataclass(frozen=True, slots=True)
class RouteNotice(WatchNotice):
    """A notice from a declared route's stage (rfcs/0078); ``watch`` is the route id.

    Attributes:
        route: The staged route whose disposition applies.
        server: The server of ``uri`` (for the ``{server}`` template placeholder).
    """

    route: str = ""
    server: str | None = None


#: Route ids of watches start with this (``watch:<session>:<name>``).
WATCH_ROUTE_PREFIX = "watch:"


class Reactor:
    """Runs the exit predicates over one event loop.

    Args:
        driver: the mode's driver (exit predicates).
        router: the reactive router (pure).
        budget: the tree-wide budget.
        governor: the restart governor.
        hooks: I/O the reactor triggers.
        telemetry: NDJSON events and counters.
        instruction: the root instruction (once/loop/schedule).
        grace: drain grace period in seconds.
        interval_timer: a clock source for reactive/schedule timers, if any.
        required: names of required servers.
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
        clock: Any = None,
        required: frozenset[str] = frozenset(),
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
        self.send, self._recv = trio.open_memory_channel[ReactorEvent](EVENT_BUFFER)
        self.phase = Phase.RUNNING
        self.agents: dict[str, Agent] = {}
        self.sessions: dict[str, str] = {}
        self._seq = 0
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
        self.routed_by_route: Counter[str] = Counter()
        self.coalesced_by_route: Counter[str] = Counter()
        self.server_restarts: Counter[str] = Counter()
        self.agent_restarts = 0
        self.declared: set[tuple[str, str]] = set()
        """(server, uri) of every declared subscription (globs expanded against the catalogs)."""
        self.unresolved: dict[str, str] = {}
        """Declared subscription patterns that resolve to nothing now -> why (rfcs/0134)."""
        self.unresolved_required: set[str] = set()
        """The patterns of :attr:`unresolved` that name a required server: readiness fails."""
        self.on_catalog: Callable[[CatalogChanged], None] | None = None
        """Re-expands glob subscriptions when a server's catalog changes (set by the app)."""
        self.on_connected: Callable[[str], None] | None = None
        """A server (re)connected: (re)subscribe its declared URIs (set by the app)."""
        self.started = False
        """The driver's ``on_start`` ran (once every required server had connected, rfcs/0135)."""
        self.open = not required
        """Every required server has connected once: roots, clock fires and deliveries may start."""
        self.paused: dict[str, set[str]] = {}
        """Server -> the blocked routes it is paused for (``block`` overflow, rfcs/0131)."""
        self._blocked: frozenset[str] = frozenset()
        self._waiting_reported = False
        self.watches: WatchHooks | None = None
        """The watch manager (set by the app)."""
        self.watch_sessions: dict[str, set[str]] = {}
        self.staged: dict[str, StagedRoute] = {}
        """Declared routes with a watch stage, by route id (set by the app; rfcs/0078)."""
        self.route_notices: dict[str, list[RouteNotice]] = {}
        """Spawn-route notices waiting for a free ``max_inflight`` slot, by route id."""
        self._startup_notices: dict[str, list[WatchNotice]] = {}
        """Notices known before the first turn (the watch restore), by session: the first turn
        of a session the reactor starts itself carries them (see :meth:`queue_startup_notices`)."""
        """Session -> names of the watches it owns (their routes are ``watch:<session>:<name>``)."""

    # -- views ------------------------------------------------------------------

    def live_agents(self) -> list[Agent]:
        return [a for a in self.agents.values() if a.phase is not AgentPhase.EXITED]

    def view(self, now: float) -> modes.SupervisorView:
        """What the driver may read."""
        live = self.live_agents()
        return modes.SupervisorView(
            draining=self.phase is Phase.DRAINING,
            drain_timed_out=False,
            children_running=len(live),
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
        if self.unresolved_required:
            pattern = sorted(self.unresolved_required)[0]
            return False, f"declared subscription {pattern!r} resolves to nothing: {self.unresolved[pattern]}"
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

    def dropped_by_reason(self) -> dict[str, int]:
        """Dropped events by the router's reason (``coalesce_cap``, ``drop_oldest``, ...), non-zero only."""
        prefix = "dropped_events."
        return {
            k.removeprefix(prefix): v for k, v in self.router.counters().items() if k.startswith(prefix) and v
        }

    def metrics_snapshot(self) -> Any:
        """A frozen copy of the numbers ``/metrics`` exposes."""
        from agentd.metrics import MetricsSnapshot

        live = self.live_agents()
        counters = self.telemetry.counters
        # Declared routes are present from the start, at 0 (a rate over a missing series is no rate).
        declared = [r.id for r in self.router.routes() if r.owner is None]
        return MetricsSnapshot(
            routed={**dict.fromkeys(declared, 0), **self.routed_by_route},
            unrouted=counters.get("unrouted", 0),
            coalesced={**dict.fromkeys(declared, 0), **self.coalesced_by_route},
            dropped=self.dropped_by_reason(),
            server_restarts=dict(self.server_restarts),
            agent_restarts=self.agent_restarts,
            tokens_input=counters.get("input_tokens", 0),
            tokens_output=counters.get("output_tokens", 0),
            tokens_cached_input=counters.get("cached_input_tokens", 0),
            tokens_cache_creation_input=counters.get("cache_creation_input_tokens", 0),
            cost_usd=self.budget.usd,
            unpriced_calls=self.budget.unpriced_calls,
            telemetry_dropped=self.telemetry.dropped,
            subagents_running=len(live),
            warm_sessions=sum(1 for a in live if a.warm or a.subscriptions),
            draining=self.phase is not Phase.RUNNING,
            server_state=dict(self.server_states),
            subscription_state={k: v for k, v in self.subscription_states.items() if v != "pending"},  # type: ignore[misc]
            subscriptions_unresolved=len(self.unresolved),
            histograms=self.telemetry.histograms.snapshot(),
        )

    # -- the loop ---------------------------------------------------------------

    async def run(self) -> ExitCode:
        """Turn until the exit predicate fires; returns the exit code."""
        now = trio.current_time()
        self._start(now)
        self._report_readiness()  # ready before any event (no required server, nothing declared)
        while True:
            code = self._exit_predicate(now)
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
            elif isinstance(event, ChildExited):
                self._reaped(event, code)
            elif isinstance(event, UsageReported | TurnEnded | ChildMessage):
                self._refuse_while_stopping(event)
            elif isinstance(event, HealthProbe):
                event.reply.set()
        for agent in self.live_agents():
            self._reaped(ChildExited(agent=agent.id, pid=-1, returncode=None), code)

    def _reaped(self, ev: ChildExited, code: ExitCode | None) -> None:
        """An agent's exit after the run ended: telemetry only (no routes, no restarts)."""
        agent = self.agents.get(ev.agent)
        if agent is None or agent.phase is AgentPhase.EXITED:
            return
        was = agent.phase
        agent.phase = AgentPhase.EXITED
        agent.held = None
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

    def _refuse_while_stopping(self, msg: UsageReported | TurnEnded | ChildMessage) -> None:
        """A child asked something after the run ended: tell it to stop (it is about to be reaped)."""
        if isinstance(msg, UsageReported):
            msg.reply.answer(UsageVerdict(id=msg.report.id, proceed=False, reason="draining"))
        elif isinstance(msg, TurnEnded):
            agent = self.agents.get(msg.agent)
            if agent is not None and agent.phase is not AgentPhase.EXITED:
                agent.phase = AgentPhase.EXITING  # TURN -> EXITING
            msg.reply.answer(NextTurn(id=msg.end.id, action="exit"))
        else:
            Reply[dict[str, Any]](msg.payload.get("reply")).answer({"error": "agentd is stopping"})

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

    def _exit_predicate(self, now: float) -> ExitCode | None:
        if self.forced_exit is not None:
            return self.forced_exit
        if self.required_failed is not None:
            return ExitCode.REQUIRED_SERVER
        if self.fatal_infra is not None and not self._busy():
            return ExitCode.FATAL_INFRA
        if self.budget.deadline_reached(now):
            return ExitCode.DEADLINE
        return self.driver.exit_predicate(self.view(now))

    def _busy(self) -> bool:
        return any(a.phase in (AgentPhase.STARTING, AgentPhase.TURN) for a in self.live_agents())

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
                self._watch_notice(notice, now)

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
        import datetime as _dt

        self.clock.fire(now, _dt.datetime.now(_dt.UTC))
        self.telemetry.emit("timer.fire")
        if isinstance(self.driver, modes.Schedule) and self.router.timer_route is None:
            for action in self.driver.on_fire(self.view(now), now):
                if isinstance(action, modes.SpawnRoot):
                    self._spawn_root(now)
                else:
                    self.telemetry.emit("timer.coalesced", reason="previous root still running")
        else:
            self.router.ingest_timer(now)

    # -- event handling -------------------------------------------------------------

    def handle(self, event: ReactorEvent, now: float) -> None:
        """Apply one event (synchronous; never blocks)."""
        if isinstance(event, ResourceChanged):
            self._resource_changed(event, now)
        elif isinstance(event, UsageReported):
            self._usage(event, now)
        elif isinstance(event, TurnEnded):
            self._turn_end(event, now)
        elif isinstance(event, ChildMessage):
            self._child_message(event, now)
        elif isinstance(event, ChildExited):
            self._child_exited(event, now)
        elif isinstance(event, SignalReceived):
            self._signal(event, now)
        elif isinstance(event, ServerStateChanged):
            self._server_state(event)
            if event.state is ServerState.CONNECTED and self.on_connected is not None:
                self.on_connected(event.server)
            self._maybe_start(now)
        elif isinstance(event, SubscriptionStateChanged):
            # The connection already wrote subscription.<state> telemetry.
            self.subscription_states[(event.server, event.uri)] = event.state
            if self.watches is not None:
                self.watches.on_subscription_state(event)
                owner = self.router.first_match(event.uri)
                if event.state == "established" and owner is not None and owner.id in self.staged:
                    self.watches.on_route_subscribed(owner.id, event.server, event.uri)
        elif isinstance(event, RouteNotice):
            self._route_notice(event, now)
        elif isinstance(event, WatchNotice):
            self._watch_notice(event, now)
        elif isinstance(event, CatalogChanged):
            self.telemetry.emit("catalog.changed", server=event.server, uris=len(event.uris))
            if self.on_catalog is not None:
                self.on_catalog(event)
        elif isinstance(event, HealthProbe):
            event.reply.set()
        elif isinstance(event, ZygoteStateChanged):
            self.zygote_problem = (event.reason or "unavailable") if event.state == "degraded" else None

    def _resource_changed(self, ev: ResourceChanged, now: float) -> None:
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
            self.telemetry.incr("unrouted")
            return
        self.telemetry.incr("routed")
        self.routed_by_route[result.route_id] += 1
        outcome = result.outcome
        if outcome is PushOutcome.COALESCED:
            self.telemetry.incr("coalesced")
            self.coalesced_by_route[result.route_id] += 1
            self.telemetry.emit("route.coalesced", route=result.route_id, uri=ev.uri)
        elif result.reason is not None:
            # One vocabulary: the router's reason, and the URI that was lost
            # (under drop_oldest that is the oldest queued one, not this one).
            self.telemetry.incr("dropped_events")
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
            if isinstance(d, SpawnDelivery):
                self.telemetry.observe("event_to_agent", now - d.event.first_seen, route=d.route_id)
                self.telemetry.emit("route.deliver", route=d.route_id, uris=[d.event.uri])
                agent = self._spawn(now, role="spawn", instruction=d.instruction, route=d.route_id)
                agent.origin = [d.event]
            elif isinstance(d, ContinueDelivery):
                uris = [e.uri for e in d.events]
                self.telemetry.emit("route.deliver", route=d.route_id, uris=uris)
                if d.route_id.startswith(WATCH_ROUTE_PREFIX):
                    # A watch re-reads and filters on its own task; the owning
                    # session only hears of it as a notice (see _watch_notice).
                    self.router.on_session_idle(d.session)
                    if self.watches is not None:
                        self.watches.on_changed(d.route_id, uris)
                    continue
                if d.route_id in self.staged:
                    # Same for a staged declared route: its notices come back as RouteNotice.
                    self.router.on_session_idle(d.session)
                    if self.watches is not None:
                        self.watches.on_route_changed(d.route_id, [(e.uri, e.server) for e in d.events])
                    continue
                oldest = min(e.first_seen for e in d.events) if d.events else now
                self.telemetry.observe("event_to_agent", now - oldest, route=d.route_id)
                self._deliver_to_session(
                    now, d.session, render_delivery(d.events), route=d.route_id, origin=d.events
                )
        if self.route_notices:
            self._spawn_route_notices(now)

    def _session_idle(self, session: str) -> bool:
        agent_id = self.sessions.get(session)
        if agent_id is None:
            return True  # a named session that does not run yet starts on delivery
        agent = self.agents[agent_id]
        return agent.phase is AgentPhase.IDLE

    def _deliver_to_session(
        self,
        now: float,
        session: str,
        text: str,
        *,
        route: str | None,
        origin: list[QueuedEvent] | None = None,
    ) -> None:
        agent_id = self.sessions.get(session)
        if agent_id is None:
            instruction = f"{self.instruction}\n\n{text}" if self.instruction else text
            started = self._spawn(
                now, role="session", instruction=instruction, route=route, session=session, warm=True
            )
            started.origin = list(origin or ())
            self.telemetry.emit("session.deliver", session=session, route=route, started=True)
            return
        agent = self.agents[agent_id]
        self.telemetry.emit("session.deliver", session=session, route=route, agent=agent.id)
        self._real_work(agent)
        self._resume(agent, text)

    def _real_work(self, agent: Agent) -> None:
        """A delivery reached ``agent``: for the warm loop root that is real work (resets the idle backoff)."""
        if agent.role == "root" and isinstance(self.driver, modes.Loop):
            self.driver.on_delivery()

    def _resume(self, agent: Agent, text: str) -> None:
        """Answer an idle agent's held turn end with its next input (IDLE -> TURN)."""
        held = agent.held
        agent.held = None
        agent.phase = AgentPhase.TURN
        agent.turn_started_at = trio.current_time()
        if held is not None:
            # The next turn's trace context (tracing on): the child's tool calls carry it.
            tracing = active_tracing()
            traceparent = tracing.traceparent(agent.id) if tracing is not None else None
            held.reply.answer(
                NextTurn(id=held.end.id, action="continue", input=text, traceparent=traceparent)
            )

    # -- agents -----------------------------------------------------------------------

    def _next_id(self) -> str:
        self._seq += 1
        # Unnamed agents use their id as session name (self-subscribe, watches);
        # skip ids a restored watch session already holds.
        while f"a{self._seq}" in self.watch_sessions:
            self._seq += 1
        return f"a{self._seq}"

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
        agent = Agent(
            id=self._next_id(),
            role=role,
            instruction=instruction,
            route=route,
            session=session,
            warm=warm,
            started_at=now,
            turn_started_at=now,
        )
        self.agents[agent.id] = agent
        if session is not None:
            self.sessions[session] = agent.id
        self.telemetry.emit("subagent.spawn", agent=agent.id, role=role, route=route, session=session)
        self.hooks.spawn(agent)
        return agent

    def _child_message(self, msg: ChildMessage, now: float) -> None:
        agent = self.agents.get(msg.agent)
        reply = Reply[dict[str, Any]](msg.payload.get("reply"))
        if agent is None:
            reply.answer({"error": f"unknown agent {msg.agent!r}"})
            return
        if msg.kind == "self_tool":
            self._self_tool(agent, msg.payload, reply, now)

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
        if agent is None or agent.phase not in (AgentPhase.STARTING, AgentPhase.TURN):
            self._refuse(ev, agent)
            return
        report = ev.report
        if agent.phase is AgentPhase.STARTING:
            agent.phase = AgentPhase.TURN  # STARTING -> TURN
        self.budget.charge(
            input_tokens=report.input_tokens,
            output_tokens=report.output_tokens,
            steps=report.steps,
            cost_usd=report.cost_usd,
        )
        self.telemetry.incr("input_tokens", report.input_tokens)
        self.telemetry.incr("output_tokens", report.output_tokens)
        self.telemetry.incr("cached_input_tokens", report.cached_input_tokens)
        self.telemetry.incr("cache_creation_input_tokens", report.cache_creation_input_tokens)
        self.telemetry.incr("model_calls")
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
        if report.cost_usd is None:
            self.telemetry.incr("unpriced_calls")
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
        if agent is None or agent.phase not in (AgentPhase.STARTING, AgentPhase.TURN):
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
        self.telemetry.incr("turns")
        self.telemetry.emit("turn.end", agent=agent.id, status=status, route=agent.route, idle=idle)
        hold = self._should_hold(agent, status)
        if hold:
            agent.phase = AgentPhase.IDLE  # TURN -> IDLE
            agent.held = ev
        else:
            agent.phase = AgentPhase.EXITING  # TURN -> EXITING
            ev.reply.answer(NextTurn(id=end.id, action="exit"))
        self._after_terminal(agent, status, idle, now)
        if agent.notices and agent.phase is AgentPhase.IDLE and agent.held is not None:
            self._resume_with_notices(agent)

    def _should_hold(self, agent: Agent, status: TerminalStatus) -> bool:
        if self.phase is not Phase.RUNNING or self.budget.spent() is not None or self.fatal_infra:
            return False
        watched = self._owns_watches(agent)
        if status in ("crashed", "refused", "deadline") and not agent.subscriptions and not watched:
            return False
        return agent.warm or bool(agent.subscriptions) or watched

    def _owns_watches(self, agent: Agent) -> bool:
        return agent.session is not None and bool(self.watch_sessions.get(agent.session))

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

    def _apply_disposition(self, agent: Agent, disposition: Any, now: float) -> None:
        if isinstance(disposition, modes.ReEnterAfter):
            self.reenter_at = now + disposition.delay
            self.telemetry.emit("loop.reenter", after_s=disposition.delay)
        elif isinstance(disposition, modes.Restart):
            if self.governor.record_restart(now):
                self.telemetry.incr("restarts")
                self.agent_restarts += 1
                delay = self.governor.restart_delay()
                self.telemetry.emit("subagent.restart", agent=agent.id, after_s=delay)
                # The governor's backoff (0.5 s, 1 s, 2 s ...): a crashing root must
                # not be restarted hot until the breaker trips.
                self.reenter_at = now + delay
            else:
                self.breaker_open = True
                self.telemetry.emit("governor.breaker_open", agent=agent.id)

    def _reenter(self, now: float) -> None:
        if self.phase is not Phase.RUNNING or self.budget.spent() is not None:
            return
        root_id = self.sessions.get("root")
        root = self.agents.get(root_id) if root_id else None
        if root is not None and root.phase is AgentPhase.IDLE:
            self.telemetry.emit("loop.shift", agent=root.id, warm=True)
            self._resume(root, self.instruction)
            return
        if root is not None and root.phase is not AgentPhase.EXITED:
            return  # still busy: the next terminal status decides again
        if root is not None:
            self.sessions.pop("root", None)
        self.telemetry.emit("loop.shift", warm=False)
        self._spawn_root(now)

    def _child_exited(self, ev: ChildExited, now: float) -> None:
        agent = self.agents.get(ev.agent)
        if agent is None:
            return
        was = agent.phase
        agent.phase = AgentPhase.EXITED
        if agent.held is not None:
            agent.held = None
        if agent.notices:
            self.telemetry.emit(
                "watch.notice_dropped",
                agent=agent.id,
                watch=[n.watch for n in agent.notices],
                reason="agent exited",
            )
            agent.notices.clear()
        if agent.session is not None and self.sessions.get(agent.session) == agent.id:
            del self.sessions[agent.session]
            if ev.spawned:
                # A session whose agent never started keeps its watches: the
                # notice it was started for starts it again (below).
                self._stop_watches(agent.session)
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
            if isinstance(notice, RouteNotice):
                self._route_notice(notice, now)
            else:
                self._watch_notice(notice, now)

    # -- self tools -------------------------------------------------------------------

    def _self_tool(self, agent: Agent, p: dict[str, Any], reply: Reply[dict[str, Any]], now: float) -> None:
        op = p.get("op")
        if op in ("watch_session", "watch_route_add", "watch_route_remove"):
            self._watch_op(agent, op, p, reply)
            return
        uri = str(p.get("uri", ""))
        server = p.get("server")
        if op == "subscribe":
            from agentd.errors import RouteError
            from agentd.triggers.router import Continue, RouteSpec

            session = agent.session or agent.id
            try:
                route = self.router.add_route(
                    RouteSpec(
                        match=uri, disposition=Continue(session=session), route_id=f"self:{session}:{uri}"
                    ),
                    front=True,
                    owner=session,
                )
            except (RouteError, ValueError) as exc:  # ValueError: a URI that is no valid match
                reply.answer({"error": str(exc)})
                return
            if route.id.startswith(WATCH_ROUTE_PREFIX):
                reply.answer(
                    {
                        "error": (
                            f"{uri!r} is already watched by this session (route {route.id!r}); its changes arrive as "
                            "watch notices: call watch_stop first to be woken by every change instead"
                        )
                    }
                )
                return
            if agent.session is None:
                agent.session = session
                self.sessions[session] = agent.id
            agent.subscriptions.add(uri)
            if server:
                agent.subscription_servers[uri] = str(server)
            self.telemetry.emit("self.subscribe", agent=agent.id, uri=uri, server=server)
            reply.answer({"ok": True})
        elif op == "unsubscribe":
            existed = uri in agent.subscriptions
            self._drop_self_route(agent, uri)
            agent.subscription_servers.pop(uri, None)
            # A declared subscription (or another route or watch) still needs
            # the upstream subscription: the hub must keep it, and the URI goes
            # back to its declared route (rfcs/0134).
            needed = server is not None and self.uri_needed(str(server), uri)
            reply.answer({"ok": existed, "needed": needed})
            self.telemetry.emit("self.unsubscribe", agent=agent.id, uri=uri, server=server, kept=needed)
        else:
            reply.answer({"error": f"unknown self-tool operation {op!r}"})

    # -- watches ----------------------------------------------------------------------

    def _watch_op(self, agent: Agent, op: str, p: dict[str, Any], reply: Reply[dict[str, Any]]) -> None:
        """``watch_session`` / ``watch_route_add`` / ``watch_route_remove`` for the hub (answered at once)."""
        from agentd.errors import RouteError

        session = agent.session or agent.id
        if op == "watch_session":
            if p.get("register") and agent.session is None:
                agent.session = session
                self.sessions[session] = agent.id
            reply.answer({"session": session})
        elif op == "watch_route_add":
            try:
                self.add_watch_route(str(p["session"]), str(p["name"]), str(p["uri"]))
            except (RouteError, ValueError) as exc:  # ValueError: a URI that is no valid match
                reply.answer({"error": str(exc)})
                return
            reply.answer({"ok": True})
        else:
            self.remove_watch_route(str(p["session"]), str(p["name"]))
            reply.answer({"ok": True, "needed": self.uri_needed(str(p.get("server")), str(p["uri"]))})

    def add_watch_route(self, session: str, name: str, uri: str) -> str:
        """Add the exact, front route ``watch:<session>:<name>`` for ``uri``; return its id.

        Several watches may share a URI (the manager fans a change out to all
        of them), but a URI a session subscribed to with ``subscribe`` is
        refused: one URI, one kind of owner, stated in the error.

        Raises:
            RouteError: the URI has a self-subscribe route, or the id is taken.
        """
        from agentd.errors import RouteError
        from agentd.triggers.router import Continue, RouteSpec

        for r in self.router.routes():
            if r.glob.exact and r.glob.literal == uri and r.id.startswith("self:"):
                raise RouteError(
                    f"{uri!r} is already subscribed by session {r.owner!r} (route {r.id!r}); a URI is either "
                    "subscribed or watched: call unsubscribe first (a watch also wakes you, with a filtered notice)"
                )
        route_id = f"{WATCH_ROUTE_PREFIX}{session}:{name}"
        route = self.router.add_route(
            RouteSpec(
                match=uri, disposition=Continue(session=route_id), debounce=0.0, route_id=route_id, exact=True
            ),
            front=True,
        )
        route.owner = session  # a subscribe from another session names this owner
        self.watch_sessions.setdefault(session, set()).add(name)
        return route_id

    def remove_watch_route(self, session: str, name: str) -> None:
        """Remove a watch's route (idempotent)."""
        names = self.watch_sessions.get(session)
        if names is not None:
            names.discard(name)
            if not names:
                del self.watch_sessions[session]
        if self.router.get(f"{WATCH_ROUTE_PREFIX}{session}:{name}") is not None:
            self.router.remove_route(f"{WATCH_ROUTE_PREFIX}{session}:{name}")

    def uri_needed(self, server: str, uri: str) -> bool:
        """Whether a route or a declared subscription other than a watch still needs ``uri``."""
        if (server, uri) in self.declared:
            return True
        return any(r.glob.exact and r.glob.literal == uri for r in self.router.routes())

    def _stop_watches(self, session: str) -> None:
        """The session's agent exited: its watch routes go, and the manager stops the watches."""
        names = self.watch_sessions.pop(session, set())
        for name in sorted(names):
            route_id = f"{WATCH_ROUTE_PREFIX}{session}:{name}"
            if self.router.get(route_id) is not None:
                self.router.remove_route(route_id)
        if names and self.watches is not None:
            self.watches.on_owner_exited(session, self.uri_needed)

    def _watch_notice(self, ev: WatchNotice, now: float) -> None:
        """Deliver a watch notice into its session: now if idle, after the turn if busy, or start it."""
        fields = {"session": ev.session, "watch": ev.watch or None, "uri": ev.uri or None, "kind": ev.kind}
        route = ev.route if isinstance(ev, RouteNotice) else None
        if route is None and ev.kind == "notice" and ev.watch not in self.watch_sessions.get(ev.session, ()):
            self.telemetry.emit("watch.notice_dropped", **fields, reason="the watch was stopped")
            return
        agent_id = self.sessions.get(ev.session)
        if agent_id is None:
            if self.phase is not Phase.RUNNING or self.budget.spent() is not None:
                self.telemetry.emit(
                    "watch.notice_dropped", **fields, reason="no new turns (draining or budget)"
                )
                return
            self._deliver_to_session(now, ev.session, ev.text, route=route)
            started = self.agents[self.sessions[ev.session]]
            started.notice_turn = [ev]
            return
        agent = self.agents[agent_id]
        if agent.phase is AgentPhase.IDLE and agent.held is not None:
            self.telemetry.emit(
                "session.deliver", session=ev.session, route=route, agent=agent.id, watch=ev.watch
            )
            agent.notice_turn = [ev]
            self._real_work(agent)
            self._resume(agent, ev.text)
        elif agent.phase in (AgentPhase.STARTING, AgentPhase.TURN):
            agent.notices.append(ev)  # one follow-up turn carries every notice queued meanwhile
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
        self._spawn_route_notices(now)

    def _spawn_route_notices(self, now: float) -> None:
        """Start one agent per staged spawn route with a free slot, carrying every notice it queued.

        A route's slots are its ``max_inflight``: agents it started that have
        not ended their last turn (the router's rule for spawn routes).
        """
        for route_id, pending in list(self.route_notices.items()):
            staged = self.staged[route_id]
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

    def _resume_with_notices(self, agent: Agent) -> None:
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
        self._resume(agent, "\n\n".join(n.text for n in pending))

    def _release_upstream(self, agent: Agent, uri: str) -> None:
        """The agent that subscribed ``uri`` is gone: drop the upstream subscription unless still needed."""
        server = agent.subscription_servers.pop(uri, None)
        if server is None or self.uri_needed(server, uri):
            return
        if self.watches is not None and self.watches.needs(server, uri):
            return
        self.telemetry.emit("self.unsubscribe", agent=agent.id, uri=uri, server=server, reason="owner exited")
        self.hooks.unsubscribe(server, uri)

    def _drop_self_route(self, agent: Agent, uri: str) -> None:
        session = agent.session or agent.id
        agent.subscriptions.discard(uri)
        from agentd.errors import RouteError

        # remove_route raises RouteError (not KeyError) for an unknown id: an
        # unsubscribe of a URI the agent never subscribed must not crash the reactor.
        with contextlib.suppress(RouteError):
            self.router.remove_route(f"self:{session}:{uri}")

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
                held, agent.held = agent.held, None
                agent.phase = AgentPhase.EXITING  # IDLE -> EXITING
                held.reply.answer(NextTurn(id=held.end.id, action="exit"))

    def _server_state(self, ev: ServerStateChanged) -> None:
        self.server_states[ev.server] = ev.state
        if ev.state is ServerState.RESTARTING:
            self.server_restarts[ev.server] += 1
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


def render_delivery(events: list[QueuedEvent]) -> str:
    """The user turn a continue delivery becomes."""
    lines = ["These resources changed (re-read what you need; act on the current state):"]
    for e in events:
        tag = "possibly changed" if e.kind == "synthetic" else e.kind
        server = f" on {e.server}" if e.server else ""
        lines.append(f"- {e.uri}{server} ({tag})")
    return "\n".join(lines)
