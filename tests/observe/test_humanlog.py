"""The formats for people (rfcs/0320) and the final error line (rfcs/0321), without a process."""

from __future__ import annotations

import io
import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentd.core.errors import ConfigError
from agentd.core.exitcodes import ExitCode
from agentd.observe.errorline import (
    FALLBACK,
    config_error_lines,
    error_line,
    failure_for,
    internal_failure,
    split_fix,
)
from agentd.observe.humanlog import INTERIM_LINES, HumanView, colours_wanted, terminal_width, text_line
from agentd.observe.telemetry import Telemetry


def view(width: int = 80, *, verbose: bool = False, colour: bool = False) -> HumanView:
    return HumanView(colour=colour, width=lambda: width, verbose=verbose)


def rec(event: str, level: str = "info", **fields: object) -> dict[str, object]:
    return {
        "ts": "2026-01-01T10:00:00.000Z",
        "level": level,
        "severity": level.upper(),
        "event": event,
        **fields,
    }


# -- progress -----------------------------------------------------------------------------


def test_a_model_call_with_interim_text_and_a_tool_call() -> None:
    v = view()
    model = v.render(
        rec(
            "step.assistant",
            provider="openai",
            model="gpt-4o-mini",
            input_tokens=12345,
            output_tokens=87,
            cached_input_tokens=12000,
            cost_usd=0.00041,
            latency_ms=812.0,
            tool_calls=1,
            text="I will read\n\nthe notes.",
        )
    )
    assert model == (
        "model   openai:gpt-4o-mini · 12,345 in (12,000 cached) · 87 out · $0.0004 · 812ms\n"
        "said    I will read the notes.\n"
    )
    tool = v.render(
        rec("step.tool_call", name="memo__memo_get", server="memo", tool="memo_get", arguments={"key": "x"})
    )
    assert tool == 'tool    memo/memo_get {"key":"x"}\n'


def test_the_final_reply_is_not_repeated_on_the_terminal() -> None:
    line = view().render(
        rec("step.assistant", provider="script", model="a.json", tool_calls=0, text="the answer")
    )
    assert "the answer" not in line
    assert line.startswith("model   script:a.json · 0 in · 0 out")


def test_interim_text_is_bounded() -> None:
    lines = view(60).render(rec("step.assistant", model="m", tool_calls=2, text="word " * 2000)).splitlines()
    said = lines[1:]
    assert len(said) == INTERIM_LINES
    assert all(len(line) <= 60 for line in said)
    assert said[-1].endswith("…")


def test_tool_arguments_are_cut_to_one_line_of_the_terminal() -> None:
    line = view(70).render(
        rec("step.tool_call", name="t", server="s", tool="t", arguments={"text": "x\n" * 500})
    )
    assert line.count("\n") == 1
    assert len(line.rstrip("\n")) == 70
    assert line.startswith('tool    s/t {"text":"x\\nx\\n')
    assert line.rstrip("\n").endswith("…")


def test_a_failed_tool_call_says_so_and_an_ok_one_says_nothing_more() -> None:
    v = view()
    assert v.render(rec("tool.call", server="memo", tool="memo_get", latency_ms=3.0, error=None)) == ""
    failed = v.render(rec("tool.call", server="memo", tool="memo_get", error="tool returned an error"))
    assert failed == "tool    memo/memo_get failed: tool returned an error\n"


def test_wakes_notices_and_turn_ends_in_a_daemon() -> None:
    v = view()
    assert v.render(rec("supervisor.start", mode="reactive")) == ""
    assert (
        v.render(rec("ready.changed", ready=True, reason="ok"))
        == "ready   watching for changes (Ctrl-C stops)\n"
    )
    assert v.render(
        rec("route.deliver", route="notes", uris=["memo://a", "memo://b", "memo://c", "memo://d"])
    ) == ("wake    route notes: memo://a, memo://b, memo://c and 1 more\n")
    assert v.render(rec("timer.fire")) == "wake    the clock fired\n"
    notice = v.render(rec("watch.notice", watch="orders", uri="kube://pods", session="s1", lines=1, total=1))
    assert notice == "notice  watch orders on kube://pods: 1 line into session s1\n"
    assert v.render(rec("turn.end", agent="a3", route="notes", status="completed")) == (
        "turn    a3 completed (route notes)\n"
    )
    assert v.render(rec("drain.start", signal="SIGTERM", agents=2, grace_s=25.0)) == (
        "stop    draining: 2 agents running, 25s grace\n"
    )


def test_a_once_run_shows_no_turn_end_and_no_root_exit_but_a_summary() -> None:
    v = view()
    v.render(rec("supervisor.start", mode="once"))
    v.render(rec("subagent.spawn", agent="a1", role="root"))
    assert v.render(rec("turn.end", agent="a1", status="completed")) == ""
    assert (
        v.render(rec("subagent.exit", "warning", agent="a1", status="crashed", returncode=4, exit_code=1))
        == ""
    )
    child = v.render(
        rec("subagent.exit", "warning", agent="a2", status="crashed", returncode=1, reason="boom")
    )
    assert child == "warning subagent.exit agent=a2 status=crashed: boom\n"
    summary = v.render(
        rec(
            "supervisor.exit",
            exit_code=4,
            status="crashed",
            counters={"model_calls": 3, "input_tokens": 1000, "output_tokens": 234},
            cost_usd=0.0123,
            duration_s=72.5,
        )
    )
    assert summary == "done    crashed · 3 steps · 1,234 tokens · $0.0123 · 1m12s · exit 4\n"
    without = v.render(
        rec(
            "supervisor.exit",
            exit_code=0,
            status="completed",
            counters={},
            servers_unavailable={"memo": "restarting: cannot start 'agentdd'"},
            duration_s=1.0,
        )
    )
    # Wrapped, never cut, at the terminal's width (80 here).
    assert without == (
        "done    completed · 0 steps · 0 tokens · 1s · without memo (restarting: cannot\n"
        "        start 'agentdd')\n"
    )


def test_internal_events_only_when_verbose() -> None:
    event = rec("upstream.connected", server="memo", transport="stdio", ms=12.5)
    assert view().render(event) == ""
    assert (
        view(verbose=True).render(event) == "info    upstream.connected server=memo transport=stdio ms=12.5\n"
    )


# -- problems -------------------------------------------------------------------------------


def test_warnings_and_errors_are_whole_wrapped_at_spaces_never_cut() -> None:
    error = "could not start: " + " ".join(f"word{i}" for i in range(60)) + " /a/very/long/path/" + "x" * 90
    out = view(60).render(
        rec(
            "server.state",
            "error",
            server="memo",
            state="failed",
            attempt=5,
            error=error,
            fix="check its command",
        )
    )
    lines = out.splitlines()
    assert lines[0].startswith("error   server.state server=memo state=failed attempt=5:")
    assert all(line.startswith("        ") for line in lines[1:])
    joined = " ".join(line.strip() for line in lines)
    assert joined.endswith(
        f"{error.split(' ', 2)[2].rsplit(' ', 1)[0]} /a/very/long/path/{'x' * 90} — fix: check its command"
    )
    assert "…" not in out
    assert "/a/very/long/path/" + "x" * 90 in out  # a path longer than the line is kept whole


def test_a_traceback_follows_its_error() -> None:
    out = view().render(
        rec("supervisor.internal_error", "error", error="ValueError: x", traceback="T\n  f\nValueError")
    )
    assert out.splitlines() == [
        "error   supervisor.internal_error: ValueError: x",
        "        T",
        "          f",
        "        ValueError",
    ]


def test_what_the_final_line_says_is_not_said_twice() -> None:
    v = view()
    assert v.render(rec("model.fatal", "error", agent="a1", error="HTTP 401")) == ""
    assert v.render(rec("supervisor.required_server_failed", "error", server="m", error="x")) == ""
    assert v.render(rec("upstream.connect_failed", "warning", server="m", attempt=1, error="x")) == ""
    assert (
        v.render(rec("server.state", "warning", server="m", state="restarting", attempt=1, error="x")) != ""
    )
    assert view(verbose=True).render(rec("model.fatal", "error", agent="a1", error="HTTP 401")) != ""


@given(st.text())
def test_no_field_writes_a_control_character(text: str) -> None:
    v = view(60)
    records = [
        rec("step.assistant", model=text, provider=text, tool_calls=1, text=text),
        rec("step.tool_call", name=text, server=text, tool=text, arguments={text: text}),
        rec("tool.call", server=text, tool=text, error=text or "x"),
        rec("route.deliver", route=text, uris=[text]),
        rec("log", "warning", logger=text, message=text, fix=text),
        rec(text or "x", "error", **{"k" + text: text}),
    ]
    for record in records:
        out = v.render(record)
        assert not any(c != "\n" and (ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F) for c in out), repr(out)


def test_colours_wrap_agentds_own_tags_only() -> None:
    v = view(colour=True)
    line = v.render(rec("step.tool_call", name="t", server="s", tool="t", arguments={"a": "\x1b[31m"}))
    assert line == '\x1b[34mtool    \x1b[0ms/t {"a":"\\u001b[31m"}\n'


@pytest.mark.parametrize(
    ("env", "wanted"),
    [({"TERM": "xterm"}, True), ({"TERM": "xterm", "NO_COLOR": "1"}, False), ({"TERM": "dumb"}, False)],
)
def test_colours_follow_no_color_and_the_terminal(env: dict[str, str], wanted: bool) -> None:
    master, slave = os.openpty()
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        assert colours_wanted(env, slave) is wanted
        assert colours_wanted(env, devnull) is False  # not a terminal
    finally:
        for fd in (master, slave, devnull):
            os.close(fd)


def test_width_follows_columns_then_the_terminal() -> None:
    assert terminal_width(2, {"COLUMNS": "132"})() == 132
    assert terminal_width(2, {"COLUMNS": "10"})() == 40  # never narrower than a usable line
    assert terminal_width(-1, {})() == 100  # no terminal
    # A COLUMNS in other digits is no width: "²" passed isdigit() and int() raised mid-line.
    assert terminal_width(-1, {"COLUMNS": "²"})() == 100
    assert terminal_width(-1, {"COLUMNS": "١٢٠"})() == 100


# -- the text format ------------------------------------------------------------------------


def test_text_lines_keep_errors_and_fixes_whole_and_cut_other_values() -> None:
    line = text_line(
        rec("subscription.unresolved", "warning", pattern="p" * 300, error="e" * 300, fix="f" * 300)
    )
    assert "p" * 119 + "…" in line
    assert "p" * 120 not in line
    assert "e" * 300 in line
    assert "f" * 300 in line


# -- telemetry in the human format, and the final line -----------------------------------------


def test_telemetry_in_the_human_format_renders_steps_only_there() -> None:
    human, text = io.StringIO(), io.StringIO()
    for out, fmt in ((human, "human"), (text, "text")):
        t = Telemetry(out, line_format=fmt)  # type: ignore[arg-type]
        t.emit("supervisor.start", mode="once", model="m", servers=[], pid=1, open_files=1)
        t.step(
            "tool_call",
            agent="a1",
            name="s__t",
            server="s",
            tool="t",
            arguments={"token": "sk-live-abcdefghijklmnopqrstuvwx"},
        )
        t.step("tool_result", agent="a1", name="s__t", is_error=False, content=[], latency_ms=1.0)
    assert human.getvalue() == 'tool    s/t {"token":"***"}\n'  # redacted like every line
    assert "tool_call" not in text.getvalue()  # content stays out of the logs
    assert "supervisor.start" in text.getvalue()


def test_quiet_telemetry_shows_no_progress() -> None:
    out = io.StringIO()
    t = Telemetry(out, line_format="human", level="error")
    t.step("assistant", model="m", tool_calls=1, text="thinking")
    t.emit("route.dropped", route="r", uri="u", reason="full")
    t.emit("server.state", server="s", state="failed", error="gone")
    assert out.getvalue() == "error   server.state server=s state=failed: gone\n"


@pytest.mark.parametrize("fmt", ["json", "text", "human"])
def test_the_final_line_comes_last_whatever_the_level(fmt: str) -> None:
    out = io.StringIO()
    t = Telemetry(out, line_format=fmt, level="error")  # type: ignore[arg-type]
    t.fail(
        failure_for(
            ExitCode.DEADLINE,
            {"kind": "deadline", "message": "the --deadline 5s was reached", "fix": "raise --deadline"},
        )
    )
    t.emit("server.state", server="s", state="failed")
    t.close(1.0)
    last = out.getvalue().splitlines()[-1]
    plain = "agentd: error: the --deadline 5s was reached — fix: raise --deadline"
    if fmt == "json":
        record = json.loads(last)
        assert record["event"] == "run.failed"
        assert (record["exit_code"], record["kind"], record["message"]) == (124, "deadline", plain)
        assert (record["error"], record["fix"]) == ("the --deadline 5s was reached", "raise --deadline")
    else:
        assert last == plain


# -- errorline -----------------------------------------------------------------------------------


def test_the_line_is_one_line_redacted_and_escaped() -> None:
    line = error_line("bad\nthing at https://user:hunter2@example.com/\x1b[2K", "do\rthis")
    assert "\n" not in line
    assert "hunter2" not in line
    assert line == "agentd: error: bad\\nthing at https://***@example.com/\\x1b[2K — fix: do\\rthis"


def test_a_message_with_its_own_fix_gives_that_fix() -> None:
    assert split_fix("openai rejected (HTTP 401): bad key. Fix: set OPENAI_API_KEY") == (
        "openai rejected (HTTP 401): bad key",
        "set OPENAI_API_KEY",
    )
    assert split_fix("server 'm' failed (last error: x); fix its command") == (
        "server 'm' failed (last error: x)",
        "its command",
    )
    assert split_fix("no fix here") == ("no fix here", None)
    account = {"kind": "provider", "message": "bad key. Fix: set OPENAI_API_KEY", "fix": "check the key"}
    assert failure_for(4, account).line == "agentd: error: bad key — fix: set OPENAI_API_KEY"


@pytest.mark.parametrize("code", [c for c in ExitCode if c is not ExitCode.OK])
def test_every_failing_exit_code_has_a_line_with_a_fix(code: ExitCode) -> None:
    failure = failure_for(code)
    assert code in FALLBACK
    assert failure.exit_code == code
    assert failure.error
    assert failure.fix
    assert failure.line.startswith("agentd: error: ")
    assert " — fix: " in failure.line


def test_internal_errors_and_unknown_codes() -> None:
    assert internal_failure(ValueError("boom")).line == (
        "agentd: error: internal error: ValueError: boom — fix: this is a bug in agentd: report it with the "
        "traceback above (supervisor.internal_error)"
    )
    assert failure_for(99).line == "agentd: error: agentd exited with code 99 — fix: read the lines above"


def test_config_errors_one_or_several() -> None:
    one = ConfigError("--mode", "nope", "choose one of once, loop, reactive, schedule")
    two = ConfigError("--grace", "-1", "a duration ≥ 0, e.g. 25s")
    assert config_error_lines([one]) == [
        "agentd: error: --mode: 'nope' is not valid: choose one of once, loop, reactive, schedule — fix: correct "
        "--mode as it says; `agentd check` validates the settings without running anything"
    ]
    assert config_error_lines([one, two]) == [
        "agentd: --mode: 'nope' is not valid: choose one of once, loop, reactive, schedule",
        "agentd: --grace: '-1' is not valid: a duration ≥ 0, e.g. 25s",
        "agentd: error: 2 settings are not valid (each is named above) — fix: correct each as its line says; "
        "`agentd check` validates the settings without running anything",
    ]
