"""Fault catalog: spawning cannot hang; a stopped, dead or failing zygote is replaced.

Each case runs the real ``agentd`` command in reactive mode (the bundled memo
server, a spawn route) and breaks the zygote for real: SIGSTOP, SIGKILL, or a
pids cgroup that makes its ``fork()`` fail with EAGAIN (root and a writable
pids controller needed; skipped otherwise, with the reason). The change that
needed an agent is handled anyway (a fresh interpreter, said so in
telemetry), readiness reports the degraded zygote until its replacement is
ready, and the next change forks from the replacement. When no child can be
started at all (the supervisor's own forks fail too), the change is queued
again and handled once spawning works, never lost.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
import pytest
import trio

from agentd.core.exitcodes import ExitCode
from tests.support.agentd_proc import Agentd, run_agentd, script
from tests.support.cgroups import pids_cgroup
from tests.support.files import edit
from tests.support.leftovers import tagged_env
from tests.support.routing import memo_change_handled, memo_server

pytestmark = pytest.mark.fault

#: The spawn bound the tests set (``--spawn-timeout``): short, so a stopped zygote costs little.
SPAWN_TIMEOUT_S = 1.0
#: Slack on wall-time assertions for a shared, loaded 2-core machine.
SLACK_S = 5.0


def args(tmp_path: Path, memo: Path, *extra: str, latency_ms: int = 0, inflight: int = 1) -> list[str]:
    model = script(tmp_path, [{"text": "handled {instruction}", "latency_ms": latency_ms}])
    return [
        "--mode", "reactive", "--model", model, "--mcp-stdio", memo_server(memo),
        "--subscribe", "memo:memo://notes", "--route", f"memo://notes=spawn:{inflight}",
        "--spawn-timeout", f"{SPAWN_TIMEOUT_S}s", "--health-addr", "127.0.0.1:0", *extra, "react",
    ]  # fmt: skip


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def readiness_flips(a: Agentd, *, reason: str) -> None:
    """``/readyz`` went not-ready naming the zygote, then ready again once the replacement was up."""
    down = await a.wait_event("ready.changed", lambda e: not e["ready"] and "zygote" in e["reason"])
    assert reason in down["reason"]
    assert "fresh interpreters" in down["reason"]
    replaced = await a.wait_event("zygote.ready", lambda e: e["replaced"], timeout=60)
    up = await a.wait_event("ready.changed", lambda e: e["ready"], count=2)
    assert a.events.index(up) > a.events.index(replaced)


async def zygote_when_ready(a: Agentd) -> int:
    """The zygote's pid, once agentd reports ready."""
    pid = (await a.wait_event("zygote.ready"))["pid"]
    await a.wait_event("ready.changed", lambda e: e["ready"])
    return int(pid)


async def stops_cleanly(a: Agentd) -> None:
    """SIGTERM: agentd drains and exits 0."""
    a.signal(signal.SIGTERM)
    assert await a.wait_exit() == ExitCode.OK, a.tail()


@pytest.fixture
def memo(tmp_path: Path) -> Path:
    """The memo server's file, holding one note before agentd starts."""
    path = tmp_path / "notes.json"
    edit(path, {"todo": "milk"})
    return path


async def test_a_stopped_zygote_is_detected_replaced_and_the_change_still_runs(
    tmp_path: Path, memo: Path
) -> None:
    extra_args = args(tmp_path, memo, latency_ms=1500, inflight=2)
    async with run_agentd(extra_args, env=tagged_env(tmp_path)) as a:
        old = await zygote_when_ready(a)
        # Agent A, forked by the zygote, is mid-turn (its model call takes 1.5 s) when the zygote stops.
        edit(memo, {"todo": "first"})
        a_started = await a.wait_event("subagent.started")
        assert a_started["zygote"] is True
        os.kill(old, signal.SIGSTOP)
        b_started = await memo_change_handled(a, memo, "while stopped")
        # B's spawn waited the bound for the stopped zygote, then a fresh interpreter ran it.
        assert b_started["zygote"] is False
        assert SPAWN_TIMEOUT_S * 1000 <= b_started["spawn_ms"] < (2 * SPAWN_TIMEOUT_S + SLACK_S) * 1000
        degraded = a.find("zygote.degraded")[0]
        assert degraded["pid"] == old
        assert f"did not answer a spawn request within {SPAWN_TIMEOUT_S:g}s" in degraded["reason"]
        assert a.find("subagent.spawn_fallback")[0]["agent"] == b_started["agent"]
        await readiness_flips(a, reason="did not answer a spawn request")
        # A was not taken down with its zygote: the retired zygote is killed only once A is gone.
        a_exit = await a.wait_event("subagent.exit", lambda e: e["agent"] == a_started["agent"])
        assert a_exit["status"] == "completed"
        assert a.find("turn.end", lambda e: e["agent"] == a_started["agent"])[0]["status"] == "completed"
        # The next change forks from the replacement; the stopped zygote was killed.
        again = await memo_change_handled(a, memo, "after")
        assert again["zygote"] is True
        assert gone(old)
        await stops_cleanly(a)
    assert a.out.count("handled") == 3


async def test_a_killed_zygote_is_replaced_and_the_next_change_forks_from_the_replacement(
    tmp_path: Path, memo: Path
) -> None:
    async with run_agentd(args(tmp_path, memo), env=tagged_env(tmp_path)) as a:
        old = await zygote_when_ready(a)
        os.kill(old, signal.SIGKILL)
        degraded = await a.wait_event("zygote.degraded")
        assert degraded["reason"] == f"the zygote (pid {old}) exited"
        await readiness_flips(a, reason="exited")
        assert (await memo_change_handled(a, memo, "after"))["zygote"] is True
        await stops_cleanly(a)


async def test_a_zygote_whose_fork_fails_with_eagain_is_replaced_and_the_change_runs(
    tmp_path: Path, memo: Path
) -> None:
    with pids_cgroup() as cgroup:
        async with run_agentd(args(tmp_path, memo), env=tagged_env(tmp_path)) as a:
            old = await zygote_when_ready(a)
            cgroup.add(old)
            cgroup.limit(0)  # the zygote may not create one more task: fork() -> EAGAIN
            first = await memo_change_handled(a, memo, "under the limit")
            if first["zygote"]:
                # A spare the zygote forked before the limit ran it; its next fork fails.
                first = await memo_change_handled(a, memo, "under the limit, again")
            assert first["zygote"] is False
            degraded = a.find("zygote.degraded")[0]
            assert degraded["pid"] == old
            assert "could not fork: fork failed: [Errno 11]" in degraded["reason"]
            await readiness_flips(a, reason="could not fork")
            assert (await memo_change_handled(a, memo, "after"))["zygote"] is True
            assert gone(old)  # retired with no child left: killed
            await stops_cleanly(a)


async def test_when_no_child_can_start_the_change_is_queued_again_and_handled_later(
    tmp_path: Path, memo: Path
) -> None:
    with pids_cgroup() as cgroup:
        extra = ("--max-restarts", "1000")  # failed spawns count as crashes; keep the breaker shut here
        async with run_agentd(args(tmp_path, memo, *extra), env=tagged_env(tmp_path)) as a:
            zygote = await zygote_when_ready(a)
            cgroup.add(a.proc.pid)
            cgroup.add(zygote)
            cgroup.limit(0)  # neither agentd nor its zygote can fork (or start a thread)
            spawns = len(a.find("subagent.spawn"))
            edit(memo, {"todo": "blocked"})
            spawned = await a.wait_event("subagent.spawn", count=spawns + 1)
            ended = await a.wait_event("subagent.exit", lambda e: e["agent"] == spawned["agent"])
            if ended["status"] == "completed":
                # A spare the zygote forked before the limit ran it; nothing can be forked now.
                edit(memo, {"todo": "blocked again"})
            failed = await a.wait_event("subagent.spawn_failed")
            exit_event = await a.wait_event("subagent.exit", lambda e: e["agent"] == failed["agent"])
            assert exit_event["status"] == "crashed"
            assert exit_event["reason"].startswith("spawn failed: could not start a fresh interpreter")
            requeued = await a.wait_event("route.requeued", lambda e: e["agent"] == failed["agent"])
            assert requeued["uri"] == "memo://notes"
            cgroup.limit("max")
            # The queued change is handled once a child can start: not lost.
            turn = await a.wait_event("turn.end", lambda e: e["status"] == "completed", timeout=60)
            assert turn["route"] == a.find("route.deliver")[-1]["route"]
            await a.wait_event("zygote.ready", lambda e: e["replaced"], timeout=60)
            with trio.fail_after(60):
                await stops_cleanly(a)
    assert "handled" in a.out
