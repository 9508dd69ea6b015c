"""Every ``[watches]`` setting takes effect, through the real ``agentd`` command.

Each test changes settings (in the environment, ``AGENTD_WATCHES__…``, or a
TOML ``[watches]`` table) away from their defaults and shows the effect on a
real watch of ``tests/mcpservers/watch_server.py``. ``resubscribe_attempts`` and
``filter_timeout`` are shown in ``tests/watches/test_watch_server_faults.py``
(a flapping server, a slow read-only tool). Every wait is on telemetry with a
timeout; nothing sleeps.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import trio

from tests.support.agentd_proc import PY, drain, run_agentd, script
from tests.support.watch import Control, loop_args, mcp_stdio, notice_lines, obj, server_args, watch_start

#: The default quiet time: a notice sooner than this shows the setting was applied.
DEFAULT_DEBOUNCE_S = 3.0


def echo_turns(first: list[dict[str, Any]], n: int = 10) -> list[dict[str, Any]]:
    return [{"tool_calls": first}, {"text": "started: {last_tool_result}"}] + [
        {"text": "got: {input}"} for _ in range(n)
    ]


THREE_CALLS = "[watchy__get_key(key=k) for k in ('a', 'b', 'c')]"


async def test_max_watches_tool_calls_events_per_update_and_notice_lines_from_a_toml_file(
    tmp_path: Path,
) -> None:
    ctl = Control(tmp_path / "ctl")
    model = script(
        tmp_path,
        echo_turns(
            [
                watch_start("calls", "state://doc", THREE_CALLS),
                watch_start("log", "events://log"),
                watch_start("third", "state://doc"),
            ]
        ),
    )
    cfg = tmp_path / "agentd.toml"
    cfg.write_text(
        'mode = "loop"\nsession = "warm"\ninterval = "1h"\nverbose = true\n'
        f"model = {json.dumps(model)}\n"
        "[servers.watchy]\n"
        f"command = {json.dumps(PY)}\n"
        f"args = {json.dumps(server_args(tmp_path / 'ctl'))}\n"
        "[watches]\n"
        "max_watches = 2\n"
        "filter_tool_calls = 2\n"
        "events_per_update = 5\n"
        "notice_lines = 4\n"
        'debounce = "0.1s"\n'
        'max_wait = "1s"\n'
    )
    async with run_agentd(["--config", str(cfg), "watch things"]) as a:
        await a.wait_event("turn.end")
        ctl.set("k", 1)
        calls = await a.wait_event("watch.event", lambda e: e["watch"] == "calls")
        ctl.append(*(({"type": "ADDED", "object": obj(f"o{i}")}) for i in range(8)))
        await a.wait_event("watch.notice", lambda e: e["watch"] == "log")
        await a.wait_event("turn.end", count=3)
        await drain(a)
    # max_watches = 2: the third watch is refused, naming the setting.
    [third] = a.find("tool.call", lambda e: e["tool"] == "watch_start" and e.get("error"))
    assert "already has 2 watches (calls, log), the limit (watches.max_watches = 2)" in third["error"]
    # filter_tool_calls = 2: the third call of one event is refused.
    assert calls["outcome"] == "error"
    assert "made more than 2 catalog calls for one event" in calls["error"]
    # events_per_update = 5: 8 new events -> the 4 newest and a GAP for the rest;
    # notice_lines = 4: the GAP, "+N more" and the 2 newest.
    by_watch = {b[0]: b for b in notice_lines(a.out)}
    assert [
        "GAP: skipped 4 events (seq 1..4): more than this watch processes per update",
        "+2 more",
        "ADDED default/o6",
        "ADDED default/o7",
    ] in by_watch.values()


async def test_debounce_and_max_wait_from_the_environment(tmp_path: Path) -> None:
    """A lone change waits ``debounce``; a stream of changes is cut at ``max_wait``."""
    ctl = Control(tmp_path / "ctl")
    model = script(tmp_path, echo_turns([watch_start("doc", "state://doc")]))
    env = {"AGENTD_WATCHES__DEBOUNCE": "1", "AGENTD_WATCHES__MAX_WAIT": "1.5"}
    async with run_agentd(loop_args(model, mcp_stdio("watchy", tmp_path / "ctl")), env=env) as a:
        await a.wait_event("turn.end")
        ctl.set("lone", 1)
        lone = await a.wait_event("watch.notice")
        # Now keep changing: each change read makes the next one, so the quiet time never comes.
        n = 0
        with trio.fail_after(10):  # the 15 s default max_wait would fail here
            while len(a.find("watch.notice")) < 2:
                ctl.set(f"k{n}", n)
                n += 1
                await a.wait_event("watch.event", count=1 + n)
        streamed = a.find("watch.notice")[1]
        await drain(a)
    assert 1.0 <= lone["waited_s"] < DEFAULT_DEBOUNCE_S
    assert 1.5 <= streamed["waited_s"] < DEFAULT_DEBOUNCE_S
    assert streamed["total"] >= 3  # it carried a stream of changes, not one
