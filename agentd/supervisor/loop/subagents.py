"""Agents that start agents (rfcs/0370): the records of started agents, and the reactor's answers.

:class:`ChildRecords` (pure) keeps what a parent may read of each agent it
started: its status, result and spend, while it runs and after it ended
(at most :data:`MAX_RECORDS_PER_PARENT` per parent, dropped with the
parent). :class:`SubagentDesk` answers the hub's requests
(:class:`~agentd.events.AgentStart`, :class:`~agentd.events.AgentLookup`),
never raising: it mints a child's depth, limits and caps from what the
parent has (the model only asks), starts it through the spawner, and turns
a child's end into its completion: its record is final, its waiters are
woken, and one change of ``agent://ID`` is queued for the reactor to route
(a parent subscribed to it is woken by its ordinary self route). A parent
that ends takes its running children with it, deepest first.

Pure: no trio, no I/O (the kill is a hook, the change a queue the reactor takes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Final, Literal, get_args

from agentd.core.exitcodes import TerminalStatus
from agentd.core.limits import ModelLimit
from agentd.events import (
    AGENT_SCHEME,
    OWN_SERVER,
    AgentLookup,
    AgentRecords,
    AgentStart,
    ProbeEvent,
    Refused,
    StartSpec,
)
from agentd.observe.counters import RunCounters
from agentd.observe.telemetry import Telemetry
from agentd.selfmcp.protocol import AGENT_TOOL_NAMES
from agentd.supervisor.loop.agents import Agent, AgentLimits, AgentPhase, AgentTable, ChildTraits
from agentd.supervisor.loop.budget import Budget
from agentd.supervisor.loop.runstatus import RunStatus
from agentd.supervisor.loop.selftools import SelfToolDesk
from agentd.supervisor.loop.spawner import Spawner

#: Finished children's records a parent keeps (the oldest go first): a session that
#: starts a child a second holds as much after a month as after a minute.
MAX_RECORDS_PER_PARENT: Final = 1024

#: Characters of a child's result a delivery carries inline (the record has it whole).
RESULT_CHARS_IN_DELIVERY: Final = 16_000

#: Waiters one running child holds; one more wakes the oldest (it asks again and
#: sees the child still running), so repeated short waits cannot grow memory.
MAX_WAKES_PER_CHILD: Final = 16

SupervisorStatus = Literal["cancelled", "lost"]
"""Final statuses only a supervisor gives: its parent ended or cancelled it; agentd restarted under it."""

FinalStatus = TerminalStatus | SupervisorStatus
"""How a started agent ended."""

FINAL_STATUSES: Final = frozenset((*get_args(TerminalStatus), *get_args(SupervisorStatus)))


def agent_uri(agent_id: str) -> str:
    """The resource of agent ``agent_id``."""
    return f"{AGENT_SCHEME}{agent_id}"


def agent_id_of(uri: str) -> str | None:
    """The agent id an ``agent://ID`` URI names; None for any other URI."""
    if not uri.startswith(AGENT_SCHEME):
        return None
    rest = uri[len(AGENT_SCHEME) :]
    return rest if rest and "/" not in rest else None


@dataclass
class ChildRecord:
    """What a parent may read of an agent it started."""

    id: str
    parent: str | None
    """The parent agent's id (None for a record restored as ``lost``)."""
    session: str | None
    """The parent's session when it had one: a restored parent reads its children by it."""
    depth: int
    type: str | None
    started_at: float
    status: str = "running"
    """``running`` or a :data:`FinalStatus`."""
    result: str = ""
    steps: int = 0
    tokens: int = 0
    cost_usd: float | None = 0.0
    ended_at: float | None = None
    wakes: list[ProbeEvent] = field(default_factory=list)
    """Waiters to wake when it ends (set once, then cleared)."""
    consumed: bool = False
    """Its final record was handed to its parent (``agent_wait``, ``agent_start`` with ``wait``):
    a completion queued for the parent is not delivered again."""

    @property
    def final(self) -> bool:
        return self.status != "running"

    def as_json(
        self, now: float, agent: Agent | None = None, *, result_chars: int | None = None
    ) -> dict[str, object]:
        """The record as the model reads it; a running agent's spend is read live from ``agent``."""
        running = not self.final and agent is not None
        steps = agent.tree_steps if running and agent is not None else self.steps
        tokens = agent.tree_tokens if running and agent is not None else self.tokens
        if running and agent is not None:
            cost: float | None = None if agent.tree_unpriced else round(agent.tree_usd, 8)
        else:
            cost = None if self.cost_usd is None else round(self.cost_usd, 8)
        status = self.status
        if running and agent is not None and agent.cancel_reason is not None:
            status = "cancelling"
        result = self.result
        if result_chars is not None and len(result) > result_chars:
            result = result[:result_chars] + (
                f"\n[agentd: result cut at {result_chars} of {len(self.result)} characters; "
                f"read_resource({agent_uri(self.id)!r}) has it whole]"
            )
        return {
            "id": self.id,
            "uri": agent_uri(self.id),
            "parent": self.parent,
            "depth": self.depth,
            "type": self.type,
            "status": status,
            "result": result,
            "usage": {"steps": steps, "tokens": tokens, "cost_usd": "unknown" if cost is None else cost},
            "running_s": round((self.ended_at if self.ended_at is not None else now) - self.started_at, 3),
        }


class ChildRecords:
    """The records of every started agent, by parent (bounded; pure)."""

    def __init__(self, per_parent: int = MAX_RECORDS_PER_PARENT) -> None:
        self._per_parent = per_parent
        self._records: dict[str, ChildRecord] = {}
        self._by_parent: dict[str, dict[str, None]] = {}
        """Parent key (agent id, or ``session:NAME`` for restored ones) -> its children, oldest first."""
        self._running: dict[str, int] = {}
        """Parent agent id -> its running children."""
        self._changes: list[str] = []
        """URIs of completions the reactor has not routed yet."""
        self._live: dict[str, None] = {}
        """Ids of the started agents that have not ended (what the deadlines are read from)."""
        self._orphaned: set[str] = set()
        """Parents gone while children of theirs still ran: those records go as they end."""

    def __len__(self) -> int:
        return len(self._records)

    def get(self, agent_id: str) -> ChildRecord | None:
        return self._records.get(agent_id)

    def holds(self, agent_id: str) -> bool:
        """An id a record holds (no new agent may take it)."""
        return agent_id in self._records

    @property
    def running_total(self) -> int:
        """Running agents that agents started."""
        return len(self._live)

    def running_ids(self) -> Iterator[str]:
        """The ids of the started agents that have not ended, oldest first."""
        return iter(list(self._live))

    def running_of(self, parent: str) -> int:
        return self._running.get(parent, 0)

    def add(self, child: Agent, parent: Agent, now: float) -> ChildRecord:
        """``parent`` started ``child`` (running)."""
        record = ChildRecord(
            id=child.id,
            parent=parent.id,
            session=parent.session,
            depth=child.depth,
            type=child.type,
            started_at=now,
        )
        self._index(parent.id, record)
        self._live[child.id] = None
        self._running[parent.id] = self._running.get(parent.id, 0) + 1
        return record

    def restore_lost(self, session: str, agent_id: str, now: float) -> ChildRecord:
        """A restored session held ``agent://agent_id``: that agent did not survive the restart."""
        found = self._records.get(agent_id)
        if found is not None:
            return found
        record = ChildRecord(
            id=agent_id,
            parent=None,
            session=session,
            depth=1,
            type=None,
            started_at=now,
            status="lost",
            result="agentd restarted while this agent ran; its work, if any, is lost",
            ended_at=now,
        )
        self._index(f"session:{session}", record)
        self._changes.append(agent_uri(agent_id))
        return record

    def _index(self, key: str, record: ChildRecord) -> None:
        self._records[record.id] = record
        self._by_parent.setdefault(key, {})[record.id] = None
        self._trim(key)

    def _trim(self, key: str) -> None:
        """Past the bound, the parent's oldest finished records go (running ones stay)."""
        children = self._by_parent.get(key)
        if children is None or len(children) <= self._per_parent:
            return
        for old in list(children):
            if len(children) <= self._per_parent:
                break
            kept = self._records.get(old)
            if kept is None or kept.final:
                del children[old]
                self._records.pop(old, None)

    def finish(self, child: Agent, status: FinalStatus, now: float) -> ChildRecord | None:
        """``child`` reached its final status: its record is final, its waiters woken, its change queued.

        Returns None when it was final already (a completion happens once).
        """
        record = self._records.get(child.id)
        if record is None or record.final:
            return None
        record.status = status
        record.result = child.text
        record.steps, record.tokens = child.tree_steps, child.tree_tokens
        record.cost_usd = None if child.tree_unpriced else child.tree_usd
        record.ended_at = now
        self._live.pop(child.id, None)
        if record.parent is not None:
            left = self._running.get(record.parent, 0) - 1
            if left > 0:
                self._running[record.parent] = left
            else:
                self._running.pop(record.parent, None)
            self._trim(record.parent)
        wakes, record.wakes = record.wakes, []
        for wake in wakes:
            wake.set()
        self._changes.append(agent_uri(child.id))
        if record.parent is not None and record.parent in self._orphaned:
            # Nobody can read it any more (its parent's routes went with the parent).
            children = self._by_parent.get(record.parent, {})
            children.pop(record.id, None)
            self._records.pop(record.id, None)
            if not children:
                self._by_parent.pop(record.parent, None)
                self._orphaned.discard(record.parent)
        return record

    def requeue(self, record: ChildRecord) -> None:
        """Queue the completion of a finished agent again (a subscribe after it ended)."""
        record.consumed = False
        self._changes.append(agent_uri(record.id))

    def take_changes(self) -> list[str]:
        """The completions to route (``agent://ID``), in the order the agents ended."""
        changes, self._changes = self._changes, []
        return changes

    def wake_on(self, record: ChildRecord, wake: ProbeEvent) -> None:
        """Set ``wake`` when ``record``'s agent ends (the oldest waiter is woken past the bound)."""
        record.wakes.append(wake)
        if len(record.wakes) > MAX_WAKES_PER_CHILD:
            record.wakes.pop(0).set()

    def children(self, parent: Agent) -> Iterator[ChildRecord]:
        """The records ``parent`` may name: those it started, and its session's restored ones, oldest first."""
        keys = [parent.id] + ([f"session:{parent.session}"] if parent.session is not None else [])
        for key in keys:
            for child_id in self._by_parent.get(key, ()):
                record = self._records.get(child_id)
                if record is not None:
                    yield record

    def may_name(self, parent: Agent, record: ChildRecord) -> bool:
        """Whether ``parent`` may read, wait for, cancel or subscribe to ``record``'s agent."""
        if record.parent is not None:
            return record.parent == parent.id
        return record.session is not None and record.session == parent.session

    def parent_gone(self, parent: Agent) -> None:
        """``parent`` left the table: its children's records go (those still running when they end)."""
        children = self._by_parent.get(parent.id)
        if children is None:
            return
        for child_id in list(children):
            record = self._records.get(child_id)
            if record is None or record.final:
                children.pop(child_id, None)
                self._records.pop(child_id, None)
        if children:
            self._orphaned.add(parent.id)  # being cancelled: each record goes as its agent ends
        else:
            del self._by_parent[parent.id]


@dataclass(frozen=True, slots=True)
class ChildCaps:
    """How deep agents may start agents, and how many may run (rfcs/0370).

    Attributes:
        max_depth: the deepest an agent may be (roots 0); an agent at it starts none.
        max_children: running children one agent may have.
        max_agents: running agents started by agents, in all.
    """

    max_depth: int = 2
    max_children: int = 8
    max_agents: int = 64


#: The setting behind each cap, as flag and variable (for the refusal's text).
_SPELLED: Final[dict[str, str]] = {
    "max_children": "--max-children / AGENTD_MAX_CHILDREN",
    "max_agents": "--max-agents / AGENTD_MAX_AGENTS",
}


@dataclass(frozen=True, slots=True)
class Remainder:
    """What an agent has left: its own limits and its ancestors' and the tree budget's, the least of them."""

    steps: int | None
    tokens: int | None
    usd: float | None
    deadline_at: float | None


def remainder(agent: Agent, chain: Iterable[Agent], budget: Budget) -> Remainder:
    """What ``agent`` (whose ancestors are ``chain``) may still spend: the least over them and the budget."""
    steps = budget.remaining_steps()
    tokens = budget.remaining_tokens()
    usd = None if budget.max_usd is None else max(0.0, budget.max_usd - budget.usd)
    deadline = budget.deadline_at
    for a in (agent, *chain):
        lim = a.limits
        if lim.steps is not None:
            left = max(0, lim.steps - a.tree_steps)
            steps = left if steps is None else min(steps, left)
        if lim.tokens is not None:
            left = max(0, lim.tokens - a.tree_tokens)
            tokens = left if tokens is None else min(tokens, left)
        if lim.usd is not None:
            left_usd = max(0.0, lim.usd - a.tree_usd)
            usd = left_usd if usd is None else min(usd, left_usd)
        if lim.deadline_at is not None:
            deadline = lim.deadline_at if deadline is None else min(deadline, lim.deadline_at)
    return Remainder(steps, tokens, usd, deadline)


@dataclass(frozen=True, slots=True, eq=False)
class SubagentDesk:
    """The reactor's answers to the agent tools, and what a started agent's end means."""

    agents: AgentTable
    records: ChildRecords
    spawner: Spawner
    selftools: SelfToolDesk
    status: RunStatus
    budget: Budget
    caps: ChildCaps
    kill: Callable[[str], None]
    """Run the kill ladder on an agent's process (a task; its exit comes back as ChildExited)."""
    telemetry: Telemetry
    counters: RunCounters
    refusing: set[str] = field(default_factory=set)
    """Caps refusing now: told once per hit (``limit.reached``), cleared when a start passes."""

    # -- agent_start -----------------------------------------------------------

    def start(self, request: AgentStart, now: float) -> None:
        """``agent_start``: a child of the caller, or a refusal the model reads. Never raises."""
        parent = self.agents.get(request.agent)
        spec = request.spec
        if parent is None or not parent.busy:
            request.reply.answer(Refused("agent_start: only an agent in a turn may start agents"))
            return
        if not self.status.may_start_work():
            why = "agentd is draining" if not self.status.running else "the run's budget is spent"
            request.reply.answer(
                Refused(f"agent_start refused: {why}, so no agent starts now; finish your turn")
            )
            return
        if parent.depth >= self.caps.max_depth:
            request.reply.answer(
                Refused(
                    f"agent_start refused: this agent is at depth {parent.depth}, the deepest agents may start "
                    f"agents from (max_depth = {self.caps.max_depth}); do the work yourself"
                )
            )
            return
        refusal = self._cap_refusal(parent, spec)
        if refusal is not None:
            request.reply.answer(Refused(refusal))
            return
        limits = self._limits(parent, spec, now)
        if isinstance(limits, str):
            request.reply.answer(Refused(limits))
            return
        child_id = self.agents.next_id()
        session = parent.session or parent.id
        if spec.notify:
            refused = self.selftools.subscribe_own(parent, agent_uri(child_id))
            if refused is not None:
                request.reply.answer(Refused(f"agent_start refused: {refused}"))
                return
        self.refusing.clear()
        child = self.spawner.spawn(
            now,
            role="child",
            instruction=spec.instruction,
            # Its parent's route: the route's tool policy and model profile are where it starts from.
            route=parent.route,
            parent=parent,
            traits=ChildTraits(
                type=spec.type, scope=spec.scope, model=spec.model, system=spec.system, limits=limits
            ),
        )
        assert child.id == child_id, "the agent table minted another id than it announced"
        record = self.records.add(child, parent, now)
        self.telemetry.emit(
            "subagent.start",
            agent=parent.id,
            child=child.id,
            depth=child.depth,
            type=spec.type,
            session=session if spec.notify else None,
            # What it is offered: at the deepest level the agent tools are not among them.
            tools=len(spec.scope - AGENT_TOOL_NAMES if child.depth >= self.caps.max_depth else spec.scope),
        )
        request.reply.answer(AgentRecords((record.as_json(now, child),), running=frozenset({child.id})))

    def _cap_refusal(self, parent: Agent, spec: StartSpec) -> str | None:
        del spec
        running = self.records.running_of(parent.id)
        if running >= self.caps.max_children:
            return self._refuse(
                "max_children",
                self.caps.max_children,
                f"agent_start refused: this agent has {running} agents running, the limit "
                f"(max_children = {self.caps.max_children}); wait for one (agent_wait) or cancel one "
                "(agent_cancel) and try again",
                parent,
            )
        total = self.records.running_total
        if total >= self.caps.max_agents:
            return self._refuse(
                "max_agents",
                self.caps.max_agents,
                f"agent_start refused: {total} agents started by agents are running in this agentd, the "
                f"limit (max_agents = {self.caps.max_agents}); wait for yours to finish and try again",
                parent,
            )
        return None

    def _refuse(self, limit: ModelLimit, value: int, text: str, parent: Agent) -> str:
        self.counters.refuse(limit)
        if limit not in self.refusing:
            self.refusing.add(limit)
            self.telemetry.emit(
                "limit.reached", limit=limit, value=value, agent=parent.id, session=parent.session
            )
        return f"{text} (an operator raises the limit with {_SPELLED[limit]})"

    def _limits(self, parent: Agent, spec: StartSpec, now: float) -> AgentLimits | str:
        """The child's limits, each at most what the parent has left.

        A limit the model asked for above that is refused (the text says how much
        is left); one its definition set is cut to it (the operator's ceiling, not a request).
        """
        left = remainder(parent, self.agents.ancestors(parent), self.budget)
        time_left = None if left.deadline_at is None else max(0.0, left.deadline_at - now)
        asked: list[tuple[str, float | None, float | None]] = [
            ("max_steps", spec.max_steps, left.steps),
            ("max_tokens", spec.max_tokens, left.tokens),
            ("max_usd", spec.max_usd, left.usd),
            ("deadline_s", spec.deadline_s, time_left),
        ]
        given: dict[str, float | None] = {}
        for name, want, have in asked:
            if have is not None and have <= 0:
                what = {"max_steps": "steps", "max_tokens": "tokens", "max_usd": "dollars"}.get(name, "time")
                return (
                    f"agent_start refused: this agent has no {what} left; finish your turn with what you have"
                )
            if want is not None and have is not None and want > have:
                if name not in spec.asked:
                    want = have  # the definition's ceiling, cut to what is left
                else:
                    shown = f"{have:.3f}".rstrip("0").rstrip(".") if isinstance(have, float) else str(have)
                    return (
                        f"agent_start refused: {name} = {want:g} is more than this agent has left ({shown}); "
                        f"ask for at most {shown}, or leave {name} out to give the child what is left"
                    )
            given[name] = want
        steps, tokens = given["max_steps"], given["max_tokens"]
        deadline = given["deadline_s"]
        return AgentLimits(
            steps=None if steps is None else int(steps),
            tokens=None if tokens is None else int(tokens),
            usd=given["max_usd"],
            deadline_at=None if deadline is None else now + deadline,
        )

    # -- read, wait, cancel, list ------------------------------------------------

    def lookup(self, request: AgentLookup, now: float) -> None:
        """``read_resource(agent://ID)``, ``agent_wait``, ``agent_cancel``, ``agent_list``. Never raises."""
        caller = self.agents.get(request.agent)
        if caller is None:
            request.reply.answer(Refused("unknown agent"))
            return
        if request.kind == "list":
            records = list(self.records.children(caller))
            request.reply.answer(self._answer(records, now))
            return
        found: list[ChildRecord] = []
        for agent_id in request.ids:
            record = self.records.get(agent_id)
            if record is None or not self.records.may_name(caller, record):
                yours = [r.id for r in self.records.children(caller)]
                named = ", ".join(yours[-20:]) if yours else "none yet"
                request.reply.answer(
                    Refused(
                        f"{agent_id[:64]!r} is not an agent you started: you may name only your own agents "
                        f"({named}; agent_list lists them)"
                    )
                )
                return
            found.append(record)
        if request.kind == "wait":
            if request.wake is not None:
                for record in found:
                    if not record.final:
                        self.records.wake_on(record, request.wake)
            for record in found:
                if record.final:
                    # Handed over here: a completion queued for the caller is taken back.
                    record.consumed = True
                    self.selftools.drop_own(caller, agent_uri(record.id))
        elif request.kind == "subscribe":
            for record in found:
                refused = self.selftools.subscribe_own(caller, agent_uri(record.id))
                if refused is not None:
                    request.reply.answer(Refused(refused))
                    return
                if record.final:
                    self.records.requeue(record)  # it ended already: the change comes at once
        elif request.kind == "cancel":
            for record in found:
                child = self.agents.get(record.id)
                if not record.final and child is not None:
                    self.telemetry.emit(
                        "subagent.cancel", agent=caller.id, child=record.id, reason="agent_cancel"
                    )
                    self.end_descendants(child, f"cancelled by its parent {caller.id}")
                    self._stop(child, f"cancelled by its parent {caller.id}")
        request.reply.answer(self._answer(found, now))

    def _answer(self, records: list[ChildRecord], now: float) -> AgentRecords:
        return AgentRecords(
            tuple(r.as_json(now, self.agents.get(r.id)) for r in records),
            running=frozenset(r.id for r in records if not r.final),
        )

    # -- ends ------------------------------------------------------------------------

    def final_status(self, agent: Agent, status: TerminalStatus) -> FinalStatus:
        """How an agent whose process is gone ended: a cancelled one ``cancelled`` (or ``deadline``)."""
        if agent.cancel_reason is not None and status != "completed":
            return "deadline" if agent.cancel_reason == "deadline" else "cancelled"
        return status

    def ended(self, agent: Agent, status: FinalStatus, now: float) -> None:
        """``agent`` ended for good (told to exit, or its process is gone).

        Its running children are cancelled (deepest first); if another agent
        started it, its record is final and its completion queued.
        """
        self.end_descendants(agent, f"its parent {agent.id} ended")
        if agent.role == "child":
            self.records.finish(agent, status, now)

    def gone(self, agent: Agent) -> None:
        """``agent`` left the table: its finished children's records go.

        Draining, a parent held for the agents it started exits once the last
        of their processes is gone (not at their turn end: a child's exit
        always comes before its parent's).
        """
        self.records.parent_gone(agent)
        parent = self.agents.get(agent.parent) if agent.parent is not None else None
        if (
            parent is not None
            and not self.status.running
            and parent.phase is AgentPhase.IDLE
            and not self.has_live_children(parent)
        ):
            self.spawner.release(parent)

    def has_live_children(self, agent: Agent) -> bool:
        """Whether a process of an agent ``agent`` started still runs (its turn may have ended)."""
        return any(a.parent == agent.id for a in self.agents.live())

    def end_descendants(self, agent: Agent, reason: str) -> None:
        """Stop every running agent ``agent`` started (and theirs), the deepest first."""
        if self.records.running_of(agent.id) == 0:
            return
        found: list[Agent] = []
        frontier = [agent.id]
        while frontier:
            ids = set(frontier)
            frontier = []
            for a in self.agents.live():
                if a.parent in ids and a.phase is not AgentPhase.EXITED:
                    found.append(a)
                    frontier.append(a.id)
        for a in sorted(found, key=lambda a: -a.depth):
            self._stop(a, reason)

    def _stop(self, agent: Agent, reason: str) -> None:
        if agent.cancelling(reason):
            if agent.phase is AgentPhase.IDLE and agent.held is not None:
                self.spawner.release(agent)  # a held agent exits at once
                return
            self.kill(agent.id)

    # -- deadlines -----------------------------------------------------------------

    def _running_children(self) -> list[Agent]:
        """The started agents still running (at most ``max_agents``): only they carry deadlines.

        The reactor asks on every turn of its loop, so this never walks the whole agent table.
        """
        found = (self.agents.get(i) for i in self.records.running_ids())
        return [a for a in found if a is not None and a.alive]

    def next_deadline(self) -> float | None:
        """The earliest deadline of a running started agent (the reactor's wait bound), or None."""
        found = [
            a.limits.deadline_at
            for a in self._running_children()
            if a.limits.deadline_at is not None and a.cancel_reason is None
        ]
        return min(found) if found else None

    def on_time(self, now: float) -> None:
        """Stop every started agent whose deadline passed (it completes ``deadline``)."""
        for agent in self._running_children():
            at = agent.limits.deadline_at
            if at is not None and now >= at and agent.cancel_reason is None:
                self.telemetry.emit("subagent.deadline", agent=agent.id, parent=agent.parent)
                self.end_descendants(agent, f"its parent {agent.id} reached its deadline")
                self._stop(agent, "deadline")

    # -- deliveries ------------------------------------------------------------------

    def delivered(self, agent: Agent, uris: Iterable[str]) -> None:
        """The completions ``uris`` went to ``agent``'s session: a finished agent never changes again."""
        for uri in uris:
            self.selftools.drop_own(agent, uri)

    def describe(self, uri: str, now: float) -> str | None:
        """The lines a delivery carries for ``uri`` when it is a finished agent (None: not one)."""
        agent_id = agent_id_of(uri)
        record = None if agent_id is None else self.records.get(agent_id)
        if record is None or not record.final:
            return None
        record.consumed = True
        body = record.as_json(now, result_chars=RESULT_CHARS_IN_DELIVERY)
        usage = body["usage"]
        assert isinstance(usage, dict)
        head = (
            f"- {uri}: agent {record.id}{f' ({record.type})' if record.type else ''} ended {record.status} "
            f"after {body['running_s']} s, {usage['steps']} steps, {usage['tokens']} tokens; its result:"
        )
        result = str(body["result"]) or "(no text)"
        return f"{head}\n<agent-result id={record.id!r}>\n{result}\n</agent-result>"


def valid_number(value: object, *, whole: bool) -> bool:
    """A model's limit is a JSON number (not a bool), finite and positive."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if whole and not (isinstance(value, int) or (isinstance(value, float) and value.is_integer())):
        return False
    return math.isfinite(value) and value > 0


__all__ = [
    "AGENT_SCHEME",
    "FINAL_STATUSES",
    "MAX_RECORDS_PER_PARENT",
    "OWN_SERVER",
    "RESULT_CHARS_IN_DELIVERY",
    "ChildCaps",
    "ChildRecord",
    "ChildRecords",
    "FinalStatus",
    "Remainder",
    "SubagentDesk",
    "agent_id_of",
    "agent_uri",
    "remainder",
    "valid_number",
]
