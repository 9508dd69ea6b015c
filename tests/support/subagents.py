"""Agents that start agents (rfcs/0370) through the real ``agentd`` command: a config of scripted types.

:func:`tree_config` writes one ``script:`` model per agent type and an
``agentd.toml`` naming them, so a test reads like the tree it runs: the
root's turns, then each type's. :func:`steps` and :func:`tool_results` read
what ``--output stream-json`` printed (the tool results each model was given).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.agentd_proc import Agentd, script

#: Flags every tree run takes: no Claude Code agent files from the test machine's home
#: or working directory (the test's own types only).
ISOLATED = ("--no-claude-agents",)


@dataclass(frozen=True)
class AgentType:
    """One ``[agents.NAME]``: its scripted turns and its other keys (limits, tools)."""

    turns: list[dict[str, Any]]
    then: str = "no_reply"
    keys: dict[str, Any] = field(default_factory=dict)


def tree_config(
    tmp: Path, root: list[dict[str, Any]], types: dict[str, AgentType], *, then: str = "no_reply"
) -> str:
    """Write the root's script, one script per type and ``agentd.toml``; returns the config's path.

    The root's model is the config's ``model``; each type's model is its own script.
    """
    lines = [f"model = {json.dumps(script(tmp, root, then=then, name='root.json'))}"]
    for name, kind in types.items():
        lines.append(f"[agents.{name}]")
        lines.append(f"description = {json.dumps(f'the {name} agent')}")
        lines.append(f"model = {json.dumps(script(tmp, kind.turns, then=kind.then, name=f'{name}.json'))}")
        lines += [f"{key} = {json.dumps(value)}" for key, value in kind.keys.items()]
    path = tmp / "agentd.toml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def says(name: str, latency_ms: float = 0) -> AgentType:
    """A type whose one turn answers ``NAME says: INSTRUCTION`` after ``latency_ms``."""
    return AgentType([{"text": f"{name} says: {{instruction}}", "latency_ms": latency_ms}])


#: A type whose one model call would take ten minutes: it is still running when a test acts.
STUCK = AgentType([{"text": "never said", "latency_ms": 600_000}])


def streamed(config: str, *extra: str) -> list[str]:
    """``agentd`` arguments for a once run of ``config`` with ``--output stream-json``, nothing cut."""
    return ["--config", config, *ISOLATED, "-o", "stream-json", "--output-truncate", "0", *extra, "go"]


def start(instruction: str, **arguments: Any) -> dict[str, Any]:
    """An ``agent_start`` tool call of a scripted turn."""
    return {"name": "agent_start", "arguments": {"instruction": instruction, **arguments}}


def call(name: str, **arguments: Any) -> dict[str, Any]:
    """A tool call of a scripted turn."""
    return {"name": name, "arguments": arguments}


def steps(a: Agentd) -> list[dict[str, Any]]:
    """The lines ``--output stream-json`` printed, parsed."""
    return [json.loads(line) for line in a.out.splitlines() if line.startswith("{")]


def tool_results(a: Agentd, agent: str, name: str | None = None) -> list[dict[str, Any]]:
    """The ``tool_result`` steps of ``agent`` (of tool ``name``), in the order they were given."""
    return [
        s
        for s in steps(a)
        if s.get("type") == "tool_result"
        and s.get("agent") == agent
        and (name is None or s.get("name") == name)
    ]


def children(a: Agentd) -> list[dict[str, Any]]:
    """The ``subagent.spawn`` events of agents another agent started."""
    return a.find("subagent.spawn", lambda e: e.get("role") == "child")


def result_of(a: Agentd) -> dict[str, Any]:
    """The ``result`` step of a once run's stream-json."""
    (found,) = [s for s in steps(a) if s.get("type") == "result"]
    return found
