"""Fault catalog: any string a model emits is survivable, and none reaches a terminal as a control.

* End to end through the real ``agentd --mode reactive`` command, the model
  a loopback fake speaking the Chat Completions wire format: six replies
  hold lone surrogates (JSON ``"\\ud800"`` escapes) in their text, their
  tool names, their call ids and their arguments (escaped inside the
  argument text and outside it), NULs and ESC, and arguments nested past
  the limit. The daemon stays up, the restart breaker stays closed, each
  call either happens (the memo holds the key, U+FFFD where the surrogate
  was) or goes back to the model as a tool error, and the next change still
  reaches an agent.
* The text log format (``--log-format text``) with a model that names a
  tool and subscribes a URI built to set the clipboard (OSC 52), erase the
  line and print a fake green ``INFO`` line: stderr's bytes hold no ESC, no
  C1 control, no BEL, no carriage return, only their escapes. ``agentd
  check`` shows a hostile configuration key escaped too.
* In process (*component*): hypothesis-made model output, through the real
  provider parsers (each wire format, over loopback HTTP), the real agent
  loop, the real self-MCP link and control link, and the real hub and
  control-channel reader of the supervisor, in front of the bundled memo
  server: no exception, every frame the child sends validates, and every
  tool call is either made (the memo server saw it) or answered with a tool
  error.
"""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path
from typing import Any

from agentd.exitcodes import ExitCode
from tests.fakes.provider_server import RecordedRequest, Reply, provider_server
from tests.support.agentd_proc import PY, run_agentd, script
from tests.support.files import edit
from tests.support.leftovers import tagged_env
from tests.support.memo import memo_toml
from tests.support.supervised import RUN_TIMEOUT

#: One agent's run on this shared machine (a change -> a fork -> two model calls -> its exit).
STEP_TIMEOUT = 30.0

#: Replies with hostile strings the reactive run answers (the report's six).
HOSTILE_REPLIES = 6

#: Nesting of the too-deep arguments (the limit is agentd.models.base.MAX_TOOL_ARGUMENT_DEPTH, 64).
DEEP = 100


def _raw(body: dict[str, Any]) -> Reply:
    """A 200 whose body is written by the standard library: a lone surrogate becomes a ``\\ud800`` escape.

    (The fake's own orjson refuses to write one, as every strict encoder does.)
    """
    return Reply(200, body=json.dumps(body).encode())


def _completion(message: dict[str, Any], finish: str) -> Reply:
    return _raw(
        {
            "id": "chatcmpl-hostile",
            "object": "chat.completion",
            "model": "fake-model",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }
    )


def hostile_reply(n: int) -> Reply:
    """Lone surrogates in the text, a call id, tool names and arguments; NUL and ESC; too deep arguments."""
    # Inside the argument text: an escape that only the argument parser turns into a surrogate.
    escaped = json.dumps({"key": f"k{n}-\ud800", "value": "v\x00\x1b]52;c;aGk=\x07\u009b"})
    assert "\\ud800" in escaped
    calls = [
        (f"c1-\ud800{n}", "store__memo_set", escaped),
        # Outside it: the whole response body carries the escape (orjson refuses that body).
        ("c2", "store__memo_set", '{"key": "j' + str(n) + '-\udfff", "value": 1}'),
        ("c3", "store\ud800__memo_set", "{}"),
        ("c4", "store__memo_get", '{"key": ' + "[" * DEEP + "]" * DEEP + "}"),
    ]
    return _completion(
        {
            "role": "assistant",
            "content": f"working \ud800 on it\x00 {n}",
            "tool_calls": [
                {"id": i, "type": "function", "function": {"name": name, "arguments": args}}
                for i, name, args in calls
            ],
        },
        "tool_calls",
    )


class HostileProvider:
    """Answers each agent's first call with :func:`hostile_reply` (the first six agents), its next with text."""

    def __init__(self) -> None:
        self.hostile = 0

    def __call__(self, request: RecordedRequest) -> Reply:
        # orjson (strict) reads every request: one lone surrogate sent back would fail the fake.
        messages = request.json["messages"]
        if messages[-1]["role"] == "tool":
            n = self.hostile
            return _completion({"role": "assistant", "content": f"done {n} \udc00\ud800"}, "stop")
        if self.hostile < HOSTILE_REPLIES:
            self.hostile += 1
            return hostile_reply(self.hostile)
        return _completion({"role": "assistant", "content": "calm"}, "stop")


def _tool_results(body: dict[str, Any]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in body["messages"] if m["role"] == "tool"}


async def test_six_replies_of_lone_surrogates_leave_the_daemon_up_and_the_breaker_closed(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store.json"
    store.write_text("{}")
    servers = (
        f"[servers.store]\ncommand = {json.dumps(PY)}\n"
        f'args = ["-m", "agentd", "serve", "memo", "--file", {json.dumps(str(store))}]\n'
    )
    config, notes = memo_toml(tmp_path, "openai:gpt-fake", servers=servers)
    provider = HostileProvider()
    async with provider_server(handler=provider) as srv:
        env = tagged_env(tmp_path, OPENAI_BASE_URL=srv.url("/v1"), OPENAI_API_KEY="sk-test")
        async with run_agentd(["--config", str(config)], env=env) as a:
            await a.wait_event("ready.changed", lambda e: e["ready"], timeout=RUN_TIMEOUT)
            for n in range(1, HOSTILE_REPLIES + 2):
                edit(notes, {"n": n})
                done = await a.wait_event("subagent.exit", count=n, timeout=STEP_TIMEOUT)
                assert done["status"] == "completed", a.tail()
            a.signal(signal.SIGTERM)
            assert await a.wait_exit(RUN_TIMEOUT) == ExitCode.OK, a.tail()
    assert provider.hostile == HOSTILE_REPLIES
    # The daemon never lost an agent: no crash, no restart, the breaker closed.
    assert not a.find("governor.breaker_open")
    assert not a.find("supervisor.internal_error")
    assert not a.find("model.fatal")
    assert [e["status"] for e in a.find("subagent.exit")] == ["completed"] * (HOSTILE_REPLIES + 1)
    assert a.find("supervisor.exit")[0]["counters"]["restarts"] == 0
    # Each result was published, the surrogates as U+FFFD; the seventh change reached an agent.
    assert a.out.splitlines() == [f"done {n} \ufffd\ufffd" for n in range(1, HOSTILE_REPLIES + 1)] + ["calm"]
    # The calls that could be made were made, with U+FFFD where the model put a lone surrogate.
    kept = json.loads(store.read_text())
    for n in range(1, HOSTILE_REPLIES + 1):
        assert kept[f"k{n}-\ufffd"] == "v\x00\x1b]52;c;aGk=\x07\u009b"  # NUL, ESC, C1: carried as they were
        assert kept[f"j{n}-\ufffd"] == 1
    # The others went back to the model as tool errors, in the next request of the same agent.
    answered = [r.json for r in srv.requests if r.json["messages"][-1]["role"] == "tool"]
    assert len(answered) == HOSTILE_REPLIES
    for n, body in enumerate(answered, start=1):
        results = _tool_results(body)
        assert set(results) == {f"c1-\ufffd{n}", "c2", "c3", "c4"}
        assert results["c3"].startswith("ERROR: unknown tool 'store\ufffd__memo_set'")
        assert "nested too deeply" in results["c4"]
        assistant = next(m for m in body["messages"] if m["role"] == "assistant")
        assert assistant["content"] == f"working \ufffd on it\x00 {n}"
    refused = a.find("tool.refused")
    assert [e["tool"] for e in refused] == ["store\ufffd__memo_set"] * HOSTILE_REPLIES


# ----------------------------------------------------------------------------- terminal escapes

ESC = "\x1b"
#: Sets the clipboard (OSC 52), erases the line, returns the cursor and prints a fake green INFO line.
HOSTILE_NAME = f"{ESC}]52;c;aGFja2Vk\x07{ESC}[2K\r{ESC}[32mINFO{ESC}[0m\u009b31m"
HOSTILE_URI = f"memo://notes{ESC}[2K\r{ESC}[32m12:00:00.000_INFO_supervisor.exit{ESC}]52;c;aGk=\x07\u009b"

#: What a terminal acts on: C0 controls but the newline (ESC, BEL, CR among them), DEL, and C1 in UTF-8.
TERMINAL_CONTROLS = re.compile(rb"[\x00-\x09\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")


async def test_text_log_lines_show_a_hostile_tool_name_and_uri_escaped(tmp_path: Path) -> None:
    turns = [
        {
            "tool_calls": [
                {"name": HOSTILE_NAME, "arguments": {}},
                {"name": "subscribe", "arguments": {"uri": HOSTILE_URI}},
                {"name": "read_resource", "arguments": {"uri": HOSTILE_URI}},
            ]
        },
        {"text": "done"},
    ]
    config, notes = memo_toml(tmp_path, script(tmp_path, turns))
    args = ["--config", str(config), "--log-format", "text", "--verbose"]
    async with run_agentd(args, env=tagged_env(tmp_path)) as a:
        with_ready = await _wait_line(a, b"ready.changed ready=true")
        assert with_ready
        edit(notes, {"n": 1})
        await _wait_line(a, b"turn.end")  # the agent stays, waiting on what it subscribed
        a.signal(signal.SIGTERM)
        assert await a.wait_exit(RUN_TIMEOUT) == ExitCode.OK, a.tail()
    raw = b"\n".join(line.encode() for line in a.raw_stderr)
    assert TERMINAL_CONTROLS.search(raw) is None, TERMINAL_CONTROLS.search(raw)
    text = raw.decode()
    # The model's name and URI are there, as escapes a person can read: a bare value
    # escaped, a value with spaces or "=" quoted as JSON (which escapes C0 its own way).
    assert " tool=\\x1b]52;c;aGFja2Vk\\x07\\x1b[2K\\r\\x1b[32mINFO\\x1b[0m\\u009b31m " in text
    quoted = '"memo://notes\\u001b[2K\\r\\u001b[32m12:00:00.000_INFO_supervisor.exit\\u001b]52;c;aGk=\\u0007\\u009b"'
    assert f"self.subscribe agent=a1 uri={quoted} server=memo" in text
    # Every line is one of agentd's: its clock, then its level.
    for line in text.splitlines():
        assert re.match(r"\d\d:\d\d:\d\d\.\d{3} (DEBUG|INFO|WARNING|ERROR) ", line), line


async def _wait_line(a: Any, needle: bytes, timeout: float = RUN_TIMEOUT) -> str:
    """Wait for a text log line holding ``needle`` (the text format is not JSON: wait on raw lines)."""
    import trio

    with trio.move_on_after(timeout):
        while True:
            for line in a.raw_stderr:
                if needle.decode() in line:
                    return str(line)
            if a.stderr_closed:
                raise AssertionError(f"agentd exited before {needle!r}:\n{a.tail()}")
            await a._changed.wait()
    raise AssertionError(f"no line with {needle!r} within {timeout:g}s:\n{a.tail()}")


def test_check_shows_a_hostile_configuration_key_escaped(tmp_path: Path) -> None:
    import subprocess

    config = tmp_path / "agentd.toml"
    key = f"{ESC}]52;c;aGk=\x07{ESC}[2K\rINFO"
    config.write_text(f'model = "script:x.json"\n"{json.dumps(key)[1:-1]}" = 1\n')
    result = subprocess.run(
        [PY, "-m", "agentd", "check", "--config", str(config)],
        capture_output=True,
        timeout=60,
        check=False,
        env={**os.environ, **tagged_env(tmp_path)},
    )
    assert TERMINAL_CONTROLS.search(result.stderr) is None, result.stderr
    assert b"\\x1b]52;c;aGk=\\x07\\x1b[2K\\rINFO" in result.stderr, result.stderr
