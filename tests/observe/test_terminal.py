"""A terminal mode for people (rfcs/0320) and the final error line (rfcs/0321), through the real command.

Under a pseudo-terminal (``tests/support/terminal.py``): progress lines, not
NDJSON; nothing a model wrote acts on the terminal; ``--quiet`` leaves the
answer alone; a failed run ends with ``agentd: error: WHAT — fix: HOW``,
whole, however narrow the terminal. On a pipe: the same line is the
NDJSON stream's last object (``run.failed``), or a plain line with
``--log-format text`` and for errors found before the run starts.
"""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

from agentd.core.exitcodes import ExitCode
from tests.fakes.provider_server import openai_error, provider_server
from tests.support.agentd_proc import PY, run_agentd, script
from tests.support.files import edit
from tests.support.memo import NOTES, memo_toml
from tests.support.terminal import SGR, on_a_terminal

#: A control a terminal acts on: C0 (but the newline), DEL, C1. Colours (SGR) are removed first.
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")
#: What a hostile model writes to take over a terminal: set the clipboard (OSC 52), erase the line, recolour.
HOSTILE = "\x1b]52;c;aGk=\x07\x1b[2K\x1b[32m\u009b31m"


def _memo(tmp_path: Path) -> str:
    notes = tmp_path / "notes.json"
    notes.write_text(json.dumps({"todo": "milk"}))
    return f"memo={PY} -m agentd serve memo --file {notes}"


def _one_tool_call_model(tmp_path: Path, *, value: str | None = None) -> str:
    call = (
        {"name": "memo__memo_get", "arguments": {"key": "todo"}}
        if value is None
        else {"name": "memo__memo_set", "arguments": {"key": "todo", "value": value}}
    )
    return script(
        tmp_path,
        [
            {
                "text": f"Let me read the notes first. {HOSTILE}",
                "tool_calls": [call],
                "usage": {"input_tokens": 1200, "output_tokens": 12},
            },
            {"text": "The todo is: {last_tool_result}", "usage": {"input_tokens": 1300, "output_tokens": 8}},
        ],
    )


async def test_a_once_run_on_a_terminal_shows_progress_lines_for_people(tmp_path: Path) -> None:
    value = "oat milk" + " and more" * 40  # longer than the terminal: the tool call is cut to one line
    model = _one_tool_call_model(tmp_path, value=value)
    async with on_a_terminal(
        ["--model", model, "--mcp-stdio", _memo(tmp_path), "what is todo"], columns=80
    ) as t:
        assert await t.wait_exit() == ExitCode.OK, t.screen
    assert t.out.startswith("The todo is: ")  # the answer on stdout, not on the terminal
    lines = t.lines
    tags = [line.split()[0] for line in lines]
    assert tags == ["model", "said", "tool", "model", "done"], t.plain
    model_line, said, tool, _second, done = lines
    assert f"script:{model.removeprefix('script:')}" in model_line
    assert "1,200 in · 12 out" in model_line
    # The model's interim text, with what would have acted on the terminal shown as escapes.
    assert said.startswith(
        "said    Let me read the notes first. \\x1b]52;c;aGk=\\x07\\x1b[2K\\x1b[32m\\u009b31m"
    )
    # Server, tool and arguments, on one line of the terminal's width.
    assert tool.startswith('tool    memo/memo_set {"key":"todo","value":"oat milk and more and more')
    assert tool.endswith("…")
    assert len(tool) <= 80
    assert re.fullmatch(r"done    completed · 2 steps · 2,520 tokens · cost unknown · \d+(ms|\.\ds)", done), (
        done
    )
    # Nothing else: no NDJSON, no internal events, no raw control character but colours.
    assert not any(line.startswith("{") for line in lines)
    assert "supervisor.start" not in t.plain
    assert not RAW_CONTROL.search(t.plain)
    assert set(SGR.findall(t.screen)) <= {"\x1b[0m", "\x1b[36m", "\x1b[2m", "\x1b[34m", "\x1b[1m"}


async def test_no_color_and_verbose(tmp_path: Path) -> None:
    model = _one_tool_call_model(tmp_path)
    args = ["--model", model, "--mcp-stdio", _memo(tmp_path), "--verbose", "what is todo"]
    async with on_a_terminal(args, env={"NO_COLOR": "1"}) as t:
        assert await t.wait_exit() == ExitCode.OK, t.screen
    assert "\x1b" not in t.screen  # not one colour, not one raw escape
    tags = {line.split()[0] for line in t.lines}
    # --verbose adds every internal event (info and debug) beside the progress lines.
    assert {"model", "said", "tool", "done", "info", "debug"} <= tags, t.plain
    assert any(line.startswith("info    supervisor.start mode=once") for line in t.lines)


async def test_quiet_shows_only_the_answer(tmp_path: Path) -> None:
    model = _one_tool_call_model(tmp_path)
    async with on_a_terminal(
        ["--model", model, "--mcp-stdio", _memo(tmp_path), "--quiet", "what is todo"]
    ) as t:
        assert await t.wait_exit() == ExitCode.OK
    assert t.out.strip() == "The todo is: milk"
    assert t.screen == ""


async def test_a_failed_run_ends_with_the_whole_error_and_fix_on_a_narrow_terminal(tmp_path: Path) -> None:
    refusal = (
        "Incorrect API key provided. You can find your API key at https://platform.example/account/api-keys."
    )
    async with provider_server([]) as srv:
        env = {"OPENAI_BASE_URL": srv.base_url + "/v1", "OPENAI_API_KEY": "sk-test-not-a-secret"}
        for quiet in ([], ["--quiet"]):
            srv.push(openai_error(401, refusal))
            async with on_a_terminal(["--model", "openai:gpt-test", *quiet, "hi"], env=env, columns=50) as t:
                assert await t.wait_exit() == ExitCode.FATAL_INFRA
            last = t.lines[-1]
            # One line, whole: the terminal wraps it, agentd does not cut or break it.
            assert last.startswith("agentd: error: openai rejected the credentials (HTTP 401 from ")
            assert last.endswith(
                f"{refusal} — fix: set OPENAI_API_KEY to a valid key for this base URL (OPENAI_BASE_URL)"
            ), last
            assert len(last) > 200
            assert "sk-test-not-a-secret" not in t.screen
            if quiet:
                assert t.lines == [last]  # only the error
            else:
                # The summary just before it, wrapped to the 50 columns (its length depends on the time taken).
                done = max(i for i, line in enumerate(t.lines) if line.startswith("done    "))
                assert t.lines[done].startswith("done    crashed · 0 steps · 0 tokens"), t.lines
                assert all(line.startswith("        ") for line in t.lines[done + 1 : -1]), t.lines


async def test_a_failed_run_on_a_pipe_ends_with_run_failed_in_ndjson(tmp_path: Path) -> None:
    async with provider_server([openai_error(401, "invalid api key")]) as srv:
        env = {"OPENAI_BASE_URL": srv.base_url + "/v1", "OPENAI_API_KEY": "sk-test-not-a-secret"}
        async with run_agentd(["--model", "openai:gpt-test", "--output", "json", "hi"], env=env) as a:
            assert await a.wait_exit() == ExitCode.FATAL_INFRA
        srv.push(openai_error(401, "invalid api key"))
        async with run_agentd(["--model", "openai:gpt-test", "--log-format", "text", "hi"], env=env) as text:
            assert await text.wait_exit() == ExitCode.FATAL_INFRA
    # Every stderr line is still JSON, and the last one is the run's error with its fix.
    lines = [json.loads(line) for line in a.raw_stderr if line]
    failed = lines[-1]
    assert failed["event"] == "run.failed"
    assert (failed["level"], failed["severity"], failed["exit_code"], failed["kind"]) == (
        "error",
        "ERROR",
        4,
        "provider",
    )
    assert failed["fix"] == "set OPENAI_API_KEY to a valid key for this base URL (OPENAI_BASE_URL)"
    assert failed["message"] == f"agentd: error: {failed['error']} — fix: {failed['fix']}"
    assert "invalid api key" in failed["error"]
    assert lines[-2]["event"] == "supervisor.exit"
    # The JSON result on stdout says the same.
    assert json.loads(a.out)["error"]["kind"] == "provider"
    # --log-format text: the same line, plain, last.
    assert [line for line in text.raw_stderr if line][-1] == failed["message"]


async def test_errors_before_the_run_are_plain_lines_ending_with_the_fix(tmp_path: Path) -> None:
    async with run_agentd(["--mode", "sometimes", "hi"]) as one:
        assert await one.wait_exit() == ExitCode.CONFIG
    assert [line for line in one.raw_stderr if line] == [
        "agentd: error: --mode: 'sometimes' is not valid: choose one of once, loop, reactive, schedule — fix: "
        "correct --mode as it says; `agentd check` validates the settings without running anything"
    ]
    async with run_agentd(["--mode", "sometimes", "--budget-steps", "many", "hi"]) as two:
        assert await two.wait_exit() == ExitCode.CONFIG
    lines = [line for line in two.raw_stderr if line]
    assert lines[:2] == [
        "agentd: --mode: 'sometimes' is not valid: choose one of once, loop, reactive, schedule",
        "agentd: --budget-steps: 'many' is not valid: must be a whole number ≥ 1",
    ]
    assert lines[2:] == [
        "agentd: error: 2 settings are not valid (each is named above) — fix: correct each as its line "
        "says; `agentd check` validates the settings without running anything"
    ]


async def test_a_reactive_daemon_on_a_terminal_shows_its_wakes(tmp_path: Path) -> None:
    model = script(
        tmp_path,
        [
            {"text": "Checking.", "tool_calls": [{"name": "memo__memo_get", "arguments": {"key": "todo"}}]},
            {"text": "noted"},
        ],
    )
    toml, memo = memo_toml(tmp_path, model)
    async with on_a_terminal(["--config", str(toml)]) as t:
        await t.wait_for("ready   watching for changes (Ctrl-C stops)")
        edit(memo, {"todo": "milk"})
        await t.wait_for("turn    ")
        t.signal(signal.SIGTERM)
        assert await t.wait_exit() == ExitCode.OK
    tags = [line.split()[0] for line in t.lines]
    assert tags == ["ready", "wake", "model", "said", "tool", "model", "turn", "stop", "done"], t.plain
    assert t.lines[1] == f"wake    route notes: {NOTES}"
    assert re.fullmatch(r"turn    a\d+ completed \(route notes\)", t.lines[6])
    assert t.lines[-1].startswith("done    stopped · 2 steps")
    assert t.out.strip() == "noted"  # a daemon's reply on stdout
