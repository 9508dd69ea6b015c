"""The agent table's ownership checks: a slot is freed once, a session ends with its holder (docs/testing.md).

Through the table's public methods only: the table's storage is being reworked.
"""

from __future__ import annotations

from agentd.supervisor.agents import AgentTable


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
