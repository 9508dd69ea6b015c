"""The OTP-style restart governor."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentd.supervisor.loop.governor import RESTART_DELAY_CAP, RestartGovernor, add_restart


def test_intensity_within_period() -> None:
    g = RestartGovernor(intensity=3, period=10.0)
    assert g.record_restart(0.0)
    assert g.record_restart(1.0)
    assert g.record_restart(2.0)
    assert not g.record_restart(9.9)  # 4 restarts within 10 s
    assert g.breaker_open
    assert not g.record_restart(100.0)  # stays open


def test_old_restarts_age_out() -> None:
    g = RestartGovernor(intensity=2, period=10.0)
    assert g.record_restart(0.0)
    assert g.record_restart(5.0)
    assert g.record_restart(10.0)  # the one at 0.0 is exactly a period old: gone
    assert g.recent() == 2
    assert not g.breaker_open


def test_zero_intensity_never_restarts() -> None:
    assert not RestartGovernor(intensity=0, period=1.0).record_restart(0.0)


def test_delay_doubles_to_cap() -> None:
    g = RestartGovernor(intensity=100, period=60.0)
    assert [g.restart_delay(n) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 4.0]
    assert g.restart_delay(50) == RESTART_DELAY_CAP
    g.record_restart(0.0)
    g.record_restart(1.0)
    assert g.restart_delay() == 1.0


def test_bad_settings() -> None:
    with pytest.raises(ValueError, match=r"max_restarts: -1 is not valid"):
        RestartGovernor(-1, 1.0)
    with pytest.raises(ValueError, match=r"restart period: 0 is not valid"):
        RestartGovernor(1, 0)


@given(st.lists(st.floats(0, 100), max_size=30).map(sorted), st.integers(0, 5), st.floats(0.5, 20))
def test_class_agrees_with_pure_function(times: list[float], intensity: int, period: float) -> None:
    g = RestartGovernor(intensity, period)
    kept: list[float] = []
    open_ = False
    for t in times:
        kept, ok = add_restart(kept, t, intensity, period)
        open_ = open_ or not ok
        assert g.record_restart(t) == (not open_)
