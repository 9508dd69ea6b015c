"""A once run's pre-forked root (rfcs/0185) under a killed supervisor and a run that never starts it.

The root of ``--mode once`` is forked from the supervisor before its event
loop starts and waits for its spawn payload. No process of the tree may
outlive the supervisor: not when the supervisor is SIGKILLed while the root
waits, and not when the run ends before the root was ever needed.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
import pytest
import trio

from agentd.core.exitcodes import ExitCode
from tests.support.agentd_proc import PY, notes_server, run_agentd, script

pytestmark = pytest.mark.fault


def _same_command(marker: str) -> list[psutil.Process]:
    """Live processes whose command line carries ``marker`` (a forked child keeps the supervisor's)."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if marker in " ".join(p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.Error:
            continue
    return found


async def _wait_gone(pid: int, timeout: float = 20) -> None:
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        with trio.fail_after(timeout):
            await trio.lowlevel.wait_readable(pidfd)
    finally:
        os.close(pidfd)


async def test_sigkilled_supervisor_takes_the_waiting_root_with_it(tmp_path: Path) -> None:
    marker = f"root-of-{tmp_path.name}"
    # A server that never finishes its handshake: the root waits for its payload.
    stuck = f"stuck={PY} -c 'import time; time.sleep(120)'"
    model = script(tmp_path, [{"text": "never"}])
    async with run_agentd(["--model", model, "--mcp-stdio", stuck, marker]) as a:
        await a.wait_event("supervisor.start")
        supervisor = psutil.Process(a.proc.pid)
        roots = [c for c in supervisor.children() if marker in " ".join(c.cmdline())]
        assert len(roots) == 1, [c.cmdline() for c in supervisor.children()]
        a.signal(signal.SIGKILL)
        await a.wait_exit()
        await _wait_gone(roots[0].pid)
    assert _same_command(marker) == []


async def test_a_run_that_ends_before_its_root_starts_reaps_the_root(tmp_path: Path) -> None:
    marker = f"root-of-{tmp_path.name}"
    broken = notes_server(tmp_path, "--exit-during-init", name="needed")
    model = script(tmp_path, [{"text": "never"}])
    env = {"AGENTD_RECONNECT_BACKOFF": "0.01"}
    async with run_agentd(
        ["--model", model, "--mcp-stdio", broken, "--require", "needed", marker], env=env
    ) as a:
        # Five attempts of two starts each (the server exits on the discover probe, then
        # on initialize: rfcs/0285), each start an interpreter importing the SDK.
        assert await a.wait_exit(timeout=100) == ExitCode.REQUIRED_SERVER, a.tail()
    assert a.find("subagent.spawn") == []
    # The exit summary, then the failed run's final line (rfcs/0321): nothing after them.
    assert [e["event"] for e in a.events[-2:]] == ["supervisor.exit", "run.failed"]
    assert _same_command(marker) == []
