"""Servers of earlier eras and transports, through the real ``agentd`` command (rfcs/0285, rfcs/0286).

* A FastMCP server on the Python ``mcp`` SDK 1.8.1 over stdio (it reads the
  ``server/discover`` probe and says nothing, rfcs/0378): its tool is called
  in a once run.
* The same server, and one on SDK 1.30.0, over HTTP+SSE, given as Cursor
  writes it (``{"url": "http://…/sse"}``, no ``type``): a reactive run is
  woken by the server's own ``notifications/resources/updated`` after
  another client changed the note, and the agent reads the new text.
* The Node ``server-everything`` in SSE mode, given the same way.

The old SDKs live in their own virtual environments (``tests/support/oldmcp.py``).
"""

from __future__ import annotations

import json
import signal
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp import Client
from mcp.client.sse import sse_client

from tests.support.agentd_proc import run_agentd, script
from tests.support.everything import everything_http
from tests.support.oldmcp import INSTALL_TIMEOUT_S, OldSdkUnavailable, old_mcp_python, old_server_argv
from tests.support.processes import listening, stop

pytestmark = pytest.mark.timeout(INSTALL_TIMEOUT_S + 180)

STARTUP = 60.0
"""Bound on agentd's start with an old FastMCP server on a loaded 2-core machine
(two interpreter starts for a 1.8 server: the probe, then initialize)."""


SDK_PROBE_TIMEOUT = 10.0
"""How long the SDK itself waits for an answer to the probe before it sends ``initialize``."""


def _seconds(a: dict[str, Any], b: dict[str, Any]) -> float:
    """Seconds between two telemetry events (their ``ts``)."""

    def parse(e: dict[str, Any]) -> datetime:
        return datetime.fromisoformat(e["ts"].replace("Z", "+00:00"))

    return (parse(b) - parse(a)).total_seconds()


def _python(version: str) -> Path:
    try:
        return old_mcp_python(version)
    except OldSdkUnavailable as exc:
        pytest.fail(str(exc))


def _cursor_file(tmp_path: Path, name: str, url: str) -> Path:
    path = tmp_path / "cursor-mcp.json"
    path.write_text(json.dumps({"mcpServers": {name: {"url": url, "startup_timeout": STARTUP}}}))
    return path


async def test_once_run_calls_a_tool_of_an_sdk_1_8_stdio_server(tmp_path: Path) -> None:
    argv = old_server_argv(_python("1.8.1"))
    model = script(
        tmp_path,
        [
            {"tool_calls": [{"name": "old__add", "arguments": {"a": 40, "b": 2}}]},
            {"text": "sum: {last_tool_result}"},
        ],
    )
    config = tmp_path / "servers.json"
    config.write_text(
        json.dumps(
            {"mcpServers": {"old": {"command": argv[0], "args": argv[1:], "startup_timeout": STARTUP}}}
        )
    )
    args = ["--mode", "once", "--model", model, "--mcp-config", str(config), "--require", "old", "add"]
    async with run_agentd(args) as a:
        assert await a.wait_exit(timeout=STARTUP + 30) == 0, a.raw_stderr[-20:]
    assert a.out.strip() == "sum: 42"
    [connected] = a.find("upstream.connected")
    assert (connected["transport"], connected["era"], connected["probe"]) == ("stdio", "handshake", "ignored")
    assert a.find("upstream.connect_failed") == []
    # It read the probe and said nothing: taken as handshake-era after 1 s of silence, where
    # agentd used to wait out the SDK's 10 s probe timeout at every start (rfcs/0378).
    [start] = a.find("supervisor.start")
    [fallback] = a.find("upstream.fallback")
    assert "read the server/discover probe and answered nothing for 1s" in fallback["error"]
    assert _seconds(start, fallback) < SDK_PROBE_TIMEOUT


@pytest.mark.parametrize("version", ["1.8.1", "1.30.0"])
async def test_reactive_run_is_woken_by_an_old_sdk_sse_server_given_as_a_url_only_entry(
    tmp_path: Path, version: str
) -> None:
    listener, port = listening()
    url = f"http://127.0.0.1:{port}/sse"
    model = script(
        tmp_path,
        [
            {"tool_calls": [{"name": "read_resource", "arguments": {"uri": "note://alpha"}}]},
            {"text": "note now: {last_tool_result}"},
        ],
    )
    args = [
        "--mode", "reactive", "--verbose", "--model", model,
        "--mcp-config", str(_cursor_file(tmp_path, "old", url)),
        "--subscribe", "old:note://alpha",
        "--route", "note://alpha=spawn,reread_on_start=false",
        "React to note changes.",
    ]  # fmt: skip
    server = await trio.lowlevel.open_process(
        old_server_argv(_python(version), "sse", fd=listener.fileno()),
        pass_fds=(listener.fileno(),),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        async with run_agentd(args) as a:
            connected = await a.wait_event("upstream.connected", timeout=STARTUP)
            assert (connected["transport"], connected["era"]) == ("sse", "handshake")
            await a.wait_event(
                "subscription.established", lambda e: e["uri"] == "note://alpha", timeout=STARTUP
            )
            # Another program changes the note through its own session; the server tells agentd's.
            async with Client(sse_client(url), mode="legacy") as other:
                await other.call_tool("set_note", {"name": "alpha", "text": "changed elsewhere"})
            spawn = await a.wait_event("subagent.spawn", timeout=STARTUP)
            await a.wait_event("turn.end", lambda e: e["agent"] == spawn["agent"], timeout=STARTUP)
            a.signal(signal.SIGTERM)
            assert await a.wait_exit() == 0, a.raw_stderr[-20:]
    finally:
        await stop(server)
        listener.close()
    assert "changed elsewhere" in a.out
    assert [e["uri"] for e in a.find("resource.updated")] == ["note://alpha"]


async def test_once_run_against_server_everything_over_sse_given_as_a_url_only_entry(tmp_path: Path) -> None:
    model = script(
        tmp_path,
        [
            {"tool_calls": [{"name": "everything__echo", "arguments": {"message": "found sse"}}]},
            {"text": "echo: {last_tool_result}"},
        ],
    )
    async with everything_http("sse") as url:
        args = [
            "--mode", "once", "--model", model,
            "--mcp-config", str(_cursor_file(tmp_path, "everything", url)), "--require", "everything", "echo",
        ]  # fmt: skip
        async with run_agentd(args) as a:
            assert await a.wait_exit(timeout=STARTUP + 30) == 0, a.raw_stderr[-20:]
    assert "found sse" in a.out
    connected: dict[str, Any] = a.find("upstream.connected")[0]
    assert connected["transport"] == "sse"
    [fallback] = a.find("upstream.fallback")
    assert (fallback["tried"], fallback["next"]) == (
        "http, server/discover probe",
        "sse, server/discover probe",
    )
