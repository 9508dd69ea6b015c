"""``agentd status``, ``GET /status`` and the status page, through the real command (docs/status.md).

A reactive daemon over the bundled memo server (its notes routed to a spawn
route) and the SDK-written notes server (whose ``sleep`` tool holds an agent
mid-turn and tells the test, on a loopback port, that it has the call). The
script model's agent calls that tool, so while the test looks the agent is
doing a tool call it can name. Every wait is on telemetry, a socket or a
process exit, bounded by a timeout; nothing sleeps.
"""

from __future__ import annotations

import json
import os
import pty
import shutil
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.support.agentd_proc import PY, REPO, Agentd, agentd_cmd, drain
from tests.support.files import edit
from tests.support.routing import (
    START,
    STEP,
    get,
    health_base,
    memo_server,
    script,
    sdk_server,
    supervised,
)

#: Seconds the notes server's ``sleep`` holds the agent's tool call: the window in which the test
#: looks at a running agent (a few status reads, each milliseconds; generous for a loaded machine).
HOLD = 10

#: Bound on one ``agentd status`` command or one headless Chromium load.
COMMAND = 60.0

INSTRUCTION = "report the notes, SECRET-INSTRUCTION-TEXT"


def _env() -> dict[str, str]:
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
    return {**inherited, "PYTHONPATH": str(REPO)}


async def status_cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    """``agentd status ARGS`` to its end (without blocking the test's event loop)."""
    with trio.fail_after(COMMAND):
        return await trio.run_process(
            agentd_cmd("status", *args), capture_stdout=True, capture_stderr=True, check=False, env=_env()
        )


def daemon(tmp: Path, receipt_port: int, *extra: str, hold: int = HOLD) -> tuple[list[str], Path]:
    notes = tmp / "notes.json"
    model = script(
        tmp,
        [
            {
                "tool_calls": [
                    {"name": "notes__sleep", "arguments": {"seconds": hold, "receipt_port": receipt_port}}
                ],
                "usage": {"input_tokens": 100, "output_tokens": 20},
                "cost_usd": 0.0015,
            },
            {"text": "done", "usage": {"input_tokens": 50, "output_tokens": 5}, "cost_usd": 0.0005},
        ],
        then="repeat",
    )
    args = [
        "--mode", "reactive", "--verbose", "--mcp-stdio", memo_server(notes), "--mcp-stdio", sdk_server(tmp, "notes"),
        "--subscribe", "memo:memo://notes", "--route", "memo://notes=spawn:1,debounce=50ms,reread_on_start=false",
        "--health-addr", "127.0.0.1:0", "--model", model, *extra, INSTRUCTION,
    ]  # fmt: skip
    return args, notes


class Receipts:
    """The loopback port the notes server's ``sleep`` tool reports each call on."""

    def __init__(self) -> None:
        self.sock = trio.socket.socket()

    async def __aenter__(self) -> Receipts:
        await self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port: int = self.sock.getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.sock.close()

    async def call(self, timeout: float = STEP) -> None:
        """Wait until the tool has a call (it connects and writes ``sleep``)."""
        with trio.fail_after(timeout):
            conn, _ = await self.sock.accept()
            with conn:
                assert await conn.recv(16) == b"sleep\n"


async def until_agent_gone(a: Agentd) -> None:
    await a.wait_event("subagent.exit", timeout=HOLD + STEP)


async def test_status_shows_the_wake_the_agent_doing_a_tool_call_and_its_cost(tmp_path: Path) -> None:
    async with Receipts() as receipts:
        args, notes = daemon(tmp_path, receipts.port)
        async with supervised(args) as a:
            base = await health_base(a)
            addr = base.removeprefix("http://")
            await a.wait_event("subscription.established", lambda e: e.get("server") == "memo", timeout=START)
            before = json.loads((await status_cli("--addr", addr, "--json")).stdout)
            edit(notes, {"todo": "buy milk"})
            await receipts.call()
            running = await status_cli("--addr", addr, "--json")
            human = await status_cli("--addr", addr)
            page = await get(base + "/")
            await until_agent_gone(a)
            after = json.loads((await status_cli("--addr", addr, "--json")).stdout)
            after_human = (await status_cli("--addr", addr)).stdout.decode()
            await drain(a)
    assert before["agents"] == []
    assert before["finished"] == []
    assert before["ready"] is True
    assert running.returncode == 0, running.stderr
    doc: dict[str, Any] = json.loads(running.stdout)
    [agent] = doc["agents"]
    assert (agent["id"], agent["route"], agent["woken_by"], agent["woken_route"]) == (
        "a1",
        "r0",
        ["memo://notes"],
        "r0",
    )
    assert agent["doing"]["kind"] == "tool"
    assert agent["doing"]["tool"] == "notes__sleep"
    assert (agent["steps"], agent["tokens"], agent["cost_usd"]) == (1, 120, 0.0015)
    [route] = doc["routes"]
    assert (route["id"], route["match"], route["in_flight"], route["routed"]) == ("r0", "memo://notes", 1, 1)
    assert route["last_wake"] is not None
    assert [(d["outcome"], d.get("agent")) for d in doc["recent"]] == [
        ("skipped:reread_on_start", None),  # the route switched the start-up re-read off
        ("enqueued", None),
        ("delivered", "a1"),
    ]
    assert {s["name"]: s["state"] for s in doc["servers"]} == {"memo": "connected", "notes": "connected"}
    # Content is hidden by default: no instruction, no tool arguments.
    assert doc["content_shown"] is False
    assert "SECRET-INSTRUCTION-TEXT" not in running.stdout.decode()
    assert "receipt_port" not in running.stdout.decode()
    assert "arguments" not in agent["doing"]
    # The human view: a header line with the cost, the agent and the route that woke it.
    text = human.stdout.decode()
    assert human.returncode == 0, human.stderr
    header = text.splitlines()[0]
    assert header.startswith("agentd ")
    assert "reactive" in header
    assert "1 running" in header
    assert "$0.0015" in header
    [row] = [line for line in text.splitlines() if line.startswith("a1 ")]
    assert "r0" in row
    assert "memo://notes" in row
    assert "tool notes__sleep" in row
    assert "$0.0015" in row
    assert "SECRET-INSTRUCTION-TEXT" not in text
    # The page is one self-contained document.
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "<script src" not in page.text
    assert "http://" not in page.text.replace("http://www.w3.org/2000/svg", "")
    # Finished: the agent left the table, its cost stayed in the budget, and it is listed as finished.
    assert after["agents"] == []
    [done] = after["finished"]
    assert (done["id"], done["route"], done["woken_by"], done["status"]) == (
        "a1",
        "r0",
        ["memo://notes"],
        "completed",
    )
    assert (done["steps"], done["cost_usd"]) == (2, 0.002)
    assert done["tokens"] == after["budget"]["tokens"]  # the only agent of the run
    [row] = [line for line in after_human.splitlines() if line.startswith("a1 ")]
    assert "completed" in row
    assert "$0.002" in row
    assert (after["budget"]["steps"], after["budget"]["cost_usd"]) == (2, 0.002)
    assert after["totals"]["model_calls"] == 2
    assert sum(m["wakes"] for m in after["per_minute"]) == 1
    assert sum(m["model_calls"] for m in after["per_minute"]) == 2


async def test_status_show_content_shows_instructions_and_tool_arguments_never_secrets(
    tmp_path: Path,
) -> None:
    secret = "sk-abcdefabcdefabcdefabcdef0123"
    async with Receipts() as receipts:
        args, notes = daemon(tmp_path, receipts.port, "--status-show-content", hold=HOLD)
        args[-1] = f"{INSTRUCTION} with key {secret}"
        async with supervised(args) as a:
            base = await health_base(a)
            await a.wait_event("subscription.established", lambda e: e.get("server") == "memo", timeout=START)
            edit(notes, {"todo": "x"})
            await receipts.call()
            shown = await status_cli("--addr", base.removeprefix("http://"), "--json")
            await until_agent_gone(a)
            await drain(a)
    doc = json.loads(shown.stdout)
    [agent] = doc["agents"]
    assert doc["content_shown"] is True
    assert "SECRET-INSTRUCTION-TEXT" in agent["instruction"]
    assert agent["doing"]["arguments"] == {"seconds": HOLD, "receipt_port": receipts.port}
    assert secret not in shown.stdout.decode()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_an_unreachable_address_is_one_line_with_the_fix() -> None:
    port = _closed_port()
    done = await status_cli("--addr", f"127.0.0.1:{port}")
    lines = done.stderr.decode().splitlines()
    assert done.returncode == 1
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"agentd: error: status: nothing listens on 127.0.0.1:{port}"), lines
    assert f"nothing listens on 127.0.0.1:{port}" in lines[0]
    assert "fix: start agentd with --health-addr" in lines[0]
    assert done.stdout == b""


async def test_watch_ends_on_ctrl_c_even_when_started_with_sigint_ignored() -> None:
    """A script's background job (or nohup) starts its children with SIGINT ignored: the view
    still ends on Ctrl-C, as it says it does."""
    port = _closed_port()

    def ignore_sigint() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    with trio.fail_after(COMMAND):
        proc = await trio.lowlevel.open_process(
            agentd_cmd("status", "--watch", "--interval", "0.2", "--addr", f"127.0.0.1:{port}"),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env=_env(), preexec_fn=ignore_sigint,
        )  # fmt: skip
    try:
        assert proc.stdout is not None
        seen = b""
        with trio.fail_after(COMMAND):
            while b"Ctrl-C ends" not in seen:  # it is in its loop, retrying
                chunk = await proc.stdout.receive_some(65536)
                assert chunk, seen
                seen += chunk
        proc.send_signal(signal.SIGINT)
        with trio.fail_after(COMMAND):
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()


async def test_no_address_is_a_usage_error_naming_the_setting() -> None:
    done = await status_cli()
    assert done.returncode == 2
    assert done.stderr.decode().startswith("agentd: error: status: no address — fix: give --addr HOST:PORT")
    assert "AGENTD_HEALTH_ADDR" in done.stderr.decode()


async def test_watch_redraws_in_place_and_ends_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    async with Receipts() as receipts:
        args, notes = daemon(tmp_path, receipts.port, hold=2)
        async with supervised(args) as a:
            base = await health_base(a)
            await a.wait_event("subscription.established", lambda e: e.get("server") == "memo", timeout=START)
            master, slave = pty.openpty()
            with trio.fail_after(COMMAND):
                proc = await trio.lowlevel.open_process(
                    agentd_cmd("status", "--watch", "--interval", "0.2", "--addr", base.removeprefix("http://")),
                    stdin=slave, stdout=slave, stderr=slave, env=_env(), start_new_session=True,
                )  # fmt: skip
            os.close(slave)
            screen = bytearray()
            stream = trio.lowlevel.FdStream(master)

            async def read() -> bytes:
                try:
                    return await stream.receive_some(65536)
                except trio.BrokenResourceError:  # EIO: a pty's end of file, once the process is gone
                    return b""

            async def until(pred: Any) -> None:
                with trio.fail_after(STEP):
                    while not pred(bytes(screen)):
                        chunk = await read()
                        assert chunk, f"agentd status --watch ended early: {bytes(screen)[-2000:]!r}"
                        screen.extend(chunk)

            await until(lambda s: s.count(b"\x1b[H\x1b[2J") >= 2)  # drawn, then drawn again in place
            assert s_has(screen, b"\x1b[?1049h")  # the alternate screen, like top
            edit(notes, {"todo": "watch me"})
            await until(lambda s: b"tool notes__sleep" in s)  # the agent appeared, mid tool call
            await until_agent_gone(a)
            mark = len(screen)
            await until(lambda s: b"delivered \xe2\x86\x92 a1" in s[mark:] and b"(none)" in s[mark:])
            proc.send_signal(signal.SIGINT)  # Ctrl-C

            try:
                with trio.fail_after(COMMAND):
                    code = await proc.wait()
            finally:
                if proc.returncode is None:  # it did not end: not left running into the next test
                    proc.kill()
            with trio.move_on_after(STEP):
                while chunk := await read():
                    screen.extend(chunk)
            await stream.aclose()
            await drain(a)
    assert code == 0
    assert b"Traceback" not in screen
    assert b"KeyboardInterrupt" not in screen
    assert screen.rstrip().endswith(b"\x1b[?1049l")  # the terminal is given back as it was


def s_has(buf: bytearray, needle: bytes) -> bool:
    return needle in bytes(buf)


# --------------------------------------------------------------------------- the page in Chromium

CHROMIUM = shutil.which("chromium")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("CI"),
    reason="Debian's chromium is not installed (.ci/run installs it)",
)


async def chromium(url: str, *what: str, budget_ms: int = 5000) -> str:
    """Load ``url`` in headless Chromium, let the page's timers run ``budget_ms`` of virtual time."""
    assert CHROMIUM is not None, "chromium is not installed: apt-get install chromium"
    with trio.fail_after(COMMAND):
        done = await trio.run_process(
            [
                CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-dev-shm-usage", f"--virtual-time-budget={budget_ms}", *what, url,
            ],
            capture_stdout=True, capture_stderr=True, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return done.stdout.decode()


@needs_chromium
async def test_the_page_in_chromium_shows_the_running_agent_and_its_route_and_updates(tmp_path: Path) -> None:
    async with Receipts() as receipts:
        args, notes = daemon(tmp_path, receipts.port, hold=HOLD * 3)
        async with supervised(args) as a:
            base = await health_base(a)
            await a.wait_event("subscription.established", lambda e: e.get("server") == "memo", timeout=START)
            edit(notes, {"todo": "look at the page"})
            await receipts.call()
            first = await chromium(base + "/", "--dump-dom")
            await chromium(base + "/", f"--screenshot={tmp_path / 'page.png'}", "--window-size=1100,900")
            # A change while the agent runs: the route's one slot is taken, so the change waits in its queue.
            edit(notes, {"todo": "a second change"})
            await a.wait_event("route.enqueued", count=2, timeout=STEP)
            second = await chromium(base + "/", "--dump-dom")
            a.signal(signal.SIGTERM)
            await a.wait_exit(START + HOLD * 3)
    assert 'data-agent="a1"' in first
    row = first[first.index('data-agent="a1"') :].split("</tr>")[0]
    assert "r0" in row
    assert "memo://notes" in row
    assert "tool notes__sleep" in row
    assert 'data-route="r0"' in first
    assert "delivered → a1" in first
    assert int(first.split('data-updates="')[1].split('"')[0]) >= 2  # it refreshed itself
    route = second[second.index('data-route="r0"') :].split("</tr>")[0]
    assert "<td>1</td>" in route  # one change queued behind the running agent
    assert (tmp_path / "page.png").stat().st_size > 10_000
    if os.environ.get("AGENTD_UPDATE_SCREENSHOT"):  # regenerate docs/images/status-page.png on purpose only
        shutil.copy(tmp_path / "page.png", REPO / "docs/images/status-page.png")
    assert PY  # the same interpreter ran agentd and its servers
