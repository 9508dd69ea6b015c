"""The WatchManager against a server that misbehaves (``tests/mcpservers/watch_server.py``).

Real stdio connections, real sandbox, the reactor's routing played by
:class:`tests.support.watch_rig.Rig`. The server flaps or refuses
subscriptions, jumps ``seq`` and blocks read-only tools on command. No sleeps.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from agentd.core.errors import FilterRejected
from agentd.observe.telemetry import Telemetry
from agentd.supervisor.hub import SupervisorHub
from agentd.watches.limits import WatchLimits
from tests.support.watch import Control, obj, watch_spec
from tests.support.watch_rig import FAST, lines, rig

pytestmark = pytest.mark.process  # its servers run as child processes (tests/support helpers)


async def test_a_flapping_subscription_fails_the_watch_once_with_each_event_logged_once(
    tmp_path: Path,
) -> None:
    spec = watch_spec("watchy", tmp_path / "ctl", "--listen", "flap")
    async with rig([spec], limits=FAST, resubscribe=((0.01, 0.02), 2)) as r:
        await r.start("doc", "state://doc")
        failed = await r.notice()
        [listed] = r.manager.listing("s1")
    assert lines(failed) == [
        "ERROR in watch 'doc': the subscription to 'state://doc' failed after 2 resubscribe attempts "
        "(the server closed the listen stream); no changes arrive until the server reconnects or you "
        "start the watch again; call watch_stop to drop it"
    ]
    assert listed["failed"] is True
    t = r.telemetry
    # Three streams (the first and two re-opens), each up once and lost once; one failure.
    assert len(t.find("watch.subscribed", watch="doc")) == 3
    assert len(t.find("watch.resubscribing", watch="doc")) == 3
    assert [e["attempts"] for e in t.find("watch.failed", watch="doc")] == [2]
    assert len(t.find("watch.notice", watch="doc")) == 1


async def test_watch_subscribed_once_when_the_upstream_reports_the_same_establishment(
    tmp_path: Path,
) -> None:
    async with rig([watch_spec("watchy", tmp_path / "ctl")], limits=FAST) as r:
        await r.start("doc", "state://doc")
        Control(tmp_path / "ctl").set("k", 1)
        assert lines(await r.notice()) == ["ADDED k"]
    # watch_start reports it, and the upstream's own "established" (seen after) is the same one.
    assert len(r.telemetry.find("subscription.established")) == 1
    assert len(r.telemetry.find("watch.subscribed", watch="doc")) == 1
    assert r.telemetry.find("watch.resubscribing") == []


#: The design's own example filter (it reads ``event["object"]``, which GAP and ERROR lack).
DESIGN_EXAMPLE = """
m = event["object"]["metadata"]
f'{event["type"].lower()} {m["namespace"]}/{m["name"]}' if event["type"] in ("ADDED", "DELETED") else None
"""


async def test_gap_and_in_band_error_reach_the_agent_through_a_filter_that_fails_on_them(
    tmp_path: Path,
) -> None:
    ctl = Control(tmp_path / "ctl")
    async with rig([watch_spec("watchy", tmp_path / "ctl")], limits=FAST) as r:
        await r.start("cm", "events://log", DESIGN_EXAMPLE)
        ctl.append({"type": "ADDED", "object": obj("o1")})
        assert lines(await r.notice()) == ["added default/o1"]
        # seq jumps from 1 to 7, then an in-band error.
        ctl.append(
            {"type": "ADDED", "object": obj("o7")},
            {"type": "ERROR", "message": "watch of configmaps expired"},
            skip=5,
        )
        notice = await r.notice(2)
    assert lines(notice) == [
        "GAP: missed 5 events (seq 2..6): the server's log has no events with these numbers",
        "ERROR in watch 'cm': on_event failed at line 2, column 5: KeyError: object ×2",
        "added default/o7",
        "ERROR: watch of configmaps expired",
    ]


async def test_a_caught_call_to_a_mutating_tool_fails_watch_start(tmp_path: Path) -> None:
    async with rig([watch_spec("watchy", tmp_path / "ctl")], limits=FAST) as r:
        with pytest.raises(
            FilterRejected,
            match=r"calls 'watchy__set_key', which a watch filter may not use \(the call was refused even "
            r"though the filter caught the error\)",
        ):
            await r.start(
                "sneaky",
                "state://doc",
                "try:\n    watchy__set_key(key='x', value=1)\nexcept Exception:\n    pass\n'ok'",
            )
        assert r.upstreams["watchy"].subscriptions == frozenset()
        assert r.manager.listing("s1") == []
        doc = await r.upstreams["watchy"].read_resource("state://doc")
    assert doc.contents[0].text == "{}"  # type: ignore[union-attr]  # the dry run never reached the server


async def test_the_filter_list_resources_is_the_self_tool_list_resources(tmp_path: Path) -> None:
    async with rig([watch_spec("watchy", tmp_path / "ctl")], limits=FAST) as r:
        await r.start("cat", "state://doc", "list_resources()")
        Control(tmp_path / "ctl").set("k", 1)
        [line] = lines(await r.notice())
        hub = SupervisorHub(events=r.send, upstreams=r.upstreams, telemetry=Telemetry(stream=io.StringIO()))
        from_tool = await hub.list_resources()
    from_filter = json.loads(line)
    assert from_filter == from_tool
    assert {e["uri"] for e in from_tool} == {"state://doc", "events://log"}
    assert set(from_tool[0]) == {
        "uri",
        "template",
        "name",
        "description",
        "example",
        "mime_type",
        "server",
        "subscribable",
    }


async def test_slow_filters_of_one_session_do_not_delay_another_sessions_watch(tmp_path: Path) -> None:
    """Four watches of s1 whose filters wait on a read-only tool; s2's watch is notified meanwhile."""
    ctl = Control(tmp_path / "ctl")
    patient = WatchLimits(debounce_quiet_secs=0.05, debounce_max_secs=0.5, filter_time_secs=60.0)
    async with rig([watch_spec("watchy", tmp_path / "ctl")], limits=patient) as r:
        for i in range(4):
            await r.start(f"slow{i}", "state://doc", "watchy__gate_wait(gate='g')", session="s1")
        await r.start("fast", "events://log", "'fast ' + event['type']", session="s2")
        await r.upstreams["watchy"].subscribe("gate://g?waiters=4")
        ctl.set("k", 1)
        await r.change("gate://g?waiters=4")  # all four filters now wait in the tool call
        ctl.append({"type": "ADDED", "object": obj("o1")})
        fast = await r.notice(pred=lambda n: n.session == "s2")
        assert lines(fast) == ["fast ADDED"]
        assert [n for n in r.notices if n.session == "s1"] == []  # still waiting
        ctl.open("g")
        for i in range(4):
            notice = await r.notice(pred=lambda n, i=i: n.watch == f"slow{i}")
            assert lines(notice) == ['{"result":"g open"}']  # the tool's structured result
