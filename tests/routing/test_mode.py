"""Drivers as exit predicates, idle backoff and the driver factory."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agentd.core.exitcodes import ExitCode
from agentd.triggers.mode import (
    ContinueRoot,
    Done,
    FireCoalesced,
    IdleBackoff,
    Loop,
    Once,
    Quiesce,
    Reactive,
    ReEnterAfter,
    Restart,
    Schedule,
    SpawnRoot,
    SupervisorView,
    make_driver,
)
from agentd.triggers.timer import CronSource, IntervalSource

V = SupervisorView


def test_idle_backoff_doubles_caps_and_resets() -> None:
    b = IdleBackoff(1.0, 10.0)
    assert [b.next() for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    b.reset()
    assert b.next() == 1.0
    assert b.current == 2.0
    with pytest.raises(ValueError, match=r"need 0 < base <= cap"):
        IdleBackoff(2.0, 1.0)


# ---------------------------------------------------------------- once


@pytest.mark.parametrize(
    ("status", "partial", "code"),
    [
        ("completed", False, ExitCode.OK),
        ("refused", False, ExitCode.REFUSED),
        ("exhausted_tokens", False, ExitCode.BUDGET),
        ("exhausted_steps", True, ExitCode.BUDGET_PARTIAL),
        ("deadline", False, ExitCode.DEADLINE),
        ("crashed", False, ExitCode.CRASHED),
    ],
)
def test_once_maps_root_status(status, partial, code) -> None:
    d = Once()
    assert d.on_start(V()) == [SpawnRoot()]
    assert d.exit_predicate(V(children_running=1)) is None
    assert d.on_root_terminal(V(), status, idle=False, now=1.0) == Done()  # never restarted
    assert d.exit_predicate(V(root_status=status, root_partial=partial)) == code


def test_once_infra_and_drain() -> None:
    d = Once()
    assert d.exit_predicate(V(fatal_infra=True, children_running=1)) == ExitCode.FATAL_INFRA
    assert d.exit_predicate(V(required_server_failed=True)) == ExitCode.REQUIRED_SERVER
    assert d.exit_predicate(V(deadline_reached=True, children_running=1)) == ExitCode.DEADLINE
    assert (
        d.exit_predicate(V(draining=True, drain_timed_out=True, children_running=1)) == ExitCode.DRAIN_TIMEOUT
    )
    assert d.exit_predicate(V(draining=True, children_running=1)) is None
    assert d.on_start(V(draining=True)) == []


# ---------------------------------------------------------------- loop


def test_loop_interval_zero_reenters_at_once_after_work_and_backs_off_when_idle() -> None:
    d = Loop(0.0, "warm")
    assert d.on_start(V()) == [SpawnRoot()]
    assert d.reentry() == ContinueRoot()
    assert d.on_root_terminal(V(), "completed", idle=False, now=0) == ReEnterAfter(0.0)
    waits = [d.on_root_terminal(V(), "completed", idle=True, now=0) for _ in range(8)]
    assert [w.delay for w in waits] == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]  # type: ignore[union-attr]
    assert d.on_root_terminal(V(), "stalled", idle=False, now=0) == ReEnterAfter(60.0)
    # Real work resets the backoff.
    assert d.on_root_terminal(V(), "completed", idle=False, now=0) == ReEnterAfter(0.0)
    assert d.on_root_terminal(V(), "refused", idle=False, now=0) == ReEnterAfter(1.0)


def test_loop_interval_keeps_cadence_when_idle() -> None:
    d = Loop(30.0, "fresh")
    assert d.reentry() == SpawnRoot()
    assert d.on_root_terminal(V(), "completed", idle=False, now=0) == ReEnterAfter(30.0)
    assert [d.on_root_terminal(V(), "completed", idle=True, now=0) for _ in range(3)] == [
        ReEnterAfter(30.0)
    ] * 3


def test_loop_small_interval_backs_off_up_to_it() -> None:
    d = Loop(5.0, "fresh")
    delays = [d.on_root_terminal(V(), "completed", idle=True, now=0).delay for _ in range(5)]  # type: ignore[union-attr]
    assert delays == [5.0, 5.0, 5.0, 5.0, 5.0]
    assert d.backoff.cap == 5.0


def _shifts_within(d: Loop, window: float, *, idle: bool) -> list[float]:
    """Start times of the shifts a loop runs in ``window`` seconds when every shift is instant."""
    now, starts = 0.0, []
    while now < window and len(starts) < 1000:
        starts.append(now)
        decision = d.on_root_terminal(V(), "completed", idle=idle, now=now)
        assert isinstance(decision, ReEnterAfter)
        now += decision.delay
    return starts


def test_an_idle_loop_makes_at_most_seven_shifts_in_35_seconds() -> None:
    # "Nothing to do." every shift (no state-changing tool call): 1, 2, 4, 8, 16 s apart.
    assert _shifts_within(Loop(0.0, "warm"), 35.0, idle=True) == [0.0, 1.0, 3.0, 7.0, 15.0, 31.0]
    # A shift that changed state keeps the cadence: interval 0 re-enters at once, 5 s keeps 5 s.
    assert len(_shifts_within(Loop(0.0, "warm"), 35.0, idle=False)) == 1000
    assert _shifts_within(Loop(5.0, "fresh"), 35.0, idle=False) == [0.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0]


def test_a_shift_that_ran_out_of_steps_only_reading_is_idle_too() -> None:
    d = Loop(0.0, "warm")
    assert d.on_root_terminal(V(), "exhausted_steps", idle=True, now=0) == ReEnterAfter(1.0)
    assert d.on_root_terminal(V(), "exhausted_steps", idle=False, now=0) == ReEnterAfter(0.0)


def test_loop_exhausted_and_crash() -> None:
    d = Loop(0.0, "fresh")
    assert d.on_root_terminal(V(budget_spent="tokens"), "exhausted_tokens", idle=False, now=0) == Quiesce()
    assert d.on_root_terminal(V(deadline_reached=True), "deadline", idle=False, now=0) == Quiesce()
    assert d.on_root_terminal(V(), "exhausted_steps", idle=False, now=0) == ReEnterAfter(0.0)
    assert d.on_root_terminal(V(), "crashed", idle=False, now=0) == Restart()
    assert d.on_root_terminal(V(draining=True), "completed", idle=False, now=0) == Quiesce()


@pytest.mark.parametrize(
    ("view", "code"),
    [
        (V(), None),
        (V(draining=True, children_running=1), None),
        (V(draining=True), ExitCode.OK),
        (V(draining=True, warm_sessions=1), None),
        (V(draining=True, drain_timed_out=True, children_running=2), ExitCode.DRAIN_TIMEOUT),
        (V(budget_spent="tokens", warm_sessions=1), None),  # drain warm sessions first
        (V(budget_spent="steps"), ExitCode.BUDGET),
        (V(deadline_reached=True, children_running=1), ExitCode.DEADLINE),
        (V(fatal_infra=True), ExitCode.FATAL_INFRA),
        (V(required_server_failed=True), ExitCode.REQUIRED_SERVER),
        (V(breaker_open=True), ExitCode.CRASHED),
    ],
)
def test_daemon_exit_predicates(view, code) -> None:
    src = IntervalSource(60.0, start=0.0)
    for d in (Loop(0.0, "fresh"), Reactive(), Schedule(src)):
        assert d.exit_predicate(view) == code, type(d).__name__


# ---------------------------------------------------------------- reactive


def test_reactive_spawns_nothing_and_quiesces() -> None:
    d = Reactive()
    assert d.on_start(V()) == []
    assert d.on_root_terminal(V(), "crashed", idle=False, now=0) == Quiesce()


# ---------------------------------------------------------------- schedule


def test_schedule_coalesces_fires_while_root_runs() -> None:
    d = Schedule(IntervalSource(10.0, start=0.0))
    assert d.on_start(V()) == []
    assert d.on_fire(V(), 0.0) == [SpawnRoot()]
    assert d.on_fire(V(), 10.0) == [FireCoalesced()]
    assert d.on_fire(V(), 20.0) == [FireCoalesced()]  # still at most one pending
    assert d.coalesced_fires == 2
    # The pending fire starts when the root ends.
    assert d.on_root_terminal(V(), "completed", idle=False, now=25.0) == ReEnterAfter(0.0)
    assert d.root_running
    assert d.on_root_terminal(V(), "completed", idle=False, now=26.0) == Quiesce()
    assert not d.root_running
    assert d.on_fire(V(), 30.0) == [SpawnRoot()]


def test_schedule_crash_restarts_and_stops_when_spent() -> None:
    d = Schedule(IntervalSource(10.0, start=0.0))
    d.on_fire(V(), 0.0)
    assert d.on_root_terminal(V(), "crashed", idle=False, now=1.0) == Restart()
    assert d.root_running
    d.on_restart_refused()
    assert not d.root_running
    assert d.on_fire(V(budget_spent="tokens"), 10.0) == []
    assert d.on_fire(V(draining=True), 10.0) == []


# ---------------------------------------------------------------- factory


def test_make_driver() -> None:
    assert isinstance(make_driver("once"), Once)
    assert isinstance(make_driver("reactive"), Reactive)
    warm = make_driver("loop")
    assert isinstance(warm, Loop)
    assert (warm.interval, warm.session) == (0.0, "warm")
    fresh = make_driver("loop", interval=30)
    assert isinstance(fresh, Loop)
    assert fresh.session == "fresh"
    iv = make_driver("schedule", interval=60, now_mono=5.0)
    assert isinstance(iv, Schedule)
    assert iv.source.next_fire() == 5.0
    cr = make_driver(
        "schedule", cron="0 * * * *", now_mono=0.0, now_wall=datetime(2026, 1, 1, 9, 30, tzinfo=UTC)
    )
    assert isinstance(cr, Schedule)
    assert isinstance(cr.source, CronSource)
    assert cr.source.next_fire() == 1800.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "once", "interval": 5}, r"--interval 5 does not apply to --mode once: remove it"),
        (
            {"mode": "reactive", "cron": "* * * * *"},
            r"--cron '\* \* \* \* \*' does not apply to --mode reactive",
        ),
        ({"mode": "loop", "cron": "* * * * *"}, r"does not apply to --mode loop"),
        ({"mode": "schedule"}, r"--mode schedule needs exactly one of --interval SECONDS or --cron"),
        ({"mode": "schedule", "interval": 1, "cron": "* * * * *"}, r"needs exactly one of"),
        (
            {"mode": "schedule", "interval": 0},
            r"--interval 0 is not valid with --mode schedule: give seconds > 0",
        ),
        ({"mode": "schedule", "cron": "* * * * * *"}, r"expected 5 fields"),
        ({"mode": "schedule", "session": "warm", "interval": 1}, r"--session 'warm' does not apply"),
        ({"mode": "loop", "interval": -1}, r"interval: -1 is not valid: give seconds >= 0"),
        ({"mode": "daemon"}, r"--mode 'daemon' is not valid: use once, loop, reactive or schedule"),
    ],
)
def test_make_driver_errors(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        make_driver(**kwargs)
