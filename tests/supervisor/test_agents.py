"""The agent table: phases change only through transitions, and illegal moves raise."""

from __future__ import annotations

import pytest

from agentd.supervisor.loop.agents import AgentPhase, AgentTable, IllegalTransition
from tests.support.reports import turn_ended


def test_a_warm_agent_goes_starting_turn_idle_turn_exiting_exited() -> None:
    table = AgentTable()
    agent = table.new(role="session", instruction="x", route=None, session="s", warm=True, now=0.0)
    assert (agent.id, agent.phase) == ("a1", AgentPhase.STARTING)
    assert table.session_agent("s") is agent
    agent.begin_turn()  # STARTING -> TURN
    end, _recv = turn_ended(agent.id)
    agent.hold(end)  # TURN -> IDLE
    assert (agent.phase, agent.held) == (AgentPhase.IDLE, end)
    assert agent.resume() is end  # IDLE -> TURN, the held turn end handed back
    assert (agent.phase, agent.held) == (AgentPhase.TURN, None)
    assert agent.exiting() is None  # TURN -> EXITING
    assert agent.exited() is AgentPhase.EXITING
    assert not agent.alive
    assert table.release_session(agent)
    assert table.session_agent("s") is None


@pytest.mark.parametrize(
    ("moves", "message"),
    [
        (["resume"], "cannot go starting -> turn: only from idle"),
        (["begin_turn", "exiting", "begin_turn"], "cannot go exiting -> turn: only from starting, turn"),
        (["exited", "exiting"], "cannot go exited -> exiting: only from starting, turn, idle"),
    ],
)
def test_an_illegal_transition_raises_naming_the_phases(moves: list[str], message: str) -> None:
    agent = AgentTable().new(role="spawn", instruction="x", route="r", session=None, warm=False, now=0.0)
    *ok, bad = moves
    for move in ok:
        getattr(agent, move)()
    before = agent.phase
    with pytest.raises(IllegalTransition, match=message):
        getattr(agent, bad)()
    assert agent.phase is before  # a refused move changes nothing


def test_unnamed_agents_skip_ids_a_restored_watch_session_holds() -> None:
    table = AgentTable(reserved=lambda name: name in {"a1", "a2"})
    agent = table.new(role="spawn", instruction="x", route=None, session=None, warm=False, now=0.0)
    assert agent.id == "a3"
    assert table.name_session(agent) == "a3"
    assert table.session_agent("a3") is agent


def test_an_exited_agent_leaves_the_table_and_only_the_last_few_are_remembered() -> None:
    table = AgentTable(recent=3)
    for n in range(5):
        agent = table.new(role="spawn", instruction="x" * 1000, route="r", session=None, warm=False, now=n)
        agent.begin_turn()
        agent.end_turn("completed", "done")
        agent.exiting()
        agent.exited()
        table.forget(agent, now=n + 0.5)
    assert len(table) == 0
    assert table.live() == []
    assert (table.started, table.forgotten) == (5, 5)
    recent = table.recent()
    assert [(r.id, r.status, r.turns, r.exited_at) for r in recent] == [
        ("a3", "completed", 1, 2.5),
        ("a4", "completed", 1, 3.5),
        ("a5", "completed", 1, 4.5),
    ]
    # What is remembered is small: no instruction, no reply text.
    assert not hasattr(recent[0], "instruction")
    assert table.new(role="spawn", instruction="x", route="r", session=None, warm=False, now=9).id == "a6"


def test_forgetting_releases_the_session_and_refuses_a_live_agent() -> None:
    table = AgentTable()
    agent = table.new(role="session", instruction="x", route=None, session="s", warm=True, now=0.0)
    with pytest.raises(
        IllegalTransition, match=r"'a1' cannot leave the table while starting: only once exited"
    ):
        table.forget(agent, now=1.0)
    assert table.get("a1") is agent
    agent.exited()
    table.forget(agent, now=1.0)
    table.forget(agent, now=2.0)  # twice is once
    assert (table.get("a1"), table.session_agent("s"), table.forgotten) == (None, None, 1)


def test_a_turn_is_idle_until_state_changed_or_it_carried_a_delivery() -> None:
    agent = AgentTable().new(role="root", instruction="x", route=None, session="root", warm=True, now=0.0)
    assert agent.idle_turn  # a first shift from the instruction alone
    agent.begin_turn()
    agent.record_state_change()
    assert not agent.idle_turn
    end, _recv = turn_ended(agent.id)
    agent.hold(end)
    agent.resume(1.0)  # the loop's next shift: it starts idle again
    assert agent.idle_turn
    agent.hold(end)
    agent.resume(2.0, delivery=True)  # a routed delivery is work
    assert not agent.idle_turn
