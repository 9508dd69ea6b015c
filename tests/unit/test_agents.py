"""The agent table: phases change only through transitions, and illegal moves raise."""

from __future__ import annotations

import pytest

from agentd.supervisor.agents import AgentPhase, AgentTable, IllegalTransition
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
