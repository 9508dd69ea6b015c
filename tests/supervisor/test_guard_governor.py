"""The restart window's edge: a restart exactly one period old no longer counts (docs/testing.md)."""

from __future__ import annotations

from agentd.supervisor.loop.governor import RestartGovernor, add_restart


def test_a_restart_exactly_one_period_ago_has_left_the_window() -> None:
    assert add_restart([0.0], 10.0, intensity=1, period=10.0) == ([10.0], True)
    assert add_restart([0.5], 10.0, intensity=1, period=10.0) == ([0.5, 10.0], False)
    gov = RestartGovernor(intensity=1, period=10.0)
    assert gov.record_restart(0.0)
    assert gov.record_restart(10.0)  # the first one is exactly one period old: gone
    assert gov.recent() == 1
    assert not gov.record_restart(19.5)
    assert gov.breaker_open is True


def test_a_new_governor_is_closed_and_says_so_as_a_bool() -> None:
    assert RestartGovernor(intensity=0, period=1.0).breaker_open is False
