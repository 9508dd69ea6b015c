"""Agents that start agents (rfcs/0370) through the real ``agentd`` command: fan-out and the agent tools.

Every agent is a ``script:`` model; each defined type has its own script, so
a test reads as the tree it runs. Waits are on telemetry (or the exit),
bounded by the support module's hang guards; nothing sleeps.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.agentd_proc import Agentd, drain, of, run_agentd
from tests.support.subagents import (
    ISOLATED,
    STUCK,
    call,
    children,
    says,
    start,
    steps,
    streamed,
    tool_results,
    tree_config,
)

pytestmark = pytest.mark.process

#: A child's one model call: long enough that three started together are all running
#: before the first of them ends, even when a loaded machine spreads their starts (a
#: zygote late to start: each a fresh interpreter). It is a wait, not CPU.
CHILD_LATENCY_MS = 4000


def _steps_of(a: Agentd, agent: str) -> list[dict[str, Any]]:
    """``agent``'s tool calls and results, as stream-json printed them."""
    return [s for s in steps(a) if s.get("agent") == agent and s.get("type") in ("tool_call", "tool_result")]


async def test_a_once_root_fans_out_to_three_agents_in_parallel_and_merges_their_results(
    tmp_path: Path,
) -> None:
    root = [
        {"text": "Splitting the work.", "tool_calls": [
            start("part A", type="alpha"), start("part B", type="beta"), start("part C", type="alpha"),
        ]},
        {"text": "Three agents are working; I merge their answers when they end."},
        {"tool_calls": [call("agent_wait", ids=["a2", "a3", "a4"])]},
        {"text": "Merged: {last_tool_result}\nWoken by: {input}"},
    ]  # fmt: skip
    config = tree_config(
        tmp_path, root, {"alpha": says("alpha", CHILD_LATENCY_MS), "beta": says("beta", CHILD_LATENCY_MS)}
    )
    async with run_agentd(["--config", config, *ISOLATED, "split it"], cwd=tmp_path) as a:
        assert await a.wait_exit() == 0, a.tail()
    spawned = children(a)
    assert [(e["parent"], e["depth"]) for e in spawned] == [("a1", 1)] * 3
    assert sorted(e["type"] for e in spawned) == ["alpha", "alpha", "beta"]
    ids = {e["agent"] for e in spawned}
    assert ids == {"a2", "a3", "a4"}
    # In parallel: every child was running before any of them ended its turn.
    names = [(e["event"], e.get("agent")) for e in a.events]
    started = [names.index(("subagent.started", i)) for i in ids]
    ended = [names.index(("turn.end", i)) for i in ids]
    assert max(started) < min(ended), a.tail(60)
    # The root's first turn ended before its children did: it was woken with their results.
    assert names.index(("turn.end", "a1")) < min(ended)
    assert of(a, "session.deliver", agent="a1"), "the root is woken by a completion"
    out = a.out
    assert out.startswith("Merged: ")
    merged, woken = out.split("\nWoken by: ")
    records = {r["id"]: r for r in json.loads(merged.removeprefix("Merged: "))["agents"]}
    assert {r["status"] for r in records.values()} == {"completed"}
    assert sorted(r["result"] for r in records.values()) == [
        "alpha says: part A", "alpha says: part C", "beta says: part B",
    ]  # fmt: skip
    assert "<agent-result id=" in woken
    assert "ended completed" in woken
    assert {e["agent"]: e["status"] for e in a.find("subagent.exit")} == dict.fromkeys(
        ["a1", *ids], "completed"
    )


async def test_the_agent_tools_start_wait_list_read_and_cancel(tmp_path: Path) -> None:
    """wait=true answers the record in the same turn; agent_wait, agent_list, read_resource, agent_cancel."""
    root = [
        # Two started with wait in one reply: they run together, each answers its record.
        {"tool_calls": [start("one", type="quick", wait=True), start("two", type="quick", wait=True)]},
        {"tool_calls": [start("three", type="quick", notify=False), start("four", type="quick", notify=False)]},
        {"tool_calls": [call("agent_wait", ids=["a4", "a5"])]},
        {"tool_calls": [call("agent_list")]},
        {"tool_calls": [call("read_resource", uri="agent://a2")]},
        {"tool_calls": [start("never ends", type="stuck", notify=False)]},
        {"tool_calls": [call("agent_wait", ids="a6", timeout_s=1)]},
        {"tool_calls": [call("agent_cancel", id="a6")]},
        {"text": "done"},
    ]  # fmt: skip
    types = {"quick": says("quick", 200), "stuck": STUCK}
    config = tree_config(tmp_path, root, types)
    async with run_agentd(streamed(config), cwd=tmp_path) as a:
        assert await a.wait_exit() == 0, a.tail()
    results = tool_results(a, "a1")
    assert [r["name"] for r in results] == [
        "agent_start", "agent_start", "agent_start", "agent_start",
        "agent_wait", "agent_list", "read_resource", "agent_start", "agent_wait", "agent_cancel",
    ]  # fmt: skip
    assert not any(r["is_error"] for r in results), results
    body = [json.loads(r["content"]) for r in results]
    # wait=true: the child's final record, its result included, in the same turn.
    waited = sorted((b["result"], b["status"], b["id"]) for b in body[:2])
    assert [w[:2] for w in waited] == [("quick says: one", "completed"), ("quick says: two", "completed")]
    assert {w[2] for w in waited} == {"a2", "a3"}
    # Both wait=true calls were under way at once: each one's call came before either's result.
    lines = [(s["type"], s.get("name")) for s in _steps_of(a, "a1")]
    assert lines[:4] == [("tool_call", "agent_start")] * 2 + [("tool_result", "agent_start")] * 2
    # notify=false: at once, running.
    assert [b["status"] for b in body[2:4]] == ["running", "running"]
    # agent_wait on several ids: both records, final (which of the two got which id is the reactor's order).
    assert [r["id"] for r in body[4]["agents"]] == ["a4", "a5"]
    assert sorted((r["status"], r["result"]) for r in body[4]["agents"]) == [
        ("completed", "quick says: four"), ("completed", "quick says: three"),
    ]  # fmt: skip
    assert "still_running" not in body[4]
    # agent_list: every child so far, oldest first.
    assert [r["id"] for r in body[5]] == ["a2", "a3", "a4", "a5"]
    assert all(r["parent"] == "a1" and r["depth"] == 1 for r in body[5])
    # read_resource of agent://a2: its record.
    assert body[6]["id"] == "a2"
    assert body[6]["status"] == "completed"
    assert body[6]["usage"]["steps"] == 1
    # agent_cancel of a running child: cancelled, and its process is gone.
    assert body[7]["id"] == "a6"
    assert body[7]["status"] == "running"
    # A wait that times out answers where the child stands.
    assert [r["status"] for r in body[8]["agents"]] == ["running"]
    assert body[8]["still_running"] == ["a6"]
    (cancelled,) = body[9]["agents"]
    assert cancelled["id"] == "a6"
    assert cancelled["status"] == "cancelled"
    (exit6,) = of(a, "subagent.exit", agent="a6")
    assert exit6["status"] == "cancelled"
    assert a.events.index(exit6) < a.events.index(of(a, "turn.end", agent="a1")[-1])
    assert of(a, "subagent.cancel", agent="a1", child="a6", reason="agent_cancel")
    assert json.loads(a.out.splitlines()[-1])["result"] == "done"


async def test_a_warm_loop_root_is_woken_by_its_childs_completion_through_the_self_route(
    tmp_path: Path,
) -> None:
    root = [
        {"tool_calls": [start("look into it", type="quick")]},
        {"text": "started a helper; waiting"},
        {"text": "woken: {input}"},
    ]
    config = tree_config(tmp_path, root, {"quick": says("quick", 200)})
    args = ["--config", config, *ISOLATED, "--mode", "loop", "--session", "warm", "--interval", "1h", "work"]
    async with run_agentd(args, cwd=tmp_path) as a:
        updated = await a.wait_event("resource.updated", lambda e: e["uri"] == "agent://a2")
        assert updated["server"] == "agentd"
        assert updated["kind"] == "updated"
        assert updated["route"] == "self:root:agent://a2"
        deliver = await a.wait_event("session.deliver", lambda e: e.get("agent") == "a1")
        assert deliver["route"] == "self:root:agent://a2"
        await a.wait_event("turn.end", lambda e: e["agent"] == "a1", count=2)
        await drain(a)
    # The warm root answered twice: its first shift, then the turn its child's completion started.
    woken = a.out.split("woken: ", 1)[1]
    assert "agent://a2: agent a2 (quick) ended completed" in woken
    assert "<agent-result id='a2'>\nquick says: look into it\n</agent-result>" in woken
    assert [e["agent"] for e in a.find("subagent.exit")] == ["a2", "a1"]
