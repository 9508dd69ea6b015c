"""The reactor's answer to a model call's usage report: charge the budget, count, and say whether to proceed.

A report is charged to the tree-wide budget and the run's counters, written
as ``model.call`` (and the ``assistant`` step), and answered with a verdict;
the first report that spends the budget writes ``budget.exhausted`` and
releases the idle sessions. :func:`refuse` is the reactor's guard against a
report the agent's phase cannot produce (usage here, turn ends in
:mod:`agentd.supervisor.loop.turns`).
"""

from __future__ import annotations

from dataclasses import dataclass

from agentd.events import TurnEnded, UsageReported
from agentd.observe.counters import RunCounters
from agentd.observe.telemetry import Telemetry
from agentd.selfmcp.protocol import NextTurn, StopReason, UsageVerdict
from agentd.supervisor.loop.agents import NO_LIMITS, Agent, AgentTable, spent_limit
from agentd.supervisor.loop.budget import Budget
from agentd.supervisor.loop.runstatus import RunStatus
from agentd.supervisor.loop.spawner import Spawner


def reporting_agent(agents: AgentTable, ev: UsageReported | TurnEnded, telemetry: Telemetry) -> Agent | None:
    """The agent a usage report or turn end comes from, if it is mid-turn; otherwise the report is refused."""
    agent = agents.get(ev.agent)
    if agent is None or not agent.busy:
        refuse(ev, agent, telemetry)
        return None
    return agent


def refuse(ev: UsageReported | TurnEnded, agent: Agent | None, telemetry: Telemetry) -> None:
    """A report that cannot happen in the agent's phase (only a broken child sends one): stop it.

    Nothing of the report is applied; the child is told to stop (usage)
    or exit (turn end). The channel's protocol rules make this
    unreachable for an honest child; it is the reactor's own guard.
    """
    kind = "usage" if isinstance(ev, UsageReported) else "turn_end"
    telemetry.emit(
        "reactor.refused",
        agent=ev.agent,
        report=kind,
        phase=agent.phase.value if agent is not None else "unknown",
    )
    if isinstance(ev, UsageReported):
        ev.reply.answer(UsageVerdict(id=ev.report.id, proceed=False, reason="draining"))
    else:
        ev.reply.answer(NextTurn(id=ev.end.id, action="exit"))


@dataclass(frozen=True, slots=True, eq=False)
class Usage:
    """Charges usage reports and answers them with a verdict."""

    agents: AgentTable
    status: RunStatus
    """Whether ``budget.exhausted`` was written already."""
    budget: Budget
    counters: RunCounters
    spawner: Spawner
    """Releases the idle sessions once the budget is spent."""
    telemetry: Telemetry

    def report(self, ev: UsageReported, now: float) -> None:
        agent = reporting_agent(self.agents, ev, self.telemetry)
        if agent is None:
            return
        agent.begin_turn()  # STARTING -> TURN
        report = ev.report
        self.budget.charge(
            input_tokens=report.input_tokens,
            output_tokens=report.output_tokens,
            steps=report.steps,
            cost_usd=report.cost_usd,
        )
        tokens_used = report.input_tokens + report.output_tokens
        agent.charge(tokens=tokens_used, steps=report.steps, cost_usd=report.cost_usd)
        # What an agent spends counts against it and every agent above it (rfcs/0370).
        chain = list(self.agents.ancestors(agent)) if agent.parent is not None else []
        for a in (agent, *chain):
            a.charge_tree(tokens=tokens_used, steps=report.steps, cost_usd=report.cost_usd)
        self.counters.activity.model_call(now)
        self.counters.model_call(
            input_tokens=report.input_tokens,
            output_tokens=report.output_tokens,
            cached_input_tokens=report.cached_input_tokens,
            cache_creation_input_tokens=report.cache_creation_input_tokens,
            priced=report.cost_usd is not None,
        )
        telemetry = self.telemetry
        telemetry.observe("model_call", report.latency_ms / 1000, route=agent.route, provider=report.provider)
        # The step and model.call name the same model and token counts (in this order).
        model = {"provider": report.provider, "model": report.model}
        tokens = {
            "input_tokens": report.input_tokens,
            "output_tokens": report.output_tokens,
            "cached_input_tokens": report.cached_input_tokens,
        }
        who = {"agent": agent.id, "route": agent.route, "session": agent.session}
        telemetry.step(
            "assistant",
            **who,
            text=report.text,
            tool_calls=report.tool_calls,
            **model,
            latency_ms=report.latency_ms,
            **tokens,
            cost_usd=report.cost_usd,
        )
        telemetry.emit(
            "model.call",
            agent=agent.id,
            **model,
            **tokens,
            cache_creation_input_tokens=report.cache_creation_input_tokens,
            cost_usd="unknown" if report.cost_usd is None else report.cost_usd,
            latency_ms=round(report.latency_ms, 3),
        )
        spent = self.budget.spent()
        if spent is not None and self.status.report_budget():
            telemetry.emit("budget.exhausted", kind=spent, budget=self.budget.snapshot())
            # Nothing new will start, so idle warm sessions must exit too, or
            # the budget exit predicate (nothing running) never fires.
            self.spawner.release_idle()
        # The USD ceiling ends turns exactly as the token ceiling does (exhausted_tokens).
        reason: StopReason | None = "tokens" if spent == "usd" else spent
        if reason is None and self.budget.deadline_reached(now):
            reason = "deadline"
        if reason is None and (agent.parent is not None or agent.limits is not NO_LIMITS):
            own = spent_limit(agent, chain, now)
            reason = "tokens" if own == "usd" else own
            if own is not None:
                telemetry.emit("subagent.limit", agent=agent.id, limit=own, parent=agent.parent)
        ev.reply.answer(UsageVerdict(id=report.id, proceed=reason is None, reason=reason))
