"""Logs people can read: levels, --log-level, --log-format (auto: human under a real terminal), Python logging in the stream."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess

import trio

from agentd.observe.vocabulary import EVENTS
from tests.support.agentd_proc import REPO, agentd_cmd, run_agentd, script


async def test_every_line_is_json_with_a_declared_event_and_its_level(tmp_path):
    model = script(tmp_path, [{"text": "hi"}])
    async with run_agentd(["--model", model, "--log-format", "json", "go"]) as a:
        assert await a.wait_exit() == 0
    lines = [json.loads(x) for x in a.raw_stderr if x]
    assert lines
    assert len(lines) == len(a.raw_stderr) - a.raw_stderr.count("")
    for line in lines:
        assert EVENTS[line["event"]].level_for(line) == line["level"]
        assert line["severity"] == line["level"].upper()
    assert {x["event"] for x in lines} >= {"supervisor.start", "subagent.exit", "supervisor.exit"}


async def test_log_level_warning_writes_only_warnings_and_errors(tmp_path):
    model = script(tmp_path, [{"tool_calls": [{"name": "nope__nothing", "arguments": {}}]}, {"text": "done"}])
    async with run_agentd(["--model", model, "--log-level", "warning", "go"]) as a:
        assert await a.wait_exit() == 0
    levels = {e["level"] for e in a.events}
    assert levels == {"warning"}
    assert [e["event"] for e in a.events] == ["tool.refused"]
    assert a.out.strip() == "done"


async def test_log_level_debug_routes_python_logging_into_the_stream(tmp_path):
    model = script(tmp_path, [{"text": "hi"}])
    async with run_agentd(["--model", model, "--log-level", "debug", "--log-format", "json", "go"]) as a:
        assert await a.wait_exit() == 0
    # Every stderr line is one JSON event: library records are not plain text between them.
    assert all(json.loads(x) for x in a.raw_stderr if x)
    logs = a.find("log")
    assert logs, a.tail()
    assert any(e["logger"].startswith("mcp.") and e["level"] == "debug" for e in logs)


async def test_a_bad_log_level_is_a_config_error(tmp_path):
    async with run_agentd(["--log-level", "chatty", "go"]) as a:
        assert await a.wait_exit() == 2
    assert "--log-level: 'chatty' is not valid: choose one of debug, info, warning, error" in a.tail()


async def _run_on_a_terminal(args: list[str]) -> tuple[int, str, str]:
    """Run agentd with stderr on a pseudo-terminal (stdout a pipe); its exit code, stderr and stdout."""
    master, slave = pty.openpty()
    proc = await trio.lowlevel.open_process(
        agentd_cmd(*args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, cwd=str(REPO)
    )
    os.close(slave)
    chunks: list[bytes] = []

    def read_terminal() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every holder of the terminal's other end closed it
                return
            if not data:
                return
            chunks.append(data)

    out = bytearray()
    try:
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.to_thread.run_sync, read_terminal)
                assert proc.stdout is not None
                while data := await proc.stdout.receive_some(65536):
                    out += data
                code = await proc.wait()
    finally:
        os.close(master)
    return code, b"".join(chunks).decode(errors="replace").replace("\r\n", "\n"), out.decode()


async def test_auto_format_is_human_on_a_terminal_and_text_shows_every_event(tmp_path):
    model = script(tmp_path, [{"text": "hello there"}])
    code, err, out = await _run_on_a_terminal(["--model", model, "go"])
    assert code == 0
    assert out.strip() == "hello there"
    lines = [x for x in err.splitlines() if x]
    assert not any(x.startswith("{") for x in lines)  # no JSON for a person
    # Progress for a person (rfcs/0320): the model call and a summary, no internal events.
    tags = [re.sub(r"\x1b\[[0-9;]*m", "", x).split()[0] for x in lines]
    assert tags == ["model", "done"], err
    assert "supervisor.start" not in err

    code, err, out = await _run_on_a_terminal(["--model", model, "--log-format", "text", "go"])
    assert code == 0
    lines = [x for x in err.splitlines() if x]
    start = next(x for x in lines if " supervisor.start " in x)
    clock, level, event, *fields = start.split()
    assert len(clock) == 12
    assert clock[2] == ":"
    assert clock[8] == "."
    assert (level, event) == ("INFO", "supervisor.start")
    assert "mode=once" in fields
    assert any(" INFO    subagent.exit agent=a1 status=completed" in x for x in lines)


async def test_auto_format_is_json_when_stderr_is_not_a_terminal(tmp_path):
    model = script(tmp_path, [{"text": "hello"}])
    async with run_agentd(["--model", model, "go"]) as a:
        assert await a.wait_exit() == 0
    assert a.raw_stderr[0].startswith('{"ts":')


async def test_json_format_on_a_terminal_when_asked(tmp_path):
    model = script(tmp_path, [{"text": "hello"}])
    code, err, _out = await _run_on_a_terminal(["--model", model, "--log-format", "json", "go"])
    assert code == 0
    assert all(json.loads(x)["event"] for x in err.splitlines() if x)
