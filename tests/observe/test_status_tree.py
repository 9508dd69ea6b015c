"""``agentd status`` draws the agent tree (rfcs/0370): each agent's children under it, indented by depth."""

from __future__ import annotations

from typing import Any

from agentd.cli import _status


def _agent(ident: str, parent: str | None = None, depth: int = 0) -> dict[str, Any]:
    return {
        "id": ident,
        "parent": parent,
        "depth": depth,
        "role": "child" if parent else "root",
        "route": None,
        "woken_by": [],
        "doing": {"kind": "model", "since_s": 1.0},
        "phase": "turn",
        "age_s": 3.0,
        "steps": 1,
        "tokens": 10,
        "cost_usd": 0.0,
    }


def test_children_follow_their_parent_indented_by_depth_whatever_the_order_given() -> None:
    agents = [
        _agent("a4", "a2", 2),
        _agent("a1"),
        _agent("a3", "a1", 1),
        _agent("a2", "a1", 1),
        _agent("a9", "a7", 1),  # its parent is not running: shown as a top-level line
    ]
    ordered = [a["id"] for a in _status.tree_order(agents)]
    assert ordered == ["a1", "a3", "a2", "a4", "a9"]
    doc = {
        "version": "0.1.0",
        "mode": "reactive",
        "phase": "running",
        "ready": True,
        "uptime_s": 1,
        "pid": 1,
        "agents": agents,
        "routes": [],
        "servers": [],
        "recent": [],
        "finished": [],
        "budget": {"cost_usd": 0.0, "tokens": 0, "steps": 0},
    }
    lines = _status.render(doc, 200).splitlines()
    rows = [line.split()[:2] for line in lines if "a1" in line or "└" in line]
    assert ["└", "a3"] in rows
    assert ["└", "a2"] in rows
    (grandchild,) = [line for line in lines if "a4" in line]
    assert "  └ a4" in grandchild


def test_a_parent_cycle_in_a_document_shows_each_agent_once() -> None:
    agents = [_agent("a1", "a2", 1), _agent("a2", "a1", 1)]
    assert [a["id"] for a in _status.tree_order(agents)] == ["a1", "a2"]  # nothing hangs or repeats
