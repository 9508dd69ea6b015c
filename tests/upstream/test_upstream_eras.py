"""Fault catalog V1–V4: servers that break on the ``server/discover`` probe (rfcs/0285, rfcs/0378).

Each test runs the real ``agentd`` command against
``tests/mcpservers/probe_exit_server.py``, a stdio server that exits with status 1 on
any request it does not know, or (V4) ``tests/mcpservers/partial_server.py``, which
reads the probe and says nothing, as Python SDK ≤ 1.8 servers do over stdio.
Every wait is on telemetry or the exit; the fault conftest fails a test that
leaves a process behind.
"""

from __future__ import annotations

import json
import os
import signal
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
import pytest

from agentd.core.exitcodes import ExitCode
from tests.support.agentd_proc import PY, REPO, Agentd, run_agentd, script
from tests.support.leftovers import AllowedFiles, tagged_env

pytestmark = pytest.mark.fault

PROBE_EXIT_SERVER = REPO / "tests/mcpservers/probe_exit_server.py"
PARTIAL_SERVER = REPO / "tests/mcpservers/partial_server.py"

SDK_PROBE_TIMEOUT = 10.0
"""How long the SDK itself waits for an answer to the probe before it sends ``initialize``."""

STARTUP = 30.0
"""Bound on agentd's start on a loaded 2-core machine (an interpreter start plus imports)."""


@pytest.fixture(autouse=True)
def _spawn_log(allow_files: AllowedFiles) -> None:
    allow_files("spawns")  # the server's own count of its starts


def _server(tmp_path: Path, *extra: str) -> str:
    return f"old={PY} {PROBE_EXIT_SERVER} --spawns {tmp_path / 'spawns'} {' '.join(extra)}".strip()


def _spawns(tmp_path: Path) -> int:
    path = tmp_path / "spawns"
    return len(path.read_text().splitlines()) if path.exists() else 0


def _of(a: Agentd, name: str, **where: Any) -> list[dict[str, Any]]:
    return a.find(name, lambda e: all(e.get(k) == v for k, v in where.items()))


async def test_v1_server_exiting_on_the_probe_is_started_again_with_initialize_and_remembered(
    tmp_path: Path,
) -> None:
    model = script(
        tmp_path,
        [
            {"tool_calls": [{"name": "old__echo", "arguments": {"text": "from an old server"}}]},
            {"text": "echo said: {last_tool_result}"},
        ],
    )
    args = ["--mode", "reactive", "--verbose", "--model", model, "--mcp-stdio", _server(tmp_path), "react"]
    async with run_agentd(args, env=tagged_env(tmp_path, AGENTD_RECONNECT_BACKOFF="0.05")) as a:
        first = await a.wait_event("upstream.connected", timeout=STARTUP)
        assert (first["era"], first["probe"], first["protocol_version"]) == (
            "handshake",
            "failed",
            "2024-11-05",
        )
        [fallback] = _of(a, "upstream.fallback")
        assert fallback["tried"] == "stdio, server/discover probe"
        assert fallback["next"] == "stdio, initialize"
        assert "exited with status 1" in fallback["error"]
        assert "is not a valid method" in fallback["error"]  # the stderr tail is quoted
        assert _of(a, "upstream.connect_failed") == []  # no backoff round was spent on the probe
        assert _spawns(tmp_path) == 2

        # A restart of the server goes straight to initialize: the era is remembered.
        os.kill(_pid_of(tmp_path), signal.SIGKILL)
        second = await a.wait_event("upstream.connected", count=2, timeout=STARTUP)
        assert second["probe"] == "skipped"
        assert len(_of(a, "upstream.fallback")) == 1
        assert _spawns(tmp_path) == 3
        a.proc.send_signal(signal.SIGTERM)
        assert await a.wait_exit(timeout=STARTUP) == 0


def _pid_of(tmp_path: Path, server: Path = PROBE_EXIT_SERVER) -> int:
    """The running test server's pid (found by its command line)."""
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if str(server) in cmdline and str(tmp_path / "spawns") in cmdline:
            return int(proc.pid)
    raise AssertionError(f"{server.name} is not running")


async def test_v4_server_that_reads_the_probe_and_says_nothing_connects_without_waiting_out_the_probe(
    tmp_path: Path,
) -> None:
    model = script(tmp_path, [{"text": "never runs"}])
    server = f"old={PY} {PARTIAL_SERVER} --drop server/discover --spawns {tmp_path / 'spawns'}"
    args = ["--mode", "reactive", "--verbose", "--model", model, "--mcp-stdio", server, "react"]
    async with run_agentd(args, env=tagged_env(tmp_path, AGENTD_RECONNECT_BACKOFF="0.05")) as a:
        start = await a.wait_event("supervisor.start", timeout=STARTUP)
        first = await a.wait_event("upstream.connected", timeout=STARTUP)
        assert (first["era"], first["probe"], first["protocol_version"]) == (
            "handshake",
            "ignored",
            "2024-11-05",
        )
        # Was: the SDK's own 10 s wait for the probe, at every start of such a server.
        assert _seconds(start, first) < SDK_PROBE_TIMEOUT
        [fallback] = _of(a, "upstream.fallback")
        assert (fallback["tried"], fallback["next"]) == ("stdio, server/discover probe", "stdio, initialize")
        assert "read the server/discover probe and answered nothing for 1s" in fallback["error"]
        assert _of(a, "upstream.connect_failed") == []
        assert _spawns(tmp_path) == 2

        # A restart of the server goes straight to initialize: the era is remembered, no probe.
        os.kill(_pid_of(tmp_path, PARTIAL_SERVER), signal.SIGKILL)
        second = await a.wait_event("upstream.connected", count=2, timeout=STARTUP)
        assert second["probe"] == "skipped"
        assert len(_of(a, "upstream.fallback")) == 1
        assert _spawns(tmp_path) == 3
        a.proc.send_signal(signal.SIGTERM)
        assert await a.wait_exit(timeout=STARTUP) == 0


def _seconds(a: dict[str, Any], b: dict[str, Any]) -> float:
    """Seconds between two telemetry events (their ``ts``)."""
    return (_ts(b) - _ts(a)).total_seconds()


def _ts(event: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(event["ts"].replace("Z", "+00:00"))


async def test_v2_server_that_never_connects_costs_two_starts_per_attempt_and_fails_required(
    tmp_path: Path,
) -> None:
    model = script(tmp_path, [{"text": "never runs"}])
    args = [
        "--mode", "once", "--model", model,
        "--mcp-stdio", _server(tmp_path, "--exit-on-initialize"), "--require", "old", "react",
    ]  # fmt: skip
    async with run_agentd(args, env=tagged_env(tmp_path, AGENTD_RECONNECT_BACKOFF="0.05")) as a:
        assert await a.wait_exit(timeout=60) == ExitCode.REQUIRED_SERVER
    # Five attempts (the backoff rounds), each a probe and one initialize: ten starts.
    assert [e["attempt"] for e in _of(a, "upstream.connect_failed")] == [1, 2, 3, 4, 5]
    assert len(_of(a, "upstream.fallback")) == 5
    assert _spawns(tmp_path) == 10
    error = _of(a, "upstream.failed")[0]["error"]
    assert error.startswith("server 'old' ")
    assert "exited with status 1" in error
    assert "earlier tries: stdio, server/discover probe: " in error


async def test_v3_a_pinned_2026_version_is_never_downgraded(tmp_path: Path) -> None:
    model = script(tmp_path, [{"text": "never runs"}])
    config = tmp_path / "mcp.json"
    server = {"command": PY, "args": [str(PROBE_EXIT_SERVER), "--spawns", str(tmp_path / "spawns")]}
    config.write_text(
        json.dumps({"mcpServers": {"old": {**server, "protocol": "2026-07-28", "required": True}}})
    )
    args = ["--mode", "once", "--model", model, "--mcp-config", str(config), "react"]
    async with run_agentd(args, env=tagged_env(tmp_path, AGENTD_RECONNECT_BACKOFF="0.05")) as a:
        assert await a.wait_exit(timeout=60) == ExitCode.REQUIRED_SERVER
    assert _of(a, "upstream.fallback") == []
    assert _spawns(tmp_path) == 5  # one start per attempt: no initialize try
    error = _of(a, "upstream.failed")[0]["error"]
    assert "exited with status 1" in error
    assert (
        "its protocol is pinned to '2026-07-28' (stdio, server/discover at 2026-07-28), so no other "
        "handshake was tried: set protocol to 'auto' to let agentd negotiate; its stderr ends with:\n"
    ) in error
