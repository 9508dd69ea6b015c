"""The WatchManager against real MCP servers over stdio (the bundled memo server, the notes server).

The reactor's part is played by :class:`tests.support.watch_rig.Rig`. No
sleeps: every wait is on a channel or an event, bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentd.core.errors import FilterRejected, WatchError
from agentd.supervisor.routing.sessionroutes import SessionRoutes
from agentd.watches.limits import WatchLimits
from agentd.watches.state import load
from tests.mcpservers.helpers import notes_spec
from tests.support.watch_rig import lines, memo_spec, rig

pytestmark = pytest.mark.process  # its servers run as child processes (tests/support helpers)


async def test_bad_uri_fails_the_call_and_leaves_nothing_subscribed(tmp_path: Path) -> None:
    async with rig([memo_spec(tmp_path / "notes.json")]) as r:
        with pytest.raises(
            WatchError, match=r"reading 'memo://nope' on server 'memo' failed, so nothing was subscribed"
        ):
            await r.start("bad", "memo://nope")
        assert r.upstreams["memo"].subscriptions == frozenset()
        assert list(r.router.routes()) == []
        assert r.manager.listing("s1") == []
        # The name is free again: the same name works on a good URI.
        assert await r.start("bad", "memo://notes") == {
            "name": "bad",
            "uri": "memo://notes",
            "shape": "state",
        }


async def test_limit_of_five_and_name_conflict(tmp_path: Path) -> None:
    async with rig([memo_spec(tmp_path / "notes.json")]) as r:
        for i in range(5):
            await r.start(f"w{i}", "memo://notes")
        with pytest.raises(
            WatchError, match=r"already has a watch named 'w0' \(on 'memo://notes'\); call watch_stop"
        ):
            await r.start("w0", "memo://notes")
        with pytest.raises(WatchError, match=r"already has 5 watches \(w0, w1, w2, w3, w4\), the limit"):
            await r.start("w5", "memo://notes")
        with pytest.raises(WatchError, match=r"name 'a b' is not valid"):
            await r.start("a b", "memo://notes")
        # Another session has its own limit, and five watches of one URI share one subscription.
        await r.start("w0", "memo://notes", session="s2")
        assert r.upstreams["memo"].subscriptions == frozenset({"memo://notes"})
        # One change reaches every watch on the URI (the router delivers to the first route only).
        await r.memo_set("todo", "milk")
        for i in range(5):
            n = await r.notice(pred=lambda n, i=i: n.watch == f"w{i}" and n.session == "s1")
            assert lines(n) == ["ADDED todo"]
        assert (await r.notice(pred=lambda n: n.session == "s2")).text.startswith('<watch-event name="w0"')


async def test_watches_in_total_are_capped_counted_and_said_once_per_hit(tmp_path: Path) -> None:
    """rfcs/0265: ``max_watches_total`` across sessions; each refusal counted, ``limit.reached`` once per hit."""
    limits = WatchLimits(max_watches=2, max_watches_total=3, debounce_quiet_secs=0.05, debounce_max_secs=0.5)
    async with rig([memo_spec(tmp_path / "notes.json")], limits=limits) as r:
        await r.start("w0", "memo://notes")
        await r.start("w1", "memo://notes")
        with pytest.raises(
            WatchError,
            match=r"watch_start 'w2': this session already has 2 watches \(w0, w1\), the limit "
            r"\(watches.max_watches = 2\); stop one with watch_stop\(name\) first \(an operator raises the "
            r"limit with \[watches\] max_watches / AGENTD_WATCHES__MAX_WATCHES\)",
        ):
            await r.start("w2", "memo://notes")
        await r.start("w0", "memo://notes", session="s2")
        total = (
            r"watch_start 'w\d': the sessions of this agentd already hold 3 watches together, the limit "
            r"\(watches.max_watches_total = 3\); stop a watch you no longer need with watch_stop\(name\), "
            r"or try again later \(an operator raises the limit with \[watches\] max_watches_total / "
            r"AGENTD_WATCHES__MAX_WATCHES_TOTAL\)"
        )
        for session, name in [("s2", "w1"), ("s3", "w0"), ("s3", "w1")]:
            with pytest.raises(WatchError, match=total) as refused:
                await r.start(name, "memo://notes", session=session)
            assert refused.value.transient  # another session's watch may stop
        assert r.manager.listing("s3") == []
        assert r.upstreams["memo"].subscriptions == frozenset({"memo://notes"})
        reached = [(e["limit"], e["session"], e["watch"]) for e in r.telemetry.find("limit.reached")]
        assert reached == [("watches.max_watches", "s1", "w2"), ("watches.max_watches_total", "s2", "w1")]
        # One watch stops: below the cap, s3's start passes; the next refusal is a new hit.
        assert await r.manager.stop(session="s1", name="w1", routes=r)
        await r.start("w0", "memo://notes", session="s3")
        with pytest.raises(WatchError, match=total):
            await r.start("w1", "memo://notes", session="s3")
        assert len(r.telemetry.find("limit.reached")) == 3
    assert r.counters.refusals_by_limit() == {
        "max_self_subscriptions_per_session": 0,
        "max_self_subscriptions": 0,
        "watches.max_watches": 1,
        "watches.max_watches_total": 4,
        "max_children": 0,
        "max_agents": 0,
    }


async def test_filter_drops_and_transforms_events(tmp_path: Path) -> None:
    async with rig([memo_spec(tmp_path / "notes.json")]) as r:
        on_event = "f\"{event['key']} is now {event['new']}\" if event['key'] == 'todo' else None"
        await r.start("todo", "memo://notes", on_event)
        await r.memo_set("noise", 1)
        await r.memo_set("todo", "buy milk")
        n = await r.notice()
        assert lines(n) == ["todo is now buy milk"]
        assert n.text.startswith('<watch-event name="todo" uri="memo://notes">\n')
        outcomes = [(e["type"], e["outcome"]) for e in r.telemetry.find("watch.event")]
        assert ("ADDED", "dropped") in outcomes
        assert ("ADDED", "kept") in outcomes
        [listed] = r.manager.listing("s1")
        assert listed["events"] == 2
        assert listed["notices"] == 1


async def test_filter_is_denied_mutating_tools_and_may_use_read_only_ones(tmp_path: Path) -> None:
    path = tmp_path / "notes.json"
    async with rig([memo_spec(path)]) as r:
        with pytest.raises(
            FilterRejected, match=r"calls 'memo__memo_set' at line 1, column 1, which a watch filter"
        ):
            await r.start("w", "memo://notes", "memo__memo_set(key='x', value=1)")
        with pytest.raises(FilterRejected, match=r"syntax error at line 3, column 1"):
            await r.start("w", "memo://notes", "x = 1\ny = (\n")
        with pytest.raises(FilterRejected, match=r"must be Python source text \(a str\), got int"):
            await r.start("w", "memo://notes", 42)
        assert r.upstreams["memo"].subscriptions == frozenset()
        # memo_get is read-only: allowed. memo_set only on a real 'evil' event: refused at run time.
        source = (
            "if event['key'] == 'evil':\n"
            "    memo__memo_set(key='hacked', value=True)\n"
            "f\"{event['key']}: {memo__memo_get(key=event['key'])}\""
        )
        await r.start("w", "memo://notes", source)
        await r.memo_set("todo", "milk")
        assert lines(await r.notice()) == ["todo: milk"]
        await r.memo_set("evil", 1)
        n = await r.notice(2)
        assert "on_event called 'memo__memo_set', which a watch filter may not use" in n.text
        assert "hacked" not in json.loads(path.read_text())


async def test_changes_in_one_burst_become_one_notice(tmp_path: Path) -> None:
    """Three writes in a burst: one notice with every change, held back by the trailing debounce.

    Each write adds a key, so however the reads fall (one read seeing all three,
    or one per write) the diffs add up to the same three lines, in order.
    """
    limits = WatchLimits(debounce_quiet_secs=1.5, debounce_max_secs=10.0)
    async with rig([memo_spec(tmp_path / "notes.json")], limits=limits) as r:
        await r.start("all", "memo://notes")
        await r.memo_set("a", 1)
        await r.memo_set("b", 2)
        await r.memo_set("c", 3)
        n = await r.notice()
        assert lines(n) == ["ADDED a", "ADDED b", "ADDED c"]  # all of the burst: one notice
        [notice] = r.telemetry.find("watch.notice")
        assert (notice["lines"], notice["total"]) == (3, 3)
        assert notice["waited_s"] >= 1.5  # the trailing debounce held it back


async def test_watch_stop_unsubscribes_and_list_counts(tmp_path: Path) -> None:
    async with rig([memo_spec(tmp_path / "notes.json")]) as r:
        await r.start("a", "memo://notes")
        await r.start("b", "memo://notes")
        await r.memo_set("k", "v")
        await r.notice(pred=lambda n: n.watch == "a")
        await r.notice(pred=lambda n: n.watch == "b")
        listed = {w["name"]: w for w in r.manager.listing("s1")}
        assert listed["a"] == {
            "name": "a",
            "uri": "memo://notes",
            "shape": "state",
            "events": 1,
            "notices": 1,
        }
        # Each watch holds the pair in the component that decides (and has its route).
        assert "watched" in r.subscriptions.why("memo", "memo://notes")
        assert await r.manager.stop(session="s1", name="a", routes=r) is True
        # "b" still needs the subscription.
        assert r.upstreams["memo"].subscriptions == frozenset({"memo://notes"})
        assert await r.manager.stop(session="s1", name="b", routes=r) is True
        assert r.upstreams["memo"].subscriptions == frozenset()
        assert r.subscriptions.why("memo", "memo://notes") == frozenset()
        assert list(r.router.routes()) == []
        assert await r.manager.stop(session="s1", name="b", routes=r) is False
        assert r.manager.listing("s1") == []
        assert [e["watch"] for e in r.telemetry.find("watch.stopped")] == ["a", "b"]


async def test_a_release_kept_for_a_starting_watch_is_made_when_that_watch_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with rig([memo_spec(tmp_path / "notes.json")]) as r:
        up = r.upstreams["memo"]
        routes = SessionRoutes(r.router)
        routes.subscribe("a", "memo://notes")  # agent a's own subscription
        await up.subscribe("memo://notes")
        kept: list[object] = []
        started = r.subscriptions.watch_started

        def a_unsubscribes_meanwhile(key: tuple[str, str], server: str, uri: str) -> None:
            started(key, server, uri)  # the watch picked its server and holds the pair
            routes.unsubscribe("a", "memo://notes")
            kept.append(r.subscriptions.unsubscribed(server, uri))

        monkeypatch.setattr(r.subscriptions, "watch_started", a_unsubscribes_meanwhile)
        with pytest.raises(FilterRejected):
            await r.start("w", "memo://notes", "memo__memo_set(key='x', value=1)")
        assert kept == [[]]  # kept for the starting watch ...
        # ... which never started: nothing needs the subscription any more.
        assert r.subscriptions.why("memo", "memo://notes") == frozenset()
        assert up.subscriptions == frozenset()


async def test_a_watch_stopped_while_its_owner_exits_releases_what_nothing_else_needs(tmp_path: Path) -> None:
    async with rig([memo_spec(tmp_path / "notes.json")]) as r:
        up = r.upstreams["memo"]
        await r.start("w", "memo://notes")
        assert up.subscriptions == frozenset({"memo://notes"})

        class OwnerExitsMeanwhile:
            """``watch_stop`` reaches the reactor after its agent's exit, as the reactor then answers."""

            async def add(self, *, session: str, name: str, uri: str) -> None:
                raise AssertionError("only stopped here")

            async def remove(self, *, session: str, name: str) -> None:
                r.router.remove_route(f"watch:{session}:{name}")  # the exit dropped the session's routes
                r.manager.on_owner_exited(session)  # the stop already took the watch: nothing to retire
                # ... and the late removal, for an agent the reactor no longer knows, removes nothing.

        assert await r.manager.stop(session="s1", name="w", routes=OwnerExitsMeanwhile()) is True
        assert r.subscriptions.why("memo", "memo://notes") == frozenset()
        assert up.subscriptions == frozenset()  # released by the stop, not left with no reason


async def test_a_text_resource_on_the_notes_server(tmp_path: Path) -> None:
    async with rig([notes_spec("notes", tmp_path / "s.json")]) as r:
        assert (await r.start("alpha", "note://alpha"))["shape"] == "state"
        result = await r.upstreams["notes"].call_tool("set_note", {"name": "alpha", "text": "rewritten"})
        assert not result.is_error
        assert lines(await r.notice()) == ["CHANGED rewritten"]


async def test_restore_reports_changes_made_while_down(tmp_path: Path) -> None:
    memo, state = tmp_path / "notes.json", tmp_path / "watches.json"
    async with rig([memo_spec(memo)], state_path=state) as r:
        await r.start("todo", "memo://notes", "f\"{event['type']} {event['key']}\"")
        await r.memo_set("first", 1)
        await r.notice()
    [saved] = load(state).specs
    assert (saved.name, saved.owner, saved.baseline) == (
        "todo",
        "s1",
        {"shape": "state", "kind": "json", "value": {"first": 1}},
    )
    # Add specs that cannot start: a refused filter (dropped) and a server that is not there (kept).
    doc = json.loads(state.read_text())
    doc["watches"] += [
        {"name": "bad", "uri": "memo://notes", "on_event": "fmt", "owner": "s1", "baseline": None},
        {"name": "gone", "uri": "other://x", "on_event": None, "owner": "s2", "baseline": None},
    ]
    state.write_text(json.dumps(doc))
    # While agentd is down, the notes change (the memo server edits its file).
    memo.write_text(json.dumps({"first": 1, "late": 2}))

    async with rig([memo_spec(memo)], state_path=state) as r:
        # The restore notices come back to the caller (the reactor folds them into first turns).
        restore, gone = await r.manager.restore(r)
        assert (restore.kind, restore.session, gone.kind, gone.session) == ("restore", "s1", "restore", "s2")
        assert restore.text.startswith(
            "<watches-restored>\ntodo memo://notes (state)\nbad memo://notes: dropped"
        )
        assert "NameError" in restore.text
        assert "gone other://x: could not start again" in gone.text
        change = await r.notice(pred=lambda n: n.kind == "notice")
        assert lines(change) == ["ADDED late"]
        [event] = r.telemetry.find("watch.restored")
        assert (event["restored"], event["failed"], event["dropped"]) == (
            ["s1:todo"],
            ["s2:gone"],
            ["s1:bad"],
        )
        assert r.manager.listing("s2") == [
            {
                "name": "gone",
                "uri": "other://x",
                "shape": None,
                "events": 0,
                "notices": 0,
                "restore_failed": True,
                "error": r.manager.listing("s2")[0]["error"],
            }
        ]
    names = [s.name for s in load(state).specs]
    assert names == ["todo", "gone"]  # the refused filter is dropped from the file
