"""Helpers for end-to-end routing tests: the real ``agentd`` command, real MCP servers.

Every wait is on agentd's NDJSON telemetry, a process exit or an HTTP answer,
bounded by a timeout; nothing sleeps to wait for a condition.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import psutil
import trio
from prometheus_client.parser import text_string_to_metric_families

from tests.support.agentd_proc import PY, REPO, Agentd, script
from tests.support.files import edit
from tests.support.supervised import alive, tracking

#: A whole agentd start on this shared 2-core machine (interpreter, zygote,
#: servers' SDK imports), with room for a busy CI box.
START = 40.0

#: One reactive step (a change travelling server -> agentd -> an agent -> its answer).
STEP = 20.0

#: Bound on one HTTP request to agentd's endpoints.
HTTP = 10.0

NOTES_SERVER = REPO / "tests/mcpservers/notes_server.py"
FAULT_SERVER = REPO / "tests/mcpservers/fault_server.py"

#: ``AGENTD_RECONNECT_BACKOFF`` for tests: restarts are real, only the waits are short.
FAST_BACKOFF = {"AGENTD_RECONNECT_BACKOFF": "0.2,0.2,0.2,0.2,0.2"}


def routes_config(tmp: Path, routes: list[dict[str, Any]], servers: str = "") -> str:
    """Write ``agentd.toml`` with ``servers`` (TOML text) and these ``[[routes]]``; returns its path.

    Values are simple: JSON is valid TOML for them.
    """
    lines = []
    for route in routes:
        lines.append("[[routes]]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in route.items()]
    path = tmp / "agentd.toml"
    path.write_text(servers + "\n".join(lines) + "\n")
    return str(path)


def reader_script(tmp: Path) -> str:
    """A model that reads the resource its instruction names and answers with the body."""
    return script(
        tmp,
        [
            {"tool_calls": [{"name": "read_resource", "arguments": {"uri": "{instruction}"}}]},
            {"text": "saw {instruction}: {last_tool_result}"},
        ],
        then="stop",
        name="reader.json",
    )


def memo_server(path: Path, name: str = "memo") -> str:
    """An ``--mcp-stdio`` value for the bundled memo server persisting to ``path`` (created as ``{}``)."""
    if not path.exists():
        path.write_text("{}")
    return f"{name}={PY} -m agentd serve memo --file {path}"


def sdk_server(tmp: Path, name: str, *extra: str, server: Path = NOTES_SERVER, era: str = "modern") -> str:
    """An ``--mcp-stdio`` value for an SDK-written test server with its state in ``tmp/<name>.json``."""
    return f"{name}={PY} {server} --era {era} --state {tmp / (name + '.json')} {' '.join(extra)}".strip()


def write(tmp: Path, name: str, text: str) -> str:
    """Write ``tmp/name``; returns its path as text."""
    path = tmp / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


@asynccontextmanager
async def supervised(
    args: Sequence[str], *, env: dict[str, str] | None = None, cwd: Path | None = None
) -> AsyncIterator[Agentd]:
    """Run the real ``agentd``; afterwards no process it started (seen while it ran) may be left.

    Processes on their way out get :data:`HTTP` seconds, awaited on their pidfds.
    """
    async with tracking(args, env=env, cwd=cwd) as (a, seen):
        yield a
    left = [pid for pid in sorted(seen) if alive(pid) is not None]
    with trio.move_on_after(HTTP):
        for pid in left:
            await wait_gone(pid)
    described = []
    for pid in left:
        if alive(pid) is not None:
            with contextlib.suppress(psutil.NoSuchProcess):
                described.append(f"{pid}: {' '.join(psutil.Process(pid).cmdline())[:160]}")
                os.kill(pid, signal.SIGKILL)
    assert not described, "processes outlived agentd:\n" + "\n".join(described)


async def wait_gone(pid: int) -> None:
    """Wait until ``pid`` exits: its pidfd becomes readable (no polling)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        await trio.lowlevel.wait_readable(fd)
    finally:
        os.close(fd)


async def get(url: str) -> httpx2.Response:
    with trio.fail_after(HTTP):
        async with httpx2.AsyncClient() as client:
            return await client.get(url)


async def health_base(a: Agentd) -> str:
    """The base URL of the health (and metrics) endpoint of an agentd run with ``--health-addr 127.0.0.1:0``."""
    listening = await a.wait_event("health.listening", timeout=START)
    return f"http://127.0.0.1:{listening['port']}"


async def scrape(base: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``/metrics`` parsed by prometheus_client: {(sample name, sorted labels): value}."""
    r = await get(base + "/metrics")
    assert r.status_code == 200
    out = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def metric_total(
    metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    """The sum of the samples of ``name`` (a :func:`scrape` result) whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, lbl), v in metrics.items() if n == name and want <= set(lbl))


def spawn_exit_pairs(a: Agentd) -> tuple[set[str], set[str]]:
    """The agents with a ``subagent.spawn`` and those with a ``subagent.exit``."""
    return {e["agent"] for e in a.find("subagent.spawn")}, {e["agent"] for e in a.find("subagent.exit")}


def command_line(proc: psutil.Process) -> str:
    """``proc``'s command line; empty if it exited meanwhile (an agent child may end at any time)."""
    try:
        return " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return ""


def server_process(a: Agentd, marker: str) -> psutil.Process:
    """The one descendant of agentd whose command line contains ``marker``."""
    [proc] = [p for p in psutil.Process(a.proc.pid).children(recursive=True) if marker in command_line(p)]
    return proc


async def wait_until(a: Agentd, done: Callable[[], bool], *, timeout: float) -> None:
    """Until ``done()`` holds; re-checked whenever agentd writes a telemetry or stdout line."""
    with trio.fail_after(timeout):
        while not done():
            if a.stderr_closed:
                code = await a.proc.wait()
                raise AssertionError(f"agentd exited ({code}) first:\n{a.tail()}")
            await a._changed.wait()


async def run_storm(a: Agentd, state: Path, spec: dict[str, Any]) -> None:
    """Start a storm in the fault server whose state file is ``state`` (``<state>.storm`` + SIGUSR1)."""
    await trio.Path(str(state) + ".storm").write_text(json.dumps(spec))
    server_process(a, str(state)).send_signal(signal.SIGUSR1)


async def memo_change_handled(a: Agentd, memo: Path, value: str) -> dict[str, Any]:
    """Edit the memo's ``todo``; the ``subagent.started`` of the agent that handled it (after its turn)."""
    spawns = len(a.find("subagent.spawn"))
    edit(memo, {"todo": value})
    spawned = await a.wait_event("subagent.spawn", count=spawns + 1)
    turn = await a.wait_event("turn.end", lambda e: e["agent"] == spawned["agent"])
    assert turn["status"] == "completed"
    return a.find("subagent.started", lambda e: e["agent"] == spawned["agent"])[0]
