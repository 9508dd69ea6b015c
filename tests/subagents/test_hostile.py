"""A model's hostile ``agent_start`` and agent-tool calls (rfcs/0370, issue 36 item 7), through the real command.

Each call is a clear tool error the model reads (the ``tool_result`` steps of
``--output stream-json``, or a child's answer echoed up the tree), and
nothing the caps forbid starts (``subagent.spawn`` is counted).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.agentd_proc import of, run_agentd
from tests.support.subagents import (
    AgentType,
    call,
    children,
    says,
    start,
    streamed,
    tool_results,
    tree_config,
)

pytestmark = pytest.mark.process

#: The longest instruction a child may get is 100,000 characters (rfcs/0370): twice that.
ENORMOUS = "x" * 200_000

QUICK = says("quick", 100)


#: Each hostile agent_start call (one a reply), and the words its tool error must hold.
HOSTILE_STARTS: list[tuple[dict[str, Any], list[str]]] = [
    (start("t", max_steps=50), ["max_steps = 50 is more than this agent has left ({LEFT})", "leave max_steps out"]),
    (start(ENORMOUS), ["instruction has 200000 characters, more than 100000"]),
    (start("t", type="nosuch"), ["type 'nosuch' is no defined agent type", "capped, quick"]),
    (start("t", tools=["nosuch__tool"]), ["'nosuch__tool' names none of the tools you may give", "agent_start"]),
    # A once root is not offered subscribe: it cannot give it away either.
    (start("t", tools=["subscribe"]), ["'subscribe' names none of the tools you may give"]),
    (start("t", tools=[f"t{k}" for k in range(65)]), ["tools must be a list of at most 64"]),
    (start("t", type="capped", max_steps=5), ["max_steps = 5 is more than the type 'capped' allows (2)"]),
    (start("t", max_steps=-1), ["max_steps must be a whole number > 0, got -1"]),
    (start("t", max_steps=0), ["max_steps must be a whole number > 0, got 0"]),
    (start("t", max_steps=1.5), ["max_steps must be a whole number > 0, got 1.5"]),
    (start("t", max_tokens="5"), ["max_tokens must be a whole number > 0, got '5'"]),
    (start("t", max_usd=True), ["max_usd must be a number > 0, got True"]),
    (start("t", deadline_s=-2.5), ["deadline_s must be a number > 0, got -2.5"]),
    (start("t", wait="yes"), ["wait must be true or false, got 'yes'"]),
    (start("t", depth=1), ["unknown argument(s) 'depth'", "depth, ids and scope are agentd's to set"]),
    (start("t", model="script:/etc/passwd"), ["model 'script:/etc/passwd' is not one this agentd names"]),
    ({"name": "agent_start", "arguments": {"type": "quick"}}, ["instruction must be a non-empty string"]),
]  # fmt: skip

#: Names no agent of the run may name: made up, a path, the caller itself.
HOSTILE_LOOKUPS: list[tuple[dict[str, Any], list[str]]] = [
    (call("read_resource", uri="agent://a999"), ["'a999' is not an agent you started", "none yet"]),
    (call("agent_wait", ids=["a999"]), ["agent_wait: 'a999' is not an agent you started"]),
    (call("agent_cancel", id="../a1"), ["agent_cancel: '../a1' is not an agent you started"]),
    (call("read_resource", uri="agent://../a1"), ["is no agent URI"]),
    (call("agent_cancel", id="a1"), ["'a1' is not an agent you started"]),
    (call("agent_wait", ids="a1", timeout_s=-1), ["timeout_s must be a number of seconds > 0"]),
    (call("agent_wait", ids=[]), ["agent_wait takes ids"]),
    (call("agent_cancel", id="a2", why="because"), ["agent_cancel takes one argument, id"]),
]  # fmt: skip


async def test_hostile_agent_start_arguments_are_each_a_tool_error_and_nothing_starts(tmp_path: Path) -> None:
    """One call a reply: a reply's tool results are printed as each call ends, not in the reply's order."""
    hostile = HOSTILE_STARTS + HOSTILE_LOOKUPS
    root = [{"tool_calls": [made]} for made, _ in hostile] + [{"text": "done"}]
    types = {"quick": QUICK, "capped": AgentType(QUICK.turns, keys={"max_steps": 2})}
    config = tree_config(tmp_path, root, types)
    # A tree budget: the root's first call (max_steps = 50) leaves it BUDGET - 1 steps to give.
    budget = len(root) + 1
    async with run_agentd(streamed(config, "--budget-steps", str(budget)), cwd=tmp_path) as a:
        assert await a.wait_exit() == 0, a.tail()
    results = tool_results(a, "a1")
    assert len(results) == len(hostile)
    for result, (made, words) in zip(results, hostile, strict=True):
        assert result["name"] == made["name"]
        assert result["is_error"], (made, result)
        for word in words:
            word = word.replace("{LEFT}", str(budget - 1))
            assert word in result["content"], (made["arguments"], result["content"][:600])
    assert children(a) == [], "nothing may start"
    assert not a.find("limit.reached")


async def test_100_starts_in_one_reply_start_max_children_and_refuse_the_rest(tmp_path: Path) -> None:
    """Only the 8 that start take ids (a2-a9); each runs for 10 s, so none ends while the 100 calls are answered."""
    root = [
        {"tool_calls": [start(f"part {k}", type="slow", notify=False) for k in range(100)]},
        {"tool_calls": [call("agent_wait", ids=[f"a{k}" for k in range(2, 10)])]},
        {"text": "done"},
    ]
    config = tree_config(tmp_path, root, {"slow": AgentType([{"text": "slow done", "latency_ms": 10_000}])})
    async with run_agentd(streamed(config, "--max-children", "8"), cwd=tmp_path) as a:
        assert await a.wait_exit() == 0, a.tail()
    results = tool_results(a, "a1", "agent_start")
    assert len(results) == 100
    started = [r for r in results if not r["is_error"]]
    refused = [r for r in results if r["is_error"]]
    assert len(started) == 8
    assert sorted(e["agent"] for e in children(a)) == sorted(f"a{k}" for k in range(2, 10))
    for r in refused:
        assert "this agent has 8 agents running, the limit (max_children = 8)" in r["content"]
        assert "--max-children / AGENTD_MAX_CHILDREN" in r["content"]
    # Told once per hit, not 92 times.
    (reached,) = a.find("limit.reached")
    assert (reached["limit"], reached["value"], reached["agent"]) == ("max_children", 8, "a1")
    (waited,) = tool_results(a, "a1", "agent_wait")
    assert [r["status"] for r in json.loads(waited["content"])["agents"]] == ["completed"] * 8


async def test_at_max_depth_a_child_is_not_offered_agent_start(tmp_path: Path) -> None:
    root = [
        {"tool_calls": [start("go deeper", type="starter", wait=True)]},
        {"text": "root got: {last_tool_result}"},
    ]
    starter = AgentType(
        [{"tool_calls": [start("deeper still", type="starter")]}, {"text": "child got: {last_tool_result}"}]
    )
    config = tree_config(tmp_path, root, {"starter": starter})
    async with run_agentd(streamed(config, "--max-depth", "1"), cwd=tmp_path) as a:
        assert await a.wait_exit() == 0, a.tail()
    assert [e["agent"] for e in children(a)] == ["a2"]
    # The child's own loop refused the call (it never reached agentd): its answer, in its record, says so.
    assert tool_results(a, "a2") == []
    record = json.loads(json.loads(a.out.splitlines()[-1])["result"].removeprefix("root got: "))
    said = record["result"].removeprefix("child got: ")
    assert said.startswith("unknown tool 'agent_start'; the tools you can call are: "), said
    offered = said.split(": ", 1)[1].split(", ")
    assert "read_resource" in offered
    assert not {"agent_start", "agent_wait", "agent_cancel", "agent_list"} & set(offered)
    assert of(a, "tool.refused", agent="a2")


async def test_limits_above_the_parents_and_a_strangers_ids_are_refused(tmp_path: Path) -> None:
    """A lead limited to 3 steps asks 50 for its child; a sibling names the lead's child; the root its grandchild."""
    root = [
        {"tool_calls": [start("lead the work", type="lead", wait=True)]},
        {"tool_calls": [start("look around", type="snoop", wait=True)]},
        {"tool_calls": [call("read_resource", uri="agent://a3")]},
        {"text": "done"},
    ]
    lead = AgentType(
        [
            {"tool_calls": [start("sub", type="quick", max_steps=50), start("sub", type="quick", wait=True)]},
            {"text": "lead done"},
        ],
        keys={"max_steps": 3},
    )
    snoop = AgentType(
        [
            {
                "tool_calls": [
                    call("read_resource", uri="agent://a3"),
                    call("agent_wait", ids=["a3"]),
                    call("agent_cancel", id="a3"),
                    call("read_resource", uri="agent://a2"),
                    call("agent_list"),
                ]
            },
            {"text": "snooped"},
        ]
    )
    config = tree_config(tmp_path, root, {"lead": lead, "snoop": snoop, "quick": QUICK})
    async with run_agentd(streamed(config), cwd=tmp_path) as a:
        assert await a.wait_exit() == 0, a.tail()
    spawned = {e["agent"]: (e["parent"], e["depth"], e["type"]) for e in children(a)}
    assert spawned == {"a2": ("a1", 1, "lead"), "a3": ("a2", 2, "quick"), "a4": ("a1", 1, "snoop")}
    # The lead had 3 steps and spent 1: its child may have at most 2.
    too_much, given = tool_results(a, "a2")
    assert too_much["is_error"]
    assert "max_steps = 50 is more than this agent has left (2)" in too_much["content"]
    assert json.loads(given["content"])["status"] == "completed"
    # A sibling's child, and the sibling itself, are not the snoop's to name.
    *named, listed = tool_results(a, "a4")
    for result, who in zip(named, ["a3", "a3", "a3", "a2"], strict=True):
        assert result["is_error"]
        assert (
            f"'{who}' is not an agent you started: you may name only your own agents (none yet"
            in result["content"]
        )
    assert json.loads(listed["content"]) == []
    # Nor is a grandchild its grandparent's: only the parent names a child.
    (grandchild,) = tool_results(a, "a1", "read_resource")
    assert grandchild["is_error"]
    assert (
        "'a3' is not an agent you started: you may name only your own agents (a2, a4;"
        in grandchild["content"]
    )
    assert not of(a, "subagent.cancel")
