"""The reactor's handling of what agents report: usage, turn ends, exits, and the root's disposition.

Usage is charged to the budget and answered with a verdict; a turn end is
published, then held (the session stays warm) or answered with exit; the
driver decides what a root's terminal status means (re-enter, restart,
done); an exit releases the agent's session, routes and subscriptions and
counts a crash against the restart intensity. The part owns no state of
its own: it moves agents through the agent table and records the run's
facts (root status, fatal error, breaker, re-entry) in the run status.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import assert_never

from agentd.counters import RunCounters
from agentd.events import (
    ChildExited,
    TurnEnded,
    UsageReported,
)
from agentd.exitcodes import TerminalStatus
from agentd.selfmcp.protocol import NextTurn, StopReason, UsageVerdict
from agentd.supervisor.agents import Agent, AgentPhase, AgentTable
from agentd.supervisor.budget import Budget
from agentd.supervisor.governor import RestartGovernor
from agentd.supervisor.notices import NoticeDesk
from agentd.supervisor.runstatus import RunStatus
from agentd.supervisor.seams import SessionResume
from agentd.supervisor.selftools import SelfToolDesk
from agentd.supervisor.sessionroutes import SessionRoutes
from agentd.supervisor.spawner import Spawner
from agentd.telemetry import Telemetry
from agentd.triggers import mode as modes
from agentd.triggers.router import Router


class Turns:
    """The reactor's handling of what agents report: usage, turn ends, exits, and the root's disposition."""

    __slots__ = (
        "_agents",
        "_budget",
        "_counters",
        "_driver",
        "_governor",
        "_instruction",
        "_journals",
        "_notices",
        "_publish",
        "_router",
        "_selftools",
        "_session_routes",
        "_spawner",
        "_status",
        "_telemetry",
    )

    def __init__(
        self,
        *,
        agents: AgentTable,
        status: RunStatus,
        budget: Budget,
        counters: RunCounters,
        governor: RestartGovernor,
        driver: modes.Driver,
        router: Router,
        session_routes: SessionRoutes,
        spawner: Spawner,
        notices: NoticeDesk,
        selftools: SelfToolDesk,
        publish: Callable[[Agent, TerminalStatus, str, bool], None],
        telemetry: Telemetry,
        instruction: str,
        journals: SessionResume | None,
    ) -> None:
        self._agents = agents
        self._status = status
        self._budget = budget
        self._counters = counters
        self._governor = governor
        self._driver = driver
        self._router = router
        self._session_routes = session_routes
        self._spawner = spawner
        self._notices = notices
        self._selftools = selftools
        self._publish = publish
        self._telemetry = telemetry
        self._instruction = instruction
        self._journals = journals

    def _refuse(self, ev: UsageReported | TurnEnded, agent: Agent | None) -> None:
        """A report that cannot happen in the agent's phase (only a broken child sends one): stop it.

        Nothing of the report is applied; the child is told to stop (usage)
        or exit (turn end). The channel's protocol rules make this
        unreachable for an honest child; it is the reactor's own guard.
        """
        kind = "usage" if isinstance(ev, UsageReported) else "turn_end"
        self._telemetry.emit(
            "reactor.refused",
            agent=ev.agent,
            report=kind,
            phase=agent.phase.value if agent is not None else "unknown",
        )
        if isinstance(ev, UsageReported):
            ev.reply.answer(UsageVerdict(id=ev.report.id, proceed=False, reason="draining"))
        else:
            ev.reply.answer(NextTurn(id=ev.end.id, action="exit"))

    def usage(self, ev: UsageReported, now: float) -> None:
        agent = self._agents.get(ev.agent)
        if agent is None or not agent.busy:
            self._refuse(ev, agent)
            return
        report = ev.report
        agent.begin_turn()  # STARTING -> TURN
        self._budget.charge(
            input_tokens=report.input_tokens,
            output_tokens=report.output_tokens,
            steps=report.steps,
            cost_usd=report.cost_usd,
        )
        self._counters.model_call(
            input_tokens=report.input_tokens,
            output_tokens=report.output_tokens,
            cached_input_tokens=report.cached_input_tokens,
            cache_creation_input_tokens=report.cache_creation_input_tokens,
            priced=report.cost_usd is not None,
        )
        self._telemetry.observe(
            "model_call", report.latency_ms / 1000, route=agent.route, provider=report.provider
        )
        self._telemetry.step(
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
        self._telemetry.emit(
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
        spent = self._budget.spent()
        if spent is not None and self._status.report_budget():
            self._telemetry.emit("budget.exhausted", kind=spent, budget=self._budget.snapshot())
            # Nothing new will start, so idle warm sessions must exit too, or
            # the budget exit predicate (nothing running) never fires.
            self._spawner.release_idle()
        # The USD ceiling ends turns exactly as the token ceiling does (exhausted_tokens).
        reason: StopReason | None = "tokens" if spent == "usd" else spent
        if reason is None and self._budget.deadline_reached(now):
            reason = "deadline"
        ev.reply.answer(UsageVerdict(id=report.id, proceed=reason is None, reason=reason))

    def turn_end(self, ev: TurnEnded, now: float) -> None:
        agent = self._agents.get(ev.agent)
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
            self._status.record_fatal_infra(end.fatal_infra)
            self._telemetry.emit("model.fatal", agent=agent.id, error=end.fatal_infra)
        answered, agent.notice_turn = agent.notice_turn, []
        if idle and status == "completed":
            self._telemetry.emit(
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
            self._publish(agent, status, text, idle)
        self._telemetry.observe("turn", now - agent.turn_started_at, route=agent.route)
        self._counters.turn()
        self._telemetry.emit("turn.end", agent=agent.id, status=status, route=agent.route, idle=idle)
        if self._should_hold(agent, status):
            agent.hold(ev)  # TURN -> IDLE
        else:
            agent.exiting()  # TURN -> EXITING
            ev.reply.answer(NextTurn(id=end.id, action="exit"))
        self._after_terminal(agent, status, idle, now)
        if agent.notices and agent.phase is AgentPhase.IDLE and agent.held is not None:
            self._notices.resume_with_notices(agent, now)

    def _should_hold(self, agent: Agent, status: TerminalStatus) -> bool:
        if not self._status.may_start_work() or self._status.fatal_infra:
            return False
        watched = self._owns_watches(agent)
        if status in ("crashed", "refused", "deadline") and not agent.subscriptions and not watched:
            return False
        return agent.warm or bool(agent.subscriptions) or watched

    def _owns_watches(self, agent: Agent) -> bool:
        return agent.session is not None and self._session_routes.has_session(agent.session)

    def _after_terminal(self, agent: Agent, status: TerminalStatus, idle: bool, now: float) -> None:
        if agent.role == "root":
            self._status.record_root_terminal(status, agent.text)
            disposition = self._driver.on_root_terminal(self._status.view(now), status, idle=idle, now=now)
            self._apply_disposition(agent, disposition, now)
        elif agent.role == "spawn" and agent.route is not None and not agent.slot_released:
            # The event this agent was spawned for is handled once its first
            # turn ends, even if it stays warm for its own subscriptions or
            # watches: the route's inflight slot is free again.
            agent.slot_released = True
            self._router.on_spawn_done(agent.route)
        if agent.session is not None and agent.phase is AgentPhase.IDLE:
            self._router.on_session_idle(agent.session)

    def _apply_disposition(self, agent: Agent, disposition: modes.RootDisposition, now: float) -> None:
        match disposition:
            case modes.ReEnterAfter():
                self._status.schedule_reentry(now + disposition.delay)
                self._telemetry.emit("loop.reenter", after_s=disposition.delay)
            case modes.Restart():
                if self._governor.record_restart(now):
                    self._counters.agent_restart()
                    delay = self._governor.restart_delay()
                    self._telemetry.emit("subagent.restart", agent=agent.id, after_s=delay)
                    # The governor's backoff (0.5 s, 1 s, 2 s ...): a crashing root must
                    # not be restarted hot until the breaker trips.
                    self._status.schedule_reentry(now + delay)
                else:
                    self._status.open_breaker()
                    self._telemetry.emit("governor.breaker_open", agent=agent.id)
            case modes.Done() | modes.Quiesce():
                pass
            case _:
                assert_never(disposition)

    def reenter(self, now: float) -> None:
        """A re-entry is due: the driver says whether the warm root continues or a fresh root starts."""
        if not self._status.may_start_work():
            return
        root = self._agents.session_agent("root")
        action = self._driver.reentry() if isinstance(self._driver, modes.Loop) else modes.SpawnRoot()
        if isinstance(action, modes.ContinueRoot) and root is not None and root.phase is AgentPhase.IDLE:
            self._telemetry.emit("loop.shift", agent=root.id, warm=True)
            self._spawner.resume_shift(root, self._instruction, now)
            return
        if root is not None:
            return  # still busy: the next terminal status decides again
        self._telemetry.emit("loop.shift", warm=False)
        self._spawner.spawn_root(now)

    def child_exited(self, ev: ChildExited, now: float) -> None:
        agent = self._agents.get(ev.agent)
        if agent is None or not agent.alive:
            return
        was = agent.exited()
        if agent.notices:
            self._telemetry.emit(
                "watch.notice_dropped",
                agent=agent.id,
                watch=[n.watch for n in agent.notices],
                reason="agent exited",
            )
            agent.notices.clear()
        if agent.session is not None and self._agents.release_session(agent):
            if ev.spawned:
                # A session whose agent never started keeps its watches: the
                # notice it was started for starts it again (below).
                self._selftools.stop_watches(agent.session)
                if (
                    self._journals is not None
                    and self._status.may_start_work()
                    and self._status.fatal_infra is None
                ):
                    self._journals.end(agent.session)  # over for good; a drain or a kill keeps it
            # The router must not keep a dead session marked busy: the next
            # delivery for it starts a new session.
            self._router.on_session_idle(agent.session)
        self._selftools.release(agent)
        crashed = was in (AgentPhase.STARTING, AgentPhase.TURN) or (
            was is AgentPhase.IDLE and self._status.running and ev.returncode not in (0, None)
        )
        status: TerminalStatus = "crashed" if crashed else (agent.status or "completed")
        self._spawner.exit_event(agent, status, ev.returncode, reason=ev.reason)
        if crashed:
            agent.status = "crashed"
            self._after_terminal(agent, "crashed", False, now)
            if not ev.spawned:
                self._requeue(agent, now)
            # Routed agents are not restarted (the next change re-triggers the
            # route: at-least-once by re-read), but every crash counts against
            # the restart intensity, so a crash loop opens the breaker (exit 1)
            # instead of spinning forever.
            if agent.role != "root" and self._status.running and not self._governor.record_restart(now):
                self._status.open_breaker()
                self._telemetry.emit("governor.breaker_open", agent=agent.id, route=agent.route)

    def _requeue(self, agent: Agent, now: float) -> None:
        """An agent whose process never started: queue what it was started for again (at-least-once)."""
        origin, agent.origin = agent.origin, []
        for queued in origin:
            result = self._router.ingest(queued, now)
            self._telemetry.emit("route.requeued", agent=agent.id, route=result.route_id, uri=queued.uri)
        notices, agent.notice_turn = agent.notice_turn, []
        for notice in notices:
            self._telemetry.emit("route.requeued", agent=agent.id, session=notice.session, watch=notice.watch)
            self._notices.notice(notice, now)
