"""The reactor's side of watches: routes, notice delivery and coalescing, owner exit.

Reactor handlers are synchronous, so these drive ``Reactor.handle`` directly
with typed events (no processes, no sleeps) and read the answers from the
one-slot reply channels, as the hub would.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from agentd.core.errors import RouteError
from agentd.events import ChildExited, SubscriptionStateChanged, WatchNotice
from agentd.supervisor.loop.budget import Budget
from agentd.supervisor.loop.governor import RestartGovernor
from agentd.supervisor.loop.reactor import Agent, AgentPhase, Reactor
from agentd.triggers import mode as modes
from agentd.triggers.router import Continue, Router, RouteSpec
from tests.support.reactor import spawn_hooks
from tests.support.reports import turn_ended
from tests.support.telemetry import RecordingTelemetry


class FakeManager:
    """Records what the reactor tells the watch manager."""

    limits = None

    def __init__(self) -> None:
        self.changed: list[tuple[str, list[str]]] = []
        self.exited: list[str] = []

    def on_changed(self, route_id: str, uris: list[str]) -> None:
        self.changed.append((route_id, uris))

    def on_subscription_state(self, ev: SubscriptionStateChanged) -> None:
        pass

    def needs(self, server: str, uri: str) -> bool:
        return False

    def on_owner_exited(self, session: str) -> None:
        self.exited.append(session)


def reactor() -> tuple[Reactor, list[Agent], RecordingTelemetry, FakeManager]:
    spawned: list[Agent] = []
    telemetry = RecordingTelemetry()
    hooks = spawn_hooks(spawned.append)
    driver = modes.make_driver("reactive")
    manager = FakeManager()
    r = Reactor(
        driver=driver,
        router=Router(),
        budget=Budget(max_steps=None, max_tokens=None, deadline_at=None),
        governor=RestartGovernor(intensity=5, period=60.0),
        hooks=hooks,
        telemetry=telemetry,
        instruction="keep an eye on my notes",
        grace=1.0,
        mode="reactive",
        session="fresh",
        watches=manager,
    )
    return r, spawned, telemetry, manager


def notice(text: str, watch: str = "w") -> WatchNotice:
    return WatchNotice(session="s1", watch=watch, uri="memo://notes", text=text)


def turn_end(r: Reactor, agent: Agent, *, text: str = "done", idle: bool = False) -> dict[str, Any]:
    event, recv = turn_ended(agent.id, text=text, idle=idle)
    r.handle(event, 1.0)
    try:
        return dict(recv.receive_nowait())
    except trio.WouldBlock:
        return {"held": True}


def test_notices_start_the_session_then_coalesce_into_one_follow_up_turn() -> None:
    r, spawned, telemetry, _ = reactor()
    assert r.session_routes.add_watch("s1", "w", "memo://notes") == "watch:s1:w"
    r.handle(notice("<watch-event>A"), 0.0)  # no agent has s1: it starts warm with the notice
    [agent] = spawned
    assert (agent.session, agent.warm) == ("s1", True)
    assert agent.instruction == "keep an eye on my notes\n\n<watch-event>A"
    r.handle(notice("<watch-event>B"), 0.5)  # mid-turn: queued
    r.handle(notice("<watch-event>C"), 0.6)
    answer = turn_end(r, agent)
    assert answer == {"action": "continue", "input": "<watch-event>B\n\n<watch-event>C"}
    assert agent.phase is AgentPhase.TURN
    # The follow-up answers NO_REPLY: suppressed, with the watches it answered.
    assert turn_end(r, agent, text="NO_REPLY", idle=True) == {"held": True}  # owns a watch: held warm
    [suppressed] = [e for e in telemetry.events if e["event"] == "reply.suppressed"]
    assert (suppressed["watch"], suppressed["uri"]) == (["w", "w"], ["memo://notes", "memo://notes"])
    # Idle: the next notice resumes it at once.
    held = agent.held
    r.handle(notice("<watch-event>D"), 2.0)
    assert held is not None
    assert agent.phase is AgentPhase.TURN
    assert len(spawned) == 1


def test_watch_route_is_diverted_to_the_manager_not_the_session() -> None:
    from agentd.events import ResourceChanged

    r, spawned, _, manager = reactor()
    r.session_routes.add_watch("s1", "w", "memo://notes")
    r.handle(ResourceChanged(server="memo", uri="memo://notes"), 0.0)
    r._on_time(0.0)
    assert manager.changed == [("watch:s1:w", ["memo://notes"])]
    assert spawned == []  # no turn for the raw change
    # Released at once: the next change is handed over too.
    r.handle(ResourceChanged(server="memo", uri="memo://notes"), 0.1)
    r._on_time(0.1)
    assert len(manager.changed) == 2


def test_subscribe_and_watch_on_one_uri_refuse_each_other() -> None:
    r, _, _, _ = reactor()
    r.router.add_route(
        RouteSpec(
            match="memo://notes", disposition=Continue(session="other"), route_id="self:other:memo://notes"
        ),
        front=True,
        owner="other",
    )
    with pytest.raises(RouteError, match=r"already subscribed by session 'other'.*call unsubscribe first"):
        r.session_routes.add_watch("s1", "w", "memo://notes")


def test_owner_exit_stops_its_watches_and_drops_late_notices() -> None:
    r, spawned, telemetry, manager = reactor()
    r.session_routes.add_watch("s1", "w", "memo://notes")
    r.handle(notice("first"), 0.0)
    [agent] = spawned
    r.handle(ChildExited(agent=agent.id, pid=1, returncode=0), 1.0)
    assert manager.exited == ["s1"]
    assert r.router.get("watch:s1:w") is None
    assert not r.session_routes.has_session("s1")
    r.handle(notice("late"), 2.0)  # the watch is gone: no new session for it
    assert len(spawned) == 1
    assert [e["reason"] for e in telemetry.events if e["event"] == "watch.notice_dropped"] == [
        "the watch was stopped"
    ]
