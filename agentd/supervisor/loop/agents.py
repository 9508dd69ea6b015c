"""The agent table: every agent child the reactor started, and its lifecycle.

An :class:`Agent`'s phase changes only through its transition methods; each
checks the phase it leaves and raises :class:`IllegalTransition` (naming the
current and the allowed phases) on a move the lifecycle does not have::

    STARTING --usage/turn_end--> TURN --turn_end, held--> IDLE --delivery--> TURN
    STARTING|TURN|IDLE --told to exit--> EXITING
    any --process gone--> EXITED

The reactor checks a child's report against the phase before it applies it
(a report that cannot happen is refused, never applied), so a raise here is a
bug in the reactor, not something a child can cause. What an agent carries
besides its phase (its turn record, the notices it answers or has queued,
what it was started for, its self-subscriptions) is changed through its
methods too: the reactor's parts read an agent's fields and never write them.

:class:`AgentTable` owns the live agents by id, the warm sessions by name and the
agent id sequence. An agent leaves the table once its exit was reported
(:meth:`AgentTable.forget`): what a status view needs of it afterwards is
kept in bounded form, the run's counts and the last :data:`RECENT_EXITED`
agents as :class:`ExitedAgent` records, so a daemon that starts an agent a
second holds as much after a month as after a minute (rfcs/0281).

What a status view reads (issue 30), all without a second copy: the running
agents are the table itself (:meth:`AgentTable.live`: its size is the number
of running agents, plus one whose exit is being handled in the current
step); the finished ones are :meth:`AgentTable.recent` (at most
:data:`RECENT_EXITED`, oldest first); the run's totals are
:attr:`AgentTable.started` and :attr:`AgentTable.forgotten`. Times are the
reactor's clock (``trio.current_time()``), not wall time.
Pure: no trio, no I/O.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Final, Literal

from agentd.core.errors import AgentdError
from agentd.core.exitcodes import TerminalStatus
from agentd.events import Notice, TurnEnded
from agentd.triggers.router import QueuedEvent


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


AgentRole = Literal["root", "spawn", "session", "child"]
"""Why the agent runs: the mode's root, a spawn route's event, a named warm session, or
another agent's ``agent_start`` (rfcs/0370)."""


@dataclass(frozen=True, slots=True)
class AgentLimits:
    """An agent's own ceilings (rfcs/0370): what it and its descendants may spend; None = no own limit.

    Minted by the supervisor when another agent starts it, never by a model:
    each is at most what the parent had left.
    """

    steps: int | None = None
    tokens: int | None = None
    usd: float | None = None
    deadline_at: float | None = None
    """Monotonic time the agent must end by (the reactor stops it there)."""


NO_LIMITS: Final = AgentLimits()

LimitKind = Literal["steps", "tokens", "usd", "deadline"]
"""Which of an agent's own limits it reached."""


@dataclass(frozen=True, slots=True)
class ChildTraits:
    """What the supervisor minted for an agent another agent started (rfcs/0370)."""

    type: str | None
    """The agent definition it runs, if any."""
    scope: frozenset[str]
    """The only tools it is offered (a subset of its parent's)."""
    model: str | None
    """Its model spec (None: the run's)."""
    system: str | None
    """Its system prompt (None: the run's)."""
    limits: AgentLimits


RECENT_EXITED: Final = 50
"""Exited agents the table remembers (newest last): as many as a status page shows
at a glance; everything older is in the run's counts and the telemetry."""


class IllegalTransition(AgentdError):
    """An agent was asked to move between phases its lifecycle does not connect (a reactor bug)."""


@dataclass
class Agent:
    """One agent child, as the reactor tracks it.

    The phase is read-only from outside: use the transition methods.
    """

    id: str
    role: AgentRole
    instruction: str
    route: str | None = None
    """Owning route id (spawn-route agents and route sessions)."""
    session: str | None = None
    """Session name when this agent is a warm session (``root`` for loop --session warm)."""
    warm: bool = False
    """Held between turns instead of exiting."""
    _phase: AgentPhase = AgentPhase.STARTING
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
    notices: list[Notice] = field(default_factory=list)
    """Watch notices that arrived mid-turn: all of them become ONE follow-up turn."""
    notice_turn: list[Notice] = field(default_factory=list)
    """The notices the current turn answers (for ``reply.suppressed`` telemetry)."""
    origin: list[QueuedEvent] = field(default_factory=list)
    """The routed changes it was started for: queued again if its spawn fails."""
    steps: int = 0
    """Model calls it reported (the status view)."""
    tokens: int = 0
    """Input + output tokens it reported, as the budget counts them."""
    cost_usd: float = 0.0
    """US dollars of its priced calls."""
    unpriced_calls: int = 0
    """Its calls of unknown price (its cost is then unknown)."""
    woken_by: tuple[str, ...] = ()
    """The URIs of the delivery that started its current (or last) turn; empty: its instruction."""
    woken_route: str | None = None
    """The route of that delivery."""
    woken_at: float | None = None
    """When that delivery was handed over (monotonic)."""
    changed_state: bool = False
    """Its current turn made a tool call that may change state, and it succeeded (the hub's report)."""
    delivered: bool = False
    """Its current turn carries a routed delivery or notices (not the loop's own next shift)."""
    parent: str | None = None
    """The agent that started it (``agent_start``); None: a root, a route's or a session's agent."""
    depth: int = 0
    """0 for every agent a mode or route started; a child's is its parent's plus one."""
    type: str | None = None
    """The agent definition it runs (``[agents.NAME]``), if any."""
    scope: frozenset[str] | None = None
    """The only tools it is offered (a subset of its parent's); None: the route's or the run's."""
    model: str | None = None
    """Its model spec when not the run's (a child's definition or ``agent_start`` named one)."""
    system: str | None = None
    """Its system prompt when not the run's (its definition's)."""
    limits: AgentLimits = NO_LIMITS
    """Its own ceilings (a child's, minted from its parent's remainder)."""
    tree_steps: int = 0
    """Model calls of it and its descendants (its limits count these)."""
    tree_tokens: int = 0
    """Tokens of it and its descendants."""
    tree_usd: float = 0.0
    """US dollars of it and its descendants (priced calls)."""
    tree_unpriced: int = 0
    """Calls of unknown price among it and its descendants."""
    cancel_reason: str | None = None
    """Why the supervisor is ending it before it ended on its own (its parent ended, cancel, deadline)."""

    @property
    def phase(self) -> AgentPhase:
        return self._phase

    @property
    def busy(self) -> bool:
        """Mid-turn (its first, or a later one)."""
        return self._phase in (AgentPhase.STARTING, AgentPhase.TURN)

    @property
    def alive(self) -> bool:
        return self._phase is not AgentPhase.EXITED

    def _move(self, to: AgentPhase, allowed: tuple[AgentPhase, ...]) -> None:
        if self._phase not in allowed:
            raise IllegalTransition(
                f"agent {self.id!r} cannot go {self._phase.value} -> {to.value}: only from "
                f"{', '.join(p.value for p in allowed)} (a reactor bug: please report it)"
            )
        self._phase = to

    def begin_turn(self) -> None:
        """Its first model call was reported. STARTING -> TURN (a TURN stays TURN)."""
        self._move(AgentPhase.TURN, (AgentPhase.STARTING, AgentPhase.TURN))

    def hold(self, end: TurnEnded) -> None:
        """Its turn ended and it waits warm for the next delivery. STARTING|TURN -> IDLE."""
        self._move(AgentPhase.IDLE, (AgentPhase.STARTING, AgentPhase.TURN))
        self.held = end

    def resume(self, now: float | None = None, *, delivery: bool = False) -> TurnEnded | None:
        """Its next turn starts. IDLE -> TURN; returns the held turn end to answer.

        ``now``: when the next turn's input is handed over (its duration counts from it).
        ``delivery``: the turn carries a routed delivery or notices (not the loop's own shift).
        """
        self._move(AgentPhase.TURN, (AgentPhase.IDLE,))
        if now is not None:
            self.turn_started_at = now
        self.changed_state, self.delivered = False, delivery
        held, self.held = self.held, None
        return held

    def exiting(self) -> TurnEnded | None:
        """Told to exit (or being killed). STARTING|TURN|IDLE -> EXITING; returns a held turn end."""
        self._move(AgentPhase.EXITING, (AgentPhase.STARTING, AgentPhase.TURN, AgentPhase.IDLE))
        held, self.held = self.held, None
        return held

    def exited(self) -> AgentPhase:
        """Its process is gone. any -> EXITED; returns the phase it was in."""
        was = self._phase
        self._move(AgentPhase.EXITED, tuple(AgentPhase))
        self.held = None
        return was

    # What the agent carries besides its phase: changed through these methods by the reactor's parts.

    def record_state_change(self) -> None:
        """A tool call of its current turn that may change state succeeded (rfcs/0280)."""
        self.changed_state = True

    def record_delivery(self) -> None:
        """Its current (first) turn carries a routed delivery or notices."""
        self.delivered = True

    @property
    def idle_turn(self) -> bool:
        """Its current turn left no observable state: no state-changing tool call, no delivery (rfcs/0280)."""
        return not self.changed_state and not self.delivered

    def answering(self, notices: list[Notice]) -> None:
        """Its next (or first) turn answers ``notices`` (for ``reply.suppressed``)."""
        self.notice_turn = notices

    def queue_notice(self, notice: Notice) -> None:
        """A notice arrived mid-turn: one follow-up turn carries every notice queued meanwhile."""
        self.notices.append(notice)

    def take_notices(self) -> list[Notice]:
        """The notices queued mid-turn (they become the follow-up turn, or are dropped at exit)."""
        pending, self.notices = self.notices, []
        return pending

    def charge(self, *, tokens: int, steps: int, cost_usd: float | None) -> None:
        """One of its model calls was charged to the budget: its own share, for the status view."""
        self.tokens += tokens
        self.steps += steps
        if cost_usd is None:
            self.unpriced_calls += 1
        else:
            self.cost_usd += cost_usd

    def charge_tree(self, *, tokens: int, steps: int, cost_usd: float | None) -> None:
        """A model call of it or of one of its descendants: counted against its limits."""
        self.tree_tokens += tokens
        self.tree_steps += steps
        if cost_usd is None:
            self.tree_unpriced += 1
        else:
            self.tree_usd += cost_usd

    def cancelling(self, reason: str) -> bool:
        """The supervisor ends it (its parent ended, a cancel, its deadline); False if it was already."""
        if self.cancel_reason is not None:
            return False
        self.cancel_reason = reason
        return True

    def woken(self, route: str | None, uris: tuple[str, ...], now: float) -> None:
        """A delivery on ``route`` of ``uris`` started its turn (or the agent itself)."""
        self.woken_route, self.woken_by, self.woken_at = route, uris, now

    def started_for(self, origin: list[QueuedEvent]) -> None:
        """The routed changes it was started for (queued again if its spawn fails)."""
        self.origin = origin

    def take_origin(self) -> tuple[list[QueuedEvent], list[Notice]]:
        """What it was started for: the routed changes and the notices of its first turn (both cleared)."""
        origin, self.origin = self.origin, []
        notices, self.notice_turn = self.notice_turn, []
        return origin, notices

    def end_turn(self, status: TerminalStatus, text: str) -> list[Notice]:
        """Its turn ended with ``status`` and ``text``; returns the notices that turn answered (cleared)."""
        self.turns += 1
        self.status = status
        self.text = text
        answered, self.notice_turn = self.notice_turn, []
        return answered

    def crashed(self) -> None:
        """Its process died mid-turn (or failed to start)."""
        self.status = "crashed"

    def release_slot(self) -> bool:
        """A spawn agent's first terminal status frees its route's inflight slot: True the first time only."""
        if self.slot_released:
            return False
        self.slot_released = True
        return True

    def subscribe(self, uri: str, server: str | None) -> None:
        """It owns the self-subscription ``uri`` (on ``server``, to release it when it exits)."""
        self.subscriptions.add(uri)
        if server is not None:
            self.subscription_servers[uri] = server

    def unsubscribe(self, uri: str) -> str | None:
        """It no longer owns ``uri``; returns the server it was on (None: none known, or released)."""
        self.subscriptions.discard(uri)
        return self.subscription_servers.pop(uri, None)


@dataclass(frozen=True, slots=True)
class ExitedAgent:
    """What the table keeps of an agent after it exited (its last :data:`RECENT_EXITED` only)."""

    id: str
    role: AgentRole
    route: str | None
    session: str | None
    status: TerminalStatus | None
    """Its last terminal status (None: it never ended a turn)."""
    turns: int
    started_at: float
    exited_at: float
    steps: int = 0
    tokens: int = 0
    cost_usd: float | None = 0.0
    """US dollars of its calls (None: a call had no known price)."""
    woken_by: tuple[str, ...] = ()
    woken_route: str | None = None
    parent: str | None = None
    depth: int = 0
    type: str | None = None


class AgentTable:
    """The agents the reactor runs, by id, which agent holds each warm session, and the recently exited.

    Args:
        reserved: session names that are taken without an agent (restored
            watch sessions): an unnamed agent's id, which doubles as its
            session name, skips them.
        recent: how many exited agents :meth:`recent` keeps.
    """

    def __init__(
        self, reserved: Callable[[str], bool] = lambda _name: False, *, recent: int = RECENT_EXITED
    ) -> None:
        self._agents: dict[str, Agent] = {}
        self._sessions: dict[str, str] = {}
        self._seq = 0
        self._reserved = reserved
        self._recent: deque[ExitedAgent] = deque(maxlen=recent)
        self.started = 0
        """Agents started in this run."""
        self.forgotten = 0
        """Agents that exited and left the table."""

    def __iter__(self) -> Iterator[Agent]:
        return iter(self._agents.values())

    def __len__(self) -> int:
        return len(self._agents)

    def get(self, agent_id: str) -> Agent | None:
        return self._agents.get(agent_id)

    def __getitem__(self, agent_id: str) -> Agent:
        return self._agents[agent_id]

    def live(self) -> list[Agent]:
        """The agents whose process runs (the table holds no others once their exit is handled)."""
        return [a for a in self._agents.values() if a.alive]

    def busy(self) -> bool:
        """Some agent is mid-turn."""
        return any(a.busy for a in self._agents.values())

    def forget(self, agent: Agent, now: float) -> None:
        """``agent`` exited and its exit was reported: it leaves the table (kept in :meth:`recent`).

        Raises:
            IllegalTransition: the agent has not exited (a reactor bug).
        """
        if agent.alive:
            raise IllegalTransition(
                f"agent {agent.id!r} cannot leave the table while {agent.phase.value}: only once exited "
                "(a reactor bug: please report it)"
            )
        if self._agents.pop(agent.id, None) is None:
            return  # forgotten already
        self.release_session(agent)
        self.forgotten += 1
        self._recent.append(
            ExitedAgent(
                id=agent.id,
                role=agent.role,
                route=agent.route,
                session=agent.session,
                status=agent.status,
                turns=agent.turns,
                started_at=agent.started_at,
                exited_at=now,
                steps=agent.steps,
                tokens=agent.tokens,
                cost_usd=None if agent.unpriced_calls else agent.cost_usd,
                woken_by=agent.woken_by,
                woken_route=agent.woken_route,
                parent=agent.parent,
                depth=agent.depth,
                type=agent.type,
            )
        )

    def recent(self) -> tuple[ExitedAgent, ...]:
        """The last exited agents, oldest first (at most ``recent`` of them)."""
        return tuple(self._recent)

    def new(
        self,
        *,
        role: AgentRole,
        instruction: str,
        route: str | None,
        session: str | None,
        warm: bool,
        now: float,
        parent: Agent | None = None,
        traits: ChildTraits | None = None,
    ) -> Agent:
        """A new agent (STARTING) with the next free id; it holds ``session`` if one is named.

        ``parent``: the agent that started it (``agent_start``): its depth is the
        parent's plus one; ``traits``: what the supervisor minted for it.
        """
        agent_id = self.next_id()
        self._seq = int(agent_id[1:])
        agent = Agent(
            id=agent_id,
            role=role,
            instruction=instruction,
            route=route,
            session=session,
            warm=warm,
            started_at=now,
            turn_started_at=now,
            parent=None if parent is None else parent.id,
            depth=0 if parent is None else parent.depth + 1,
        )
        if traits is not None:
            agent.type, agent.scope, agent.model = traits.type, traits.scope, traits.model
            agent.system, agent.limits = traits.system, traits.limits
        self._agents[agent.id] = agent
        self.started += 1
        if session is not None:
            self._sessions[session] = agent.id
        return agent

    # -- sessions ---------------------------------------------------------------------

    def next_id(self) -> str:
        """The id :meth:`new` gives the next agent (nothing is taken)."""
        seq = self._seq + 1
        # Unnamed agents use their id as session name (self-subscribe, watches);
        # skip ids a restored watch session (or a started agent's record) already holds.
        while self._reserved(f"a{seq}"):
            seq += 1
        return f"a{seq}"

    def ancestors(self, agent: Agent) -> Iterator[Agent]:
        """Its parent, the parent's parent, ... (those still in the table), nearest first."""
        parent = agent.parent
        while parent is not None:
            found = self._agents.get(parent)
            if found is None:
                return
            yield found
            parent = found.parent

    def session_agent(self, session: str) -> Agent | None:
        """The agent that holds ``session`` now, if any."""
        agent_id = self._sessions.get(session)
        return self._agents[agent_id] if agent_id is not None else None

    def name_session(self, agent: Agent) -> str:
        """The agent's session, making its id its session name if it had none."""
        if agent.session is None:
            agent.session = agent.id
            self._sessions[agent.id] = agent.id
        return agent.session

    def release_session(self, agent: Agent) -> bool:
        """The agent no longer holds its session; False if it did not hold one."""
        if agent.session is not None and self._sessions.get(agent.session) == agent.id:
            del self._sessions[agent.session]
            return True
        return False


def spent_limit(agent: Agent, chain: Iterable[Agent], now: float) -> LimitKind | None:
    """Which of its own or its ancestors' limits ``agent`` reached (None: it may go on)."""
    for a in (agent, *chain):
        lim = a.limits
        if lim.tokens is not None and a.tree_tokens >= lim.tokens:
            return "tokens"
        if lim.usd is not None and a.tree_usd >= lim.usd:
            return "usd"
        if lim.steps is not None and a.tree_steps >= lim.steps:
            return "steps"
        if lim.deadline_at is not None and now >= lim.deadline_at:
            return "deadline"
    return None
