"""Which listed tools agentd offers: task-only tools (2025-11-25 ``execution.taskSupport``) are kept out."""

from __future__ import annotations

import mcp_types as types

from agentd.upstream.tooluse import split_uncallable


def _tool(name: str, task_support: str | None = None) -> types.Tool:
    execution = None if task_support is None else types.ToolExecution(task_support=task_support)  # type: ignore[arg-type]
    return types.Tool(name=name, input_schema={"type": "object"}, execution=execution)


def test_task_only_tools_are_split_off_in_the_servers_order():
    tools = [
        _tool("plain"),
        _tool("research", "required"),
        _tool("maybe", "optional"),
        _tool("never", "forbidden"),
        _tool("batch", "required"),
    ]
    usable, skipped = split_uncallable(tools)
    assert [t.name for t in usable] == ["plain", "maybe", "never"]
    assert skipped == ["research", "batch"]


def test_a_task_only_flag_read_off_the_wire_is_honoured():
    wire = {"name": "research", "inputSchema": {"type": "object"}, "execution": {"taskSupport": "required"}}
    usable, skipped = split_uncallable([types.Tool.model_validate(wire)])
    assert usable == []
    assert skipped == ["research"]
