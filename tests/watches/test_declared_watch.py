"""Declared watches (rfcs/0078): a real reactor, a real WatchManager, the memo server over stdio.

The reactor runs its real loop; only its ``spawn`` hook is a recorder (no
child processes), and turn ends are sent to it as the child's channel would.
Every wait is on telemetry or a channel, bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import trio

from agentd.config import RouteConfig
from agentd.core.errors import ConfigError
from agentd.events import ChildExited, SignalReceived
from agentd.supervisor.loop.budget import Budget
from agentd.supervisor.loop.governor import RestartGovernor
from agentd.supervisor.loop.reactor import Agent, Reactor, open_channel
from agentd.supervisor.routing.routes import build_router, staged_routes
from agentd.triggers import mode as modes
from agentd.upstream import Upstream
from agentd.watches.limits import WatchLimits
from agentd.watches.manager import WatchManager
from agentd.watches.state import load
from tests.mcpservers.helpers import Spec
from tests.support.reactor import spawn_hooks
from tests.support.reports import turn_ended
from tests.support.telemetry import RecordingTelemetry

#: Short stage debounce so a notice follows a change within a fraction of a second.
FAST = WatchLimits(debounce_quiet_secs=0.05, debounce_max_secs=0.5)

#: Bound on any single wait (generous for a loaded 2-core machine).
WAIT = 15.0

#: Keeps ``todo`` changes, drops every other key.
TODO_ONLY = "f\"{event['type']} {event['key']}={event['new']}\" if event['key'] == 'todo' else None"


@dataclass
class Stack:
    reactor: Reactor
    manager: WatchManager
    memo: Upstream
    telemetry: RecordingTelemetry
    spawned: list[Agent] = field(default_factory=list)

    async def memo_set(self, key: str, value: Any) -> None:
        result = await self.memo.call_tool("memo_set", {"key": key, "value": value})
        assert not result.is_error, result

    async def spawn(self, count: int) -> Agent:
        """Wait for the ``count``-th spawned agent."""
        await self.telemetry.wait("subagent.spawn", count=count)
        return self.spawned[count - 1]

    async def end_turn(self, agent: Agent, text: str = "done") -> trio.MemoryReceiveChannel[Any]:
        """End the agent's turn as its child would; the reactor answers on the returned channel."""
        event, recv = turn_ended(agent.id, text=text)
        await self.reactor.send.send(event)
        return recv


async def answer(recv: trio.MemoryReceiveChannel[Any]) -> dict[str, Any]:
    with trio.fail_after(WAIT):
        return dict(await recv.receive())


def memo_spec(path: Path) -> Spec:
    return Spec(
        name="memo", command=sys.executable, args=["-m", "agentd", "serve", "memo", "--file", str(path)]
    )


@asynccontextmanager
async def stack(memo: Path, *routes: RouteConfig, state_path: Path | None = None) -> AsyncIterator[Stack]:
    """agentd's reactive parts wired as the app does, with ``memo://notes`` subscribed."""
    settings = SimpleNamespace(
        routes=list(routes), instruction="mind the notes", mode="reactive", session="fresh", subscriptions=[]
    )
    telemetry = RecordingTelemetry(timeout=WAIT)
    spawned: list[Agent] = []
    hooks = spawn_hooks(spawned.append)
    driver = modes.make_driver("reactive")
    channel = open_channel()
    upstream = Upstream(memo_spec(memo), channel[0], telemetry)
    staged = staged_routes(settings)
    manager = WatchManager(
        upstreams={"memo": upstream},
        events=channel[0],
        telemetry=telemetry,
        limits=FAST,
        server_for=lambda _uri: "memo",
        state_path=state_path,
        routes=staged,
    )
    reactor = Reactor(
        driver=driver,
        router=build_router(settings),
        budget=Budget(max_steps=None, max_tokens=None, deadline_at=None),
        governor=RestartGovernor(intensity=5, period=60.0),
        hooks=hooks,
        telemetry=telemetry,
        instruction=settings.instruction,
        grace=5.0,
        mode="reactive",
        session="fresh",
        channel=channel,
        watches=manager,
        staged={s.route_id: s for s in staged},
    )
    s = Stack(reactor=reactor, manager=manager, memo=upstream, telemetry=telemetry, spawned=spawned)
    async with trio.open_nursery() as nursery:
        await nursery.start(upstream.run)
        await nursery.start(manager.run)
        await manager.check_routes()
        await manager.restore(_NoRoutes())
        nursery.start_soon(reactor.run)
        await upstream.subscribe("memo://notes")
        yield s
        nursery.cancel_scope.cancel()


class _NoRoutes:
    """Restore's route table: these tests have no self-tool watches."""

    async def add(self, **_kw: Any) -> None:
        raise AssertionError("no self-tool watch is restored here")

    async def remove(self, **_kw: Any) -> None:
        pass


def todo_route(**extra: Any) -> RouteConfig:
    return RouteConfig(name="todo", match="memo://notes", debounce=0.0, on_event=TODO_ONLY, **extra)


async def test_spawn_route_respects_max_inflight_and_joins_queued_notices(tmp_path: Path) -> None:
    memo = tmp_path / "notes.json"
    memo.write_text(json.dumps({"todo": "milk"}))
    route = todo_route(disposition="spawn", max_inflight=1, template="Notes at {uri} on {server} changed.")
    async with stack(memo, route) as s:
        started = await s.telemetry.wait("watch.started")
        # on_event implies extract = "auto": the memo's mime type says state.
        assert (started["route"], started["uri"], started["shape"], started["session"]) == (
            "todo",
            "memo://notes",
            "state",
            None,
        )
        await s.memo_set("noise", 1)  # dropped by the filter: no notice, no agent
        await s.telemetry.wait("watch.event", lambda e: e["outcome"] == "dropped")
        await s.memo_set("todo", "bread")
        first = await s.spawn(1)
        assert (first.role, first.route) == ("spawn", "todo")
        assert first.instruction.startswith(
            'Notes at memo://notes on memo changed.\n\n<watch-event name="todo" uri="memo://notes">\n'
            "MODIFIED todo=bread\n</watch-event>\n"
        )
        # The one slot is taken: two more notices wait for it.
        await s.memo_set("todo", "cheese")
        await s.telemetry.wait("watch.notice", count=2)
        await s.memo_set("todo", "eggs")
        await s.telemetry.wait("watch.notice", count=3)
        assert len(s.spawned) == 1
        assert await answer(await s.end_turn(first)) == {"action": "exit"}
        second = await s.spawn(2)
        body = second.instruction.split("\n\n", 1)[1]
        assert "MODIFIED todo=cheese" in body
        assert "MODIFIED todo=eggs" in body
        assert body.count("<watch-event") == 2
        deliver = s.telemetry.find("route.deliver", lambda e: e.get("notices") == 2)
        assert [d["route"] for d in deliver] == ["todo"]
        await s.reactor.send.send(ChildExited(agent=first.id, pid=1, returncode=0))
    assert len(s.spawned) == 2
    assert [e["outcome"] for e in s.telemetry.find("watch.event")] == ["dropped", "kept", "kept", "kept"]


async def test_continue_route_starts_its_session_then_resumes_it(tmp_path: Path) -> None:
    memo = tmp_path / "notes.json"
    memo.write_text(json.dumps({"todo": "milk"}))
    async with stack(memo, todo_route(disposition="continue", session="inbox", extract="state")) as s:
        await s.telemetry.wait("watch.started")
        await s.memo_set("todo", "bread")
        agent = await s.spawn(1)
        assert (agent.role, agent.session, agent.route, agent.warm) == ("session", "inbox", "todo", True)
        assert agent.instruction.startswith('mind the notes\n\n<watch-event name="todo" uri="memo://notes">')
        held = await s.end_turn(agent)  # a warm session: held until its next delivery
        await s.telemetry.wait("turn.end")
        await s.memo_set("noise", 1)  # dropped: the session is not woken
        await s.telemetry.wait("watch.event", lambda e: e["outcome"] == "dropped")
        await s.memo_set("todo", "cheese")
        resumed = await answer(held)
        assert resumed["action"] == "continue"
        assert resumed["input"].startswith(
            '<watch-event name="todo" uri="memo://notes">\nMODIFIED todo=cheese\n'
        )
        [deliver] = s.telemetry.find("session.deliver", lambda e: e.get("agent") == agent.id)
        assert (deliver["session"], deliver["route"], deliver["watch"]) == ("inbox", "todo", "todo")
    assert len(s.spawned) == 1


async def test_declared_baselines_survive_a_restart_and_report_changes_made_while_down(
    tmp_path: Path,
) -> None:
    memo, state = tmp_path / "notes.json", tmp_path / "watches.json"
    memo.write_text(json.dumps({"todo": "milk"}))
    async with stack(memo, todo_route(disposition="spawn"), state_path=state) as s:
        await s.telemetry.wait("watch.started")
    [saved] = load(state).specs
    assert (saved.name, saved.owner, saved.uri, saved.baseline) == (
        "route:todo:memo://notes",
        None,
        "memo://notes",
        {"shape": "state", "kind": "json", "value": {"todo": "milk"}},
    )
    # A spec of a route that is no longer configured is dropped on restore.
    doc = json.loads(state.read_text())
    doc["watches"].append({"name": "route:gone:memo://notes", "uri": "memo://notes", "owner": None})
    state.write_text(json.dumps(doc))
    memo.write_text(json.dumps({"todo": "bread"}))  # while agentd is down

    async with stack(memo, todo_route(disposition="spawn"), state_path=state) as s:
        started = await s.telemetry.wait("watch.started")
        assert started["restored"] is True
        agent = await s.spawn(1)
        assert "MODIFIED todo=bread" in agent.instruction
        [restored] = s.telemetry.find("watch.restored")
        assert (restored["routes"], restored["dropped"]) == (
            ["route:todo:memo://notes"],
            ["None:route:gone:memo://notes"],
        )
    assert [(w.name, w.baseline) for w in load(state).specs] == [
        ("route:todo:memo://notes", {"shape": "state", "kind": "json", "value": {"todo": "bread"}})
    ]


async def test_pending_spawn_notices_are_dropped_when_draining(tmp_path: Path) -> None:
    memo = tmp_path / "notes.json"
    memo.write_text(json.dumps({"todo": "milk"}))
    async with stack(memo, todo_route(disposition="spawn", max_inflight=1)) as s:
        await s.telemetry.wait("watch.started")
        await s.memo_set("todo", "bread")
        await s.spawn(1)
        await s.memo_set("todo", "cheese")
        await s.telemetry.wait("watch.notice", count=2)
        await s.reactor.send.send(SignalReceived(signum=15))
        dropped = await s.telemetry.wait("watch.notice_dropped")
        assert (dropped["route"], dropped["uri"], dropped["reason"]) == (
            "todo",
            ["memo://notes"],
            "no new agents (draining or budget)",
        )
    assert len(s.spawned) == 1


async def test_a_filter_the_sandbox_refuses_is_a_config_error_naming_the_route(tmp_path: Path) -> None:
    memo = tmp_path / "notes.json"
    memo.write_text(json.dumps({}))
    bad = RouteConfig(match="memo://notes", on_event="memo__memo_set(key='x', value=1)")
    refused = pytest.RaisesExc(
        ConfigError, match=r"routes\[0\]\.on_event: .* calls 'memo__memo_set'.*read-only"
    )
    with pytest.RaisesGroup(refused, flatten_subgroups=True):
        async with stack(memo, bad):
            pass
