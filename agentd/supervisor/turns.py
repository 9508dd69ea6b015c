"""The reactor's handling of what agents report: usage, turn ends, exits, and the root's disposition.

Usage is charged to the budget and answered with a verdict; a turn end is
published, then held (the session stays warm) or answered with exit; the
driver decides what a root's terminal status means (re-enter, restart,
done); an exit releases the agent's session, routes and subscriptions and
counts a crash against the restart intensity. Part of the reactor (see
:mod:`agentd.supervisor.reactorcore`).
"""

from __future__ import annotations

from typing import assert_never

from agentd.events import (
    ChildExited,
    TurnEnded,
    UsageReported,
)
from agentd.exitcodes import TerminalStatus
from agentd.selfmcp.protocol import NextTurn, StopReason, UsageVerdict
from agentd.supervisor.agents import Agent, AgentPhase
from agentd.supervisor.selftools import SelfTools
from agentd.triggers import mode as modes


class Turns(SelfTools):
    """The reactor's handling of what agents report: usage, turn ends, exits, and the root's disposition."""

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
        if spent is not None and self.status.report_budget():
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
            self.status.record_fatal_infra(end.fatal_infra)
            self.telemetry.emit("model.fatal", agent=agent.id, error=end.fatal_infra)
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
        if not self.status.may_start_work() or self.status.fatal_infra:
            return False
        watched = self._owns_watches(agent)
        if status in ("crashed", "refused", "deadline") and not agent.subscriptions and not watched:
            return False
        return agent.warm or bool(agent.subscriptions) or watched

    def _owns_watches(self, agent: Agent) -> bool:
        return agent.session is not None and self.session_routes.has_session(agent.session)

    def _after_terminal(self, agent: Agent, status: TerminalStatus, idle: bool, now: float) -> None:
        if agent.role == "root":
            self.status.record_root_terminal(status, agent.text)
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
                self.status.schedule_reentry(now + disposition.delay)
                self.telemetry.emit("loop.reenter", after_s=disposition.delay)
            case modes.Restart():
                if self.governor.record_restart(now):
                    self.counters.agent_restart()
                    delay = self.governor.restart_delay()
                    self.telemetry.emit("subagent.restart", agent=agent.id, after_s=delay)
                    # The governor's backoff (0.5 s, 1 s, 2 s ...): a crashing root must
                    # not be restarted hot until the breaker trips.
                    self.status.schedule_reentry(now + delay)
                else:
                    self.status.open_breaker()
                    self.telemetry.emit("governor.breaker_open", agent=agent.id)
            case modes.Done() | modes.Quiesce():
                pass
            case _:
                assert_never(disposition)

    def _reenter(self, now: float) -> None:
        """A re-entry is due: the driver says whether the warm root continues or a fresh root starts."""
        if not self.status.may_start_work():
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
                    and self.status.may_start_work()
                    and self.status.fatal_infra is None
                ):
                    self.journals.end(agent.session)  # over for good; a drain or a kill keeps it
            # The router must not keep a dead session marked busy: the next
            # delivery for it starts a new session.
            self.router.on_session_idle(agent.session)
        for uri in sorted(agent.subscriptions):
            self._drop_self_route(agent, uri)
            self._release_upstream(agent, uri)
        crashed = was in (AgentPhase.STARTING, AgentPhase.TURN) or (
            was is AgentPhase.IDLE and self.status.running and ev.returncode not in (0, None)
        )
        status: TerminalStatus = "crashed" if crashed else (agent.status or "completed")
        self._exit_event(agent, status, ev.returncode, reason=ev.reason)
        if crashed:
            agent.status = "crashed"
            self._after_terminal(agent, "crashed", False, now)
            if not ev.spawned:
                self._requeue(agent, now)
            # Routed agents are not restarted (the next change re-triggers the
            # route: at-least-once by re-read), but every crash counts against
            # the restart intensity, so a crash loop opens the breaker (exit 1)
            # instead of spinning forever.
            if agent.role != "root" and self.status.running and not self.governor.record_restart(now):
                self.status.open_breaker()
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
