"""A declared timer route keeps its disposition, template and max_inflight (rfcs/0132)."""

from __future__ import annotations

from pathlib import Path

from agentd.config import load_settings
from agentd.supervisor.routing.routes import build_router, spawn_template
from agentd.triggers.router import DEFAULT_TIMER_TEMPLATE, Continue, Spawn


def _settings(tmp_path: Path, *routes: str, instruction: str = "do the rounds") -> object:
    model = tmp_path / "m.json"
    model.write_text('{"turns": [{"text": "x"}]}')
    return load_settings(
        {
            "mode": "schedule",
            "interval": "1m",
            "model": f"script:{model}",
            "instruction": instruction,
            "routes": list(routes),
        },
        env={},
    )


def test_a_timer_spawn_route_keeps_its_template_and_max_inflight(tmp_path: Path) -> None:
    router = build_router(_settings(tmp_path, "@timer=spawn:2,template=tick {kind}"))
    timer = router.timer_route
    assert timer is not None
    assert timer.disposition == Spawn(max_inflight=2, template="tick {kind}")


def test_a_timer_route_without_a_template_runs_the_main_instruction(tmp_path: Path) -> None:
    router = build_router(_settings(tmp_path, "@timer=spawn", instruction="check {the} rounds"))
    timer = router.timer_route
    assert timer is not None
    assert isinstance(timer.disposition, Spawn)
    assert timer.disposition.template == "check {{the}} rounds"  # literal braces, no event sentence
    assert spawn_template(None, None, timer=True) == DEFAULT_TIMER_TEMPLATE


def test_a_timer_continue_route_ticks_its_session(tmp_path: Path) -> None:
    router = build_router(_settings(tmp_path, "@timer=continue:ticks"))
    timer = router.timer_route
    assert timer is not None
    assert timer.disposition == Continue("ticks")
