"""The reactor's spawner: start an agent, give a session its next turn, release idle agents.

Every other part that starts or resumes an agent goes through it, so
``subagent.spawn``, ``session.deliver`` (for a delivery) and ``subagent.exit``
are written in one place each. It owns no state: the agents live in the
agent table (:mod:`agentd.supervisor.loop.agents`), which it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agentd.core.exitcodes import TerminalStatus, code_for_status
from agentd.events import Notice
from agentd.observe.telemetry import Telemetry
from agentd.observe.tracing import active as active_tracing
from agentd.selfmcp.protocol import NextTurn
from agentd.supervisor.loop.agents import Agent, AgentPhase, AgentRole, AgentTable, ChildTraits
from agentd.supervisor.loop.seams import SessionResume
from agentd.triggers import mode as modes
from agentd.triggers.router import QueuedEvent


@dataclass(frozen=True, slots=True, eq=False)
class Spawner:
    """Starts agents (through the ``spawn`` hook), resumes idle ones, releases idle ones."""

    agents: AgentTable
    spawn_hook: Callable[[Agent], None]
    driver: modes.Driver
    journals: SessionResume | None
    telemetry: Telemetry
    instruction: str
    """The root instruction; a fresh session's first turn starts with it too."""
    warm_root: bool
    """``loop --session warm``: the root is the warm session ``root``."""

    @property
    def root_session(self) -> str | None:
        """The loop's warm root is the session ``root``; any other root has no session."""
        return "root" if self.warm_root else None

    def session_idle(self, session: str) -> bool:
        """Whether a delivery may go to ``session`` now (the router asks)."""
        agent = self.agents.session_agent(session)
        # A named session that does not run yet starts on delivery.
        return agent is None or agent.phase is AgentPhase.IDLE

    def deliver_to_session(
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
            started = self.spawn(now, role="session", instruction=instruction, route=route, session=session)
            started.started_for(list(origin or ()))
            started.woken(route, tuple(e.uri for e in origin or ()), now)
            started.record_delivery()
            self.telemetry.emit("session.deliver", session=session, route=route, started=True)
            return started
        self.telemetry.emit("session.deliver", session=session, route=route, agent=agent.id)
        self.resume(agent, text, now)
        agent.woken(route, tuple(e.uri for e in origin or ()), now)
        return agent

    def resume(self, agent: Agent, text: str, now: float) -> None:
        """Answer an idle agent's held turn end with a delivery (IDLE -> TURN).

        A delivery to the warm loop root is real work: it resets the loop's
        idle backoff, and the turn it starts is not idle (rfcs/0280).
        """
        if agent.role == "root" and isinstance(self.driver, modes.Loop):
            self.driver.on_delivery()
        self._answer(agent, text, now, delivery=True)

    def shift_root(self, root: Agent, now: float) -> None:
        """The loop's next shift for its idle warm root (not a delivery: the idle backoff stays)."""
        self._answer(root, self.instruction, now, delivery=False)

    def end_session(self, session: str) -> None:
        """The session is over for good (its agent exited while agentd runs on): forget its journal."""
        if self.journals is not None:
            self.journals.end(session)

    def _answer(self, agent: Agent, text: str, now: float, *, delivery: bool) -> None:
        held = agent.resume(now, delivery=delivery)
        if held is not None:
            # The next turn's trace context (tracing on): the child's tool calls carry it.
            tracing = active_tracing()
            traceparent = tracing.traceparent(agent.id) if tracing is not None else None
            held.reply.answer(
                NextTurn(id=held.end.id, action="continue", input=text, traceparent=traceparent)
            )

    def spawn_root(self, now: float, folded: Sequence[Notice] = ()) -> None:
        """Start the mode's root; ``folded`` notices (the watch restore) ride in its first turn."""
        session = self.root_session
        # The restore notice rides in the root's first turn: one turn, not two.
        instruction = "\n\n".join(t for t in [self.instruction, *(n.text for n in folded)] if t)
        agent = self.spawn(now, role="root", instruction=instruction, session=session)
        if folded:
            agent.answering(list(folded))
            agent.record_delivery()
            self.telemetry.emit(
                "session.deliver",
                session=session,
                route=None,
                agent=agent.id,
                watch=[n.watch for n in folded],
            )

    def spawn(
        self,
        now: float,
        role: AgentRole,
        instruction: str,
        *,
        route: str | None = None,
        session: str | None = None,
        parent: Agent | None = None,
        traits: ChildTraits | None = None,
    ) -> Agent:
        """A new agent in the table, started through the ``spawn`` hook (``subagent.spawn``).

        An agent that holds a session is warm (held between turns instead of exiting).
        ``parent`` and ``traits``: an agent another agent started (rfcs/0370).
        """
        warm = session is not None
        agent = self.agents.new(
            role=role,
            instruction=instruction,
            route=route,
            session=session,
            warm=warm,
            now=now,
            parent=parent,
            traits=traits,
        )
        restored = self.journals.resumable(session) if self.journals is not None and session else None
        for uri, server in restored or ():
            # A restored session owns the self-subscriptions it had (their routes exist already).
            agent.subscribe(uri, server or None)
        self.telemetry.emit(
            "subagent.spawn",
            agent=agent.id,
            role=role,
            route=route,
            session=session,
            **(
                {"parent": agent.parent, "depth": agent.depth, "type": agent.type}
                if parent is not None
                else {}
            ),
        )
        self.spawn_hook(agent)
        return agent

    def exit_event(
        self,
        agent: Agent,
        status: TerminalStatus,
        returncode: int | None,
        *,
        shown: str | None = None,
        **extra: object,
    ) -> None:
        """``subagent.exit`` for ``agent`` (exactly one per ``subagent.spawn``).

        ``shown``: the status to write when the supervisor ended it (``cancelled``,
        ``deadline``: rfcs/0370); the exit code is still ``status``'s.
        """
        self.telemetry.emit(
            "subagent.exit",
            agent=agent.id,
            status=shown or status,
            returncode=returncode,
            exit_code=int(code_for_status(status, partial=bool(agent.text.strip()))),
            **extra,
        )

    def release_idle(self, *, keep_parents: Callable[[Agent], bool] | None = None) -> None:
        """Tell every idle agent (its turn-end held) to exit.

        ``keep_parents``: agents for which it answers True stay (a drain keeps a
        parent held for its running children until the last of them ended).
        """
        for agent in self.agents.live():
            if keep_parents is not None and keep_parents(agent):
                continue
            self.release(agent)

    def release(self, agent: Agent) -> None:
        """Tell ``agent`` to exit if it is idle (its turn-end held); IDLE -> EXITING."""
        if agent.phase is AgentPhase.IDLE and agent.held is not None:
            held = agent.exiting()  # IDLE -> EXITING
            if held is not None:
                held.reply.answer(NextTurn(id=held.end.id, action="exit"))
