"""The reactor's parts on their own: the run status's and readiness's transitions, and parts that cannot be rewired.

The reactor's behaviour through its channel is covered by ``test_reactor.py``;
these tests pin what each part owns: a move its lifecycle does not connect
raises, a one-time report is made once, and a part built by the reactor
cannot have a collaborator replaced from outside.
"""

from __future__ import annotations

import dataclasses

import pytest

from agentd.core.exitcodes import ExitCode
from agentd.events import ServerState
from agentd.supervisor.loop.agents import AgentTable, IllegalTransition
from agentd.supervisor.loop.budget import Budget
from agentd.supervisor.loop.governor import RestartGovernor
from agentd.supervisor.loop.reactor import Phase, Reactor
from agentd.supervisor.loop.readiness import Readiness
from agentd.supervisor.loop.runstatus import RunStatus
from agentd.supervisor.routing.subscriptions import Subscriptions
from agentd.triggers import mode as modes
from agentd.triggers.router import Router
from tests.support.reactor import spawn_hooks
from tests.support.telemetry import RecordingTelemetry


def _status(**budget: int | None) -> RunStatus:
    return RunStatus(Budget(max_tokens=budget.get("max_tokens"), max_steps=None), AgentTable())


def test_the_run_goes_running_draining_stopped_and_a_second_drain_or_stop_raises() -> None:
    status = _status()
    assert status.running
    assert status.may_start_work()
    status.schedule_reentry(5.0)
    status.begin_drain(10.0, grace=25.0)
    assert (status.phase, status.drain_deadline, status.reenter_at) == (Phase.DRAINING, 35.0, None)
    assert not status.may_start_work()
    assert status.view(11.0).draining
    with pytest.raises(IllegalTransition, match="cannot start draining while draining"):
        status.begin_drain(12.0, grace=25.0)
    status.force_exit()
    assert status.view(40.0).drain_timed_out
    status.stop(ExitCode.DRAIN_TIMEOUT)
    assert (status.phase, status.exit_code) == (Phase.STOPPED, ExitCode.DRAIN_TIMEOUT)
    with pytest.raises(IllegalTransition, match="stopped already"):
        status.stop(ExitCode.OK)


def test_a_forced_exit_needs_a_drain() -> None:
    with pytest.raises(IllegalTransition, match="cannot be forced out while running"):
        _status().force_exit()


def test_a_reentry_is_taken_once_when_due_and_budget_exhausted_is_reported_once() -> None:
    status = _status()
    status.schedule_reentry(3.0)
    assert not status.reentry_due(2.9)
    assert status.reentry_due(3.0)
    assert not status.reentry_due(4.0)  # taken
    assert [status.report_budget(), status.report_budget()] == [True, False]


def test_the_drivers_view_carries_the_recorded_facts() -> None:
    status = _status(max_tokens=10)
    status.record_root_terminal("crashed", "  partial answer ")
    status.record_fatal_infra("invalid API key")
    status.record_required_failed("memo", 3, "connection refused")
    status.open_breaker()
    view = status.view(0.0)
    assert (view.root_status, view.root_partial) == ("crashed", True)
    assert view.fatal_infra
    assert view.required_server_failed
    assert view.breaker_open
    assert status.required_failed_error is not None
    assert "'memo'" in status.required_failed_error
    assert "after 3 attempts" in status.required_failed_error


def test_the_start_gate_opens_once_when_every_required_server_connected_and_waiting_is_written_once() -> None:
    telemetry = RecordingTelemetry()
    flips: list[tuple[bool, str]] = []
    readiness = Readiness(
        frozenset({"memo", "kube"}),
        Subscriptions((), Router()),
        _status(),
        telemetry,
        lambda ready, reason: flips.append((ready, reason)),
    )
    assert not readiness.open
    assert not readiness.open_gate()
    readiness.on_server_state("memo", ServerState.CONNECTED)
    assert not readiness.open_gate()
    assert [e["servers"] for e in telemetry.find("reactor.waiting")] == [["kube", "memo"]]
    readiness.report()
    readiness.report()  # the same answer: no second flip
    assert flips == [(False, "required server 'kube' is starting")]
    readiness.on_server_state("kube", ServerState.CONNECTED)
    assert readiness.open_gate()
    assert readiness.open
    assert readiness.started
    assert not readiness.open_gate()  # the driver's on_start runs once
    readiness.on_subscription_state("memo", "memo://notes", "lost")
    assert readiness.ready() == (False, "subscriptions not established: memo:memo://notes")
    readiness.forget([("memo", "memo://notes")])
    readiness.on_zygote("fork failed")
    assert readiness.ready()[1].startswith("agent zygote degraded (fork failed)")
    readiness.on_zygote(None)
    readiness.report()
    assert flips[-1] == (True, "ok")
    assert [e["ready"] for e in telemetry.find("ready.changed")] == [False, True]


def test_the_reactors_handler_parts_cannot_be_rewired_from_outside() -> None:
    reactor = Reactor(
        driver=modes.Reactive(),
        router=Router(),
        budget=Budget(max_tokens=None, max_steps=None),
        governor=RestartGovernor(intensity=3, period=60.0),
        hooks=spawn_hooks(lambda _agent: None),
        telemetry=RecordingTelemetry(),
        instruction="",
        grace=5.0,
        mode="reactive",
        session="fresh",
    )
    parts = [reactor.spawner, reactor.notices, reactor.selftools, reactor.usage, reactor.turns]
    for part in [*parts, reactor.delivery, reactor.drain]:
        field = dataclasses.fields(part)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(part, field, None)
    # The parts share the reactor's objects: one agent table, one run status.
    assert reactor.turns.agents is reactor.spawner.agents is reactor.agents
    assert reactor.turns.status is reactor.delivery.status is reactor.drain.status is reactor.status
