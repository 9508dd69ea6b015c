"""``--output stream-json`` and ``--output json`` through the real command, every line checked against the schema."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from agentd.core.exitcodes import ExitCode
from tests.fakes.provider_server import openai_error, provider_server
from tests.support.agentd_proc import REPO, notes_server, run_agentd, script
from tests.support.files import edit
from tests.support.memo import NOTES, memo_toml

SCHEMA = json.loads((REPO / "docs" / "stream-json.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def lines_of(out: str) -> list[dict[str, Any]]:
    """Every stdout line, each validated against docs/stream-json.schema.json."""
    lines = [json.loads(x) for x in out.splitlines()]
    for line in lines:
        errors = [f"{list(e.absolute_path)}: {e.message}" for e in VALIDATOR.iter_errors(line)]
        assert not errors, (line, errors)
    assert lines[0]["type"] == "start"
    assert lines[-1]["type"] == "result"
    assert [x["type"] for x in lines].count("result") == 1
    assert len({x["session_id"] for x in lines}) == 1
    return lines


def test_the_schema_refuses_what_it_should() -> None:
    ok = {"type": "turn_end", "ts": "2026-01-01T00:00:00.000Z", "session_id": "s", "agent": "a1"}
    ok |= {"route": None, "status": "completed", "idle": False}
    assert VALIDATOR.is_valid(ok)
    assert not VALIDATOR.is_valid({**ok, "status": "fine"})
    assert not VALIDATOR.is_valid({**ok, "extra": 1})
    assert not VALIDATOR.is_valid({**ok, "type": "nope"})


async def test_once_run_streams_every_step_and_ends_with_the_result(tmp_path: Path) -> None:
    model = script(
        tmp_path,
        [
            {"text": "Let me write it down.", "tool_calls": [
                {"name": "notes__set_note", "arguments": {"name": "todo", "text": "x" * 300}}
            ]},
            {"tool_calls": [{"name": "nope__nothing", "arguments": {}}]},
            {"tool_calls": [{"name": "read_resource", "arguments": {"uri": "note://todo"}}]},
            {"text": "done: {last_tool_result}", "usage": {"input_tokens": 9, "output_tokens": 4}},
        ],
    )  # fmt: skip
    args = ["--model", model, "--mcp-stdio", notes_server(tmp_path), "--output", "stream-json"]
    async with run_agentd([*args, "--output-truncate", "50", "note it"]) as a:
        assert await a.wait_exit() == ExitCode.OK, a.tail()
    lines = lines_of(a.out)
    types = [x["type"] for x in lines]
    assert types == [
        "start",
        "agent",
        "assistant",
        "tool_call",
        "tool_result",
        "assistant",
        "tool_call",
        "assistant",
        "tool_call",
        "tool_result",
        "assistant",
        "turn_end",
        "result",
    ]
    start = lines[0]
    assert (start["mode"], start["servers"], start["schema_version"]) == ("once", ["notes"], 1)
    first = lines[2]
    assert (first["text"], first["tool_calls"]) == ("Let me write it down.", 1)
    call = lines[3]
    assert call["name"] == "notes__set_note"
    assert call["truncated"] is True
    assert len(call["arguments"]) == 50
    assert call["arguments"].startswith('{"name":"todo","text":"xxx')
    assert lines[4]["is_error"] is False
    assert lines[6] == {**lines[6], "name": "nope__nothing", "refused": True}
    read = lines[9]
    assert (read["name"], read["content"][:7]) == ("read_resource", "x" * 7)
    result = lines[-1]
    assert result["status"] == "completed"
    assert result["result"].startswith("done: xxx")
    assert (result["turns"], result["steps"], result["error"]) == (1, 4, None)
    assert result["usage"]["input_tokens"] >= 9


async def test_json_output_has_session_turns_steps_and_no_error(tmp_path: Path) -> None:
    model = script(tmp_path, [{"text": "hi", "usage": {"input_tokens": 5, "output_tokens": 1}}])
    async with run_agentd(["--model", model, "--output", "json", "go"]) as a:
        assert await a.wait_exit() == 0
    out = json.loads(a.out)
    assert out["session_id"]
    assert (out["turns"], out["steps"], out["error"]) == (1, 1, None)
    assert out["usage"]["cached_input_tokens"] == 0


@pytest.mark.parametrize("output", ["json", "stream-json"])
async def test_a_401_says_why_and_what_to_do(tmp_path: Path, output: str) -> None:
    async with provider_server([openai_error(401, "Incorrect API key provided")]) as srv:
        env = {"OPENAI_BASE_URL": srv.url("/v1"), "OPENAI_API_KEY": "sk-wrong"}
        async with run_agentd(["--model", "openai:gpt-4o-mini", "--output", output, "go"], env=env) as a:
            assert await a.wait_exit() == ExitCode.FATAL_INFRA
    result = lines_of(a.out)[-1] if output == "stream-json" else json.loads(a.out)
    assert (result["status"], result["exit_code"]) == ("crashed", 4)
    error = result["error"]
    assert error["kind"] == "provider"
    assert "401" in error["message"]
    assert "Incorrect API key" in error["message"]
    assert "API key" in error["fix"]
    assert "sk-wrong" not in a.out


@pytest.mark.parametrize("output", ["json", "stream-json"])
async def test_reactive_replies_carry_their_time_and_cause(tmp_path: Path, output: str) -> None:
    model = script(tmp_path, [{"text": "seen the change"}], then="repeat")
    _, memo = memo_toml(tmp_path, model, settings=f'output = "{output}"')
    async with run_agentd(["--config", str(tmp_path / "agentd.toml")]) as a:
        await a.wait_event("ready.changed", lambda e: e["ready"])
        edit(memo, {"todo": "milk"})
        await a.wait_event("turn.end")
        await a.wait_event("subagent.exit")
        a.signal(signal.SIGTERM)
        assert await a.wait_exit() == 0
    if output == "json":
        (reply,) = [json.loads(x) for x in a.out.splitlines()]
        assert reply["ts"].endswith("Z")
    else:
        lines = lines_of(a.out)
        (reply,) = [x for x in lines if x["type"] == "reply"]
        (delivery,) = [x for x in lines if x["type"] == "delivery"]
        assert delivery == {**delivery, "kind": "resource", "route": "notes", "uris": [NOTES]}
        assert lines[-1]["status"] == "stopped"
        assert lines[-1]["exit_code"] == 0
        assert lines[0]["routes"] == ["notes"]
        assert lines[0]["sessions"] == []
    assert reply["result"] == "seen the change"
    assert reply["cause"] == {"kind": "resource", "route": "notes", "uris": [NOTES]}
