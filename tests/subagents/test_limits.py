"""A started agent's limits (rfcs/0370) through the real ``agentd`` command: its own, its parent's, its deadline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.agentd_proc import of, run_agentd
from tests.support.subagents import STUCK, AgentType, call, says, start, streamed, tool_results, tree_config

pytestmark = pytest.mark.process

#: A model that calls a tool for ever (the arguments differ, so it never stalls).
GRINDER = AgentType([{"tool_calls": [call("list_resources", step=k)]} for k in range(4)], then="repeat")


def record_in(answer: str, prefix: str) -> dict[str, Any]:
    """The agent record a scripted answer ``PREFIX{last_tool_result}`` carries."""
    assert answer.startswith(prefix), answer
    found: dict[str, Any] = json.loads(answer.removeprefix(prefix))
    return found


def final_answer(out: str) -> str:
    return str(json.loads(out.splitlines()[-1])["result"])


async def test_a_childs_own_max_steps_stops_it_exhausted_steps(tmp_path: Path) -> None:
    root = [
        {"tool_calls": [start("grind", type="grinder", wait=True)]},
        {"text": "root got: {last_tool_result}"},
    ]
    config = tree_config(tmp_path, root, {"grinder": AgentType(GRINDER.turns, "repeat", {"max_steps": 2})})
    async with run_agentd(streamed(config), cwd=tmp_path) as a:
        assert await a.wait_exit() == 0, a.tail()
    record = record_in(final_answer(a.out), "root got: ")
    assert (record["id"], record["status"], record["usage"]["steps"]) == ("a2", "exhausted_steps", 2)
    (limit,) = of(a, "subagent.limit", agent="a2")
    assert (limit["limit"], limit["parent"]) == ("steps", "a1")
    assert [e["status"] for e in of(a, "turn.end", agent="a2")] == ["exhausted_steps"]


async def test_what_a_child_spends_counts_against_its_parents_limit(tmp_path: Path) -> None:
    """A lead of 4 steps starts a grinder with no limit of its own: the lead's 4 bound both of them."""
    root = [
        {"tool_calls": [start("lead it", type="lead", wait=True)]},
        {"text": "root got: {last_tool_result}"},
    ]
    lead = AgentType(
        [
            {"tool_calls": [start("grind", type="grinder", wait=True)]},
            {"tool_calls": [call("agent_list")]},
            {"text": "never reached"},
        ],
        keys={"max_steps": 4},
    )
    config = tree_config(tmp_path, root, {"lead": lead, "grinder": GRINDER})
    async with run_agentd(streamed(config), cwd=tmp_path) as a:
        assert await a.wait_exit() == 0, a.tail()
    # The lead's first call left it 3 steps: the grinder's third call spent the lead's last.
    (started,) = tool_results(a, "a2", "agent_start")
    grinder = json.loads(started["content"])
    assert (grinder["id"], grinder["status"], grinder["usage"]["steps"]) == ("a3", "exhausted_steps", 3)
    assert [(e["limit"], e["parent"]) for e in of(a, "subagent.limit", agent="a3")] == [("steps", "a2")]
    # Then the lead's own next call finds its limit spent: it stops, its tree's spend in its record.
    lead_record = record_in(final_answer(a.out), "root got: ")
    assert (lead_record["id"], lead_record["status"]) == ("a2", "exhausted_steps")
    assert lead_record["usage"]["steps"] == 5  # its own 2 and the grinder's 3
    assert [e["status"] for e in of(a, "turn.end", agent="a2")] == ["exhausted_steps"]
    assert tool_results(a, "a2", "agent_list") == [], "the call after the limit is not run"
    assert len(of(a, "model.call", agent="a3")) == 3


async def test_a_childs_deadline_stops_it_mid_model_call_and_the_parent_goes_on(tmp_path: Path) -> None:
    root = [
        # A first child starts the zygote, so the second forks at once and its deadline runs in its model call.
        {"tool_calls": [start("warm up", type="quick", wait=True)]},
        {"tool_calls": [start("hang", type="stuck", deadline_s=3, wait=True)]},
        {"text": "root went on: {last_tool_result}"},
    ]
    config = tree_config(tmp_path, root, {"quick": says("quick"), "stuck": STUCK})
    async with run_agentd(streamed(config), cwd=tmp_path) as a:
        assert await a.wait_exit() == 0, a.tail()
    record = record_in(final_answer(a.out), "root went on: ")
    assert (record["id"], record["status"], record["result"]) == ("a3", "deadline", "")
    assert record["running_s"] >= 3
    (deadline,) = a.find("subagent.deadline")
    assert (deadline["agent"], deadline["parent"]) == ("a3", "a1")
    names = [(e["event"], e.get("agent")) for e in a.events]
    assert names.index(("subagent.started", "a3")) < names.index(("subagent.deadline", "a3"))
    (gone,) = of(a, "subagent.exit", agent="a3")
    assert gone["status"] == "deadline"
    assert not of(a, "model.call", agent="a3"), "stopped inside its model call"
    assert json.loads(a.out.splitlines()[-1])["status"] == "completed"
