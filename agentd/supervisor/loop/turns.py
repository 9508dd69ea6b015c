"""The reactor's handling of what agents report: turn ends, exits, and the root's disposition.

A turn end is published, then held (the session stays warm) or answered with exit; the
driver decides what a root's terminal status means (re-enter, restart,
done), and whether the root's shift was idle: it changed nothing (no
state-changing tool call succeeded, the hub's :class:`~agentd.events.ToolChangedState`)
and carried no delivery (rfcs/0280). An exit releases the agent's session,
routes and subscriptions, counts a crash against the restart intensity,
and then the agent leaves the table (rfcs/0281). The part owns no state of
its own: it moves agents through the agent table and records the run's
facts (root status, fatal error, breaker, re-entry) in the run status.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import assert_never

from agentd.core.exitcodes import TerminalStatus
from agentd.events import (
    ChildExited,
    ToolChangedState,
    TurnEnded,
)
from agentd.observe.counters import RunCounters
from agentd.observe.telemetry import Telemetry
from agentd.selfmcp.protocol import NextTurn
from agentd.supervisor.loop.agents import Agent, AgentPhase, AgentTable
from agentd.supervisor.loop.governor import RestartGovernor
from agentd.supervisor.loop.notices import NoticeDesk
from agentd.supervisor.loop.runstatus import RunStatus
from agentd.supervisor.loop.selftools import SelfToolDesk
from agentd.supervisor.loop.spawner import Spawner
from agentd.supervisor.loop.subagents import SubagentDesk
from agentd.supervisor.loop.usage import reporting_agent
from agentd.triggers import mode as modes
from agentd.triggers.router import Router


@dataclass(frozen=True, slots=True, eq=False)
class Turns:
    """The reactor's handling of turn ends, exits and the root's disposition."""

    agents: AgentTable
    status: RunStatus
    counters: RunCounters
    governor: RestartGovernor
    driver: modes.Driver
    router: Router
    spawner: Spawner
    notices: NoticeDesk
    selftools: SelfToolDesk
    subagents: SubagentDesk
    publish: Callable[[Agent, TerminalStatus, str, bool], None]
    telemetry: Telemetry

    def turn_end(self, ev: TurnEnded, now: float) -> None:
        agent = reporting_agent(self.agents, ev, self.telemetry)
        if agent is None:
            return
        end = ev.end
        status: TerminalStatus = end.status
        text = end.text
        idle = end.idle
        answered = agent.end_turn(status, text)
        if end.fatal_infra:
            self.status.record_fatal_infra(end.fatal_infra)
            self.telemetry.emit("model.fatal", agent=agent.id, error=end.fatal_infra)
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
            self.publish(agent, status, text, idle)
        self.telemetry.observe("turn", now - agent.turn_started_at, route=agent.route)
        self.counters.turn()
        self.telemetry.emit("turn.end", agent=agent.id, status=status, route=agent.route, idle=idle)
        if self._should_hold(agent, status):
            agent.hold(ev)  # TURN -> IDLE
        else:
            agent.exiting()  # TURN -> EXITING
            ev.reply.answer(NextTurn(id=end.id, action="exit"))
            # Over for good: its running children go; if an agent started it, its completion is queued.
            self.subagents.ended(agent, status, now)
        # The driver's idle is the shift's, not the reply's: a shift that only talked changed nothing.
        self._after_terminal(agent, status, agent.idle_turn, now)
        if (
            agent.notices
            and agent.phase is AgentPhase.IDLE
            and agent.held is not None
            and self.status.may_start_work()
        ):
            self.notices.resume_with_notices(agent, now)

    def tool_changed_state(self, ev: ToolChangedState) -> None:
        """The hub saw a state-changing tool call of ``ev.agent`` succeed: its turn did work."""
        agent = self.agents.get(ev.agent)
        if agent is not None and agent.busy:
            agent.record_state_change()

    def _should_hold(self, agent: Agent, status: TerminalStatus) -> bool:
        if self.status.fatal_infra:
            return False
        if not self.status.may_start_work():
            # Draining, a parent waits for the agents it started, which finish their turns
            # (the last one's exit releases it): children stop before their parents (rfcs/0370).
            return not self.status.running and self.subagents.has_live_children(agent)
        watched = self.selftools.owns_watches(agent)
        if status in ("crashed", "refused", "deadline") and not agent.subscriptions and not watched:
            return False
        return agent.warm or bool(agent.subscriptions) or watched

    def _after_terminal(self, agent: Agent, status: TerminalStatus, idle: bool, now: float) -> None:
        if agent.role == "root" and self.driver.mode == "once" and agent.phase is AgentPhase.IDLE:
            # A once root held for the agents it started: its run goes on, their
            # completions are its next turns (rfcs/0370); the turn that ends with
            # nothing left to wait for is the root's terminal status.
            pass
        elif agent.role == "root":
            self.status.record_root_terminal(status, agent.text)
            disposition = self.driver.on_root_terminal(self.status.view(now), status, idle=idle, now=now)
            self._apply_disposition(agent, disposition, now, idle)
        elif agent.role == "spawn" and agent.route is not None and agent.release_slot():
            # The event this agent was spawned for is handled once its first
            # turn ends, even if it stays warm for its own subscriptions or
            # watches: the route's inflight slot is free again.
            self.router.on_spawn_done(agent.route)
        if agent.session is not None and agent.phase is AgentPhase.IDLE:
            self.router.on_session_idle(agent.session)

    def _apply_disposition(
        self, agent: Agent, disposition: modes.RootDisposition, now: float, idle: bool
    ) -> None:
        match disposition:
            case modes.ReEnterAfter():
                self.status.schedule_reentry(now + disposition.delay)
                self.telemetry.emit("loop.reenter", after_s=disposition.delay, idle=idle)
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

    def reenter(self, now: float) -> None:
        """A re-entry is due: the driver says whether the warm root continues or a fresh root starts."""
        if not self.status.may_start_work():
            return
        root = self.agents.session_agent("root")
        action = self.driver.reentry() if isinstance(self.driver, modes.Loop) else modes.SpawnRoot()
        if isinstance(action, modes.ContinueRoot) and root is not None and root.phase is AgentPhase.IDLE:
            self.telemetry.emit("loop.shift", agent=root.id, warm=True)
            self.spawner.shift_root(root, now)
            return
        if root is not None:
            return  # still busy: the next terminal status decides again
        self.telemetry.emit("loop.shift", warm=False)
        self.spawner.spawn_root(now)

    def child_exited(self, ev: ChildExited, now: float) -> None:
        agent = self.agents.get(ev.agent)
        if agent is None or not agent.alive:
            return
        was = agent.exited()
        if agent.notices:
            dropped = agent.take_notices()
            self.telemetry.emit(
                "watch.notice_dropped",
                agent=agent.id,
                watch=[n.watch for n in dropped],
                reason="agent exited",
            )
        if agent.session is not None and self.agents.release_session(agent):
            if ev.spawned:
                # A session whose agent never started keeps its watches: the
                # notice it was started for starts it again (below).
                self.selftools.stop_watches(agent.session)
                if self.status.may_start_work() and self.status.fatal_infra is None:
                    self.spawner.end_session(agent.session)  # over for good; a drain or a kill keeps it
            # The router must not keep a dead session marked busy: the next
            # delivery for it starts a new session.
            self.router.on_session_idle(agent.session)
        self.selftools.release(agent)
        # An idle agent was not told to exit. A started agent's unknown exit status (its zygote
        # died with it) is a crash too: its parent must not read "completed" for lost work.
        crashed = was in (AgentPhase.STARTING, AgentPhase.TURN) or (
            was is AgentPhase.IDLE
            and self.status.running
            and (ev.returncode not in (0, None) or (ev.returncode is None and agent.role == "child"))
        )
        status: TerminalStatus = "crashed" if crashed else (agent.status or "completed")
        final = self.subagents.final_status(agent, status)
        self.spawner.exit_event(agent, status, ev.returncode, shown=final, reason=ev.reason)
        self.subagents.ended(agent, final, now)
        if crashed:
            agent.crashed()
            self._after_terminal(agent, "crashed", False, now)
            if not ev.spawned:
                self._requeue(agent, now)
            # Routed agents are not restarted (the next change re-triggers the
            # route: at-least-once by re-read), but every crash counts against
            # the restart intensity, so a crash loop opens the breaker (exit 1)
            # instead of spinning forever.
            # A started agent's crash is its parent's data, not a crash loop of the daemon's.
            if (
                agent.role not in ("root", "child")
                and self.status.running
                and not self.governor.record_restart(now)
            ):
                self.status.open_breaker()
                self.telemetry.emit("governor.breaker_open", agent=agent.id, route=agent.route)
        self.agents.forget(agent, now)  # its exit is reported: only a bounded record stays
        self.subagents.gone(agent)

    def _requeue(self, agent: Agent, now: float) -> None:
        """An agent whose process never started: queue what it was started for again (at-least-once)."""
        origin, notices = agent.take_origin()
        for queued in origin:
            result = self.router.ingest(queued, now)
            self.telemetry.emit("route.requeued", agent=agent.id, route=result.route_id, uri=queued.uri)
        for notice in notices:
            self.telemetry.emit("route.requeued", agent=agent.id, session=notice.session, watch=notice.watch)
            self.notices.notice(notice, now)
