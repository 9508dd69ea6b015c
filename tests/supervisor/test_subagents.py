"""Agents that start agents, in the reactor (rfcs/0370): minted depth, caps, limits, completions, ends.

The reactor runs on ``MockClock(autojump_threshold=0)``; the test plays the
children (their usage reports and turn ends) and the hub (the agent tools'
requests), as test_reactor.py does for the other reports.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import trio

from agentd.core.exitcodes import ExitCode, TerminalStatus
from agentd.events import (
    AgentLookup,
    AgentLookupKind,
    AgentRecords,
    AgentStart,
    ChildExited,
    Refused,
    Reply,
    StartSpec,
)
from agentd.observe.counters import RunCounters
from agentd.supervisor.loop.agents import Agent, AgentLimits, spent_limit
from agentd.supervisor.loop.budget import Budget
from agentd.supervisor.loop.governor import RestartGovernor
from agentd.supervisor.loop.reactor import Hooks, Reactor
from agentd.supervisor.loop.subagents import ChildCaps, ChildRecords
from agentd.triggers import mode as modes
from agentd.triggers.router import Router
from tests.support.reports import turn_ended, usage_reported
from tests.support.telemetry import RecordingTelemetry

STEP = 1000.0


@dataclass
class Rig:
    """A reactor whose spawns and kills are recorded; the test plays children and the hub."""

    reactor: Reactor
    telemetry: RecordingTelemetry
    killed: list[str] = field(default_factory=list)
    result: list[ExitCode] = field(default_factory=list)
    done: trio.Event = field(default_factory=trio.Event)

    def __post_init__(self) -> None:
        self._send, self._spawns = trio.open_memory_channel[Agent](math.inf)

    def spawned(self, agent: Agent) -> None:
        self._send.send_nowait(agent)

    async def next_spawn(self) -> Agent:
        with trio.fail_after(STEP):
            return await self._spawns.receive()

    async def _ask(self, build: Any) -> Any:
        send, recv = trio.open_memory_channel[Any](1)
        await self.reactor.send.send(build(Reply(send)))
        with trio.fail_after(STEP):
            return await recv.receive()

    async def start(self, parent: str, instruction: str = "part", **kw: Any) -> AgentRecords | Refused:
        spec = StartSpec(
            instruction=instruction,
            type=kw.pop("type", None),
            scope=frozenset(kw.pop("scope", ("memo__memo_get",))),
            model=None,
            system=None,
            **kw,
        )
        return await self._ask(lambda reply: AgentStart(parent, spec, reply))  # type: ignore[no-any-return]

    async def child(self, parent: str, **kw: Any) -> Agent:
        started = await self.start(parent, **kw)
        assert isinstance(started, AgentRecords), started
        agent = await self.next_spawn()
        assert agent.id == started.records[0]["id"]
        return agent

    async def lookup(
        self, agent: str, kind: AgentLookupKind, *ids: str, wake: trio.Event | None = None
    ) -> AgentRecords | Refused:
        return await self._ask(lambda reply: AgentLookup(agent, kind, ids, reply, wake))  # type: ignore[no-any-return]

    async def usage(self, agent: str, *, tokens: int = 10, steps: int = 1) -> dict[str, Any]:
        event, recv = usage_reported(agent, input_tokens=tokens, steps=steps)
        await self.reactor.send.send(event)
        with trio.fail_after(STEP):
            answer: dict[str, Any] = await recv.receive()
        return answer

    async def end_turn(
        self, agent: str, text: str = "done", status: TerminalStatus = "completed"
    ) -> trio.MemoryReceiveChannel[Any]:
        await self.usage(agent)
        event, recv = turn_ended(agent, status=status, text=text, idle=False)
        await self.reactor.send.send(event)
        return recv

    async def exited(self, agent: str, returncode: int | None = 0) -> None:
        await self.reactor.send.send(ChildExited(agent=agent, pid=1000, returncode=returncode))


async def answer(recv: trio.MemoryReceiveChannel[Any]) -> dict[str, Any]:
    with trio.fail_after(STEP):
        got: dict[str, Any] = await recv.receive()
    return got


@asynccontextmanager
async def running(
    mode: modes.Mode = "once",
    *,
    caps: ChildCaps | None = None,
    max_steps: int | None = None,
    max_restarts: int = 3,
) -> AsyncIterator[Rig]:
    now = trio.current_time()
    counters = RunCounters()
    router = Router(on_drop=counters.drop)
    telemetry = RecordingTelemetry()
    rig: Rig | None = None

    def spawn(agent: Agent) -> None:
        assert rig is not None
        rig.spawned(agent)

    def kill(agent_id: str) -> None:
        assert rig is not None
        rig.killed.append(agent_id)

    reactor = Reactor(
        driver=modes.make_driver(mode, now_mono=now),
        router=router,
        budget=Budget(max_steps=max_steps),
        governor=RestartGovernor(intensity=max_restarts, period=60.0),
        hooks=Hooks(
            spawn=spawn,
            kill=kill,
            kill_all=lambda: None,
            unsubscribe=lambda _s, _u: None,
            publish=lambda *_a: None,
        ),
        telemetry=telemetry,
        instruction="the whole task",
        grace=25.0,
        mode=mode,
        session="fresh",
        counters=counters,
        child_caps=caps,
    )
    rig = Rig(reactor, telemetry)

    async def run() -> None:
        assert rig is not None
        rig.result.append(await reactor.run())
        rig.done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        yield rig
        nursery.cancel_scope.cancel()


async def test_a_once_root_waits_for_its_children_and_is_woken_with_their_results(autojump_clock):
    async with running("once") as rig:
        root = await rig.next_spawn()
        await rig.usage(root.id)
        kids = [await rig.child(root.id, instruction=f"part {n}") for n in range(3)]
        assert [(k.depth, k.parent, k.role) for k in kids] == [(1, root.id, "child")] * 3
        held = await rig.end_turn(root.id, "three agents are working")
        assert not rig.done.is_set()  # held for its children: the once run goes on
        for n, kid in enumerate(kids):
            assert await answer(await rig.end_turn(kid.id, f"answer {n}")) == {"action": "exit"}
        woken = await answer(held)
        assert woken["action"] == "continue"
        # The completions that were due together come in one turn, each with its result.
        for n, kid in enumerate(kids[: woken["input"].count("<agent-result")]):
            assert f"agent://{kid.id}" in woken["input"]
            assert f"answer {n}" in woken["input"]
        ended = await rig.end_turn(root.id, "merged")
        rest = woken["input"].count("<agent-result")
        while rest < 3:  # a later delivery carries the others
            woken = await answer(ended)
            rest += woken["input"].count("<agent-result")
            ended = await rig.end_turn(root.id, "merged")
        assert await answer(ended) == {"action": "exit"}
        with trio.fail_after(STEP):
            await rig.done.wait()
        assert rig.result == [ExitCode.OK]
        spawns = rig.telemetry.fields("subagent.spawn")
        assert [(s.get("parent"), s.get("depth")) for s in spawns[1:]] == [(root.id, 1)] * 3


async def test_depth_is_minted_and_the_deepest_agent_starts_none(autojump_clock):
    async with running("once", caps=ChildCaps(max_depth=1)) as rig:
        root = await rig.next_spawn()
        await rig.usage(root.id)
        kid = await rig.child(root.id)
        await rig.usage(kid.id)
        refused = await rig.start(kid.id)
        assert isinstance(refused, Refused)
        assert "depth 1" in refused.error
        assert "max_depth = 1" in refused.error


async def test_a_cap_on_running_children_refuses_naming_it_and_is_told_once(autojump_clock):
    async with running("once", caps=ChildCaps(max_children=2)) as rig:
        root = await rig.next_spawn()
        await rig.usage(root.id)
        await rig.child(root.id)
        await rig.child(root.id)
        for _ in range(3):
            refused = await rig.start(root.id)
            assert isinstance(refused, Refused)
            assert "max_children = 2" in refused.error
            assert "--max-children" in refused.error
        assert rig.reactor.counters.limit_refusals["max_children"] == 3
        assert len(rig.telemetry.fields("limit.reached")) == 1


async def test_a_childs_limits_are_at_most_what_its_parent_has_left(autojump_clock):
    async with running("once", max_steps=10) as rig:
        root = await rig.next_spawn()
        for _ in range(4):
            await rig.usage(root.id)
        refused = await rig.start(root.id, max_steps=7, asked=frozenset({"max_steps"}))
        assert isinstance(refused, Refused)
        assert "max_steps = 7 is more than this agent has left (6)" in refused.error
        # From a definition (not asked by the model), the same ceiling is cut to what is left.
        kid = await rig.child(root.id, max_steps=9)
        assert kid.limits.steps == 6


async def test_what_a_grandchild_spends_counts_against_its_ancestors_limits(autojump_clock):
    async with running("once") as rig:
        root = await rig.next_spawn()
        await rig.usage(root.id)
        kid = await rig.child(root.id, max_steps=3, asked=frozenset({"max_steps"}))
        await rig.usage(kid.id)
        grandchild = await rig.child(kid.id)
        assert grandchild.depth == 2
        assert (await rig.usage(grandchild.id))["continue"] is True
        verdict = await rig.usage(grandchild.id)  # the child's third step, spent by its child
        assert verdict == {"continue": False, "reason": "steps"}
        assert (kid.tree_steps, grandchild.tree_steps, root.tree_steps) == (3, 2, 4)


async def test_a_parent_that_ends_takes_its_running_children_deepest_first(autojump_clock):
    async with running("once") as rig:
        root = await rig.next_spawn()
        await rig.usage(root.id)
        kid = await rig.child(root.id)
        await rig.usage(kid.id)
        grandchild = await rig.child(kid.id)
        await rig.exited(root.id, returncode=-9)  # the root's process is gone mid-turn
        with trio.fail_after(STEP):
            await rig.done.wait()
        assert rig.killed == [grandchild.id, kid.id]
        assert (kid.cancel_reason, grandchild.cancel_reason) == (
            f"its parent {root.id} ended",
            f"its parent {root.id} ended",
        )
        assert rig.result == [ExitCode.CRASHED]


async def test_a_childs_crash_is_its_parents_data_and_never_opens_the_breaker(autojump_clock):
    async with running("once", max_restarts=1) as rig:
        root = await rig.next_spawn()
        await rig.usage(root.id)
        kids = [await rig.child(root.id, notify=False) for _ in range(4)]
        for kid in kids:
            await rig.exited(kid.id, returncode=-9)
        listed = await rig.lookup(root.id, "list")
        assert isinstance(listed, AgentRecords)
        assert [r["status"] for r in listed.records] == ["crashed"] * 4
        assert not rig.reactor.status.breaker_open
        assert not rig.done.is_set()


async def test_a_child_past_its_deadline_is_stopped_and_completes_deadline(autojump_clock):
    async with running("once") as rig:
        root = await rig.next_spawn()
        await rig.usage(root.id)
        started = trio.current_time()
        kid = await rig.child(root.id, deadline_s=5.0, asked=frozenset({"deadline_s"}), notify=False)
        wake = trio.Event()
        waiting = await rig.lookup(root.id, "wait", kid.id, wake=wake)
        assert isinstance(waiting, AgentRecords)
        assert waiting.running == {kid.id}
        await rig.telemetry.wait("subagent.deadline")
        assert rig.killed == [kid.id]
        assert trio.current_time() - started == 5.0
        await rig.exited(kid.id, returncode=-15)
        with trio.fail_after(STEP):
            await wake.wait()
        done = await rig.lookup(root.id, "read", kid.id)
        assert isinstance(done, AgentRecords)
        assert done.records[0]["status"] == "deadline"


async def test_a_completion_read_by_agent_wait_is_not_delivered_again(autojump_clock):
    async with running("once") as rig:
        root = await rig.next_spawn()
        await rig.usage(root.id)
        kid = await rig.child(root.id)
        assert root.subscriptions == {f"agent://{kid.id}"}
        wake = trio.Event()
        await rig.lookup(root.id, "wait", kid.id, wake=wake)
        assert await answer(await rig.end_turn(kid.id, "the part")) == {"action": "exit"}
        with trio.fail_after(STEP):
            await wake.wait()
        waited = await rig.lookup(root.id, "wait", kid.id)
        assert isinstance(waited, AgentRecords)
        assert (waited.records[0]["status"], waited.records[0]["result"], waited.running) == (
            "completed",
            "the part",
            frozenset(),
        )
        assert root.subscriptions == set()  # handed over: its route is gone, and no drop counted
        assert rig.reactor.counters.dropped_by_reason() == {}
        assert await answer(await rig.end_turn(root.id, "merged")) == {"action": "exit"}


async def test_only_a_parent_may_name_its_children(autojump_clock):
    async with running("once") as rig:
        root = await rig.next_spawn()
        await rig.usage(root.id)
        kid = await rig.child(root.id)
        await rig.usage(kid.id)
        grandchild = await rig.child(kid.id)
        for kind in ("read", "wait", "cancel", "subscribe"):
            for stranger in (grandchild.id, "a999", "../a1", root.id):
                refused = await rig.lookup(root.id, kind, stranger)  # type: ignore[arg-type]
                assert isinstance(refused, Refused), (kind, stranger)
                assert "is not an agent you started" in refused.error
                assert kid.id in refused.error
        assert rig.killed == []


def test_spent_limit_reads_the_agent_and_every_ancestor() -> None:
    parent = Agent(id="a1", role="root", instruction="", limits=AgentLimits(tokens=100))
    child = Agent(id="a2", role="child", instruction="", parent="a1", depth=1)
    assert spent_limit(child, [parent], 0.0) is None
    parent.charge_tree(tokens=100, steps=1, cost_usd=None)
    assert spent_limit(child, [parent], 0.0) == "tokens"
    child.limits = AgentLimits(deadline_at=5.0)
    assert spent_limit(child, [], 5.0) == "deadline"


def test_records_keep_a_bounded_number_of_finished_children_per_parent() -> None:
    records = ChildRecords(per_parent=3)
    parent = Agent(id="a1", role="root", instruction="")
    kids = []
    for n in range(5):
        kid = Agent(id=f"a{n + 2}", role="child", instruction="", parent="a1", depth=1)
        records.add(kid, parent, 0.0)
        kids.append(kid)
    assert records.running_of("a1") == 5
    for kid in kids:
        records.finish(kid, "completed", 1.0)
    assert records.running_of("a1") == 0
    assert [r.id for r in records.children(parent)] == ["a4", "a5", "a6"]
    assert records.take_changes() == [f"agent://{k.id}" for k in kids]
    assert records.finish(kids[-1], "crashed", 2.0) is None  # a completion happens once


def test_the_records_of_a_gone_parents_children_go_as_they_end() -> None:
    records = ChildRecords()
    parent = Agent(id="a1", role="root", instruction="")
    done = Agent(id="a2", role="child", instruction="", parent="a1", depth=1)
    running = Agent(id="a3", role="child", instruction="", parent="a1", depth=1)
    records.add(done, parent, 0.0)
    records.add(running, parent, 0.0)
    records.finish(done, "completed", 1.0)
    records.parent_gone(parent)
    assert (records.holds("a2"), records.holds("a3")) == (False, True)
    records.finish(running, "cancelled", 2.0)
    assert len(records) == 0
    assert records.running_total == 0
