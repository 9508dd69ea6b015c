"""The loop and schedule modes through the real ``agentd`` command.

Every wait is on agentd's NDJSON telemetry (or its exit) with a timeout;
nothing sleeps. After each run no process agentd started may survive it
(:func:`supervised`).
"""

from __future__ import annotations

from pathlib import Path

from agentd.exitcodes import ExitCode
from tests.support.agentd_proc import Agentd, script
from tests.support.supervised import RUN_TIMEOUT, supervised

# --------------------------------------------------------------------------- loop


async def test_loop_interval_0_backs_off_after_idle_shifts(tmp_path):
    # Shift 1 does real work; every later shift answers NO_REPLY (the script's "then").
    model = script(tmp_path, [{"text": "did the work"}])
    args = ["--mode", "loop", "--interval", "0", "--model", model, "--deadline", "5s", "work"]
    async with supervised(args, tmp_path) as a:
        await a.wait_event("loop.reenter", count=3, timeout=RUN_TIMEOUT)
        assert await a.wait_exit(RUN_TIMEOUT) == ExitCode.DEADLINE
    waits = [e["after_s"] for e in a.find("loop.reenter")]
    assert waits[:3] == [0.0, 1.0, 2.0]
    assert all(w == 2**i for i, w in enumerate(waits[1:])), waits
    assert len(a.find("subagent.spawn")) == 1  # interval 0 defaults to one warm session
    assert a.out.splitlines() == ["did the work"]  # idle shifts publish nothing


async def _shifts(tmp_path: Path, session: str) -> Agentd:
    model = script(tmp_path, [{"text": "shift done"}], then="repeat", name=f"{session}.json")
    args = [
        "--mode",
        "loop",
        "--interval",
        "100ms",
        "--session",
        session,
        "--max-steps",
        "3",
        "--model",
        model,
        "w",
    ]
    async with supervised(args, tmp_path) as a:
        assert await a.wait_exit(RUN_TIMEOUT) == ExitCode.BUDGET
    assert a.out.splitlines() == ["shift done"] * 3
    return a


async def test_loop_warm_reuses_one_agent_fresh_spawns_one_per_shift(tmp_path):
    warm = await _shifts(tmp_path, "warm")
    assert [e["agent"] for e in warm.find("subagent.spawn")] == ["a1"]
    assert [e["agent"] for e in warm.find("turn.end")] == ["a1"] * 3
    fresh = await _shifts(tmp_path, "fresh")
    assert len(fresh.find("subagent.spawn")) == 3
    assert len({e["agent"] for e in fresh.find("turn.end")}) == 3


# --------------------------------------------------------------------------- schedule


async def test_schedule_interval_fires_a_fresh_root_each_second(tmp_path):
    model = script(tmp_path, [{"text": "scheduled run"}])
    # The deadline counts from start-up, zygote included (seconds on a busy machine): room for two fires.
    args = ["--mode", "schedule", "--interval", "1s", "--deadline", "6s", "--model", model, "tick"]
    async with supervised(args, tmp_path) as a:
        await a.wait_event("turn.end", count=2, timeout=RUN_TIMEOUT)
        assert await a.wait_exit(RUN_TIMEOUT) == ExitCode.DEADLINE
    spawns = a.find("subagent.spawn")
    assert len(spawns) >= 2
    assert all(e["role"] == "root" for e in spawns)
    assert len({e["agent"] for e in spawns}) == len(spawns)
    assert len(a.find("timer.fire")) >= 2
    assert a.out.splitlines()[:2] == ["scheduled run"] * 2
    assert a.find("supervisor.exit")[0]["exit_code"] == ExitCode.DEADLINE
