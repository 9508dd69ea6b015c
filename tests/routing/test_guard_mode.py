"""Exit predicates wait for running turns where they say they do (docs/testing.md)."""

from __future__ import annotations

import pytest

from agentd.core.exitcodes import ExitCode
from agentd.triggers.mode import (
    FireCoalesced,
    IdleBackoff,
    Loop,
    Quiesce,
    ReEnterAfter,
    Restart,
    Schedule,
    SpawnRoot,
    SupervisorView,
    make_driver,
)
from agentd.triggers.timer import IntervalSource


def test_once_with_its_root_ended_exits_with_the_roots_code_while_another_turn_runs() -> None:
    once = make_driver("once")
    # The root ended (completed) and the provider then failed another agent's call;
    # a turn is still in flight: the run ends with the root's code, not fatal infra.
    running = SupervisorView(fatal_infra=True, turns_running=1, children_running=1, root_status="completed")
    assert once.exit_predicate(running) is ExitCode.OK
    idle = SupervisorView(fatal_infra=True, turns_running=0, children_running=1, root_status="completed")
    assert once.exit_predicate(idle) is ExitCode.FATAL_INFRA


@pytest.mark.parametrize("mode", ["loop", "reactive"])
def test_a_draining_daemon_with_fatal_infra_lets_running_turns_finish(mode: str) -> None:
    driver = make_driver(mode)  # type: ignore[arg-type]
    draining = SupervisorView(draining=True, fatal_infra=True, turns_running=1, children_running=1)
    assert driver.exit_predicate(draining) is None
    done = SupervisorView(draining=True, fatal_infra=True, turns_running=0, children_running=0)
    assert driver.exit_predicate(done) is ExitCode.FATAL_INFRA
    # Not draining: a daemon does not wait for its other turns.
    live = SupervisorView(fatal_infra=True, turns_running=1, children_running=1)
    assert driver.exit_predicate(live) is ExitCode.FATAL_INFRA


def test_schedule_draining_with_a_turn_running_waits() -> None:
    driver = make_driver("schedule", interval=60.0)
    view = SupervisorView(draining=True, fatal_infra=True, turns_running=2, children_running=2)
    assert driver.exit_predicate(view) is None


@pytest.mark.parametrize("mode", ["once", "reactive"])
@pytest.mark.parametrize(
    ("option", "value", "shown"),
    [("interval", 5.0, "5.0"), ("cron", "* * * * *", r"'\* \* \* \* \*'"), ("session", "warm", "'warm'")],
)
def test_a_mode_without_a_clock_refuses_every_clock_option(
    mode: str, option: str, value: object, shown: str
) -> None:
    with pytest.raises(ValueError, match=rf"^--{option} {shown} does not apply to --mode {mode}: remove it$"):
        make_driver(mode, **{option: value})  # type: ignore[arg-type]


def test_schedule_options_are_checked_with_messages_that_say_the_fix() -> None:
    with pytest.raises(ValueError, match=r"^--session 'fresh' does not apply to --mode schedule: remove it$"):
        make_driver("schedule", interval=1.0, session="fresh")
    with pytest.raises(
        ValueError, match=r"^--mode schedule needs exactly one of --interval SECONDS or --cron '<5 fields>'$"
    ):
        make_driver("schedule")
    with pytest.raises(ValueError, match=r"^make_driver: now_wall is required with cron$"):
        make_driver("schedule", cron="* * * * *")


def test_schedule_takes_a_fractional_interval_and_fires_first_at_start() -> None:
    driver = make_driver("schedule", interval=0.5)
    assert isinstance(driver, Schedule)
    assert isinstance(driver.source, IntervalSource)
    assert driver.source.period == 0.5
    assert driver.source.next_fire() == 0.0  # the default start: now
    assert make_driver("schedule", interval=2.0, now_mono=7.0).source.next_fire() == 7.0


def test_idle_backoff_bounds() -> None:
    with pytest.raises(
        ValueError, match=r"^idle backoff: base 0.0, cap 1.0 are not valid: need 0 < base <= cap$"
    ):
        IdleBackoff(0.0, 1.0)
    flat = IdleBackoff(2.0, 2.0)  # cap == base: a constant wait
    assert [flat.next(), flat.next()] == [2.0, 2.0]


def test_a_loop_with_a_short_interval_backs_off_no_further_than_the_base() -> None:
    loop = make_driver("loop", interval=0.5)
    assert isinstance(loop, Loop)
    assert loop.backoff.cap == 1.0
    assert make_driver("loop", interval=0.0).backoff.cap == 60.0  # type: ignore[union-attr]


@pytest.mark.parametrize("status", ["exhausted_steps", "exhausted_tokens", "deadline"])
def test_a_loop_shift_that_spent_the_budget_quiesces(status: str) -> None:
    loop = make_driver("loop", interval=5.0)
    spent = SupervisorView(budget_spent="steps")
    assert loop.on_root_terminal(spent, status, idle=False, now=0.0) == Quiesce()  # type: ignore[arg-type]
    late = SupervisorView(deadline_reached=True)
    assert loop.on_root_terminal(late, status, idle=False, now=0.0) == Quiesce()  # type: ignore[arg-type]


def test_a_draining_loop_starts_nothing() -> None:
    loop = make_driver("loop")
    assert loop.on_start(SupervisorView(draining=True)) == []
    assert loop.on_start(SupervisorView()) == [SpawnRoot()]


def test_a_schedule_fire_with_nothing_coalesced_is_not_repeated() -> None:
    driver = make_driver("schedule", interval=60.0)
    assert isinstance(driver, Schedule)
    assert (driver.root_running, driver.pending_fire) == (False, False)
    assert driver.root_running is False
    assert driver.pending_fire is False
    view = SupervisorView()
    for now in (0.0, 60.0):
        assert driver.on_fire(view, now) == [SpawnRoot()]
        assert driver.on_root_terminal(view, "completed", idle=False, now=now + 1) == Quiesce()
        assert driver.root_running is False
        assert driver.pending_fire is False
    # A fire while the root runs is coalesced into one re-entry, then forgotten.
    assert driver.on_fire(view, 120.0) == [SpawnRoot()]
    assert driver.on_fire(view, 180.0) == [FireCoalesced()]
    assert driver.on_root_terminal(view, "completed", idle=False, now=181.0) == ReEnterAfter(0.0)
    assert driver.pending_fire is False
    assert driver.on_root_terminal(view, "completed", idle=False, now=182.0) == Quiesce()
    # A draining schedule drops its pending fire.
    assert driver.on_fire(view, 240.0) == [SpawnRoot()]
    assert driver.on_fire(view, 300.0) == [FireCoalesced()]
    assert (
        driver.on_root_terminal(SupervisorView(draining=True), "completed", idle=False, now=301.0)
        == Quiesce()
    )
    assert driver.pending_fire is False
    assert driver.root_running is False


def test_a_refused_restart_ends_the_fire() -> None:
    driver = make_driver("schedule", interval=60.0)
    assert isinstance(driver, Schedule)
    driver.on_fire(SupervisorView(), 0.0)
    assert driver.on_root_terminal(SupervisorView(), "crashed", idle=False, now=1.0) == Restart()
    assert driver.root_running is True
    driver.on_restart_refused()
    assert driver.root_running is False
