"""Fault catalog, cases SA1-SA4: agents that start agents (rfcs/0370) under crashes and signals.

Real ``agentd`` runs with ``script:`` models: children SIGKILLed mid fan-out,
a parent SIGKILLed while its children run, the zygote SIGKILLed under a tree,
a daemon drained while a parent waits. Every wait is on telemetry or the
exit, bounded by the support module's hang guards; after each test the
catalog's check finds no process of the tree left (``tagged_env``). Case
SA5 (a restart under a waiting session) is ``test_restart.py``.
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
from tests.support.subagents import (
    ISOLATED,
    STUCK,
    AgentType,
    call,
    children,
    says,
    start,
    streamed,
    tool_results,
    tree_config,
)

pytestmark = [pytest.mark.process, pytest.mark.fault]


def exits(a: Agentd) -> dict[str, dict[str, Any]]:
    """Each agent's ``subagent.exit``, by agent."""
    return {e["agent"]: e for e in a.find("subagent.exit")}


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
    assert {gone[k]["status"] for k in stuck} == {"crashed"}
    records = {r["id"]: r for r in json.loads(a.out.removeprefix("Merged: "))["agents"]}
    assert {k: r["status"] for k, r in records.items() if k in stuck} == dict.fromkeys(stuck, "crashed")
    (quick,) = [r for k, r in records.items() if k not in stuck]
    assert (quick["status"], quick["result"]) == ("completed", "quick says: quick")


# ---------------------------------------------------------------------------- SA2


async def test_sa2_a_parent_sigkilled_takes_its_running_children_and_the_daemon_goes_on(
    tmp_path: Path,
) -> None:
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
        await a.wait_event("turn.end", lambda e: e["agent"] == second["agent"])  # held for them
        await drain(a)
    gone = exits(a)
    assert gone["a1"]["status"] == "crashed"
    assert (gone["a2"]["status"], gone["a3"]["status"]) == ("cancelled", "cancelled")
    assert of(a, "subagent.spawn", agent="a2")[0]["parent"] == "a1"
    # The second root's children ended at their deadline, each before its parent exited.
    later = [e["agent"] for e in children(a) if e["parent"] == second["agent"]]
    assert {gone[k]["status"] for k in later} == {"deadline"}
    order = exit_order(a)
    assert max(order.index(k) for k in later) < order.index(second["agent"])
    assert not a.find("governor.breaker_open")


# ---------------------------------------------------------------------------- SA3


async def test_sa3_the_zygote_sigkilled_under_a_tree_every_parent_hears_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    """A once root, two leads each waiting on two workers, all six forked by the zygote, which is SIGKILLed.

    One lead waits held (its workers ``notify`` it), the other in two
    ``agent_start`` calls with ``wait``. The root (pre-forked, not the zygote's)
    lives: both leads complete ``crashed`` (neither may read ``completed`` for
    work it lost), each worker ``crashed`` or ``cancelled`` (its lead died
    first); nothing hangs; the next ``agent_start`` runs from a replacement
    zygote or a fresh interpreter, and the run ends with the root's answer.
    """
    root = [
        {"tool_calls": [start("idle lead", type="idler"), start("busy lead", type="busy")]},
        {"text": "waiting"},
        {"tool_calls": [call("agent_wait", ids=["a2", "a3"])]},
        {"tool_calls": [start("after the zygote", type="quick", wait=True)]},
        {"text": "after: {last_tool_result}"},
    ]
    idler = AgentType(
        [{"tool_calls": [start("A", type="worker"), start("B", type="worker")]}, {"text": "waiting"}]
    )
    busy = AgentType(
        [
            {"tool_calls": [start("C", type="worker", wait=True), start("D", type="worker", wait=True)]},
            {"text": "done"},
        ]
    )
    # The workers would take 10 s: the zygote dies (and they with it) long before.
    types = {"idler": idler, "busy": busy, "worker": says("worker", 10_000), "quick": says("quick")}
    config = tree_config(tmp_path, root, types)
    async with run_agentd(streamed(config), cwd=tmp_path, env=tagged_env(tmp_path)) as a:
        await a.wait_event("subagent.started", lambda e: e["agent"] in {"a4", "a5", "a6", "a7"}, count=4)
        idler_id = next(e["agent"] for e in children(a) if e["type"] == "idler")
        await a.wait_event("turn.end", lambda e: e["agent"] == idler_id)  # held for its workers
        (zygote,) = a.find("zygote.ready")
        forked = {e["agent"] for e in a.find("subagent.started") if e["zygote"]}
        assert forked == {"a2", "a3", "a4", "a5", "a6", "a7"}
        os.kill(zygote["pid"], signal.SIGKILL)
        assert await a.wait_exit() == 0, a.tail()
    assert a.find("zygote.degraded")
    gone = exits(a)
    tree = {e["agent"]: e["parent"] for e in children(a)}
    workers = sorted(k for k, p in tree.items() if p in ("a2", "a3"))
    assert workers == ["a4", "a5", "a6", "a7"]
    assert (gone["a2"]["status"], gone["a3"]["status"]) == ("crashed", "crashed")
    assert {gone[k]["status"] for k in workers} <= {"crashed", "cancelled"}
    # The root was told: both leads' records say crashed.
    (waited,) = tool_results(a, "a1", "agent_wait")
    leads = json.loads(waited["content"])["agents"]
    assert [(r["id"], r["status"]) for r in leads] == [("a2", "crashed"), ("a3", "crashed")]
    # The next agent started after the zygote died, and did its work.
    answer = json.loads(a.out.splitlines()[-1])["result"]
    after = json.loads(answer.removeprefix("after: "))
    assert (after["status"], after["result"]) == ("completed", "quick says: after the zygote")


# ---------------------------------------------------------------------------- SA4


async def test_sa4_a_drain_while_parents_wait_stops_every_child_before_its_parent(tmp_path: Path) -> None:
    """SIGTERM to a reactive daemon (a timer route) while two leads wait on their workers: exit 0, children first.

    One lead ended its turn and is held for its workers (``notify``); the other
    is in its turn, in two ``agent_start`` calls with ``wait``: its turn ends
    during the drain. The workers finish their turns; every agent exits after
    each agent it started.
    """
    root = [
        {"tool_calls": [start("idle lead", type="idler"), start("busy lead", type="busy")]},
        {"text": "waiting"},
    ]
    idler = AgentType(
        [{"tool_calls": [start("A", type="worker"), start("B", type="worker")]}, {"text": "waiting"}]
    )
    busy = AgentType(
        [
            {"tool_calls": [start("C", type="worker", wait=True), start("D", type="worker", wait=True)]},
            {"text": "done"},
        ]
    )
    config = tree_config(tmp_path, root, {"idler": idler, "busy": busy, "worker": says("worker", 2000)})
    args = [
        "--config", config, *ISOLATED, "--mode", "reactive", "--interval", "2s", "--route", "@timer=spawn", "go",
    ]  # fmt: skip
    async with run_agentd(args, cwd=tmp_path, env=tagged_env(tmp_path)) as a:
        await a.wait_event("subagent.spawn", lambda e: e.get("depth") == 2, count=4)
        workers = [e["agent"] for e in a.find("subagent.spawn", lambda e: e.get("depth") == 2)]
        for worker in workers:
            await a.wait_event("subagent.started", lambda e, worker=worker: e["agent"] == worker)
        (idler_id,) = [e["agent"] for e in children(a) if e["type"] == "idler"]
        await a.wait_event("turn.end", lambda e: e["agent"] == idler_id)  # held for its workers
        await drain(a)
    gone = exits(a)
    order = exit_order(a)
    tree = {e["agent"]: e["parent"] for e in children(a)}
    assert len(tree) == 6
    for kid, its_parent in tree.items():
        assert gone[kid]["status"] == "completed", gone[kid]
        assert order.index(kid) < order.index(its_parent), order
    assert {e["status"] for e in gone.values()} == {"completed"}
    assert [e["status"] for e in a.find("turn.end") if e["agent"] in workers] == ["completed"] * 4


# ---------------------------------------------------------------------------- SA6


async def test_sa6_a_once_root_that_ends_while_its_agents_and_their_zygote_start_leaves_nothing(
    tmp_path: Path,
) -> None:
    """The root ends at once, its notify-less agents still starting and the lazily started zygote with them.

    ``--spawn-timeout 0.05``: the agents do not wait for the zygote (they start as fresh
    interpreters, or fail to), so the run ends while the zygote is still starting. Before
    the fix the zygote's shielded exit watcher held the tree open after ``supervisor.exit``.
    """
    root = [
        {"tool_calls": [start(f"part {n}", type="stuck", notify=False) for n in range(3)]},
        {"text": "done without them"},
    ]
    config = tree_config(tmp_path, root, {"stuck": STUCK})
    args = ["--config", config, *ISOLATED, "--spawn-timeout", "0.05", "go"]
    async with run_agentd(args, cwd=tmp_path, env=tagged_env(tmp_path)) as a:
        assert await a.wait_exit() == 0, a.tail()
    assert a.out.strip() == "done without them"
    assert len(a.find("subagent.exit")) == len(a.find("subagent.spawn")) == 4
