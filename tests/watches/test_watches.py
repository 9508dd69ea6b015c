"""Watches through the real ``agentd`` command: watch_start from a model turn, notices as turns, restore.

The model is the script model; the watched resource is ``memo://notes`` of the
bundled memo server, edited from outside (its file) as a user would. Every
wait is on telemetry with a timeout; nothing sleeps.
"""

from __future__ import annotations

import html
import json
import signal
from pathlib import Path

from tests.support.agentd_proc import run_agentd, script
from tests.support.files import edit
from tests.support.watch import Control, mcp_stdio, memo_loop_args, watch_start
from tests.support.watch import loop_args as watch_loop_args

#: Short debounce so a notice follows an edit within a fraction of a second.
FAST_WATCHES = {"AGENTD_WATCHES__DEBOUNCE": "0.2", "AGENTD_WATCHES__MAX_WAIT": "1"}

FILTER = "f\"{event['type']} {event['key']}={event['new']}\" if event['key'] != 'noise' else None"


WATCH_TODO = {
    "tool_calls": [
        {"name": "watch_start", "arguments": {"name": "todo", "uri": "memo://notes", "on_event": FILTER}}
    ]
}
"""A model step that starts the watch ``todo`` on the memo's notes, through :data:`FILTER`."""


async def test_a_watch_wakes_the_same_agent_and_no_reply_publishes_nothing(tmp_path: Path) -> None:
    memo = tmp_path / "notes.json"
    edit(memo, {"todo": "buy milk"})
    model = script(
        tmp_path,
        [
            WATCH_TODO,
            {"text": "watching"},
            {"text": "got: {input}"},
        ],
    )
    async with run_agentd(memo_loop_args(model, memo), env=FAST_WATCHES) as a:
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
            WATCH_TODO,
            {"text": "watching"},
        ],
        name="first.json",
    )
    async with run_agentd(memo_loop_args(first, memo, "--watch-state", str(state)), env=FAST_WATCHES) as a:
        await a.wait_event("watch.started")
        await a.wait_event("turn.end")
        a.signal(signal.SIGTERM)
        assert await a.wait_exit() == 0
    saved = json.loads(state.read_text())["watches"]
    assert [(w["name"], w["owner"], w["uri"]) for w in saved] == [("todo", "root", "memo://notes")]

    edit(memo, {"todo": "buy bread", "late": "while down"})  # agentd is not running

    second = script(
        tmp_path,
        [{"text": "first: {instruction}"}, {"text": "in: {input}"}, {"text": "in: {input}"}],
        name="second.json",
    )
    async with run_agentd(memo_loop_args(second, memo, "--watch-state", str(state)), env=FAST_WATCHES) as a:
        restored = await a.wait_event("watch.restored")
        assert restored["restored"] == ["root:todo"]
        await a.wait_event("watch.notice")
        await a.wait_event("turn.end", count=2)  # the first turn, then the change made while down
        a.signal(signal.SIGTERM)
        assert await a.wait_exit() == 0
    # The restore notice rides in the root's first turn: no turn of its own.
    assert len(a.find("turn.end")) == 2
    first, change = a.out.split("\nin: ", 1)
    assert first.startswith("first: watch my notes\n\n<watches-restored>\ntodo memo://notes (state)\n")
    assert "</watches-restored>" in first
    assert "ADDED late=while down" in change
    assert "MODIFIED todo=buy bread" in change
    assert {e["agent"] for e in a.find("turn.end")} == {"a1"}
    # Telemetry says it once: one watch.subscribed for the restored watch, no resubscribing.
    assert len(a.find("watch.subscribed", lambda e: e["watch"] == "todo")) == 1
    assert a.find("watch.resubscribing") == []


async def test_the_filter_sees_the_same_list_resources_as_the_agent(tmp_path: Path) -> None:
    """One listing for both: the self-tool's fields, the same entries, from a filter and a turn."""
    ctl = Control(tmp_path / "ctl")
    model = script(
        tmp_path,
        [
            {"tool_calls": [watch_start("cat", "state://doc", "list_resources()")]},
            {"tool_calls": [{"name": "list_resources", "arguments": {}}]},
            {"text": "agent sees: {last_tool_result}"},
            {"text": "filter sees: {input}"},
        ],
    )
    server = mcp_stdio("watchy", tmp_path / "ctl")
    async with run_agentd(watch_loop_args(model, server), env=FAST_WATCHES) as a:
        await a.wait_event("turn.end")
        ctl.set("k", 1)
        await a.wait_event("turn.end", count=2)
        a.signal(signal.SIGTERM)
        assert await a.wait_exit() == 0
    agent_line = next(line for line in a.out.splitlines() if line.startswith("agent sees: "))
    from_tool = json.loads(agent_line.removeprefix("agent sees: "))
    block = a.out.split("<watch-event ", 1)[1].split("\n</watch-event>")[0]
    [filter_line] = block.split("\n")[1:]
    from_filter = json.loads(html.unescape(filter_line))
    assert from_filter == from_tool
    assert sorted(e["uri"] for e in from_tool) == ["events://log", "state://doc"]
    assert all(
        set(e) == {"uri", "template", "name", "description", "example", "mime_type", "server", "subscribable"}
        for e in from_tool
    )
