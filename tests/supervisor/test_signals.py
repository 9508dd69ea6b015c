"""Fault catalog: signals to agentd's process group drain; SIGHUP drains like SIGTERM.

A service manager often signals the whole process group, not just the main
process: systemd's default ``KillMode=control-group``, ``timeout``, ``kill --
-PGID``, a terminal's Ctrl-C, ``tini -g``. agentd's own children (the zygote
and the agents it forks) run in sessions of their own, so the signal reaches
the supervisor only, which drains them: the running turn finishes, its result
is printed, exit 0 within the grace. Each case runs the real ``agentd``
command with a real agent mid-turn (a ``script:`` model whose first answer
takes a while) when the signal arrives. And the other side of the same
coin: a SIGKILLed supervisor still leaves no process behind, not even a
zygote someone stopped.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import psutil
import pytest
import trio

from agentd.core.exitcodes import ExitCode
from tests.support.agentd_proc import PY, Agentd, run_agentd, script
from tests.support.leftovers import EXIT_BOUND, tagged_env, wait_gone

pytestmark = pytest.mark.fault

#: How long the agent's model call takes: the signal always lands mid-turn.
TURN_MS = 2500
#: The grace the tests give; a clean drain ends well before it.
GRACE_S = 20.0


def slow_model(tmp_path: Path) -> str:
    return script(tmp_path, [{"text": "finished the task", "latency_ms": TURN_MS}])


async def assert_drained_mid_turn(a: Agentd, signame: str) -> None:
    """The signal started a drain while the agent ran; its turn finished; exit 0 before the grace."""
    drain = await a.wait_event("drain.start")
    assert drain["signal"] == signame
    assert drain["agents"] == 1  # the signal arrived mid-turn
    assert await a.wait_exit(timeout=GRACE_S + 10) == ExitCode.OK, a.tail()
    (turn,) = a.find("turn.end")
    assert turn["status"] == "completed"
    assert not a.find("subagent.exit", lambda e: e["status"] == "crashed")
    assert not a.find("drain.timeout")
    assert a.find("supervisor.exit")[0]["exit_code"] == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_signal_to_the_process_group_drains_instead_of_killing_the_agents(
    tmp_path: Path, sig: signal.Signals
) -> None:
    args = ["--model", slow_model(tmp_path), "--grace", f"{GRACE_S}s", "do the task"]
    # setsid: agentd leads a process group of its own, as under systemd or `timeout`.
    async with run_agentd(args, env=tagged_env(tmp_path), prefix=["setsid"]) as a:
        started = await a.wait_event("subagent.started")
        assert os.getpgid(a.proc.pid) == a.proc.pid
        # The agent leads a process group of its own (forked from the supervisor for a once root).
        assert os.getpgid(started["pid"]) == started["pid"]
        os.killpg(a.proc.pid, sig)  # kill -- -PGID
        await assert_drained_mid_turn(a, sig.name)
    assert a.out == "finished the task\n"


@pytest.mark.skipif(shutil.which("tini") is None, reason="tini is not installed")
async def test_under_tini_g_a_sigterm_drains_the_reactive_daemon_with_exit_0(tmp_path: Path) -> None:
    memo = tmp_path / "notes.json"
    memo.write_text(json.dumps({"todo": "milk"}))
    args = [
        "--mode", "reactive", "--model", slow_model(tmp_path), "--grace", f"{GRACE_S}s",
        "--mcp-stdio", f"memo={PY} -m agentd serve memo --file {memo}",
        "--subscribe", "memo:memo://notes", "--route", "memo://notes=spawn:1", "react",
    ]  # fmt: skip
    # tini -g forwards the signals it gets to agentd's whole process group.
    tini = [str(shutil.which("tini")), "-g", "--"]
    async with run_agentd(args, env=tagged_env(tmp_path), prefix=tini) as a:
        await a.wait_event("ready.changed", lambda e: e["ready"])
        memo.write_text(json.dumps({"todo": "eggs"}))
        await a.wait_event("subagent.started")
        a.signal(signal.SIGTERM)  # to tini, PID 1 of a container
        await assert_drained_mid_turn(a, "SIGTERM")
    assert a.out == "finished the task\n"


async def test_sighup_drains_like_sigterm(tmp_path: Path) -> None:
    args = ["--model", slow_model(tmp_path), "--grace", f"{GRACE_S}s", "do the task"]
    async with run_agentd(args, env=tagged_env(tmp_path)) as a:
        await a.wait_event("subagent.started")
        a.signal(signal.SIGHUP)
        await assert_drained_mid_turn(a, "SIGHUP")
    assert a.out == "finished the task\n"


async def test_a_second_group_signal_stops_at_once_with_143(tmp_path: Path) -> None:
    args = ["--model", slow_model(tmp_path), "--grace", f"{GRACE_S}s", "do the task"]
    async with run_agentd(args, env=tagged_env(tmp_path), prefix=["setsid"]) as a:
        await a.wait_event("subagent.started")
        os.killpg(a.proc.pid, signal.SIGTERM)
        await a.wait_event("drain.start")
        os.killpg(a.proc.pid, signal.SIGTERM)
        assert await a.wait_exit(timeout=15) == ExitCode.DRAIN_TIMEOUT, a.tail()
    assert a.find("drain.abort")


async def test_a_sigkilled_supervisor_leaves_no_process_behind_even_a_stopped_zygote(tmp_path: Path) -> None:
    memo = tmp_path / "notes.json"
    memo.write_text(json.dumps({"todo": "milk"}))
    args = [
        "--mode", "reactive", "--model", script(tmp_path, [{"text": "done", "latency_ms": 60_000}]),
        "--mcp-stdio", f"memo={PY} -m agentd serve memo --file {memo}", "--spawn-timeout", "1s",
        "--subscribe", "memo:memo://notes", "--route", "memo://notes=spawn:2", "react",
    ]  # fmt: skip
    async with run_agentd(args, env=tagged_env(tmp_path)) as a:
        zygote = (await a.wait_event("zygote.ready"))["pid"]
        await a.wait_event("ready.changed", lambda e: e["ready"])
        memo.write_text(json.dumps({"todo": "first"}))
        forked = await a.wait_event("subagent.started")
        os.kill(zygote, signal.SIGSTOP)  # it can no longer see its control socket close
        memo.write_text(json.dumps({"todo": "second"}))
        fresh = await a.wait_event("subagent.started", count=2)
        assert (forked["zygote"], fresh["zygote"]) == (True, False)
        tree = [p.pid for p in psutil.Process(a.proc.pid).children(recursive=True)]
        assert {zygote, forked["pid"], fresh["pid"]} <= set(tree)
        a.proc.kill()  # SIGKILL: no drain, no cleanup code runs
        await a.wait_exit()
    # The stopped zygote dies of its death signal, its child with it; the fresh
    # interpreter sees its control channel close; the memo server its stdin.
    assert wait_gone(tree, EXIT_BOUND) == []


#: trio retires an idle worker thread after 10 s (trio/_core/_thread_cache.py); a death
#: signal tied to such a thread would kill the zygote then.
WORKER_IDLE_S = 10.0


@pytest.mark.slow
async def test_the_zygote_outlives_trios_idle_worker_threads(tmp_path: Path) -> None:
    """The zygote's death signal is tied to the supervisor's main thread, not to a worker that retires."""
    memo = tmp_path / "notes.json"
    memo.write_text(json.dumps({"todo": "milk"}))
    args = [
        "--mode", "reactive", "--model", script(tmp_path, [{"text": "done"}]),
        "--mcp-stdio", f"memo={PY} -m agentd serve memo --file {memo}",
        "--subscribe", "memo:memo://notes", "--route", "memo://notes=spawn:1", "react",
    ]  # fmt: skip
    async with run_agentd(args, env=tagged_env(tmp_path)) as a:
        zygote = (await a.wait_event("zygote.ready"))["pid"]
        await a.wait_event("ready.changed", lambda e: e["ready"])
        await trio.sleep(WORKER_IDLE_S + 3)  # the time itself is the condition: every idle worker retired
        assert psutil.Process(zygote).status() != psutil.STATUS_ZOMBIE
        memo.write_text(json.dumps({"todo": "eggs"}))
        started = await a.wait_event("subagent.started")
        assert started["zygote"] is True
        assert not a.find("zygote.degraded")
        a.signal(signal.SIGTERM)
        assert await a.wait_exit() == ExitCode.OK, a.tail()
