"""``agentd check --connect``'s report (agentd/supervisor/checkconnect.py, rfcs/0316): exit code, bounds, escapes.

The checks themselves run through the real command in tests/routing/test_silent_mistakes.py.
"""

from __future__ import annotations

import json

from agentd.core.exitcodes import ExitCode
from agentd.supervisor.checkconnect import JSON_NAMES, TEXT_NAMES, ModelCheck, Report, ServerCheck

HOSTILE = "evil\x1b]52;c;aGk=\x07\u009b2J"
"""A tool name that would set the clipboard and clear the screen if a terminal obeyed it."""


def server(name: str = "memo", *, tools: tuple[str, ...] = ("memo_get",)) -> ServerCheck:
    return ServerCheck(
        name,
        "ok",
        False,
        transport="stdio",
        protocol_version="2026-07-28",
        era="modern",
        probe="answered",
        ms=12.5,
        tools=tools,
        resources=("memo://notes",),
    )


def test_a_failed_server_wins_over_a_failed_model_and_warnings_do_not_fail() -> None:
    failed_server = ServerCheck("memo", "failed", True, error="cannot start 'agentdd'")
    failed_model = ModelCheck("openai:gpt-4o-mini", "failed", "openai rejected the credentials (HTTP 401)")
    ok_model = ModelCheck("script:m.json", "ok", "script loaded: 1 turn, not run")
    assert Report((server(),), (ok_model,)).exit_code() is ExitCode.OK
    assert Report((server(),), (failed_model,)).exit_code() is ExitCode.FATAL_INFRA
    assert Report((failed_server,), (failed_model,)).exit_code() is ExitCode.REQUIRED_SERVER
    text = Report((failed_server,), (failed_model,)).to_text()
    assert text.splitlines()[0] == "server memo (required): FAILED — cannot start 'agentdd'"
    assert text.splitlines()[-1] == (
        "check --connect: FAILED (server memo, model openai:gpt-4o-mini) — exit 6"
    )


def test_names_are_bounded_in_text_and_json() -> None:
    many = tuple(f"tool_{i:04}" for i in range(JSON_NAMES + 50))
    report = Report((server(tools=many),), ())
    tools_line = report.to_text().splitlines()[1]
    assert tools_line.startswith(f"  tools ({len(many)}): tool_0000, ")
    assert tools_line.endswith(f"tool_{TEXT_NAMES - 1:04} and {len(many) - TEXT_NAMES} more")
    [shown] = report.to_json()["servers"]
    assert len(shown["tools"]) == JSON_NAMES
    assert shown["tools_count"] == len(many)


def test_what_servers_name_is_shown_escaped_never_obeyed() -> None:
    report = Report((server(tools=(HOSTILE,)),), ())
    text = report.to_text()
    assert "\x1b" not in text
    assert "\x07" not in text
    assert "\u009b" not in text
    assert "evil\\x1b]52;c;aGk=\\x07\\u009b2J" in text
    # The JSON report keeps the value (an escape in a JSON string is the same character).
    dumped = json.dumps(report.to_json(), ensure_ascii=False)
    assert json.loads(dumped)["servers"][0]["tools"] == [HOSTILE]
