"""Reactive routing through the real ``agentd`` command and real MCP servers over stdio.

The bundled memo server (``agentd serve memo --file X``) turns edits of X into
``notifications/resources/updated``; the SDK-written notes server serves both
protocol eras and persists to ``--state``. Tests edit files the way another
program would and await agentd's NDJSON telemetry; nothing sleeps.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import psutil
import pytest

from tests.support.agentd_proc import PY, drain, notes_server, script
from tests.support.files import edit
from tests.support.routing import server_process
from tests.support.supervised import RUN_TIMEOUT, supervised

#: One step of a reactive run (a change travelling server -> agentd -> a
#: forked agent -> its answer) on this shared machine; typically well under 1 s.
STEP_TIMEOUT = 20.0

#: Reconnect backoff for tests that kill a server: restart quickly, yet late
#: enough that the test's edit of the state file lands while it is down.
FAST_RECONNECT = {"AGENTD_RECONNECT_BACKOFF": "0.5,0.5,0.5,0.5,0.5"}


def memo(tmp_path: Path) -> tuple[Path, str]:
    """The memo file and the ``--mcp-stdio`` value serving it."""
    notes = tmp_path / "notes.json"
    notes.write_text("{}")
    return notes, f"memo={PY} -m agentd serve memo --file {notes}"


def config(tmp_path: Path, body: str) -> str:
    path = tmp_path / "agentd.toml"
    path.write_text(body)
    return str(path)


READ_NOTES = [
    {"tool_calls": [{"name": "read_resource", "arguments": {"uri": "memo://notes"}}]},
    {"text": "notes: {last_tool_result}"},
]


async def test_a_burst_is_one_spawn_and_quiet_separated_writes_are_two(tmp_path):
    notes, server = memo(tmp_path)
    toml = config(
        tmp_path,
        'subscribe = ["memo:memo://notes"]\n'
        '[[routes]]\nname = "notes"\nmatch = "memo://notes"\ndisposition = "spawn"\ndebounce = "200ms"\n'
        "reread_on_start = false\n",
    )
    args = ["--mode", "reactive", "--config", toml, "--mcp-stdio", server, "--verbose"]
    args += ["--model", script(tmp_path, READ_NOTES), "report the notes"]
    async with supervised(args, tmp_path) as a:
        await a.wait_event("subscription.established", timeout=RUN_TIMEOUT)
        for n in range(5):
            edit(notes, {"n": n})
        await a.wait_event("turn.end", timeout=STEP_TIMEOUT)
        edit(notes, {"n": "second"})
        await a.wait_event("turn.end", count=2, timeout=STEP_TIMEOUT)
        await drain(a, RUN_TIMEOUT)
    spawns = a.find("subagent.spawn")
    assert [(e["role"], e["route"]) for e in spawns] == [("spawn", "notes")] * 2
    assert a.out.splitlines() == ['notes: {"n":4}', 'notes: {"n":"second"}']
    assert all(e["route"] == "notes" for e in a.find("resource.updated"))


async def test_a_continue_route_delivers_both_changes_into_one_named_session(tmp_path):
    notes, server = memo(tmp_path)
    toml = config(
        tmp_path,
        'subscribe = ["memo:memo://notes"]\n'
        '[[routes]]\nname = "ops"\nmatch = "memo://notes"\ndisposition = "continue"\nsession = "ops"\n'
        'debounce = "100ms"\nreread_on_start = false\n',
    )
    model = script(tmp_path, [{"text": "first wake"}, {"text": "second wake: {input}"}])
    args = [
        "--mode",
        "reactive",
        "--config",
        toml,
        "--mcp-stdio",
        server,
        "--verbose",
        "--model",
        model,
        "watch",
    ]
    async with supervised(args, tmp_path) as a:
        await a.wait_event("subscription.established", timeout=RUN_TIMEOUT)
        edit(notes, {"v": 1})
        await a.wait_event("turn.end", timeout=STEP_TIMEOUT)
        edit(notes, {"v": 2})
        await a.wait_event("turn.end", count=2, timeout=STEP_TIMEOUT)
        await drain(a, RUN_TIMEOUT)
    spawns = a.find("subagent.spawn")
    assert [(e["agent"], e["role"], e["session"]) for e in spawns] == [("a1", "session", "ops")]
    delivers = a.find("session.deliver")
    assert len(delivers) == 2
    assert delivers[0]["started"] is True
    assert delivers[1]["agent"] == "a1"
    assert [e["agent"] for e in a.find("turn.end")] == ["a1", "a1"]
    out = a.out.splitlines()
    assert out[0] == "first wake"
    assert out[1] == "second wake: These resources changed (re-read what you need; act on the current state):"
    assert out[2:] == ["- memo://notes on memo (updated)"]  # the second change, as the session's next turn


async def test_self_subscribe_wakes_the_same_agent(tmp_path):
    notes, server = memo(tmp_path)
    model = script(
        tmp_path,
        [
            {"tool_calls": [{"name": "subscribe", "arguments": {"uri": "memo://notes"}}]},
            {"text": "watching the notes"},
            {"tool_calls": [{"name": "read_resource", "arguments": {"uri": "memo://notes"}}]},
            {"text": "woke and read: {last_tool_result}"},
        ],
    )
    # schedule starts one root at once; its next fire is an hour away
    args = [
        "--mode",
        "schedule",
        "--interval",
        "1h",
        "--mcp-stdio",
        server,
        "--model",
        model,
        "watch the notes",
    ]
    async with supervised(args, tmp_path) as a:
        await a.wait_event("turn.end", timeout=RUN_TIMEOUT)
        assert a.find("self.subscribe")[0]["agent"] == "a1"
        edit(notes, {"todo": "ship it"})
        await a.wait_event("turn.end", count=2, timeout=STEP_TIMEOUT)
        await drain(a, RUN_TIMEOUT)
    assert [e["agent"] for e in a.find("subagent.spawn")] == ["a1"]
    assert [e.get("agent") for e in a.find("session.deliver")] == ["a1"]
    updated = a.find("resource.updated")
    assert updated[0]["route"] == "self:a1:memo://notes"
    assert a.out.splitlines() == ["watching the notes", 'woke and read: {"todo":"ship it"}']


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_a_killed_server_is_restarted_resubscribed_and_a_change_made_while_down_arrives(tmp_path, era):
    model = script(
        tmp_path,
        [
            {"tool_calls": [{"name": "read_resource", "arguments": {"uri": "note://alpha"}}]},
            {"text": "alpha is: {last_tool_result}"},
        ],
    )
    args = [
        "--mode", "reactive", "--mcp-stdio", notes_server(tmp_path, "--era", era),
        "--subscribe", "notes:note://alpha", "--verbose", "--model", model, "report alpha",
    ]  # fmt: skip
    async with supervised(args, tmp_path, env=FAST_RECONNECT) as a:
        # The start-up re-read comes first (rfcs/0130): one agent reads alpha as it is.
        await a.wait_event("subscription.established", timeout=RUN_TIMEOUT)
        await a.wait_event("turn.end", timeout=STEP_TIMEOUT)
        server = server_process(a, "notes_server.py")
        server.send_signal(signal.SIGKILL)
        state = tmp_path / "notes.json"
        edit(state, {**json.loads(state.read_text()), "alpha": "written while down"})
        synthetic = await a.wait_event(
            "resource.updated",
            lambda e: e["kind"] == "synthetic" and not e.get("startup"),
            timeout=STEP_TIMEOUT,
        )
        assert synthetic["uri"] == "note://alpha"
        assert synthetic["route"] is not None
        await a.wait_event("turn.end", count=2, timeout=STEP_TIMEOUT)
        await drain(a, RUN_TIMEOUT)
    assert len(a.find("subscription.established")) == 2
    assert a.find("server.state", lambda e: e["state"] == "restarting")
    assert a.out.splitlines() == ["alpha is: first note", "alpha is: written while down"]
    assert not psutil.pid_exists(server.pid) or server.status() == psutil.STATUS_ZOMBIE


async def test_a_dead_self_subscribers_upstream_subscription_is_released(tmp_path):
    # a1 (woken by the start-up re-read of memo://notes) subscribes itself to note://beta, then dies:
    # its route goes, and so does the upstream subscription nobody else needs.
    # (Unrouted counting is covered by tests/supervisor/test_reactor.py and by the
    # fault catalog's misbehaving server.)
    _notes, server = memo(tmp_path)
    model = script(
        tmp_path,
        [
            {"tool_calls": [{"name": "subscribe", "arguments": {"uri": "note://beta"}}]},
            {"text": "watching beta"},
        ],
    )
    args = [
        "--mode", "reactive", "--mcp-stdio", server, "--mcp-stdio", notes_server(tmp_path),
        "--subscribe", "memo:memo://notes", "--verbose", "--model", model, "watch",
    ]  # fmt: skip
    async with supervised(args, tmp_path, env=FAST_RECONNECT) as a:
        await a.wait_event("subscription.established", lambda e: e["server"] == "memo", timeout=RUN_TIMEOUT)
        await a.wait_event("turn.end", timeout=STEP_TIMEOUT)
        assert a.find("self.subscribe")[0]["uri"] == "note://beta"
        agent_pid = a.find("subagent.started")[0]["pid"]
        os.kill(agent_pid, signal.SIGKILL)
        released = await a.wait_event(
            "self.unsubscribe", lambda e: e.get("reason") == "owner exited", timeout=STEP_TIMEOUT
        )
        assert (released["uri"], released["server"]) == ("note://beta", "notes")
        await drain(a, RUN_TIMEOUT)
    assert len(a.find("subagent.spawn")) == 1


async def test_list_changed_subscribes_a_new_uri_matching_a_glob_and_seeds_it(tmp_path):
    # A declared glob subscription expands against the server's catalog. The
    # root shift adds a note (the server announces resources/list_changed):
    # agentd routes the new concrete URI at once (kind list_changed, rfcs/0350)
    # and subscribes it; the glob route hands it to one fresh agent, and no
    # re-read after the subscribe starts a second one.
    model = script(
        tmp_path,
        [
            {"tool_calls": [{"name": "notes__add_note", "arguments": {"name": "gamma", "text": "hello"}}]},
            {"text": "added: {last_tool_result}"},
        ],
    )
    args = [
        "--mode", "loop", "--interval", "1h", "--session", "fresh", "--verbose",
        "--mcp-stdio", notes_server(tmp_path),
        "--subscribe", "notes:note://*",
        "--route", "note://*=spawn,reread_on_start=false",
        "--model", model, "add a note",
    ]  # fmt: skip
    async with supervised(args, tmp_path) as a:
        seeded = await a.wait_event(
            "resource.updated", lambda e: e["uri"] == "note://gamma", timeout=RUN_TIMEOUT
        )
        spawned = await a.wait_event(
            "subagent.spawn", lambda e: e.get("route") is not None, timeout=STEP_TIMEOUT
        )
        await a.wait_event("turn.end", lambda e: e["agent"] == spawned["agent"], timeout=STEP_TIMEOUT)
        await a.wait_event(
            "subscription.established", lambda e: e["uri"] == "note://gamma", timeout=STEP_TIMEOUT
        )
        await drain(a, RUN_TIMEOUT)
    assert seeded["kind"] == "list_changed"
    assert seeded["route"] is not None
    assert "catalog.changed" in {e["event"] for e in a.events}
    assert [e["kind"] for e in a.find("resource.updated") if e["uri"] == "note://gamma"] == ["list_changed"]
    assert len([e for e in a.find("subagent.spawn") if e.get("route") is not None]) == 1
