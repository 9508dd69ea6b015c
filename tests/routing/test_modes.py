"""The loop and schedule modes through the real ``agentd`` command.

Every wait is on agentd's NDJSON telemetry (or its exit) with a timeout;
nothing sleeps. After each run no process agentd started may survive it
(:func:`supervised`).
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from agentd.core.exitcodes import ExitCode
from tests.support.agentd_proc import PY, Agentd, script
from tests.support.supervised import RUN_TIMEOUT, supervised

# --------------------------------------------------------------------------- loop


def memo(tmp_path: Path) -> list[str]:
    """The bundled memo server over stdio, its notes in ``tmp_path/notes.json`` (one note, ``a``)."""
    notes = tmp_path / "notes.json"
    notes.write_text('{"a": 1}')
    return ["--mcp-stdio", f"memo={PY} -m agentd serve memo --file {notes}"]


#: A turn that writes a memo key (memo_set is not read-only): the shift did work.
WRITE: dict[str, Any] = {
    "tool_calls": [{"name": "memo__memo_set", "arguments": {"key": "n", "value": "{input}"}}]
}


async def test_loop_interval_0_backs_off_after_idle_shifts(tmp_path):
    # Shift 1 writes a memo; every later shift answers NO_REPLY (the script's "then").
    model = script(tmp_path, [WRITE, {"text": "did the work"}])
    args = ["--mode", "loop", "--interval", "0", *memo(tmp_path), "--model", model, "work"]
    async with supervised(args, tmp_path) as a:
        await a.wait_event("loop.reenter", count=3, timeout=RUN_TIMEOUT)
        a.signal(signal.SIGTERM)
        assert await a.wait_exit(RUN_TIMEOUT) == ExitCode.OK
    reentries = [(e["after_s"], e["idle"]) for e in a.find("loop.reenter")]
    assert reentries == [(0.0, False), (1.0, True), (2.0, True)]
    assert len(a.find("subagent.spawn")) == 1  # interval 0 defaults to one warm session
    assert a.out.splitlines() == ["did the work"]  # idle shifts publish nothing


@pytest.mark.parametrize(
    ("turns", "calls_per_shift"),
    [
        ([{"text": "Nothing to do."}], 1),
        # Reads only: memo_get says readOnlyHint, read_resource is agentd's own read.
        (
            [
                {
                    "tool_calls": [
                        {"name": "memo__memo_get", "arguments": {"key": "a"}},
                        {"name": "read_resource", "arguments": {"uri": "memo://notes"}},
                    ]
                },
                {"text": "Nothing to do."},
            ],
            2,
        ),
    ],
    ids=["talks", "reads"],
)
async def test_a_loop_shift_that_changes_nothing_is_idle_and_backs_off(tmp_path, turns, calls_per_shift):
    # Before rfcs/0280 only an empty or NO_REPLY answer was idle: this loop made
    # hundreds of model calls a second. Now its shifts are 1, 2, 4 … s apart:
    # 6 shifts in 35 s (at 0, 1, 3, 7, 15 and 31 s).
    model = script(tmp_path, turns, then="repeat")
    args = ["--mode", "loop", "--interval", "0", *memo(tmp_path), "--model", model, "check"]
    async with supervised(args, tmp_path) as a:
        await a.wait_event("loop.reenter", count=3, timeout=RUN_TIMEOUT)
        calls = len(a.find("model.call"))
        a.signal(signal.SIGTERM)
        assert await a.wait_exit(RUN_TIMEOUT) == ExitCode.OK
    assert [(e["after_s"], e["idle"]) for e in a.find("loop.reenter")] == [
        (1.0, True),
        (2.0, True),
        (4.0, True),
    ]
    assert calls == 3 * calls_per_shift
    assert a.out.splitlines() == ["Nothing to do."] * 3  # talk is published; it is no work


async def test_a_loop_that_writes_a_memo_key_every_shift_keeps_its_cadence(tmp_path):
    model = script(tmp_path, [WRITE, {"text": "saved"}], then="repeat")
    args = ["--mode", "loop", "--interval", "0", *memo(tmp_path), "--model", model, "save"]
    async with supervised(args, tmp_path) as a:
        await a.wait_event("loop.reenter", count=3, timeout=RUN_TIMEOUT)
        a.signal(signal.SIGTERM)
        assert await a.wait_exit(RUN_TIMEOUT) == ExitCode.OK
    reentries = [(e["after_s"], e["idle"]) for e in a.find("loop.reenter")]
    assert len(reentries) >= 3
    assert set(reentries) == {(0.0, False)}  # never backed off


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
    # Ended by a signal after two fires, not by a deadline: start-up (the zygote) took over 6 s on a
    # busy 2-core machine, and a deadline counts from it.
    args = ["--mode", "schedule", "--interval", "1s", "--model", model, "tick"]
    async with supervised(args, tmp_path) as a:
        await a.wait_event("turn.end", count=2, timeout=RUN_TIMEOUT)
        a.signal(signal.SIGTERM)
        assert await a.wait_exit(RUN_TIMEOUT) == ExitCode.OK
    spawns = a.find("subagent.spawn")
    assert len(spawns) >= 2
    assert all(e["role"] == "root" for e in spawns)
    assert len({e["agent"] for e in spawns}) == len(spawns)
    assert len(a.find("timer.fire")) >= 2
    assert a.out.splitlines()[:2] == ["scheduled run"] * 2
    assert a.find("supervisor.exit")[0]["exit_code"] == ExitCode.OK
