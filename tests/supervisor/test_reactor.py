"""The reactor in virtual time: modes, drain, budget, governor and reactive routing.

No processes: the reactor runs with the real driver, router, budget and
governor; fake :class:`Hooks` record what it asks for, and the tests play the
children by sending usage reports, turn ends (``tests/support/reports.py``),
typed self-tool requests and ``ChildExited`` into ``reactor.send`` exactly as the
control channel, the hub and the tree do. Every test runs under
``MockClock(autojump_threshold=0)`` (the ``autojump_clock`` fixture), so the
times asserted are exact virtual times.
"""

from __future__ import annotations

import math
import signal
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
import trio

from agentd.core.exitcodes import ExitCode, TerminalStatus
from agentd.events import (
    Acknowledged,
    ChildExited,
    Refused,
    Reply,
    ResourceChanged,
    SelfSubscribe,
    SelfUnsubscribe,
    ServerState,
    ServerStateChanged,
    SignalReceived,
    ToolChangedState,
    Unsubscribed,
    WatchNotice,
)
from agentd.observe.counters import RunCounters
from agentd.supervisor.loop.budget import Budget
from agentd.supervisor.loop.governor import RestartGovernor
from agentd.supervisor.loop.reactor import Agent, AgentPhase, Hooks, Reactor
from agentd.supervisor.routing.sessionroutes import SubscriptionCaps
from agentd.supervisor.routing.subscriptions import ServerView, Subscriptions
from agentd.triggers import mode as modes
from agentd.triggers.router import Continue, Router, RouteSpec, Spawn
from agentd.triggers.timer import IntervalSource
from agentd.upstream.resolve import Catalog
from tests.support.reports import turn_ended, usage_reported
from tests.support.telemetry import RecordingTelemetry

#: Upper bound on any single await in these tests, in *virtual* seconds: far
#: past every timer a test arms, so only a reactor that never answers hits it.
STEP = 1000.0


@dataclass
class FakeHooks:
    """Records what the reactor asks for; spawns are also streamed to the test."""

    spawned: list[tuple[float, Agent]] = field(default_factory=list)
    kill_all_at: list[float] = field(default_factory=list)
    published: list[tuple[str, str, str]] = field(default_factory=list)
    unsubscribed: list[tuple[str, str]] = field(default_factory=list)
    paused: list[tuple[float, str, bool]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._send, self._recv = trio.open_memory_channel[Agent](math.inf)

    def hooks(self) -> Hooks:
        return Hooks(
            spawn=self._spawn,
            kill_all=lambda: self.kill_all_at.append(trio.current_time()),
            unsubscribe=lambda s, u: self.unsubscribed.append((s, u)),
            publish=lambda a, status, text, idle: self.published.append((a.id, status, text)),
            pause=lambda server, paused: self.paused.append((trio.current_time(), server, paused)),
        )

    def _spawn(self, agent: Agent) -> None:
        self.spawned.append((trio.current_time(), agent))
        self._send.send_nowait(agent)

    async def next_spawn(self) -> Agent:
        with trio.fail_after(STEP):
            return await self._recv.receive()

    def no_spawn_pending(self) -> bool:
        return self._recv.statistics().current_buffer_used == 0


@dataclass
class Pattern:
    """A declared subscription pattern (``server:uri``), as the configuration gives it."""

    server: str | None
    uri: str


def declared_subscriptions(
    router: Router, patterns: Sequence[str], required: frozenset[str]
) -> Subscriptions:
    """The pure subscriptions component with ``patterns`` resolved against servers that offer nothing yet."""
    subs = Subscriptions([Pattern(*p.split(":", 1)) for p in patterns], router, required=required)
    servers = {p.split(":", 1)[0] for p in patterns}
    view = ServerView(connected=False, subscribed=frozenset(), catalog=Catalog())
    assert subs.refresh({name: view for name in sorted(servers)}, "start").actions == ()
    return subs


@dataclass
class Harness:
    reactor: Reactor
    hooks: FakeHooks
    telemetry: RecordingTelemetry
    result: list[tuple[float, ExitCode]] = field(default_factory=list)
    done: trio.Event = field(default_factory=trio.Event)

    async def send(self, event: Any) -> None:
        await self.reactor.send.send(event)

    async def ask(self, agent: str, kind: Any, **payload: Any) -> trio.MemoryReceiveChannel[Any]:
        """Send a child report or self-tool request; returns the channel its answer arrives on (as a dict)."""
        if kind == "usage":
            event, recv = usage_reported(agent, **payload)
            await self.send(event)
            return recv
        if kind == "turn_end":
            event, recv = turn_ended(agent, **payload)
            await self.send(event)
            return recv
        raise ValueError(f"not a child report: {kind!r}")

    async def usage(self, agent: str, *, tokens: int = 10, steps: int = 1) -> dict[str, Any]:
        recv = await self.ask(agent, "usage", input_tokens=tokens, output_tokens=0, steps=steps)
        with trio.fail_after(STEP):
            answer: dict[str, Any] = await recv.receive()
        return answer

    async def end_turn(
        self,
        agent: str,
        text: str = "did the work",
        *,
        status: TerminalStatus = "completed",
        idle: bool | None = None,
        changed: bool = False,
    ) -> trio.MemoryReceiveChannel[Any]:
        """One model call then the turn end; returns the channel the turn-end answer arrives on.

        ``changed``: a state-changing tool call succeeded in the turn (the hub's report, before the turn end).
        """
        await self.usage(agent)
        if changed:
            await self.send(ToolChangedState(agent, "memo__memo_set"))
        if idle is None:
            idle = text.strip() == "NO_REPLY" or not text.strip()
        return await self.ask(agent, "turn_end", status=status, text=text, idle=idle)

    async def subscribe(self, agent: str, uri: str, server: str = "memo") -> Acknowledged | Refused:
        send, recv = trio.open_memory_channel[Acknowledged | Refused](1)
        await self.send(SelfSubscribe(agent, uri, server, Reply(send)))
        with trio.fail_after(STEP):
            return await recv.receive()

    async def fill_blocking_route(self, server: str) -> None:
        """``server`` sends ``b://1``-``b://3``: one agent runs, one update waits, the third finds the route full."""
        for uri in ("b://1", "b://2", "b://3"):
            await self.send(ResourceChanged(server=server, uri=uri))

    async def subscribed_agent(self, *uris: str) -> Agent:
        """A change of ``memo://x`` spawns an agent (the test's routes must spawn for it); it subscribes to ``uris``."""
        await self.send(ResourceChanged(server="memo", uri="memo://x"))
        agent = await self.hooks.next_spawn()
        for uri in uris:
            assert await self.subscribe(agent.id, uri) == Acknowledged()
        return agent

    async def unsubscribe(self, agent: str, uri: str, server: str | None = "memo") -> Unsubscribed:
        send, recv = trio.open_memory_channel[Unsubscribed](1)
        await self.send(SelfUnsubscribe(agent, uri, server, Reply(send)))
        with trio.fail_after(STEP):
            return await recv.receive()

    async def exited(self, agent: str, returncode: int | None = 0) -> None:
        await self.send(ChildExited(agent=agent, pid=1000, returncode=returncode))

    async def exit_code(self) -> tuple[float, ExitCode]:
        with trio.fail_after(STEP):
            await self.done.wait()
        return self.result[0]


async def answer(recv: trio.MemoryReceiveChannel[Any]) -> tuple[float, dict[str, Any]]:
    """Wait for a held reply; returns (virtual time it arrived, the answer)."""
    with trio.fail_after(STEP):
        msg: dict[str, Any] = await recv.receive()
    return trio.current_time(), msg


def build(
    mode: modes.Mode,
    *,
    interval: float | None = None,
    session: modes.SessionMode | None = None,
    routes: Sequence[RouteSpec] = (),
    max_steps: int | None = None,
    max_tokens: int | None = None,
    grace: float = 25.0,
    max_restarts: int = 3,
    restart_period: float = 60.0,
    clock: Any = None,
    instruction: str = "work",
    deadline: float | None = None,
    required: frozenset[str] = frozenset(),
    declared: Sequence[str] = (),
    declared_required: frozenset[str] = frozenset(),
    caps: SubscriptionCaps | None = None,
) -> tuple[Reactor, FakeHooks, RecordingTelemetry]:
    now = trio.current_time()
    driver = modes.make_driver(mode, interval=interval, session=session, now_mono=now)
    counters = RunCounters()
    router = Router(on_drop=counters.drop)
    for spec in routes:
        router.add_route(spec)
    hooks = FakeHooks()
    telemetry = RecordingTelemetry()
    if isinstance(driver, modes.Schedule):
        clock = driver.source
    session_mode = driver.session if isinstance(driver, modes.Loop) else "fresh"
    reactor = Reactor(
        driver=driver,
        router=router,
        budget=Budget(
            max_steps=max_steps,
            max_tokens=max_tokens,
            deadline_at=None if deadline is None else now + deadline,
        ),
        governor=RestartGovernor(intensity=max_restarts, period=restart_period),
        hooks=hooks.hooks(),
        telemetry=telemetry,
        instruction=instruction,
        grace=grace,
        mode=mode,
        session=session_mode,
        clock=clock,
        required=required,
        subscriptions=declared_subscriptions(router, declared, declared_required),
        counters=counters,
        caps=caps,
    )
    return reactor, hooks, telemetry


@asynccontextmanager
async def running(
    mode: modes.Mode, *, startup_notices: Sequence[WatchNotice] = (), **kw: Any
) -> AsyncIterator[Harness]:
    reactor, hooks, telemetry = build(mode, **kw)
    reactor.queue_startup_notices(list(startup_notices))
    h = Harness(reactor, hooks, telemetry)

    async def run() -> None:
        code = await reactor.run()
        h.result.append((trio.current_time(), code))
        h.done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        yield h
        nursery.cancel_scope.cancel()


# --------------------------------------------------------------------------- loop


async def test_loop_interval_0_reenters_at_once_after_work_and_backs_off_when_idle(autojump_clock):
    async with running("loop", interval=0) as h:
        root = await h.hooks.next_spawn()
        assert (root.role, root.warm, root.session) == ("root", True, "root")
        times: list[float] = []
        # work, idle, idle, idle, work, idle: waits 0, 1, 2, 4, 0, 1
        for text in ["did A", "NO_REPLY", "NO_REPLY", "NO_REPLY", "did B", "NO_REPLY"]:
            ended_at = trio.current_time()
            t, msg = await answer(await h.end_turn(root.id, text, changed=text.startswith("did")))
            assert msg == {"action": "continue", "input": "work"}
            times.append(t - ended_at)
        assert times == [0.0, 1.0, 2.0, 4.0, 0.0, 1.0]
        reentries = [(f["after_s"], f["idle"]) for _, f in h.telemetry.timed("loop.reenter")]
        assert reentries == [(0.0, False), (1.0, True), (2.0, True), (4.0, True), (0.0, False), (1.0, True)]
        assert len(h.hooks.spawned) == 1  # warm: the same agent every shift
        # NO_REPLY turns publish nothing; real work does
        assert [p[2] for p in h.hooks.published] == ["did A", "did B"]


async def test_loop_idle_backoff_caps_at_60s(autojump_clock):
    async with running("loop", interval=0) as h:
        root = await h.hooks.next_spawn()
        waits = []
        for _ in range(8):
            ended_at = trio.current_time()
            t, _ = await answer(await h.end_turn(root.id, "NO_REPLY"))
            waits.append(t - ended_at)
        assert waits == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]


async def test_loop_interval_5_fresh_spawns_a_new_root_every_5s(autojump_clock):
    async with running("loop", interval=5) as h:
        first = await h.hooks.next_spawn()
        assert first.warm is False
        await trio.sleep(1.5)  # the shift takes 1.5 s
        t, msg = await answer(await h.end_turn(first.id, "did the work", changed=True))
        assert (t, msg) == (1.5, {"action": "exit"})
        await h.exited(first.id)
        second = await h.hooks.next_spawn()
        assert trio.current_time() == 6.5
        assert second.id != first.id
        # an idle shift keeps the configured cadence (backoff capped at the interval)
        t, msg = await answer(await h.end_turn(second.id, "NO_REPLY"))
        await h.exited(second.id)
        await h.hooks.next_spawn()
        assert trio.current_time() == 11.5
        assert [f["after_s"] for _, f in h.telemetry.timed("loop.reenter")] == [5.0, 5.0]


async def test_loop_warm_continues_the_same_agent_fresh_spawns_anew(autojump_clock):
    async with running("loop", interval=2, session="warm") as h:
        root = await h.hooks.next_spawn()
        for _ in range(3):
            _t, msg = await answer(await h.end_turn(root.id))
            assert msg == {"action": "continue", "input": "work"}
        assert trio.current_time() == 6.0
        assert [a.id for _, a in h.hooks.spawned] == [root.id]
        assert [f.get("warm") for _, f in h.telemetry.timed("loop.shift")] == [True, True, True]

    base = trio.current_time()
    async with running("loop", interval=2, session="fresh") as h:
        ids = []
        for _ in range(3):
            agent = await h.hooks.next_spawn()
            ids.append(agent.id)
            _, msg = await answer(await h.end_turn(agent.id))
            assert msg == {"action": "exit"}
            await h.exited(agent.id)
        await h.hooks.next_spawn()
        assert len(set(ids)) == 3
        assert [t - base for t, _ in h.hooks.spawned] == [0.0, 2.0, 4.0, 6.0]


async def test_loop_restart_governor_opens_the_breaker_and_exits_1(autojump_clock):
    async with running("loop", interval=0, max_restarts=2, restart_period=60) as h:
        for _ in range(3):
            agent = await h.hooks.next_spawn()
            await trio.sleep(1)
            await h.exited(agent.id, returncode=-9)  # crashed mid-turn
        t, code = await h.exit_code()
    assert code == ExitCode.CRASHED
    assert t == 4.5
    # each shift crashes after 1 s; restarts wait the governor's backoff (0.5 s, then 1 s);
    # the first run and 2 restarts, then the breaker
    assert [t for t, _ in h.hooks.spawned] == [0.0, 1.5, 3.5]
    assert [f["after_s"] for _, f in h.telemetry.timed("subagent.restart")] == [0.5, 1.0]
    assert len(h.telemetry.timed("governor.breaker_open")) == 1
    assert h.reactor.counters.agent_restarts == 2
    assert h.reactor.counters.totals()["restarts"] == 2


async def test_once_root_crash_exits_1_without_restart(autojump_clock):
    async with running("once") as h:
        root = await h.hooks.next_spawn()
        await h.usage(root.id)
        await h.exited(root.id, returncode=-9)
        t, code = await h.exit_code()
    assert (t, code) == (0.0, ExitCode.CRASHED)
    assert len(h.hooks.spawned) == 1
    assert h.telemetry.timed("subagent.exit")[0][1]["status"] == "crashed"


async def test_once_completed_exits_0_and_tells_the_root_to_exit(autojump_clock):
    async with running("once") as h:
        root = await h.hooks.next_spawn()
        _, msg = await answer(await h.end_turn(root.id, "the answer"))
        assert msg == {"action": "exit"}
        _, code = await h.exit_code()
    assert code == ExitCode.OK
    assert h.reactor.status.root_text == "the answer"


# --------------------------------------------------------------------------- schedule


async def test_schedule_fires_on_the_grid_and_coalesces_fires_while_the_root_runs(autojump_clock):
    async with running("schedule", interval=2) as h:
        a1 = await h.hooks.next_spawn()
        assert trio.current_time() == 0.0  # the first fire is at start
        # a1 runs for 5 s: the fires at 2 and 4 coalesce into ONE pending fire
        await trio.sleep(5)
        _, msg = await answer(await h.end_turn(a1.id))
        assert msg == {"action": "exit"}
        await h.exited(a1.id)
        a2 = await h.hooks.next_spawn()
        assert trio.current_time() == 5.0  # the pending fire runs at once
        _, _ = await answer(await h.end_turn(a2.id))
        await h.exited(a2.id)
        a3 = await h.hooks.next_spawn()
        assert trio.current_time() == 6.0  # back on the grid, no catch-up burst
        assert h.hooks.no_spawn_pending()
    assert [t for t, _ in h.hooks.spawned] == [0.0, 5.0, 6.0]
    assert [t for t, _ in h.telemetry.timed("timer.coalesced")] == [2.0, 4.0]
    assert a3.role == "root"


# --------------------------------------------------------------------------- budget


SESSION_A_SPAWN_B = [
    RouteSpec(match="memo://a", disposition=Continue("s"), debounce=0.25),
    RouteSpec(match="memo://b", disposition=Spawn(), debounce=0.25),
]
"""``memo://a`` goes to the warm session ``s``, ``memo://b`` spawns an agent."""


async def test_budget_spent_stops_spawning_drains_warm_sessions_and_exits_7(autojump_clock):
    async with running("reactive", routes=SESSION_A_SPAWN_B, max_steps=3) as h:
        await h.send(ResourceChanged(server="memo", uri="memo://a"))
        s = await h.hooks.next_spawn()
        assert (s.role, s.session, s.warm) == ("session", "s", True)
        held = await h.end_turn(s.id)  # step 1; the session goes idle, its reply held
        await h.send(ResourceChanged(server="memo", uri="memo://b"))
        b = await h.hooks.next_spawn()
        assert (await h.usage(b.id))["continue"] is True  # step 2
        assert await h.usage(b.id) == {"continue": False, "reason": "steps"}  # step 3: spent
        _, msg = await answer(held)
        assert msg == {"action": "exit"}  # the idle warm session is told to exit
        _, msg = await answer(await h.ask(b.id, "turn_end", status="exhausted_steps", text="", idle=True))
        assert msg == {"action": "exit"}
        # a change now starts nothing
        await h.send(ResourceChanged(server="memo", uri="memo://b"))
        await trio.sleep(1)
        assert h.hooks.no_spawn_pending()
        assert not h.done.is_set()  # two children still alive
        await h.exited(b.id)
        assert not h.done.is_set()
        await trio.sleep(1)
        await h.exited(s.id)
        t, code = await h.exit_code()
    assert (t, code) == (2.5, ExitCode.BUDGET)
    assert len(h.hooks.spawned) == 2
    assert len(h.telemetry.timed("budget.exhausted")) == 1


async def test_loop_budget_spent_exits_7_after_the_root_exits(autojump_clock):
    async with running("loop", interval=0, max_steps=2) as h:
        root = await h.hooks.next_spawn()
        _, msg = await answer(await h.end_turn(root.id, changed=True))
        assert msg["action"] == "continue"
        assert await h.usage(root.id) == {"continue": False, "reason": "steps"}
        _, msg = await answer(
            await h.ask(root.id, "turn_end", status="exhausted_steps", text="half", idle=False)
        )
        assert msg == {"action": "exit"}
        await trio.sleep(3)
        assert not h.done.is_set()
        await h.exited(root.id)
        t, code = await h.exit_code()
    assert (t, code) == (3.0, ExitCode.BUDGET)
    assert len(h.hooks.spawned) == 1


# --------------------------------------------------------------------------- drain


async def test_sigterm_exits_idle_sessions_lets_the_running_turn_finish_then_0(autojump_clock):
    async with running("reactive", routes=SESSION_A_SPAWN_B, grace=10) as h:
        await h.send(ResourceChanged(server="memo", uri="memo://a"))
        s = await h.hooks.next_spawn()
        held = await h.end_turn(s.id)
        await h.send(ResourceChanged(server="memo", uri="memo://b"))
        b = await h.hooks.next_spawn()
        await h.usage(b.id)
        await h.send(SignalReceived(signal.SIGTERM))
        t, msg = await answer(held)
        assert (t, msg) == (0.5, {"action": "exit"})
        await h.exited(s.id)
        # new changes are not delivered while draining
        await h.send(ResourceChanged(server="memo", uri="memo://b"))
        await trio.sleep(4)  # the running turn takes 4 more seconds, inside the grace
        assert h.reactor.live_agents() == [h.reactor.agents[b.id]]
        assert h.reactor.agents[b.id].phase is AgentPhase.TURN
        _, msg = await answer(await h.ask(b.id, "turn_end", status="completed", text="finished", idle=False))
        assert msg == {"action": "exit"}
        await h.exited(b.id)
        t, code = await h.exit_code()
    assert (t, code) == (4.5, ExitCode.OK)
    assert h.hooks.kill_all_at == []
    assert len(h.hooks.spawned) == 2
    assert ("a2", "completed", "finished") in h.hooks.published


async def test_drain_grace_elapsed_kills_all_at_exactly_grace_and_exits_143(autojump_clock):
    async with running("loop", interval=0, grace=3) as h:
        root = await h.hooks.next_spawn()
        await h.usage(root.id)
        await trio.sleep(1)
        await h.send(SignalReceived(signal.SIGTERM))
        t, code = await h.exit_code()
    assert (t, code) == (4.0, ExitCode.DRAIN_TIMEOUT)
    assert h.hooks.kill_all_at == [4.0]
    assert h.telemetry.timed("drain.timeout")[0][0] == 4.0


async def test_second_signal_exits_143_at_once(autojump_clock):
    async with running("loop", interval=0, grace=30) as h:
        root = await h.hooks.next_spawn()
        await h.usage(root.id)
        await h.send(SignalReceived(signal.SIGTERM))
        await trio.sleep(2)
        await h.send(SignalReceived(signal.SIGINT))
        t, code = await h.exit_code()
    assert (t, code) == (2.0, ExitCode.DRAIN_TIMEOUT)
    assert h.hooks.kill_all_at == [2.0]


async def test_sigterm_with_nothing_running_exits_0_at_once(autojump_clock):
    async with running("reactive", routes=[RouteSpec(match="memo://a")]) as h:
        await trio.sleep(7)
        await h.send(SignalReceived(signal.SIGTERM))
        t, code = await h.exit_code()
    assert (t, code) == (7.0, ExitCode.OK)


# --------------------------------------------------------------------------- reactive: spawn routes


async def test_debounce_is_exactly_250ms(autojump_clock):
    async with running("reactive", routes=[RouteSpec(match="memo://*")]) as h:
        await trio.sleep(1)
        await h.send(ResourceChanged(server="memo", uri="memo://notes"))
        agent = await h.hooks.next_spawn()
        assert trio.current_time() == 1.25
        assert agent.role == "spawn"
        assert "memo://notes" in agent.instruction


async def test_a_burst_is_one_spawn_and_quiet_separated_changes_are_two(autojump_clock):
    async with running("reactive", routes=[RouteSpec(match="memo://*")]) as h:
        for _ in range(5):  # a burst: a change every 100 ms
            await h.send(ResourceChanged(server="memo", uri="memo://notes", etag="e"))
            await trio.sleep(0.1)
        first = await h.hooks.next_spawn()
        assert trio.current_time() == pytest.approx(0.65)  # 250 ms after the last change
        await answer(await h.end_turn(first.id))
        await h.exited(first.id)
        await trio.sleep(5)
        await h.send(ResourceChanged(server="memo", uri="memo://notes"))
        await h.hooks.next_spawn()
        assert trio.current_time() == pytest.approx(5.9)
    assert len(h.hooks.spawned) == 2
    assert h.reactor.counters.coalesced.total() == 4


async def test_max_inflight_is_respected(autojump_clock):
    routes = [RouteSpec(match="memo://*", disposition=Spawn(max_inflight=2))]
    async with running("reactive", routes=routes) as h:
        for n in range(3):
            await h.send(ResourceChanged(server="memo", uri=f"memo://n{n}"))
        a1 = await h.hooks.next_spawn()
        a2 = await h.hooks.next_spawn()
        await trio.sleep(3)
        assert h.hooks.no_spawn_pending()  # the third waits for a free slot
        await answer(await h.end_turn(a1.id))
        a3 = await h.hooks.next_spawn()
        assert trio.current_time() == 3.25  # at once when the slot frees, no new debounce
        assert "memo://n2" in a3.instruction
    assert [t for t, _ in h.hooks.spawned] == [0.25, 0.25, 3.25]
    assert a2.id != a3.id


async def test_unrouted_changes_are_counted_and_dropped(autojump_clock):
    async with running("reactive", routes=[RouteSpec(match="memo://notes")]) as h:
        await h.send(ResourceChanged(server="memo", uri="memo://other"))
        await trio.sleep(1)
        assert h.hooks.no_spawn_pending()
    assert h.reactor.counters.unrouted == 1
    assert h.telemetry.timed("resource.updated")[0][1]["route"] is None


# --------------------------------------------------------------------------- reactive: continue routes


async def test_continue_route_delivers_the_queued_set_once_only_when_idle_in_order(autojump_clock):
    routes = [RouteSpec(match="memo://*", disposition=Continue("s"))]
    async with running("reactive", routes=routes, instruction="") as h:
        await h.send(ResourceChanged(server="memo", uri="memo://u1"))
        s = await h.hooks.next_spawn()
        assert trio.current_time() == 0.25
        assert "memo://u1" in s.instruction
        # mid-turn: three changes (u2 twice) queue up; nothing is delivered into a running turn
        await trio.sleep(0.75)
        for uri in ("memo://u2", "memo://u3", "memo://u2"):
            await h.send(ResourceChanged(server="memo", uri=uri))
            await trio.sleep(0.1)
        await trio.sleep(2)  # the debounce elapsed long ago; the session is still mid-turn
        assert len(h.telemetry.timed("session.deliver")) == 1  # only the start
        t, msg = await answer(await h.end_turn(s.id))
        assert t == pytest.approx(3.3)  # delivered the moment the turn ended
        assert msg["action"] == "continue"
        lines = msg["input"].splitlines()
        assert [ln.split()[1] for ln in lines[1:]] == ["memo://u2", "memo://u3"]  # one set, arrival order
        delivers = h.telemetry.timed("session.deliver")
        assert len(delivers) == 2
        assert delivers[1][1]["agent"] == s.id
        assert len(h.telemetry.timed("route.deliver")) == 2
    assert len(h.hooks.spawned) == 1


# --------------------------------------------------------------------------- self-subscribe


async def test_self_subscribe_routes_ahead_of_declared_is_exclusive_and_unsubscribes(autojump_clock):
    async with running("reactive", routes=[RouteSpec(match="memo://*", route_id="all")]) as h:
        a1 = await h.subscribed_agent("memo://notes")
        held = await h.end_turn(a1.id, "watching")
        # the next change to memo://notes wakes the SAME agent, not the declared spawn route
        await trio.sleep(1)
        await h.send(ResourceChanged(server="memo", uri="memo://notes"))
        t, msg = await answer(held)
        assert t == pytest.approx(1.5)
        assert msg["action"] == "continue"
        assert "memo://notes" in msg["input"]
        routed = h.telemetry.timed("resource.updated")[-1][1]
        assert routed["route"] == f"self:{a1.id}:memo://notes"
        assert h.telemetry.timed("session.deliver")[-1][1]["agent"] == a1.id
        # a second session may not take the same URI
        await h.send(ResourceChanged(server="memo", uri="memo://y"))
        a2 = await h.hooks.next_spawn()
        refused = await h.subscribe(a2.id, "memo://notes")
        assert isinstance(refused, Refused)
        assert "memo://notes" in refused.error
        assert repr(a1.id) in refused.error
        # unsubscribe removes the self route; nothing else needs the URI upstream
        # (the hub path with a declared subscription: tests/routing/test_routing.py)
        assert await h.unsubscribe(a1.id, "memo://notes") == Unsubscribed(existed=True, needed=False)
        assert h.reactor.router.get(f"self:{a1.id}:memo://notes") is None


async def test_changes_lost_with_a_removed_route_are_counted_once_for_metrics_and_exit(autojump_clock):
    # A busy session's own route holds a change; unsubscribing removes the route and loses it.
    async with running("reactive", routes=[RouteSpec(match="memo://*", route_id="all")]) as h:
        await h.send(ResourceChanged(server="memo", uri="memo://x"))
        a1 = await h.hooks.next_spawn()
        assert await h.subscribe(a1.id, "memo://notes") == Acknowledged()
        await h.send(ResourceChanged(server="memo", uri="memo://notes"))
        await trio.sleep(1)  # past the debounce: queued, the session is mid-turn
        assert await h.unsubscribe(a1.id, "memo://notes") == Unsubscribed(existed=True, needed=False)
        snapshot = h.reactor.metrics_snapshot()
    assert snapshot.dropped == {"route_removed": 1}
    assert h.reactor.counters.totals()["dropped_events"] == 1  # supervisor.exit's count: the same
    assert sum(snapshot.routed.values()) == h.reactor.counters.totals()["routed"] == 2


async def test_unsubscribing_a_declared_uri_tells_the_hub_to_keep_the_upstream_subscription(autojump_clock):
    async with running(
        "reactive", routes=[RouteSpec(match="memo://*", route_id="all")], declared=["memo:memo://notes"]
    ) as h:
        a1 = await h.subscribed_agent("memo://notes")
        answer = await h.unsubscribe(a1.id, "memo://notes")
        assert answer == Unsubscribed(existed=True, needed=True)
        await h.end_turn(a1.id, "done")
        await h.exited(a1.id)
        await h.send(ResourceChanged(server="memo", uri="memo://y"))
        await h.hooks.next_spawn()
    # the agent exited without a subscription of its own: nothing is released
    assert h.hooks.unsubscribed == []
    [(_, unsub)] = h.telemetry.timed("self.unsubscribe")
    assert (unsub["uri"], unsub["kept"]) == ("memo://notes", True)


async def test_a_subscribe_past_a_cap_is_refused_counted_and_said_once_and_the_session_goes_on(
    autojump_clock,
):
    """rfcs/0265: the model is told (``Refused``), /metrics counts every refusal, telemetry says it once per hit."""
    caps = SubscriptionCaps(per_session=2, total=3)
    async with running("reactive", routes=[RouteSpec(match="memo://*", route_id="all")], caps=caps) as h:
        a1 = await h.subscribed_agent("memo://a", "memo://b")
        for uri in ("memo://c", "memo://d", "memo://c"):
            refused = await h.subscribe(a1.id, uri)
            assert isinstance(refused, Refused)
            assert refused.error.startswith(
                f"subscribe {uri!r} refused: this session already holds 2 subscriptions"
            )
        assert h.reactor.router.get(f"self:{a1.id}:memo://c") is None
        # Another session takes the last slot of the total, then meets the total cap.
        await h.send(ResourceChanged(server="memo", uri="memo://y"))
        a2 = await h.hooks.next_spawn()
        assert await h.subscribe(a2.id, "memo://e") == Acknowledged()
        total = await h.subscribe(a2.id, "memo://f")
        assert isinstance(total, Refused)
        assert "the limit (max_self_subscriptions = 3)" in total.error
        # The refused session still works: a change to a URI it holds wakes it.
        held = await h.end_turn(a1.id, "watching")
        await h.send(ResourceChanged(server="memo", uri="memo://a"))
        _t, msg = await answer(held)
        assert msg["action"] == "continue"
        # Its exit frees its slots: a2 subscribes again, and a later refusal is a new hit.
        await h.end_turn(a1.id, "done")
        await h.exited(a1.id)
        assert await h.subscribe(a2.id, "memo://f") == Acknowledged()
        assert isinstance(await h.subscribe(a2.id, "memo://g"), Refused)
        snapshot = h.reactor.metrics_snapshot()
    assert snapshot.limit_refusals == {
        "max_self_subscriptions_per_session": 4,
        "max_self_subscriptions": 1,
        "watches.max_watches": 0,
        "watches.max_watches_total": 0,
        "max_children": 0,
        "max_agents": 0,
    }
    assert h.reactor.counters.totals()["limit_refusals"] == 5
    reached = [(f["limit"], f["agent"], f["uri"]) for _, f in h.telemetry.timed("limit.reached")]
    assert reached == [
        ("max_self_subscriptions_per_session", a1.id, "memo://c"),
        ("max_self_subscriptions", a2.id, "memo://f"),
        ("max_self_subscriptions_per_session", a2.id, "memo://g"),
    ]


async def test_a_self_tool_request_of_an_unknown_agent_is_refused(autojump_clock):
    async with running("reactive", routes=[RouteSpec(match="memo://*")]) as h:
        assert await h.subscribe("a99", "memo://x") == Refused("unknown agent 'a99'")
        assert await h.unsubscribe("a99", "memo://x") == Unsubscribed(existed=False, needed=True)
        assert h.reactor.router.get("self:a99:memo://x") is None


# --------------------------------------------------------------------------- reactive timer


async def test_reactive_timer_route_receives_interval_fires(autojump_clock):
    routes = [RouteSpec(match="", timer=True, debounce=0.0, route_id="tick")]
    async with running("reactive", routes=routes, clock=IntervalSource(2, start=2)) as h:
        a1 = await h.hooks.next_spawn()
        assert trio.current_time() == 2.0
        assert a1.route == "tick"
        assert a1.role == "spawn"
        await answer(await h.end_turn(a1.id))
        await h.exited(a1.id)
        a2 = await h.hooks.next_spawn()
        assert trio.current_time() == 4.0
        assert a2.route == "tick"
    assert [t for t, _ in h.telemetry.timed("timer.fire")][:2] == [2.0, 4.0]


async def test_deadline_ends_an_idle_loop_at_exactly_the_deadline(autojump_clock):
    async with running("loop", interval=0, deadline=10) as h:
        root = await h.hooks.next_spawn()
        for _ in range(3):  # idle shifts: waits 1, 2, 4 s (t = 7); the next wait would pass 10
            await answer(await h.end_turn(root.id, "NO_REPLY"))
        await h.end_turn(root.id, "NO_REPLY")
        t, code = await h.exit_code()
    assert (t, code) == (10.0, ExitCode.DEADLINE)
    assert len(h.hooks.spawned) == 1


async def test_a_self_subscribed_agent_that_dies_gives_the_uri_back_to_the_declared_route(autojump_clock):
    async with running("reactive", routes=[RouteSpec(match="memo://*", route_id="all")]) as h:
        a1 = await h.subscribed_agent("memo://notes")
        await h.end_turn(a1.id, "watching")
        await h.exited(a1.id, returncode=-9)  # killed while idle
        await h.send(ResourceChanged(server="memo", uri="memo://notes"))
        a2 = await h.hooks.next_spawn()
        assert a2.route == "all"
    assert h.reactor.router.get(f"self:{a1.id}:memo://notes") is None


async def test_a_self_subscribed_spawn_agent_frees_its_route_slot_at_its_first_turn_end(autojump_clock):
    routes = [RouteSpec(match="memo://*", disposition=Spawn(max_inflight=1), route_id="all")]
    async with running("reactive", routes=routes) as h:
        await h.send(ResourceChanged(server="memo", uri="memo://a"))
        a1 = await h.hooks.next_spawn()
        assert await h.subscribe(a1.id, "memo://notes") == Acknowledged()
        await h.end_turn(a1.id, "watching")  # held warm for its subscription
        await h.send(ResourceChanged(server="memo", uri="memo://b"))
        a2 = await h.hooks.next_spawn()  # the one slot is free again
        assert "memo://b" in a2.instruction
        assert h.reactor.agents[a1.id].phase.value == "idle"


async def test_a_dead_subscribers_upstream_subscription_is_released_unless_declared(autojump_clock):
    async with running(
        "reactive", routes=[RouteSpec(match="memo://*", route_id="all")], declared=["memo:memo://declared"]
    ) as h:
        a1 = await h.subscribed_agent("memo://mine", "memo://declared")
        await h.end_turn(a1.id, "watching")
        await h.exited(a1.id, returncode=-9)
        await h.send(ResourceChanged(server="memo", uri="memo://y"))  # a wake, so the exit was handled
        await h.hooks.next_spawn()
    assert h.hooks.unsubscribed == [("memo", "memo://mine")]
    released = h.telemetry.timed("self.unsubscribe")
    assert [(f["uri"], f["reason"]) for _, f in released] == [("memo://mine", "owner exited")]


# --------------------------------------------------------------------------- required servers and reaping


async def test_once_starts_the_root_only_when_every_required_server_connected(autojump_clock):
    async with running("once", required=frozenset({"memo", "files"})) as h:
        await trio.sleep(5)
        assert h.hooks.spawned == []
        [(_, waiting)] = h.telemetry.timed("reactor.waiting")
        assert waiting["servers"] == ["files", "memo"]
        await h.send(ServerStateChanged("memo", ServerState.CONNECTED, required=True))
        await h.send(ServerStateChanged("files", ServerState.RESTARTING, required=True, attempt=1))
        await trio.sleep(1)
        assert h.hooks.spawned == []
        await h.send(ServerStateChanged("files", ServerState.CONNECTED, required=True))
        root = await h.hooks.next_spawn()
        assert (trio.current_time(), root.role) == (6.0, "root")
        await answer(await h.end_turn(root.id, "done"))
        _, code = await h.exit_code()
    assert code == ExitCode.OK


async def test_once_with_a_required_server_that_fails_exits_6_and_never_starts_the_root(autojump_clock):
    async with running("once", required=frozenset({"memo"})) as h:
        await h.send(ServerStateChanged("memo", ServerState.FAILED, required=True, attempt=5, error="exited"))
        _, code = await h.exit_code()
    assert code == ExitCode.REQUIRED_SERVER
    assert h.hooks.spawned == []


async def test_nothing_is_delivered_and_no_clock_fires_before_the_required_servers_connect(autojump_clock):
    routes = [RouteSpec(match="memo://*", route_id="all", debounce=0.5)]
    async with running("reactive", routes=routes, required=frozenset({"memo"})) as h:
        await h.send(ResourceChanged(server="memo", uri="memo://x"))
        await trio.sleep(10)
        assert h.hooks.spawned == []
        await h.send(ServerStateChanged("memo", ServerState.CONNECTED, required=True))
        a1 = await h.hooks.next_spawn()
        assert (trio.current_time(), a1.route) == (10.0, "all")


async def test_reap_writes_the_once_roots_subagent_exit(autojump_clock):
    async with running("once") as h:
        root = await h.hooks.next_spawn()
        await answer(await h.end_turn(root.id, "done"))  # told to exit
        await h.exit_code()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(h.reactor.reap)
            await h.exited(root.id)
        assert trio.current_time() == 0.0  # no wait beyond the child's own exit
    [(_, ex)] = h.telemetry.timed("subagent.exit")
    assert (ex["agent"], ex["status"], ex["returncode"], ex.get("stopped")) == (root.id, "completed", 0, None)
    assert h.hooks.kill_all_at == []


async def test_reap_kills_agents_still_running_and_reports_unseen_exits(autojump_clock):
    from agentd.supervisor.loop.reactor import REAP_KILL_WAIT

    async with running("once", deadline=3) as h:
        root = await h.hooks.next_spawn()
        t, code = await h.exit_code()
        assert (t, code) == (3.0, ExitCode.DEADLINE)
        await h.reactor.reap()  # the root never reports its exit
        assert h.hooks.kill_all_at == [3.0]
        assert trio.current_time() == 3.0 + REAP_KILL_WAIT
    [(_, ex)] = h.telemetry.timed("subagent.exit")
    assert (ex["agent"], ex["status"], ex["returncode"], ex["stopped"]) == (root.id, "deadline", None, True)


# --------------------------------------------------------------------------- loop: deliveries are real work


async def test_a_delivery_into_the_warm_loop_root_resets_the_idle_backoff(autojump_clock):
    routes = [RouteSpec(match="memo://notes", disposition=Continue("root"), debounce=0.0, route_id="notes")]
    async with running("loop", interval=0, routes=routes) as h:
        root = await h.hooks.next_spawn()
        for _ in range(3):  # idle shifts wait 1, 2, 4 s (t = 7)
            await answer(await h.end_turn(root.id, "NO_REPLY"))
        held = await h.end_turn(root.id, "NO_REPLY")  # the next wait would be 8 s
        await trio.sleep(2)
        await h.send(ResourceChanged(server="memo", uri="memo://notes"))
        t, msg = await answer(held)
        assert (t, "memo://notes" in msg["input"]) == (9.0, True)
        held = await h.end_turn(root.id, "NO_REPLY")  # the delivered turn answered nothing
        t, msg = await answer(held)
        assert (t, msg["input"]) == (9.0, "work")  # a shift with a delivery is not idle: no wait
        held = await h.end_turn(root.id, "NO_REPLY")  # an idle shift again: the backoff starts over
        t, msg = await answer(held)
        assert (t, msg["input"]) == (10.0, "work")
    reentries = [(f["after_s"], f["idle"]) for _, f in h.telemetry.timed("loop.reenter")]
    assert reentries == [(1.0, True), (2.0, True), (4.0, True), (8.0, True), (0.0, False), (1.0, True)]


async def test_a_loop_that_only_talks_backs_off_and_one_that_changes_state_keeps_its_cadence(autojump_clock):
    async with running("loop", interval=0) as h:
        root = await h.hooks.next_spawn()
        model_calls = 0
        while trio.current_time() < 35.0 and model_calls < 100:
            model_calls += 1  # end_turn makes one model call (its usage report), then ends the turn
            await answer(await h.end_turn(root.id, "Nothing to do."))
        # The hub only tells of state-changing calls: a read, or a report for no agent, changes nothing.
        await h.send(ToolChangedState("a999", "memo__memo_set"))
        assert model_calls == 6  # shifts at 0, 1, 3, 7, 15 and 31 s
        reentries = [(f["after_s"], f["idle"]) for _, f in h.telemetry.timed("loop.reenter")]
        assert reentries == [(1.0, True), (2.0, True), (4.0, True), (8.0, True), (16.0, True), (32.0, True)]
        assert [p[2] for p in h.hooks.published] == [
            "Nothing to do."
        ] * 6  # talk is published, but is no work

    async with running("loop", interval=0) as h:
        root = await h.hooks.next_spawn()
        started = trio.current_time()
        for _ in range(5):
            await answer(await h.end_turn(root.id, "saved a memo", changed=True))
        assert trio.current_time() == started  # no backoff: every shift re-entered at once
        assert [f["after_s"] for _, f in h.telemetry.timed("loop.reenter")] == [0.0] * 5


# --------------------------------------------------------------------------- flat over time


async def test_hundreds_of_exited_agents_leave_the_reactor_holding_a_bounded_record(autojump_clock):
    routes = [RouteSpec(match="memo://x*", disposition=Spawn(max_inflight=1), debounce=0.0, route_id="x")]
    async with running("reactive", routes=routes) as h:
        for n in range(300):
            await h.send(ResourceChanged(server="memo", uri=f"memo://x{n}"))
            agent = await h.hooks.next_spawn()
            if n == 150:  # a status view walks only what runs: the 150 before it are gone from the table
                assert [a.id for a in h.reactor.agents.live()] == [agent.id] == ["a151"]
                assert (len(h.reactor.agents), len(h.reactor.agents.recent())) == (1, 50)
            if n % 3:
                _, msg = await answer(await h.end_turn(agent.id))
                assert msg == {"action": "exit"}
            else:  # a third subscribe to a URI of their own and are woken by it once (a session, a self route)
                assert await h.subscribe(agent.id, f"memo://s{n}") == Acknowledged()
                await h.send(ResourceChanged(server="memo", uri=f"memo://s{n}"))
                _, msg = await answer(await h.end_turn(agent.id))
                assert "memo://s" in msg["input"]
                await h.end_turn(agent.id, "NO_REPLY")  # held warm for its subscription
                await h.exited(agent.id)
                continue
            await h.exited(agent.id)
        await h.send(SignalReceived(signum=signal.SIGTERM))
        assert (await h.exit_code())[1] == ExitCode.OK
    agents = h.reactor.agents
    assert (len(agents), agents.started, agents.forgotten) == (0, 300, 300)
    assert [a.id for a in agents.recent()] == [f"a{n}" for n in range(251, 301)]
    assert [r.id for r in h.reactor.router.routes()] == ["x"]  # every self route went with its agent
    assert agents.session_agent("a1") is None
    # Counters and histograms count the sessions' own routes under their kind, not one series each.
    assert set(h.reactor.counters.routed) == {"x", "self"}
    assert set(h.telemetry.histograms.snapshot()["event_to_agent"]) == {("x",), ("self",)}
    assert len(h.hooks.unsubscribed) == 100


# --------------------------------------------------------------------------- start-up re-read, drops, block


async def test_a_route_that_opts_out_skips_only_the_start_up_re_read(autojump_clock):
    routes = [
        RouteSpec(match="memo://quiet", route_id="quiet", reread_on_start=False),
        RouteSpec(match="memo://*", route_id="all"),
    ]
    async with running("reactive", routes=routes) as h:
        await h.send(ResourceChanged(server="memo", uri="memo://quiet", kind="synthetic", startup=True))
        await h.send(ResourceChanged(server="memo", uri="memo://loud", kind="synthetic", startup=True))
        a1 = await h.hooks.next_spawn()
        assert a1.route == "all"
        await h.send(ResourceChanged(server="memo", uri="memo://quiet", kind="synthetic"))  # a reconnect's
        a2 = await h.hooks.next_spawn()
        assert a2.route == "quiet"
    [(_, skipped)] = h.telemetry.timed("resource.reread_skipped")
    assert (skipped["uri"], skipped["route"]) == ("memo://quiet", "quiet")


async def test_drop_telemetry_and_metrics_use_the_routers_reasons(autojump_clock):
    routes = [
        RouteSpec(
            match="o://*", disposition=Spawn(max_inflight=1), queue_cap=1, overflow="drop_oldest", debounce=0
        ),
        RouteSpec(match="c://*", disposition=Spawn(max_inflight=1), queue_cap=1, debounce=0),
    ]
    async with running("reactive", routes=routes) as h:
        for uri in ("o://1", "o://2", "o://3", "c://1", "c://2", "c://3"):
            await h.send(ResourceChanged(server="s", uri=uri))
        await h.hooks.next_spawn()
        await h.hooks.next_spawn()
        await trio.sleep(1)
        snapshot = h.reactor.metrics_snapshot()
    dropped = [f for _, f in h.telemetry.timed("route.dropped")]
    assert dropped == [{"route": "r0", "uri": "o://2", "reason": "drop_oldest", "incoming": "o://3"}]
    # coalesce keeps c://3 aside until there is room (rfcs/0372): deferred, not dropped.
    assert [f for _, f in h.telemetry.timed("route.deferred")] == [{"route": "r1", "uri": "c://3"}]
    assert snapshot.dropped == {"drop_oldest": 1}
    reasons = [f.get("reason") for _, f in h.telemetry.timed("resource.updated")]
    assert reasons == [None, None, "drop_oldest", None, None, None]
    outcomes = [f.get("outcome") for _, f in h.telemetry.timed("resource.updated")]
    assert outcomes[3:] == ["enqueued", "enqueued", "deferred"]


BLOCK_ONE = RouteSpec(
    match="b://*", disposition=Spawn(max_inflight=1), queue_cap=1, overflow="block", debounce=0
)
"""A blocking route with one agent and one queue slot: a third update fills it."""


async def test_a_full_block_route_pauses_its_server_until_there_is_room(autojump_clock):
    async with running("reactive", routes=[BLOCK_ONE]) as h:
        await h.fill_blocking_route("slow")
        a1 = await h.hooks.next_spawn()
        await trio.sleep(1)
        assert h.hooks.paused == [(0.0, "slow", True)]
        await answer(await h.end_turn(a1.id))  # frees the slot: b://2 goes, b://3 moves into the queue
        await h.hooks.next_spawn()
        await trio.sleep(1)
    assert h.hooks.paused == [(0.0, "slow", True), (1.0, "slow", False)]
    assert [f["server"] for _, f in h.telemetry.timed("upstream.paused")] == ["slow"]
    assert [f["server"] for _, f in h.telemetry.timed("upstream.resumed")] == ["slow"]


# --------------------------------------------------------------------------- readiness


async def test_readiness_fails_for_a_declared_subscription_that_was_released_or_resolves_to_nothing(
    autojump_clock,
):
    async with running("reactive", declared=["memo:memo://notes"]) as h:
        assert h.reactor.ready() == (False, "subscriptions not established: memo:memo://notes")
        h.reactor.readiness.on_subscription_state("memo", "memo://notes", "established")
        assert h.reactor.ready() == (True, "ok")
    nothing = ["memo:memo://notes", "notes:file:///*"]
    async with running("reactive", declared=nothing) as h:
        h.reactor.readiness.on_subscription_state("memo", "memo://notes", "established")
        assert h.reactor.ready() == (True, "ok")  # an optional server: a warning only
        assert h.reactor.metrics_snapshot().subscriptions_unresolved == 1
    async with running("reactive", declared=nothing, declared_required=frozenset({"notes"})) as h:
        h.reactor.readiness.on_subscription_state("memo", "memo://notes", "established")
        ready, reason = h.reactor.ready()
        assert not ready
        assert reason.startswith(
            "declared subscription 'notes:file:///*' resolves to nothing: no concrete resource matches"
        )
        assert h.reactor.metrics_snapshot().subscriptions_unresolved == 1


# --------------------------------------------------------------------------- schedule: a declared timer route


async def test_schedule_fires_go_to_a_declared_timer_route(autojump_clock):
    routes = [RouteSpec(match="", timer=True, disposition=Continue("ticks"), debounce=0.0, route_id="tick")]
    async with running("schedule", interval=5, routes=routes) as h:
        a1 = await h.hooks.next_spawn()
        assert (trio.current_time(), a1.role, a1.session) == (0.0, "session", "ticks")
        held = await h.end_turn(a1.id, "tick")
        t, msg = await answer(held)
        assert t == 5.0
        assert "agentd://timer" in msg["input"]
    assert len(h.hooks.spawned) == 1


async def test_a_second_server_feeding_a_blocked_route_is_paused_too(autojump_clock):
    async with running("reactive", routes=[BLOCK_ONE]) as h:
        await h.fill_blocking_route("one")
        await h.hooks.next_spawn()
        await trio.sleep(1)
        await h.send(ResourceChanged(server="two", uri="b://4"))  # the route is already blocked
        await trio.sleep(1)
    assert h.hooks.paused == [(0.0, "one", True), (1.0, "two", True)]
    assert h.reactor.backpressure.paused == {"one": {"r0"}, "two": {"r0"}}


# --------------------------------------------------------------------------- watch restore


def restore_notice(session: str) -> WatchNotice:
    return WatchNotice(session=session, watch="", uri="", text=f"<watches-restored>{session}", kind="restore")


async def test_the_restore_notice_rides_in_the_warm_roots_first_turn(autojump_clock):
    """A restart costs no extra turn: the root's first turn carries the restore notice."""
    notices = [restore_notice("root"), restore_notice("a7")]
    async with running("loop", interval=2, session="warm", startup_notices=notices) as h:
        root = await h.hooks.next_spawn()
        assert root.instruction == "work\n\n<watches-restored>root"
        # The other session (no agent yet) is started warm with its notice, as before.
        other = await h.hooks.next_spawn()
        assert (other.session, other.instruction) == ("a7", "work\n\n<watches-restored>a7")
        t, msg = await answer(await h.end_turn(root.id, "NO_REPLY"))
        # No follow-up turn for the notice: the next input is the loop's next shift.
        assert (t, msg) == (2.0, {"action": "continue", "input": "work"})
        [(_, suppressed)] = [e for e in h.telemetry.timed("reply.suppressed") if e[1]["agent"] == root.id]
        assert suppressed["watch"] == [""]
    assert [a.id for _, a in h.hooks.spawned] == [root.id, other.id]
