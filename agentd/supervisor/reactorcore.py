"""The reactor's state, its views (readiness, ``/metrics``, the driver's view)
and the steps every part of it uses: start or resume a session, spawn an
agent, release idle agents.

The reactor is one object whose handlers are grouped by job in modules that
build on each other, each adding the handlers of one job to the state below
it: :mod:`~agentd.supervisor.reactorcore` (state, views, spawn and resume)
< :mod:`~agentd.supervisor.notices` (watch and staged-route notices)
< :mod:`~agentd.supervisor.selftools` (the self-tool requests)
< :mod:`~agentd.supervisor.turns` (usage, turn ends, root dispositions, exits)
< :mod:`~agentd.supervisor.delivery` (changes in, deliveries out, backpressure, clock fires)
< :mod:`~agentd.supervisor.drain` (signals, draining and reaping)
< :mod:`~agentd.supervisor.reactor` (the loop and the dispatch). They share the
reactor's state on purpose (one task, one owner: no locks, no copies); only
the reactor's own task calls any of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import trio

from agentd.counters import RunCounters
from agentd.events import (
    Notice,
    ReactorEvent,
    RouteNotice,
)
from agentd.exitcodes import TerminalStatus, code_for_status
from agentd.metrics import MetricsSnapshot
from agentd.selfmcp.protocol import NextTurn
from agentd.supervisor.agents import Agent, AgentPhase, AgentRole, AgentTable
from agentd.supervisor.backpressure import Backpressure
from agentd.supervisor.budget import Budget
from agentd.supervisor.governor import RestartGovernor
from agentd.supervisor.readiness import Readiness
from agentd.supervisor.runstatus import RunStatus
from agentd.supervisor.seams import (
    Clock,
    Declared,
    Hooks,
    NoDeclared,
    SessionResume,
    WatchHooks,
    open_channel,
)
from agentd.supervisor.sessionroutes import SessionRoutes
from agentd.supervisor.subscriptions import Subscriptions
from agentd.telemetry import Telemetry
from agentd.tracing import active as active_tracing
from agentd.triggers import mode as modes
from agentd.triggers.router import (
    QueuedEvent,
    Route,
    Router,
)
from agentd.watches.stage import StagedRoute


class ReactorCore:
    """The reactor's state and the steps every part uses (see :class:`agentd.supervisor.reactor.Reactor`)."""

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
        subscriptions: Subscriptions | None = None,
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
        self._declared: Declared = declared or NoDeclared()
        if subscriptions is None:  # nothing declared: routes and watches alone need subscriptions
            subscriptions = (
                Subscriptions((), router, watched=watches.needs)
                if watches is not None
                else Subscriptions((), router)
            )
        self.subscriptions = subscriptions
        """Which upstream subscriptions are wanted and why (pure; the declared shell shares it)."""
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
        self.status = RunStatus(budget, self.agents)
        """The run's phase and the facts the driver's exit rules read."""
        self.readiness = Readiness(
            required=required,
            subscriptions=subscriptions,
            status=self.status,
            telemetry=telemetry,
            notify=hooks.readiness,
        )
        """Server, subscription and zygote states; the start gate; ``/readyz``."""
        self.counters = counters if counters is not None else RunCounters()
        """The run's counts: ``/metrics`` and ``supervisor.exit`` read this one object."""
        self.backpressure = Backpressure(router, hooks.pause, telemetry)
        """Which servers are paused for which blocked routes (``block`` overflow, rfcs/0131)."""
        self.route_notices: dict[str, list[RouteNotice]] = {}
        """Spawn-route notices waiting for a free ``max_inflight`` slot, by route id."""
        self._startup_notices: dict[str | None, list[Notice]] = {}
        """Notices known before the first turn (the watch restore), by session: the first turn
        of a session the reactor starts itself carries them (see :meth:`queue_startup_notices`)."""

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
            histograms=self.telemetry.histograms.snapshot(),
        )

    def uri_needed(self, server: str, uri: str) -> bool:
        """Whether a route or a declared subscription other than a watch still needs ``uri``."""
        return self.subscriptions.needed(server, uri)

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

    def _exit_event(
        self, agent: Agent, status: TerminalStatus, returncode: int | None, **extra: object
    ) -> None:
        """``subagent.exit`` for ``agent`` (exactly one per ``subagent.spawn``)."""
        self.telemetry.emit(
            "subagent.exit",
            agent=agent.id,
            status=status,
            returncode=returncode,
            exit_code=int(code_for_status(status, partial=bool(agent.text.strip()))),
            **extra,
        )

    def _release_idle(self) -> None:
        """Tell every idle agent (its turn-end held) to exit."""
        for agent in self.live_agents():
            if agent.phase is AgentPhase.IDLE and agent.held is not None:
                held = agent.exiting()  # IDLE -> EXITING
                if held is not None:
                    held.reply.answer(NextTurn(id=held.end.id, action="exit"))
