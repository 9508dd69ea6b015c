"""agentd under a service manager: the sd_notify protocol through the real command, and the user unit.

The test plays systemd's side: it binds the unix datagram socket that
``NOTIFY_SOCKET`` names (a path, or an ``@name`` in the abstract namespace)
and reads what ``agentd --mode reactive`` sends: ``READY=1`` at the moment
``/readyz`` first says ready, ``STOPPING=1`` on SIGTERM, ``WATCHDOG=1`` pings
when ``WATCHDOG_USEC`` is set for this process. The unit file is checked with
``systemd-analyze verify --user``.
"""

from __future__ import annotations

import configparser
import os
import shutil
import signal
import subprocess
import uuid
from pathlib import Path

import httpx2
import pytest
import trio

from tests.support.agentd_proc import PY, REPO, run_agentd, script
from tests.support.sdnotify import STEP_TIMEOUT, lines, notify_socket

UNIT = REPO / "deploy" / "systemd" / "agentd.service"


async def readyz(port: int) -> int:
    with trio.fail_after(STEP_TIMEOUT):
        async with httpx2.AsyncClient() as client:
            return (await client.get(f"http://127.0.0.1:{port}/readyz")).status_code


async def test_ready_when_readyz_first_says_ready_and_stopping_on_sigterm(tmp_path: Path) -> None:
    """A required server and a declared subscription: READY=1 only once both are up, as /readyz."""
    address = str(tmp_path / "notify")
    args = [
        "--mode",
        "reactive",
        "--model",
        script(tmp_path, [{"text": "NO_REPLY"}]),
        "--mcp-stdio",
        f"memo={PY} -m agentd serve memo --file {tmp_path / 'notes.json'}",
        "--require",
        "memo",
        "--subscribe",
        "memo:memo://notes",
        "--health-addr",
        "127.0.0.1:0",
        "act on note changes",
    ]
    # A watchdog meant for another process (WATCHDOG_PID) is not agentd's to ping.
    env = {"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "100000", "WATCHDOG_PID": "1"}
    async with notify_socket(address) as listener, run_agentd(args, env=env) as a:
        ready = await listener.until("READY=1", a.tail)
        port = (await a.wait_event("health.listening"))["port"]
        assert await readyz(port) == 200
        assert ready.split("\n") == ["READY=1", "STATUS=ready"]
        # Before it: only "not ready" status lines, from the first report at start.
        before = listener.messages[:-1]
        assert before, "readiness was reported before it was ready"
        assert all(m.startswith("STATUS=not ready: ") for m in before), before
        # The reactor starts from the servers' states once their first attempts
        # settled: normally memo is up and its declared subscription is not yet.
        assert before[0] in (
            "STATUS=not ready: subscriptions not established: memo:memo://notes",
            "STATUS=not ready: required server 'memo' is restarting",
        ), before
        assert (await a.wait_event("sdnotify.enabled"))["watchdog_s"] is None

        a.signal(signal.SIGTERM)
        stopping = await listener.until("STOPPING=1", a.tail)
        assert stopping.split("\n") == ["STOPPING=1", "STATUS=draining: finishing running turns"]
        assert await a.wait_exit() == 0
        assert await listener.next() == "STATUS=stopping: exit code 0"
    sent = lines(listener.messages)
    assert sent.count("READY=1") == 1
    assert sent.count("STOPPING=1") == 1
    assert "WATCHDOG=1" not in sent


async def test_watchdog_pings_over_an_abstract_socket(tmp_path: Path) -> None:
    address = f"@agentd-test-{uuid.uuid4().hex}"
    args = ["--mode", "reactive", "--model", script(tmp_path, [{"text": "NO_REPLY"}]), "idle"]
    # A 1 s timeout: a ping every 0.5 s, each after the reactor answered a probe.
    env = {"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "1000000"}
    async with notify_socket(address) as listener, run_agentd(args, env=env) as a:
        await listener.until("READY=1", a.tail)
        enabled = await a.wait_event("sdnotify.enabled")
        assert (enabled["socket"], enabled["watchdog_s"]) == (address, 0.5)
        for _ in range(3):
            assert await listener.next() == "WATCHDOG=1"
        a.signal(signal.SIGTERM)
        await listener.until("STOPPING=1", a.tail)
        assert await a.wait_exit() == 0
    assert not a.find("sdnotify.failed")


async def test_no_notify_socket_no_notifications_and_no_timer(tmp_path: Path) -> None:
    """Outside systemd nothing is sent or armed, even with a stray WATCHDOG_USEC."""
    args = ["--mode", "reactive", "--model", script(tmp_path, [{"text": "NO_REPLY"}]), "idle"]
    env = {"NOTIFY_SOCKET": "", "WATCHDOG_USEC": "100000"}
    async with run_agentd(args, env=env) as a:
        await a.wait_event("ready.changed", lambda e: e["ready"])
        a.signal(signal.SIGTERM)
        assert await a.wait_exit() == 0
    assert not a.find("sdnotify.enabled")
    assert not a.find("watchdog.missed")


async def test_a_gone_service_manager_is_reported_once_and_agentd_runs_on(tmp_path: Path) -> None:
    address = str(tmp_path / "nobody-listens")
    args = ["--mode", "reactive", "--model", script(tmp_path, [{"text": "NO_REPLY"}]), "idle"]
    async with run_agentd(args, env={"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "200000"}) as a:
        failed = await a.wait_event("sdnotify.failed")
        assert failed["error"].startswith("ENOENT")
        a.signal(signal.SIGTERM)
        assert await a.wait_exit() == 0
    assert len(a.find("sdnotify.failed")) == 1


# --- the unit file ------------------------------------------------------------------


def _unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(UNIT.read_text(encoding="utf-8"))
    return parser


def test_unit_is_a_notify_user_service_that_drains():
    unit = _unit()
    service = unit["Service"]
    assert service["Type"] == "notify"
    assert service["NotifyAccess"] == "main"
    exec_start = service["ExecStart"].split()
    assert exec_start[0] == "%h/.local/bin/agentd"  # where pipx and uv tool put the command
    assert exec_start[1:3] == ["--mode", "reactive"]
    # The drain: SIGTERM to agentd only, and more time than its default --grace (25 s).
    assert (service["KillMode"], service["KillSignal"]) == ("mixed", "SIGTERM")
    assert int(service["TimeoutStopSec"].removesuffix("s")) > 25
    assert service["WatchdogSec"] == "1min"
    assert service["Restart"] == "on-failure"
    assert set(service["RestartPreventExitStatus"].split()) == {"2", "3", "7"}
    assert unit["Install"]["WantedBy"] == "default.target"


def _verify(unit: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    env = {**os.environ, "HOME": str(tmp_path / "home"), "XDG_RUNTIME_DIR": str(runtime)}
    return subprocess.run(
        ["systemd-analyze", "verify", "--user", str(unit)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_systemd_analyze_verify_accepts_the_unit(tmp_path):
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (Debian package systemd)")
    # The command where a pipx or uv install puts it, in a home of the test's own.
    bin_dir = tmp_path / "home" / ".local" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "agentd").symlink_to(Path(PY).parent / "agentd")
    probe = tmp_path / "probe" / "probe.service"
    probe.parent.mkdir()
    probe.write_text("[Service]\nType=notify\nExecStart=/bin/true\n")
    sanity = _verify(probe, tmp_path)
    if sanity.returncode != 0:
        pytest.skip(f"systemd-analyze verify --user cannot run here: {sanity.stderr.strip()}")
    result = _verify(UNIT, tmp_path)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")
    # And it does complain about a broken unit (so a clean pass means something).
    broken = tmp_path / "broken" / "agentd.service"
    broken.parent.mkdir()
    broken.write_text(UNIT.read_text(encoding="utf-8").replace("KillMode=mixed", "KillMode=mixd"))
    assert "mixd" in _verify(broken, tmp_path).stderr
