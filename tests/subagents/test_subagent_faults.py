"""Fault catalog, cases SA1-SA5: agents that start agents (rfcs/0370) under crashes and signals.

Real ``agentd`` runs with ``script:`` models: children SIGKILLed mid fan-out,
a parent SIGKILLed while its children run, the zygote SIGKILLed under a tree,
a daemon drained while a parent waits. Every wait is on telemetry or the
exit, bounded by the support module's hang guards; after each test the
catalog's check finds no process of the tree left (``tagged_env``).
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.support.agentd_proc import Agentd, drain, of, run_agentd
from tests.support.leftovers import tagged_env
from tests.support.subagents import ISOLATED, AgentType, call, children, start, tool_results, tree_config

pytestmark = [pytest.mark.process, pytest.mark.fault]

#: A child whose one model call would take ten minutes: it is running when the fault comes.
STUCK = AgentType([{"text": "never said", "latency_ms": 600_000}])


def says(name: str, latency_ms: float) -> AgentType:
    return AgentType([{"text": f"{name} says: {{instruction}}", "latency_ms": latency_ms}])


def stream(config: str, *extra: str) -> list[str]:
    return ["--config", config, *ISOLATED, "-o", "stream-json", "--output-truncate", "0", *extra, "go"]


def exits(a: Agentd) -> dict[str, dict[str, Any]]:
    """Each agent's ``subagent.exit``, by agent."""
    return {e["agent"]: e for e in a.find("subagent.exit")}


def final(e: dict[str, Any]) -> str:
    """How an agent ended as its parent reads it (``final`` when the supervisor's word differs)."""
    return str(e.get("final", e["status"]))


def exit_order(a: Agentd) -> list[str]:
    return [e["agent"] for e in a.find("subagent.exit")]


# ---------------------------------------------------------------------------- SA1


async def test_sa1_children_sigkilled_mid_fan_out_complete_crashed_and_never_open_the_breaker(
    tmp_path: Path,
) -> None:
    """Three of four children SIGKILLed (more crashes than --max-restarts 1 allows): the run goes on, exit 0."""
    root = [
        {"tool_calls": [
            start("stuck 1", type="stuck"), start("stuck 2", type="stuck"),
            start("stuck 3", type="stuck"), start("quick", type="quick"),
        ]},
        {"text": "waiting for four"},
        {"tool_calls": [call("agent_wait", ids=["a2", "a3", "a4", "a5"])]},
        {"text": "Merged: {last_tool_result}"},
    ]  # fmt: skip
    config = tree_config(tmp_path, root, {"stuck": STUCK, "quick": says("quick", 200)})
    args = ["--config", config, *ISOLATED, "--max-restarts", "1", "--restart-period", "1h", "go"]
    async with run_agentd(args, cwd=tmp_path, env=tagged_env(tmp_path)) as a:
        await a.wait_event("subagent.spawn", lambda e: e.get("role") == "child", count=4)
        stuck = {e["agent"] for e in children(a) if e["type"] == "stuck"}
        for agent in sorted(stuck):
            started = await a.wait_event("subagent.started", lambda e, agent=agent: e["agent"] == agent)
            os.kill(started["pid"], signal.SIGKILL)
        assert await a.wait_exit() == 0, a.tail()
    assert not a.find("governor.breaker_open")
    assert not a.find("subagent.restart"), "a started agent is never restarted"
    gone = exits(a)
    assert {final(gone[k]) for k in stuck} == {"crashed"}
    records = {r["id"]: r for r in json.loads(a.out.removeprefix("Merged: "))["agents"]}
    assert {k: r["status"] for k, r in records.items() if k in stuck} == dict.fromkeys(stuck, "crashed")
    (quick,) = [r for k, r in records.items() if k not in stuck]
    assert (quick["status"], quick["result"]) == ("completed", "quick says: quick")
    assert exit_order(a)[-1] == "a1"


# ---------------------------------------------------------------------------- SA2


async def test_sa2_a_parent_sigkilled_takes_its_running_children_and_the_daemon_goes_on(tmp_path: Path) -> None:
    """A warm loop root SIGKILLed with two children running: they are cancelled; the restarted root starts anew.

    Each root gives its children 8 s (``deadline_s``): the first pair is cancelled
    long before (its parent is killed as soon as they run); the restarted root's
    pair ends at its deadline, so the drain at the end needs nothing stuck to finish.
    """
    root = [
        {"tool_calls": [start("one", type="stuck", deadline_s=8), start("two", type="stuck", deadline_s=8)]},
        {"text": "waiting"},
        {"text": "woken: {input}"},
        {"text": "woken again: {input}"},
    ]
    config = tree_config(tmp_path, root, {"stuck": STUCK})
    args = ["--config", config, *ISOLATED, "--mode", "loop", "--session", "warm", "--interval", "1h", "work"]
    async with run_agentd(args, cwd=tmp_path, env=tagged_env(tmp_path)) as a:
        for agent in ("a2", "a3"):
            await a.wait_event("subagent.started", lambda e, agent=agent: e["agent"] == agent)
        (parent,) = of(a, "subagent.started", agent="a1")
        os.kill(parent["pid"], signal.SIGKILL)
        for agent in ("a1", "a2", "a3"):
            await a.wait_event("subagent.exit", lambda e, agent=agent: e["agent"] == agent)
        # The daemon goes on: the loop restarts its root, whose children run and reach their deadline.
        await a.wait_event("subagent.restart")
        second = await a.wait_event("subagent.spawn", lambda e: e.get("role") == "root", count=2)
        kids = await a.wait_event("subagent.spawn", lambda e: e.get("parent") == second["agent"], count=2)
        await a.wait_event("subagent.started", lambda e: e["agent"] == kids["agent"])
        await drain(a)
    gone = exits(a)
    assert gone["a1"]["status"] == "crashed"
    assert (final(gone["a2"]), final(gone["a3"])) == ("cancelled", "cancelled")
    assert of(a, "subagent.spawn", agent="a2")[0]["parent"] == "a1"
    # The second root's children ended at their deadline, each before its parent exited.
    later = [e["agent"] for e in children(a) if e["parent"] == second["agent"]]
    assert {final(gone[k]) for k in later} == {"deadline"}
    order = exit_order(a)
    assert max(order.index(k) for k in later) < order.index(second["agent"])
    assert not a.find("governor.breaker_open")


# ---------------------------------------------------------------------------- SA3


async def test_sa3_the_zygote_sigkilled_under_a_tree_every_parent_hears_and_the_daemon_goes_on(
    tmp_path: Path,
) -> None:
    """Two leads, each waiting on two workers, all forked by the zygote; the zygote is SIGKILLed.

    Each agent either finishes or completes ``crashed`` and its parent is told;
    nothing hangs; the replacement zygote (or a fresh interpreter) starts the
    next agent; the drain ends with 0.
    """
    root = [
        {"tool_calls": [start("lead 1", type="lead"), start("lead 2", type="lead")]},
        {"text": "waiting"},
        {"tool_calls": [call("agent_wait", ids=["a2", "a3"])]},
        {"tool_calls": [start("after the zygote", type="quick", wait=True)]},
        {"text": "after: {last_tool_result}"},
    ]
    lead = AgentType(
        [
            {"tool_calls": [start("work 1", type="worker", wait=True), start("work 2", type="worker", wait=True)]},
            {"text": "lead done"},
        ]
    )
    types = {"lead": lead, "worker": says("worker", 3000), "quick": says("quick", 0)}
    config = tree_config(tmp_path, root, types)
    args = stream(config, "--mode", "loop", "--session", "warm", "--interval", "1h")
    async with run_agentd(args, cwd=tmp_path, env=tagged_env(tmp_path)) as a:
        await a.wait_event("subagent.started", lambda e: e["agent"] in {"a4", "a5", "a6", "a7"}, count=4)
        (zygote,) = a.find("zygote.ready")
        assert all(e["zygote"] for e in a.find("subagent.started"))
        os.kill(zygote["pid"], signal.SIGKILL)
        await a.wait_event("turn.end", lambda e: e["agent"] == "a1", count=3)
        await drain(a)
    assert a.find("zygote.degraded")
    gone = exits(a)
    tree = {e["agent"]: e["parent"] for e in children(a)}
    workers = [k for k, p in tree.items() if p in ("a2", "a3")]
    assert len(workers) == 4
    # Every agent of the tree ended, finished or crashed, and each parent got its records.
    assert {final(gone[k]) for k in [*workers, "a2", "a3"]} <= {"completed", "crashed"}
    for lead_id in ("a2", "a3"):
        if final(gone[lead_id]) == "completed":
            answers = [json.loads(r["content"]) for r in tool_results(a, lead_id, "agent_start")]
            assert {r["status"] for r in answers} <= {"completed", "crashed"}
            assert len(answers) == 2
    (waited,) = tool_results(a, "a1", "agent_wait")
    assert {r["status"] for r in json.loads(waited["content"])["agents"]} <= {"completed", "crashed"}
    # The next agent started after the zygote died, and did its work.
    (after,) = [r for r in tool_results(a, "a1", "agent_start") if "after the zygote" not in r["content"]][-1:]
    assert json.loads(after["content"])["result"] == "quick says: after the zygote"
    assert not a.find("governor.breaker_open")


# ---------------------------------------------------------------------------- SA4


async def test_sa4_a_drain_while_a_parent_waits_stops_every_child_before_its_parent(tmp_path: Path) -> None:
    """A reactive daemon (a timer route) whose parent waits on two children: SIGTERM, exit 0, children first."""
    root = [
        {"tool_calls": [start("part A", type="worker"), start("part B", type="worker")]},
        {"text": "waiting"},
        {"text": "woken: {input}"},
    ]
    config = tree_config(tmp_path, root, {"worker": says("worker", 2000)})
    args = ["--config", config, *ISOLATED, "--mode", "reactive", "--interval", "3s", "--route", "@timer=spawn", "go"]
    async with run_agentd(args, cwd=tmp_path, env=tagged_env(tmp_path)) as a:
        parent = await a.wait_event("subagent.spawn", lambda e: e.get("role") == "spawn")
        for n in (1, 2):
            kid = await a.wait_event("subagent.spawn", lambda e: e.get("parent") == parent["agent"], count=n)
            await a.wait_event("subagent.started", lambda e, kid=kid: e["agent"] == kid["agent"])
        await a.wait_event("turn.end", lambda e: e["agent"] == parent["agent"])  # waiting, held
        await drain(a)
    gone = exits(a)
    order = exit_order(a)
    tree = {e["agent"]: e["parent"] for e in children(a)}
    for kid, its_parent in tree.items():
        assert final(gone[kid]) == "completed"
        assert order.index(kid) < order.index(its_parent), order
    assert {e["status"] for e in gone.values()} == {"completed"}
