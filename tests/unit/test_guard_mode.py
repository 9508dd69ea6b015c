"""Exit predicates wait for running turns where they say they do (docs/testing.md)."""

from __future__ import annotations

import pytest

from agentd.exitcodes import ExitCode
from agentd.triggers.mode import SupervisorView, make_driver


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
