"""The inbox server and hooks written to the mcp-watcher contract (rfcs/0291).

Such a hook (``tests/support/hooks/agent-ping-standdown.sh``, in shell, as
agent-ping's is) stands down while ``DIR/.AGENT.watcher-active`` exists and
delivers the message itself otherwise. It runs against the real server
process: it must see the sentinel while the server runs, not after a clean
stop, and a sentinel left by a SIGKILLed server is taken over by the next one.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import trio

from tests.support.rawmcp import raw_server, server_env

REPO = Path(__file__).resolve().parents[2]
HOOK = REPO / "tests/support/hooks/agent-ping-standdown.sh"
AGENT = "bob"
STATUS = f"inbox://{AGENT}/status"


def argv(directory: Path) -> list[str]:
    return [sys.executable, "-m", "agentd.servers", "inbox", "--agent", AGENT, "--dir", str(directory)]


def hook(directory: Path, message: str) -> str:
    """Run the hook as a prompt hook would be run; what it did."""
    done = subprocess.run(
        ["/bin/sh", str(HOOK), str(directory), AGENT, message],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return done.stdout.strip()


def delivered_by_hook(directory: Path) -> list[str]:
    path = directory / f"{AGENT}.hook-delivered"
    return path.read_text().splitlines() if path.exists() else []


async def test_the_hook_stands_down_while_the_server_runs_and_delivers_after_it_stops(tmp_path: Path) -> None:
    sentinel = tmp_path / f".{AGENT}.watcher-active"
    assert hook(tmp_path, "before") == "delivered"
    async with raw_server(argv(tmp_path)) as client:
        await client.initialize()
        await client.read_json(STATUS)
        assert hook(tmp_path, "while running") == "skipped"
        info = json.loads(sentinel.read_text())
        assert (info["pid"], info["host"]) == (client.proc.pid, socket.gethostname())
        assert info["start_time"] == psutil.Process(client.proc.pid).create_time()
        # The host-local files of rfcs/0141 stay beside it, the same sentinel among them.
        assert json.loads((tmp_path / f".~{AGENT}.watcher-active").read_text()) == info
        assert (tmp_path / f".~{AGENT}.lock").exists()
    assert client.proc.returncode == 0
    assert not sentinel.exists()
    assert not (tmp_path / f".~{AGENT}.watcher-active").exists()
    assert hook(tmp_path, "after") == "delivered"
    assert delivered_by_hook(tmp_path) == ["before", "after"]


async def test_a_sigkilled_servers_sentinel_is_taken_over_by_the_next_server(tmp_path: Path) -> None:
    sentinel = tmp_path / f".{AGENT}.watcher-active"
    async with raw_server(argv(tmp_path)) as client:
        await client.initialize()
        await client.read_json(STATUS)
        killed = client.proc.pid
        client.proc.kill()
        await client.proc.wait()
    # Nothing could remove it: it names a process that is gone, on this host (a hook that
    # reads it can tell; one that only tests for the file stands down until the next start).
    stale = json.loads(sentinel.read_text())
    assert (stale["pid"], stale["host"]) == (killed, socket.gethostname())
    assert not psutil.pid_exists(killed) or psutil.Process(killed).create_time() != stale["start_time"]
    async with raw_server(argv(tmp_path)) as client:
        await client.initialize()
        await client.read_json(STATUS)
        info = json.loads(sentinel.read_text())
        assert info["pid"] == client.proc.pid != killed
        assert hook(tmp_path, "while the second server runs") == "skipped"
    assert not sentinel.exists()
    assert hook(tmp_path, "after the second server") == "delivered"


async def test_a_sentinel_synced_from_another_host_is_reported_and_replaced(tmp_path: Path) -> None:
    sentinel = tmp_path / f".{AGENT}.watcher-active"
    sentinel.write_text(json.dumps({"pid": 1, "start_time": 0.0, "host": "laptop-far-away"}))
    async with raw_server(argv(tmp_path)) as client:
        await client.initialize()
        (warning,) = (await client.read_json(STATUS))["warnings"]
        assert warning.startswith(f"found a sentinel of host 'laptop-far-away' (pid 1) in {tmp_path}")
        assert "keep .~* and .*.watcher-active files out of sync" in warning
        assert json.loads(sentinel.read_text())["pid"] == client.proc.pid
    assert not sentinel.exists()


async def test_a_live_watcher_of_another_kind_keeps_the_inbox(tmp_path: Path) -> None:
    """A watcher that does not take agentd's lock (the mcp-watcher) but wrote the contract's sentinel."""
    sentinel = tmp_path / f".{AGENT}.watcher-active"
    me = psutil.Process()
    sentinel.write_text(
        json.dumps({"pid": me.pid, "start_time": me.create_time(), "host": socket.gethostname()})
    )
    done = await trio.run_process(
        argv(tmp_path), capture_stdout=True, capture_stderr=True, check=False, env=server_env(), stdin=b""
    )
    assert done.returncode == 1
    assert (
        f"{tmp_path}/{AGENT}.inbox is already drained by pid {me.pid} on {socket.gethostname()} "
        f"(sentinel {sentinel}); stop that server first" in done.stderr.decode()
    )
    assert json.loads(sentinel.read_text())["pid"] == me.pid  # left as it was
