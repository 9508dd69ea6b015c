"""Interval and cron clock sources, with monotonic and wall time passed in."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest

from agentd.triggers.timer import CronSource, IntervalSource, validate_cron

T0 = datetime(2026, 3, 1, 10, 0, 30, tzinfo=UTC)


def test_interval_grid_and_no_catch_up_burst() -> None:
    src = IntervalSource(10.0, start=100.0)
    assert src.next_fire() == 100.0
    src.fire(100.0)
    assert src.next_fire() == 110.0
    src.fire(105.0)  # early call: nothing due, nothing changes
    assert src.next_fire() == 110.0
    src.fire(145.0)  # woke 35 s late: one fire, next on the grid after now
    assert src.next_fire() == 150.0
    src.fire(150.0)
    assert src.next_fire() == 160.0


def test_interval_rejects_non_positive() -> None:
    with pytest.raises(ValueError, match=r"interval: 0 is not valid: give a period in seconds > 0"):
        IntervalSource(0, start=0.0)


def test_cron_next_fire_is_monotonic_offset_of_wall_slot() -> None:
    src = CronSource("*/5 * * * *", now_mono=1000.0, now_wall=T0)
    # 10:00:30 -> next slot 10:05:00, 270 s away.
    assert src.next_fire() == 1270.0
    assert src.next_fire_wall() == datetime(2026, 3, 1, 10, 5, tzinfo=UTC)
    src.fire(1270.0, datetime(2026, 3, 1, 10, 5, tzinfo=UTC))
    assert src.next_fire() == 1570.0


def test_cron_fire_a_hair_early_by_wall_does_not_double_fire() -> None:
    src = CronSource("0 * * * *", now_mono=0.0, now_wall=datetime(2026, 3, 1, 10, 59, tzinfo=UTC))
    assert src.next_fire() == 60.0
    # The monotonic deadline passed but the wall clock still reads 10:59:59.9.
    src.fire(60.0, datetime(2026, 3, 1, 10, 59, 59, 900000, tzinfo=UTC))
    assert src.next_fire_wall() == datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_cron_wall_jump_forward_gives_one_fire_not_a_burst() -> None:
    src = CronSource("* * * * *", now_mono=0.0, now_wall=T0)
    assert src.next_fire() == 30.0
    # The wall clock jumped 3 hours ahead while we slept: still one fire,
    # and the next one is a minute of *current* wall time away.
    jumped = T0 + timedelta(hours=3, seconds=30)
    src.fire(30.0, jumped)  # wall now 13:01:00
    assert src.next_fire() == 90.0
    assert src.next_fire_wall() == datetime(2026, 3, 1, 13, 2, tzinfo=UTC)


def test_cron_wall_jump_back_does_not_refire_the_same_slot() -> None:
    src = CronSource("0 * * * *", now_mono=0.0, now_wall=datetime(2026, 3, 1, 10, 30, tzinfo=UTC))
    assert src.next_fire() == 1800.0
    # Fired for 11:00, but the wall clock now says 10:00 (stepped back an hour).
    src.fire(1800.0, datetime(2026, 3, 1, 10, 0, tzinfo=UTC))
    assert src.next_fire_wall() == datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    assert src.next_fire() == 1800.0 + 7200.0
    src.fire(10.0, datetime(2026, 3, 1, 10, 0, tzinfo=UTC))  # early: ignored
    assert src.next_fire() == 9000.0


def test_cron_converts_other_timezones_to_utc() -> None:
    plus2 = datetime(2026, 3, 1, 12, 0, 30, tzinfo=UTC).astimezone(timezone(timedelta(hours=2)))
    src = CronSource("0 11 * * *", now_mono=0.0, now_wall=plus2)
    # 12:00:30 UTC (14:00:30 local) -> the next 11:00 UTC is tomorrow: UTC, not local time.
    assert src.next_fire_wall() == datetime(2026, 3, 2, 11, 0, tzinfo=UTC)
    assert src.next_fire() == 23 * 3600 - 30


def test_cron_naive_wall_time_is_refused() -> None:
    with pytest.raises(ValueError, match=r"is naive: pass an aware datetime"):
        CronSource("* * * * *", now_mono=0.0, now_wall=datetime(2026, 1, 1))


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        (
            "* * * * * *",
            r"has 6 fields \(seconds and years are not supported\): expected 5 fields: minute hour",
        ),
        (
            "* * *",
            r"cron '\* \* \*' has 3 fields: expected 5 fields: minute hour day-of-month month day-of-week",
        ),
        ("@reboot", r"cron '@reboot' is not supported: agentd has no boot event"),
        ("@sometimes", r"cron '@sometimes' is not a known alias"),
        ("61 * * * *", r"cron '61 \* \* \* \*' is not valid .*each in range"),
        ("", r"cron '' is empty: expected 5 fields"),
    ],
)
def test_validate_cron_rejects(expr: str, message: str) -> None:
    problem = validate_cron(expr)
    assert problem is not None
    assert re.search(message, problem), problem
    with pytest.raises(ValueError, match=message):
        CronSource(expr, now_mono=0.0, now_wall=T0)


@pytest.mark.parametrize("expr", ["*/5 * * * *", "0 9 * * 1-5", "@hourly", "@daily", " 15 3 1 * * "])
def test_validate_cron_accepts(expr: str) -> None:
    assert validate_cron(expr) is None
