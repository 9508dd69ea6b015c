"""Fault catalog, watches against a misbehaving server, through the real ``agentd`` command.

The server is ``tests/mcpservers/watch_server.py`` (the ``mcp`` SDK over stdio):
it ends every subscription right after acknowledging it, answers read-only
tools late or only when a gate opens, jumps ``seq`` and reports in-band
errors, all on command through a FIFO. The model is the script model; every
wait is on NDJSON telemetry with a timeout, nothing sleeps.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support.agentd_proc import PY, Agentd, drain, run_agentd, script
from tests.support.leftovers import tagged_env
from tests.support.watch import Control, loop_args, mcp_stdio, notice_lines, obj, server_args, watch_start

pytestmark = pytest.mark.fault

#: Slack on wall-time bounds for a shared, loaded 2-core machine.
SLACK_S = 2.0

#: Notices follow a change within a fraction of a second.
FAST_NOTICES = {"AGENTD_WATCHES__DEBOUNCE": "0.1", "AGENTD_WATCHES__MAX_WAIT": "1"}

#: Resubscribe (and reconnect) waits shortened; the attempts are real streams.
FAST_BACKOFF = {"AGENTD_RECONNECT_BACKOFF": "0.05,0.1,0.2"}


def ts(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(event["ts"]).timestamp()


def echo_turns(first: list[dict[str, Any]], n: int = 10) -> list[dict[str, Any]]:
    """The first turn's tool calls, then one turn that reports them, then ``n`` echo turns."""
    return [{"tool_calls": first}, {"text": "watching: {last_tool_result}"}] + [
        {"text": "got: {input}"} for _ in range(n)
    ]


# ------------------------------------------------------------------------ flapping


@pytest.mark.parametrize("attempts", [1, 3])
async def test_a_server_that_ends_every_subscription_at_once_fails_the_watch_after_the_attempts(
    tmp_path: Path, allow_files: Any, attempts: int
) -> None:
    """No polling forever: N re-subscriptions and N re-reads, then ``watch.failed``, the agent told once."""
    allow_files("ctl")
    model = script(tmp_path, echo_turns([watch_start("doc", "state://doc")]))
    env = tagged_env(
        tmp_path,
        **FAST_NOTICES,
        **FAST_BACKOFF,
        AGENTD_WATCHES__RESUBSCRIBE_ATTEMPTS=str(attempts),
    )
    server = mcp_stdio("watchy", tmp_path / "ctl", "--listen", "flap")
    async with run_agentd(loop_args(model, server), env=env) as a:
        failed = await a.wait_event("watch.failed")
        await a.wait_event("turn.end", count=2)  # the one turn that tells the agent
        await drain(a)
    assert (failed["watch"], failed["attempts"]) == ("doc", attempts)
    assert len(a.find("subscription.established")) == attempts + 1
    synthetic = a.find("resource.updated", lambda e: e["kind"] == "synthetic")
    assert len(synthetic) == attempts  # one re-read per re-subscription, then none
    assert len(a.find("watch.subscribed")) == attempts + 1
    assert len(a.find("watch.resubscribing")) == attempts + 1  # once per lost subscription
    assert len(a.find("watch.failed")) == 1
    assert [e["counted_as_failure"] for e in a.find("subscription.lost")] == [True] * (attempts + 1)
    told = (
        f"ERROR in watch 'doc': the subscription to 'state://doc' failed after {attempts} resubscribe "
        "attempts (the server closed the listen stream)"
    )
    assert a.out.count(told) == 1
    assert len(a.find("turn.end")) == 2


# ------------------------------------------------------------ slow read-only tools


@asynccontextmanager
async def watching(
    tmp_path: Path, start: dict[str, Any], **env: str
) -> AsyncIterator[tuple[Agentd, Control]]:
    """A loop agent whose first turn makes the ``start`` call on the watch server ``watchy``
    (its control FIFO ``tmp_path/ctl``), once that turn has ended."""
    ctl = Control(tmp_path / "ctl")
    model = script(tmp_path, echo_turns([start]))
    env = tagged_env(tmp_path, **FAST_NOTICES, **env)
    async with run_agentd(loop_args(model, mcp_stdio("watchy", tmp_path / "ctl")), env=env) as a:
        await a.wait_event("turn.end")
        yield a, ctl


SLOW_FILTER = (
    "if event['key'] == 'slow':\n"
    "    for i in range(4):\n"
    "        watchy__slow_get(key='slow', seconds=30)\n"
    "f\"{event['type']} {event['key']}\""
)


async def test_time_in_read_only_tool_calls_counts_toward_the_filter_limit(
    tmp_path: Path, allow_files: Any
) -> None:
    """Four calls to a 30 s tool: the event fails at the 0.5 s limit, and the next one is fine."""
    allow_files("ctl")
    async with watching(
        tmp_path, watch_start("slow", "state://doc", SLOW_FILTER), AGENTD_WATCHES__FILTER_TIMEOUT="0.5"
    ) as (a, ctl):
        sent = time.time()
        ctl.set("slow", 1)
        slow = await a.wait_event("watch.event")
        took = ts(slow) - sent
        ctl.set("fast", 1)
        fast = await a.wait_event("watch.event", count=2)
        await a.wait_event("watch.notice", count=2)
        await drain(a)
    assert slow["outcome"] == "error"
    assert slow["error"] == (
        "on_event stopped after the 0.5 s limit per event (time spent in tool calls counts); "
        "it ran out while waiting for 'watchy__slow_get'"
    )
    assert 0.45 <= took < 0.5 + SLACK_S
    assert fast["outcome"] == "kept"
    assert "ADDED fast" in a.out


def declared_config(tmp: Path, model: str, control: Path) -> Path:
    """A loop agent's config with a declared stage on ``events://log`` whose filter drops every event."""
    path = tmp / "agentd.toml"
    path.write_text(
        'mode = "loop"\n'
        'session = "warm"\n'
        'interval = "1h"\n'
        f"model = {json.dumps(model)}\n"
        "verbose = true\n"
        # A literal '?' is escaped in a subscription pattern (it is a glob character otherwise).
        'subscribe = ["events://log", "gate://g\\\\?waiters=4"]\n'
        "[servers.watchy]\n"
        f"command = {json.dumps(PY)}\n"
        f"args = {json.dumps(server_args(control))}\n"
        "[watches]\n"
        'debounce = "0.1s"\n'
        'max_wait = "1s"\n'
        'filter_timeout = "60s"\n'
        "[[routes]]\n"
        'name = "ops"\n'
        'match = "events://log"\n'
        'extract = "event-log"\n'
        'on_event = "None"\n'
    )
    return path


async def test_slow_filters_of_one_session_do_not_delay_another_sessions_watch(
    tmp_path: Path, allow_files: Any
) -> None:
    """The root's four watches wait in a read-only tool; a declared stage's filter runs meanwhile."""
    allow_files("ctl")
    ctl = Control(tmp_path / "ctl")
    gate = "watchy__gate_wait(gate='g')"
    model = script(tmp_path, echo_turns([watch_start(f"slow{i}", "state://doc", gate) for i in range(4)]))
    cfg = declared_config(tmp_path, model, tmp_path / "ctl")
    async with run_agentd(["--config", str(cfg), "watch things"], env=tagged_env(tmp_path)) as a:
        await a.wait_event("turn.end")
        ctl.set("k", 1)
        # Every one of the four filters is now waiting inside the tool call.
        await a.wait_event("resource.updated", lambda e: e["uri"] == "gate://g?waiters=4")
        ctl.append({"type": "ADDED", "object": obj("o1")})
        other = await a.wait_event("watch.event", lambda e: e.get("route") == "ops")
        waiting = a.find("watch.event", lambda e: str(e.get("watch", "")).startswith("slow"))
        ctl.open("g")
        await a.wait_event("watch.notice", lambda e: str(e["watch"]).startswith("slow"), count=4)
        await drain(a)
    assert other["outcome"] == "dropped"
    assert waiting == []  # the declared stage did not wait behind them


# --------------------------------------------------------------- GAP and ERROR


#: The design's own example filter: it reads ``event["object"]``, which GAP and ERROR lack.
DESIGN_EXAMPLE = """
m = event["object"]["metadata"]
f'{event["type"].lower()} {m["namespace"]}/{m["name"]}' if event["type"] in ("ADDED", "DELETED") else None
"""


async def test_gap_and_in_band_error_reach_the_agent_whatever_the_filter_does(
    tmp_path: Path, allow_files: Any
) -> None:
    allow_files("ctl")
    async with watching(tmp_path, watch_start("cm", "events://log", DESIGN_EXAMPLE)) as (a, ctl):
        ctl.append({"type": "ADDED", "object": obj("o1")})
        await a.wait_event("turn.end", count=2)
        # seq jumps from 1 to 7, then the source reports an error in-band.
        ctl.append(
            {"type": "ADDED", "object": obj("o7")},
            {"type": "ERROR", "message": "watch of configmaps expired"},
            skip=5,
        )
        await a.wait_event("turn.end", count=3)
        await drain(a)
    first, second = notice_lines(a.out)
    assert first == ["added default/o1"]
    assert second == [
        "GAP: missed 5 events (seq 2..6): the server's log has no events with these numbers",
        "ERROR in watch 'cm': on_event failed at line 2, column 5: KeyError: object ×2",
        "added default/o7",
        "ERROR: watch of configmaps expired",
    ]


# ------------------------------------------------------------------- dry run


async def test_a_filter_cannot_get_past_the_dry_run_by_catching_the_refusal(
    tmp_path: Path, allow_files: Any
) -> None:
    allow_files("ctl")
    sneaky = "try:\n    watchy__set_key(key='owned', value=1)\nexcept Exception:\n    pass\n'ok'"
    model = script(
        tmp_path,
        [{"tool_calls": [watch_start("sneaky", "state://doc", sneaky)]}, {"text": "{last_tool_result}"}],
    )
    server = mcp_stdio("watchy", tmp_path / "ctl")
    # A warm loop agent: a once root is not offered watch_start (nothing could wake it).
    async with run_agentd(loop_args(model, server), env=tagged_env(tmp_path)) as a:
        await a.wait_event("turn.end")
        a.signal(signal.SIGTERM)
        assert await a.wait_exit() == 0, a.tail()
    [call] = a.find("tool.call", lambda e: e["tool"] == "watch_start")
    assert (
        "on_event calls 'watchy__set_key', which a watch filter may not use (the call was refused even "
        "though the filter caught the error)" in call["error"]
    )
    assert a.find("watch.started") == []
    assert a.find("subscription.established") == []


# ------------------------------------------------------------- notice overflow


async def test_an_overflowing_read_shows_its_gap_and_the_newest_events_in_20_lines(
    tmp_path: Path, allow_files: Any
) -> None:
    allow_files("ctl")
    async with watching(tmp_path, watch_start("objs", "events://log")) as (a, ctl):
        ctl.append_many(150)  # one read: o0 .. o149
        notice = await a.wait_event("watch.notice")
        await a.wait_event("turn.end", count=2)
        await drain(a)
    [lines] = notice_lines(a.out)
    assert len(lines) == 20 == notice["lines"]
    assert lines[0] == "GAP: skipped 51 events (seq 1..51): more than this watch processes per update"
    assert lines[1] == "+81 more"
    assert lines[2:] == [f"ADDED default/o{i}" for i in range(132, 150)]
