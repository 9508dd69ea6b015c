"""Declared watches through the real ``agentd`` command: a TOML route with ``extract`` / ``on_event``.

The watched resource is ``memo://notes`` of the bundled memo server, edited
from outside (its file) as a user would. The route's filter keeps only changes
to the ``todo`` key, so an edit of another key wakes nobody. Every wait is on
telemetry with a timeout; nothing sleeps.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

from tests.support.agentd_proc import PY, run_agentd, script
from tests.support.files import edit

#: The route's filter: a line for ``todo`` changes, nothing for any other key.
FILTER = "f\"{event['type']} {event['key']}={event['new']}\" if event['key'] == 'todo' else None"

NOTICE = '<watch-event name="todo" uri="memo://notes">\nMODIFIED todo=buy bread\n</watch-event>'


def config(tmp: Path, memo: Path, model: str, route: str, *, mode: str = "reactive") -> Path:
    """A TOML config: the memo server, a subscription to memo://notes and one staged route."""
    path = tmp / "agentd.toml"
    path.write_text(
        f'mode = "{mode}"\n'
        f"model = {json.dumps(model)}\n"
        "verbose = true\n"
        'subscribe = ["memo://notes"]\n'
        "[servers.memo]\n"
        f"command = {json.dumps(PY)}\n"
        f'args = ["-m", "agentd", "serve", "memo", "--file", {json.dumps(str(memo))}]\n'
        "[watches]\n"
        # A short stage debounce so a notice follows an edit within a fraction of a second.
        'debounce = "0.2s"\n'
        'max_wait = "1s"\n'
        "[[routes]]\n"
        'name = "todo"\n'
        'match = "memo://notes"\n'
        'debounce = "0.05s"\n'
        f"{route}"
        f"on_event = '''{FILTER}'''\n"
    )
    return path


def is_todo(e: dict[str, object]) -> bool:
    return e.get("route") == "todo"


async def test_a_spawn_route_with_a_filter_spawns_one_agent_for_the_kept_change(tmp_path: Path) -> None:
    memo = tmp_path / "notes.json"
    edit(memo, {"todo": "buy milk", "noise": 0})
    model = script(tmp_path, [{"text": "spawned: {instruction}"}])
    cfg = config(tmp_path, memo, model, 'disposition = "spawn"\nextract = "state"\n')
    async with run_agentd(["--config", str(cfg), "watch my notes"]) as a:
        started = await a.wait_event("watch.started", is_todo)
        assert (started["watch"], started["uri"], started["shape"], started["filter"]) == (
            "todo",
            "memo://notes",
            "state",
            True,
        )
        # A change the filter drops: an event, no notice, no agent.
        edit(memo, {"todo": "buy milk", "noise": 1})
        dropped = await a.wait_event("watch.event", lambda e: e.get("outcome") == "dropped")
        assert (dropped["route"], dropped["type"]) == ("todo", "MODIFIED")
        # A change the filter keeps: one notice, one fresh agent.
        edit(memo, {"todo": "buy bread", "noise": 1})
        notice = await a.wait_event("watch.notice", is_todo)
        assert (notice["uri"], notice["lines"]) == ("memo://notes", 1)
        await a.wait_event("turn.end", is_todo)
        a.signal(signal.SIGTERM)
        assert await a.wait_exit() == 0
    spawns = a.find("subagent.spawn")
    assert [(s["role"], s["route"]) for s in spawns] == [("spawn", "todo")]
    assert a.out.startswith(f"spawned: watch my notes\n\n{NOTICE}\n"), a.out
    assert a.out.count("<watch-event") == 1
    assert len(a.find("watch.notice")) == 1


async def test_a_continue_route_delivers_notices_into_its_named_session(tmp_path: Path) -> None:
    memo = tmp_path / "notes.json"
    edit(memo, {"todo": "buy milk", "noise": 0})
    model = script(tmp_path, [{"text": "first: {instruction}"}, {"text": "next: {input}"}])
    cfg = config(tmp_path, memo, model, 'disposition = "continue"\nsession = "inbox"\n')
    async with run_agentd(["--config", str(cfg), "watch my notes"]) as a:
        started = await a.wait_event("watch.started", is_todo)
        assert (started["session"], started["shape"]) == (
            "inbox",
            "state",
        )  # extract "auto": from the mime type
        edit(memo, {"todo": "buy milk", "noise": 1})
        await a.wait_event("watch.event", lambda e: e.get("outcome") == "dropped")
        edit(memo, {"todo": "buy bread", "noise": 1})
        await a.wait_event("turn.end", is_todo)
        # The session is warm: the next kept change is a second turn of the same agent.
        edit(memo, {"todo": "buy cheese", "noise": 1})
        await a.wait_event("turn.end", is_todo, count=2)
        a.signal(signal.SIGTERM)
        assert await a.wait_exit() == 0
    spawns = a.find("subagent.spawn")
    assert [(s["role"], s["route"], s["session"]) for s in spawns] == [("session", "todo", "inbox")]
    assert a.out.startswith(f"first: watch my notes\n\n{NOTICE}\n"), a.out
    assert 'next: <watch-event name="todo" uri="memo://notes">\nMODIFIED todo=buy cheese\n' in a.out
    assert "noise" not in a.out


async def test_a_route_filter_the_sandbox_refuses_exits_2_naming_the_route(tmp_path: Path) -> None:
    memo = tmp_path / "notes.json"
    edit(memo, {})
    model = script(tmp_path, [{"text": "never"}])
    cfg = config(tmp_path, memo, model, 'disposition = "spawn"\n')
    cfg.write_text(cfg.read_text().replace(FILTER, "memo__memo_set(key='x', value=1)"))
    async with run_agentd(["--config", str(cfg), "watch my notes"]) as a:
        assert await a.wait_exit() == 2
    # The run's final line (run.failed, stderr being NDJSON here) names the route's setting (rfcs/0321).
    [failed] = a.find("run.failed")
    assert failed["kind"] == "config"
    assert failed["error"].startswith("routes[0].on_event: ")
    assert "calls 'memo__memo_set'" in failed["error"]
    assert a.find("subagent.spawn") == []
