"""Watches through the real ``agentd`` command: watch_start from a model turn, notices as turns, restore.

The model is the script model; the watched resource is ``memo://notes`` of the
bundled memo server, edited from outside (its file) as a user would. Every
wait is on telemetry with a timeout; nothing sleeps.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from tests.e2e.agentd_proc import PY, run_agentd, script

#: Short debounce so a notice follows an edit within a fraction of a second.
FAST_WATCHES = {"AGENTD_WATCHES__DEBOUNCE": "0.2", "AGENTD_WATCHES__MAX_WAIT": "1"}

FILTER = "f\"{event['type']} {event['key']}={event['new']}\" if event['key'] != 'noise' else None"


def memo_server(path: Path) -> str:
    return f"memo={PY} -m agentd serve memo --file {path}"


def edit(path: Path, notes: dict[str, object]) -> None:
    """Replace the memo file the way an editor does (write a temp file, rename it over)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(notes))
    os.replace(tmp, path)


def loop_args(model: str, memo: Path, *extra: str) -> list[str]:
    return [
        "--mode",
        "loop",
        "--session",
        "warm",
        "--interval",
        "1h",
        "--verbose",
        "--model",
        model,
        "--mcp-stdio",
        memo_server(memo),
        *extra,
        "watch my notes",
    ]


async def test_a_watch_wakes_the_same_agent_and_no_reply_publishes_nothing(tmp_path: Path) -> None:
    memo = tmp_path / "notes.json"
    edit(memo, {"todo": "buy milk"})
    model = script(
        tmp_path,
        [
            {
                "tool_calls": [
                    {
                        "name": "watch_start",
                        "arguments": {"name": "todo", "uri": "memo://notes", "on_event": FILTER},
                    }
                ]
            },
            {"text": "watching"},
            {"text": "got: {input}"},
        ],
    )
    async with run_agentd(loop_args(model, memo), env=FAST_WATCHES) as a:
        started = await a.wait_event("watch.started")
        assert (started["watch"], started["uri"], started["session"]) == ("todo", "memo://notes", "root")
        await a.wait_event("turn.end")  # held warm: it owns a watch
        edit(memo, {"todo": "buy bread", "noise": 1})
        notice = await a.wait_event("watch.notice")
        assert (notice["watch"], notice["uri"], notice["lines"]) == ("todo", "memo://notes", 1)
        await a.wait_event("turn.end", count=2)
        assert a.out.splitlines()[:3] == [
            "watching",
            'got: <watch-event name="todo" uri="memo://notes">',
            "MODIFIED todo=buy bread",
        ]
        # The script now answers NO_REPLY: the turn runs, nothing is published.
        edit(memo, {"todo": "buy cheese", "noise": 1})
        suppressed = await a.wait_event("reply.suppressed")
        assert (suppressed["watch"], suppressed["uri"]) == (["todo"], ["memo://notes"])
        out_before = a.out
        a.signal(signal.SIGTERM)
        assert await a.wait_exit() == 0
    assert a.out == out_before
    assert {e["agent"] for e in a.find("turn.end")} == {"a1"}  # every turn in the same agent
    assert len(a.find("subagent.spawn")) == 1
    dropped = [e for e in a.find("watch.event") if e["outcome"] == "dropped"]
    assert [e["type"] for e in dropped] == ["ADDED"]  # "noise" was filtered out


async def test_watch_state_restores_after_a_restart_and_reports_changes_made_while_down(
    tmp_path: Path,
) -> None:
    memo, state = tmp_path / "notes.json", tmp_path / "watches.json"
    edit(memo, {"todo": "buy milk"})
    first = script(
        tmp_path,
        [
            {
                "tool_calls": [
                    {
                        "name": "watch_start",
                        "arguments": {"name": "todo", "uri": "memo://notes", "on_event": FILTER},
                    }
                ]
            },
            {"text": "watching"},
        ],
        name="first.json",
    )
    async with run_agentd(loop_args(first, memo, "--watch-state", str(state)), env=FAST_WATCHES) as a:
        await a.wait_event("watch.started")
        await a.wait_event("turn.end")
        a.signal(signal.SIGTERM)
        assert await a.wait_exit() == 0
    saved = json.loads(state.read_text())["watches"]
    assert [(w["name"], w["owner"], w["uri"]) for w in saved] == [("todo", "root", "memo://notes")]

    edit(memo, {"todo": "buy bread", "late": "while down"})  # agentd is not running

    second = script(
        tmp_path,
        [{"text": "hello"}, {"text": "in: {input}"}, {"text": "in: {input}"}],
        name="second.json",
    )
    async with run_agentd(loop_args(second, memo, "--watch-state", str(state)), env=FAST_WATCHES) as a:
        restored = await a.wait_event("watch.restored")
        assert restored["restored"] == ["root:todo"]
        await a.wait_event("watch.notice")
        # The restore notice and the change notice, in one or two follow-up turns of the root.
        while "MODIFIED todo=buy bread" not in a.out or "<watches-restored>" not in a.out:
            await a.wait_event("turn.end", count=len(a.find("turn.end")) + 1)
        a.signal(signal.SIGTERM)
        assert await a.wait_exit() == 0
    assert "<watches-restored>\ntodo memo://notes (state)\n</watches-restored>" in a.out
    assert "ADDED late=while down" in a.out
    assert {e["agent"] for e in a.find("turn.end")} == {"a1"}
