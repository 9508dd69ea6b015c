"""The reactor's end: the drain a signal starts, and reaping every agent once the run ended.

The part owns no state: the drain's phase and deadline are the run
status's (:mod:`agentd.supervisor.loop.runstatus`), the agents the agent table's.
"""

from __future__ import annotations

import signal as _signal
from collections.abc import Callable
from dataclasses import dataclass

import trio

from agentd.core.exitcodes import ExitCode, TerminalStatus
from agentd.events import (
    Acknowledged,
    AgentLookup,
    AgentStart,
    ChildExited,
    HealthProbe,
    ReactorEvent,
    Refused,
    SelfSubscribe,
    SelfUnsubscribe,
    SignalReceived,
    TurnEnded,
    Unsubscribed,
    UsageReported,
    WatchRouteAdd,
    WatchRouteRemove,
    WatchSession,
)
from agentd.observe.telemetry import Telemetry
from agentd.selfmcp.protocol import NextTurn, UsageVerdict
from agentd.supervisor.loop.agents import Agent, AgentPhase, AgentTable
from agentd.supervisor.loop.runstatus import RunStatus
from agentd.supervisor.loop.seams import Phase
from agentd.supervisor.loop.spawner import Spawner

#: After the run ended, seconds an agent that was told to exit gets to do so
#: before the kill ladder: an agent exits within milliseconds of its answer.
REAP_EXIT_WAIT = 2.0

#: After the kill ladder started, seconds to wait for the remaining exits: the
#: tree's SIGTERM wait (2 s) plus its SIGKILL wait (2 s) plus slack.
REAP_KILL_WAIT = 5.0


@dataclass(frozen=True, slots=True, eq=False)
class Drain:
    """The reactor's end: the drain a signal starts, and reaping every agent once the run ended."""

    status: RunStatus
    agents: AgentTable
    spawner: Spawner
    kill_all: Callable[[], None]
    draining: Callable[[], None]
    telemetry: Telemetry
    grace: float
    keeps: Callable[[Agent], bool] = lambda agent: False
    """Agents a drain does not release while idle (a parent whose started agents still run)."""

    def signal(self, ev: SignalReceived, now: float) -> None:
        name = _signal.Signals(ev.signum).name
        if self.status.phase is Phase.DRAINING:
            self.telemetry.emit("drain.abort", signal=name)
            self.kill_all()
            self.status.force_exit()
            return
        self.status.begin_drain(now, self.grace)
        self.telemetry.emit("drain.start", signal=name, grace_s=self.grace, agents=len(self.agents.live()))
        self.draining()
        # A parent held for the agents it started exits once the last of them ended (children first).
        self.spawner.release_idle(keep_parents=self.keeps)

    def timed_out(self, now: float) -> bool:
        """The drain's grace is over with agents still running: kill them; the run ends with exit 143."""
        status = self.status
        if status.drain_deadline is None or now < status.drain_deadline or not self.agents.live():
            return False
        self.telemetry.emit("drain.timeout", grace_s=self.grace, agents=[a.id for a in self.agents.live()])
        self.kill_all()
        status.force_exit()
        return True

    async def reap(self, recv: trio.MemoryReceiveChannel[ReactorEvent]) -> None:
        """After the reactor's run returned: every spawned agent gets its ``subagent.exit`` (bounded).

        Agents told to exit get :data:`REAP_EXIT_WAIT` to do so; anything
        still running (mid-turn when the run ended: deadline, a failed
        required server, a second signal ...) is killed through the tree's
        kill ladder and awaited for at most :data:`REAP_KILL_WAIT`. An agent
        whose exit is not seen even then is reported with ``returncode``
        None, so ``subagent.spawn`` and ``subagent.exit`` always pair up.
        """
        code = self.status.exit_code
        self.spawner.release_idle()
        killing = any(a.phase is not AgentPhase.EXITING for a in self.agents.live())
        if killing:
            self.kill_all()
        deadline = trio.current_time() + (REAP_KILL_WAIT if killing else REAP_EXIT_WAIT)
        while self.agents.live():
            event: ReactorEvent | None = None
            with trio.move_on_at(deadline):
                event = await recv.receive()
            if event is None:
                if killing:
                    break
                killing = True
                self.kill_all()
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
                case SelfSubscribe() | WatchSession() | WatchRouteAdd() | AgentStart() | AgentLookup():
                    event.reply.answer(Refused("agentd is stopping"))
                case SelfUnsubscribe():
                    event.reply.answer(Unsubscribed(existed=False, needed=True))
                case WatchRouteRemove():
                    event.reply.answer(Acknowledged())
                case HealthProbe():
                    event.reply.set()
                case _:
                    pass  # nothing else matters once the run ended
        for agent in self.agents.live():
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
        # An agent another started that the supervisor was ending (its parent ended first).
        shown = "cancelled" if agent.cancel_reason is not None and status != "completed" else None
        if stopped:
            self.spawner.exit_event(agent, status, ev.returncode, shown=shown, stopped=True)
        else:
            self.spawner.exit_event(agent, status, ev.returncode, shown=shown)
        self.agents.forget(agent, trio.current_time())
