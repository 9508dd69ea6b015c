"""The user's routes are the routes (ARCHITECTURE decision 22), through the real ``agentd`` command.

Where the configuration declares routes, agentd adds none of its own: a
declared route whose glob covers a subscription's glob (without being the
same string) owns its changes, and a change no declared route matches is
unrouted (counted, logged, dropped) and said at start. With no route
declared, the route agentd adds is named as added.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.agentd_proc import PY, drain, notes_server, run_agentd, run_cli, script

pytestmark = pytest.mark.process

STEP = 60.0


async def test_a_declared_route_that_covers_a_subscription_owns_its_changes(tmp_path: Path) -> None:
    # The root changes note://alpha; the notes server lists note://alpha and note://beta.
    root = script(
        tmp_path,
        [
            {"tool_calls": [{"name": "notes__set_note", "arguments": {"name": "alpha", "text": "new"}}]},
            {"text": "changed it"},
        ],
        name="root.json",
    )
    quiet = script(tmp_path, [{"text": "saw it"}], name="quiet.json")
    config = tmp_path / "agentd.toml"
    # The subscription's glob has a longer literal prefix than the route: a route agentd
    # added for it would win by the longest-prefix rule, and the user's would never apply.
    config.write_text(
        f'mode = "loop"\ninterval = "1h"\nsession = "fresh"\nmodel = {json.dumps(root)}\n'
        'subscribe = ["notes:note://al*"]\n'
        '[[routes]]\nname = "mine"\nmatch = "note://*"\ndisposition = "spawn"\ndebounce = "0s"\n'
        f'reread_on_start = false\ntemplate = "my template: {{uri}}"\nmodel = {json.dumps(quiet)}\n'
    )
    args = ["--config", str(config), "--mcp-stdio", notes_server(tmp_path), "change a note"]
    async with run_agentd(args, cwd=tmp_path) as a:
        routed = await a.wait_event("resource.updated", lambda e: e["kind"] == "updated", timeout=STEP)
        spawn = await a.wait_event("subagent.spawn", lambda e: e.get("route") is not None, timeout=STEP)
        await a.wait_event("turn.end", lambda e: e["agent"] == spawn["agent"], timeout=STEP)
        await drain(a)
    assert (routed["uri"], routed["route"]) == ("note://alpha", "mine")
    assert spawn["route"] == "mine"
    assert not a.find("config.warning", lambda e: e["kind"] == "subscription")


async def test_a_change_no_declared_route_matches_is_unrouted_and_said_at_start(tmp_path: Path) -> None:
    notes = tmp_path / "notes.json"
    notes.write_text("{}")
    model = script(tmp_path, [{"text": "should not run"}])
    args = [
        "--mode", "reactive", "--model", model,
        "--mcp-stdio", f"memo={PY} -m agentd serve memo --file {notes}",
        "--subscribe", "memo:memo://notes", "--route", "memo://other=spawn", "watch",
    ]  # fmt: skip
    async with run_agentd(args, cwd=tmp_path) as a:
        said = await a.wait_event("config.warning", lambda e: e["kind"] == "subscription", timeout=STEP)
        await a.wait_event("ready.changed", lambda e: e["ready"], timeout=STEP)
        notes.write_text(json.dumps({"v": 1}))
        unrouted = await a.wait_event("resource.updated", lambda e: not e.get("startup"), timeout=STEP)
        end = await drain(a)
    assert (unrouted["route"], unrouted["outcome"]) == (None, None)
    assert end["counters"]["unrouted"] >= 1
    assert not a.find("subagent.spawn")
    assert said["value"] == "memo:memo://notes"
    assert "no declared route matches it" in said["problem"]
    # agentd check says it too, and which route covers which.
    done = run_cli(["check", *args], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "'memo:memo://notes' no declared route matches it" in done.stderr
    assert json.loads(done.stdout)["routing"] == [
        {"subscription": "memo:memo://notes", "covered": "none", "routes": [], "in_part": []}
    ]


async def test_the_route_agentd_adds_where_none_is_declared_is_named_added(tmp_path: Path) -> None:
    notes = tmp_path / "notes.json"
    notes.write_text("{}")
    model = script(tmp_path, [{"text": "saw it"}])
    args = [
        "--mode", "reactive", "--model", model,
        "--mcp-stdio", f"memo={PY} -m agentd serve memo --file {notes}",
        "--subscribe", "memo:memo://notes", "watch the notes",
    ]  # fmt: skip
    async with run_agentd(args, cwd=tmp_path) as a:
        routed = await a.wait_event("resource.updated", timeout=STEP)
        await a.wait_event("subagent.spawn", timeout=STEP)
        await drain(a)
    assert routed["route"] == "added:memo://notes"
    done = run_cli(["check", *args], cwd=tmp_path)
    assert json.loads(done.stdout)["routing"] == [
        {"subscription": "memo:memo://notes", "route": "added:memo://notes", "kind": "added"}
    ]
