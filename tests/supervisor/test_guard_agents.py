"""The agent table's ownership checks: a slot is freed once, a session ends with its holder (docs/testing.md).

Through the table's public methods only: the table's storage is being reworked.
"""

from __future__ import annotations

import pytest

from agentd.events import WatchNotice
from agentd.supervisor.loop.agents import AgentPhase, AgentTable, IllegalTransition
from agentd.triggers.router import QueuedEvent
from tests.support.reports import turn_ended


def test_a_warm_spawn_agent_frees_its_route_slot_at_its_first_terminal_status_only() -> None:
    table = AgentTable()
    agent = table.new(role="spawn", instruction="x", route="r1", session=None, warm=True, now=0.0)
    assert not agent.slot_released
    assert agent.release_slot() is True
    # Every later turn end of the same warm agent must not free another slot.
    assert agent.release_slot() is False
    assert agent.release_slot() is False
    assert agent.slot_released


def test_each_agent_frees_its_own_slot() -> None:
    table = AgentTable()
    first = table.new(role="spawn", instruction="x", route="r1", session=None, warm=False, now=0.0)
    second = table.new(role="spawn", instruction="x", route="r1", session=None, warm=False, now=0.0)
    assert first.release_slot() is True
    assert second.release_slot() is True


def test_an_old_agent_exiting_does_not_end_its_successors_session() -> None:
    table = AgentTable()
    old = table.new(role="session", instruction="x", route="r1", session="ops", warm=True, now=0.0)
    new = table.new(role="session", instruction="x", route="r1", session="ops", warm=True, now=1.0)
    assert table.session_agent("ops") is new
    old.exiting()
    old.exited()
    assert table.release_session(old) is False
    assert table.session_agent("ops") is new
    assert table.release_session(new) is True
    assert table.session_agent("ops") is None
    assert table.release_session(new) is False


def test_an_agent_with_no_session_releases_nothing() -> None:
    table = AgentTable()
    holder = table.new(role="session", instruction="x", route=None, session="a2", warm=True, now=0.0)
    loose = table.new(role="spawn", instruction="x", route="r1", session=None, warm=False, now=0.0)
    # Its id is the name of another agent's session: still not its to release.
    assert (loose.id, loose.session) == ("a2", None)
    assert table.release_session(loose) is False
    assert table.session_agent("a2") is holder


def test_a_new_agent_carries_what_it_was_started_with() -> None:
    table = AgentTable(reserved=lambda name: name == "a1")
    agent = table.new(role="spawn", instruction="do it", route="r1", session=None, warm=True, now=5.0)
    assert agent.id == "a2"  # a1 is a restored watch session's: skipped by one
    assert (agent.role, agent.instruction, agent.route, agent.session, agent.warm) == (
        "spawn",
        "do it",
        "r1",
        None,
        True,
    )
    assert (agent.started_at, agent.turn_started_at) == (5.0, 5.0)
    assert table.get("a2") is agent
    assert table.get("a9") is None
    assert table["a2"] is agent
    assert list(table) == [agent]
    assert len(table) == 1
    assert table.live() == [agent]


def test_the_table_is_busy_while_an_agent_is_mid_turn() -> None:
    table = AgentTable()
    agent = table.new(role="session", instruction="x", route=None, session="s", warm=True, now=0.0)
    assert table.busy()  # STARTING: its first turn runs
    end, _recv = turn_ended(agent.id)
    agent.hold(end)
    assert not table.busy()
    assert agent.resume(now=7.5) is end
    assert agent.turn_started_at == 7.5
    assert table.busy()
    agent.hold(end)
    agent.resume()  # no time given: the turn start stays
    assert agent.turn_started_at == 7.5
    agent.hold(end)
    assert agent.exited() is AgentPhase.IDLE
    assert agent.held is None
    assert not table.busy()
    assert table.live() == []


def test_a_turn_end_records_status_text_and_count_and_hands_back_the_notices_it_answered() -> None:
    agent = AgentTable().new(role="session", instruction="x", route=None, session="s", warm=True, now=0.0)
    first = WatchNotice(session="s", watch="w", uri="memo://a", text="changed")
    agent.answering([first])
    assert agent.notice_turn == [first]
    assert agent.end_turn("completed", "done") == [first]
    assert (agent.turns, agent.status, agent.text, agent.notice_turn) == (1, "completed", "done", [])
    assert agent.end_turn("refused", "no") == []
    assert agent.turns == 2
    agent.crashed()
    assert agent.status == "crashed"


def test_notices_queued_mid_turn_are_taken_once() -> None:
    agent = AgentTable().new(role="session", instruction="x", route=None, session="s", warm=True, now=0.0)
    one = WatchNotice(session="s", watch="w", uri="memo://a", text="1")
    two = WatchNotice(session="s", watch="w", uri="memo://b", text="2")
    agent.queue_notice(one)
    agent.queue_notice(two)
    assert agent.take_notices() == [one, two]
    assert agent.take_notices() == []
    assert agent.notices == []


def test_what_a_spawn_was_started_for_is_taken_once() -> None:
    agent = AgentTable().new(role="spawn", instruction="x", route="r1", session=None, warm=False, now=0.0)
    origin = [QueuedEvent("memo://a", "memo", None, "updated", 0.0)]
    notice = WatchNotice(session="", watch="w", uri="memo://a", text="t")
    agent.started_for(origin)
    agent.answering([notice])
    assert agent.origin == origin
    assert agent.take_origin() == (origin, [notice])
    assert agent.take_origin() == ([], [])


def test_self_subscriptions_remember_their_server_until_unsubscribed() -> None:
    agent = AgentTable().new(role="session", instruction="x", route=None, session="s", warm=True, now=0.0)
    agent.subscribe("memo://a", "memo")
    agent.subscribe("memo://b", None)
    assert agent.subscriptions == {"memo://a", "memo://b"}
    assert agent.subscription_servers == {"memo://a": "memo"}
    assert agent.unsubscribe("memo://a") == "memo"
    assert agent.unsubscribe("memo://b") is None
    assert agent.unsubscribe("memo://never") is None
    assert agent.subscriptions == set()
    assert agent.subscription_servers == {}


def test_an_agents_charges_add_up_and_one_unpriced_call_makes_its_cost_unknown() -> None:
    table = AgentTable()
    agent = table.new(role="spawn", instruction="x", route="r1", session=None, warm=False, now=0.0)
    agent.charge(tokens=100, steps=1, cost_usd=0.25)
    agent.charge(tokens=50, steps=2, cost_usd=0.5)
    assert (agent.tokens, agent.steps, agent.cost_usd, agent.unpriced_calls) == (150, 3, 0.75, 0)
    agent.charge(tokens=7, steps=1, cost_usd=None)
    assert (agent.tokens, agent.steps, agent.cost_usd, agent.unpriced_calls) == (157, 4, 0.75, 1)
    agent.charge(tokens=0, steps=1, cost_usd=None)
    assert (agent.steps, agent.unpriced_calls) == (5, 2)
    agent.exiting()
    agent.exited()
    table.forget(agent, 9.0)
    (record,) = table.recent()
    assert (record.tokens, record.steps, record.cost_usd) == (157, 5, None)


def test_a_delivery_makes_a_turn_not_idle() -> None:
    table = AgentTable()
    agent = table.new(role="spawn", instruction="x", route="r1", session=None, warm=False, now=0.0)
    assert agent.idle_turn
    agent.record_delivery()
    assert agent.delivered
    assert not agent.idle_turn


def test_an_exited_agent_leaves_the_table_once_with_its_whole_record_kept() -> None:
    table = AgentTable()
    agent = table.new(role="session", instruction="x", route="r1", session="ops", warm=True, now=2.0)
    other = table.new(role="spawn", instruction="y", route="r2", session=None, warm=False, now=3.0)
    agent.woken("r1", ("memo://a",), 4.0)
    agent.charge(tokens=10, steps=1, cost_usd=0.125)
    agent.end_turn("completed", "done")
    agent.exiting()
    agent.exited()
    table.forget(agent, 8.0)
    assert table.get("a1") is None
    assert table.get("a2") is other
    assert len(table) == 1
    assert table.session_agent("ops") is None  # its session is free for the next agent
    assert table.forgotten == 1
    table.forget(agent, 9.0)  # forgotten already: nothing changes
    assert table.forgotten == 1
    (record,) = table.recent()
    assert (record.id, record.role, record.route, record.session) == ("a1", "session", "r1", "ops")
    assert (record.status, record.turns) == ("completed", 1)
    assert (record.started_at, record.exited_at) == (2.0, 8.0)
    assert (record.steps, record.tokens, record.cost_usd) == (1, 10, 0.125)
    assert (record.woken_by, record.woken_route) == (("memo://a",), "r1")


def test_a_live_agent_cannot_leave_the_table() -> None:
    table = AgentTable()
    agent = table.new(role="spawn", instruction="x", route="r1", session=None, warm=False, now=0.0)
    with pytest.raises(
        IllegalTransition,
        match=r"^agent 'a1' cannot leave the table while \w+: only once exited \(a reactor bug: please report it\)$",
    ):
        table.forget(agent, 1.0)
    assert table.get("a1") is agent
    assert table.forgotten == 0
    assert table.recent() == ()


def test_the_table_keeps_only_its_last_exited_agents() -> None:
    table = AgentTable(recent=3)
    for i in range(5):
        agent = table.new(role="spawn", instruction="x", route="r1", session=None, warm=False, now=float(i))
        agent.exiting()
        agent.exited()
        table.forget(agent, float(i) + 0.5)
    assert [r.id for r in table.recent()] == ["a3", "a4", "a5"]
    assert (len(table), table.started, table.forgotten) == (0, 5, 5)
