"""The closed event vocabulary: every emitted name and field is declared, the reference is current."""

from __future__ import annotations

import ast
import io
import json
from pathlib import Path
from typing import get_args

import pytest

from agentd.observe.telemetry import Telemetry
from agentd.observe.vocabulary import COMMON_FIELDS, EVENTS, LEVELS, render_markdown
from agentd.selfmcp.protocol import RESERVED_EVENT_FIELDS, ChildEventName

REPO = Path(__file__).resolve().parents[2]


def _emit_calls() -> list[tuple[str, int, ast.Call]]:
    calls = []
    for path in sorted((REPO / "agentd").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "emit"
            ):
                calls.append((str(path.relative_to(REPO)), node.lineno, node))
    return calls


def test_every_emitted_event_and_field_is_declared() -> None:
    calls = _emit_calls()
    assert len(calls) > 100  # the scan sees agentd's emit calls
    problems = []
    for where, line, call in calls:
        if not call.args or not isinstance(call.args[0], ast.Constant):
            continue  # a relayed child event: checked against ChildEventName below
        name = call.args[0].value
        spec = EVENTS.get(name)
        if spec is None:
            problems.append(f"{where}:{line}: event {name!r} is not declared in agentd/observe/vocabulary.py")
            continue
        for kw in call.keywords:
            if kw.arg is not None and kw.arg != "level" and kw.arg not in spec.fields:
                problems.append(f"{where}:{line}: field {kw.arg!r} of {name!r} is not declared")
    assert not problems, "\n".join(problems)


def test_the_only_computed_event_name_is_a_childs_and_those_are_declared() -> None:
    computed = [
        (where, ast.unparse(call.args[0]))
        for where, _line, call in _emit_calls()
        if call.args and not isinstance(call.args[0], ast.Constant)
    ]
    assert computed == [("agentd/supervisor/children/channel.py", "frame.event")]
    for name in get_args(ChildEventName):
        assert name in EVENTS
        assert "agent" in EVENTS[name].fields  # the supervisor adds it
    assert {"level", "severity", "ts", "event"} <= RESERVED_EVENT_FIELDS


def test_declarations_are_well_formed() -> None:
    for name, spec in EVENTS.items():
        assert spec.name == name
        assert spec.level in LEVELS
        assert spec.summary.endswith("."), name
        assert not set(spec.fields) & set(COMMON_FIELDS), name
        assert len(set(spec.fields)) == len(spec.fields), name


def test_docs_reference_is_generated_from_the_vocabulary() -> None:
    doc = (REPO / "docs/telemetry.md").read_text()
    assert doc == render_markdown(), (
        "docs/telemetry.md is stale: run python -m agentd.observe.vocabulary > docs/telemetry.md"
    )
    for name in EVENTS:
        assert f"`{name}`" in doc


def _lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_lines_carry_level_and_severity_and_the_level_filters() -> None:
    out = io.StringIO()
    t = Telemetry(out, level="warning")
    t.emit("supervisor.start", mode="once")  # info: below warning
    t.emit("route.dropped", route="r", uri="u", reason="x")
    t.emit("server.state", server="s", state="failed")  # raised to error by its field
    t.emit("server.state", server="s", state="connected")  # info: dropped
    lines = _lines(out)
    assert [(x["event"], x["level"], x["severity"]) for x in lines] == [
        ("route.dropped", "warning", "WARNING"),
        ("server.state", "error", "ERROR"),
    ]
    assert list(lines[0])[:4] == ["ts", "level", "severity", "event"]


def test_verbose_is_debug_and_debug_events_need_it() -> None:
    quiet, loud = io.StringIO(), io.StringIO()
    Telemetry(quiet).emit("route.enqueued", route="r", uri="u")
    Telemetry(loud, verbose=True).emit("route.enqueued", route="r", uri="u")
    assert quiet.getvalue() == ""
    assert _lines(loud)[0]["level"] == "debug"


def test_a_level_keyword_overrides_the_declared_level_and_a_bad_one_is_ignored() -> None:
    out = io.StringIO()
    t = Telemetry(out, level="debug")
    t.emit("log", logger="x", message="m", level="debug")
    t.emit("log", logger="x", message="m", level="LOUD")
    assert [x["level"] for x in _lines(out)] == ["debug", "warning"]


def test_an_undeclared_event_or_field_is_written_and_reported_once() -> None:
    out = io.StringIO()
    t = Telemetry(out)
    t.emit("made.up", x=1)
    t.emit("made.up", x=2)
    t.emit("supervisor.start", mode="once", colour="red")
    lines = _lines(out)
    undeclared = [x for x in lines if x["event"] == "telemetry.undeclared"]
    assert [(x["of"], x["fields"]) for x in undeclared] == [
        ("made.up", None),
        ("supervisor.start", ["colour"]),
    ]
    assert [x["event"] for x in lines].count("made.up") == 2  # nothing is lost
    assert t.counters["undeclared_events"] == 2


def test_text_format_is_short_and_readable() -> None:
    out = io.StringIO()
    t = Telemetry(out, line_format="text")
    t.emit("subagent.started", agent="a1", pid=12, zygote=True, spawn_ms=3.5)
    t.emit("route.dropped", route="r one", uri="file:///x", reason="queue full", incoming=None)
    t.emit("supervisor.internal_error", error="boom", traceback="Traceback:\n  line 1\nValueError")
    text = out.getvalue().splitlines()
    assert text[0].endswith("INFO    subagent.started agent=a1 pid=12 zygote=true spawn_ms=3.5")
    assert text[0][2] == ":"
    assert text[0][8] == "."
    assert text[1].endswith('WARNING route.dropped route="r one" uri=file:///x reason="queue full"')
    assert "ERROR   supervisor.internal_error error=boom" in text[2]
    assert text[3:] == ["    Traceback:", "      line 1", "    ValueError"]


def test_text_format_cuts_long_values_and_secrets_stay_redacted() -> None:
    out = io.StringIO()
    t = Telemetry(out, line_format="text")
    t.emit("upstream.stdout_garbage", server="s", preview="x" * 500, bytes=500)
    t.emit("upstream.connect_failed", server="s", attempt=1, error="https://user:hunter2@example.com/")
    line, secret = out.getvalue().splitlines()
    assert len(line) < 250
    assert line.count("x") < 130
    assert "hunter2" not in secret


@pytest.mark.parametrize("level", LEVELS)
def test_enabled_matches_the_filter(level: str) -> None:
    t = Telemetry(io.StringIO(), level=level)  # type: ignore[arg-type]
    assert [t.enabled(x) for x in LEVELS] == [LEVELS.index(x) >= LEVELS.index(level) for x in LEVELS]
