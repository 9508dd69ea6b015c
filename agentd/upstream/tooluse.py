"""Which of a server's listed tools agentd can call, and why the others are not offered.

A 2025-11-25 server may mark a tool ``execution.taskSupport = "required"``: it
runs only as an MCP task (``tools/call`` with a ``task`` field, then
``tasks/get`` / ``tasks/result``). agentd's client does not run tasks, and the
server answers any other call of such a tool with ``-32601``; offering it
would only let a model spend a step on a certain error. Such tools are kept
out of the catalog and named once in ``upstream.tools_skipped``
(rfcs/0296). ``optional`` and ``forbidden`` tools are called normally.

Pure and synchronous.
"""

from __future__ import annotations

from collections.abc import Sequence

import mcp_types as types

__all__ = ["TASK_ONLY_REASON", "split_uncallable"]

TASK_ONLY_REASON = (
    "the server runs them only as MCP tasks (execution.taskSupport is 'required'), which agentd does not "
    "support; they are not offered to models. Use them from a client that runs tasks, or ask the server's "
    "authors to make task support optional"
)
"""What ``upstream.tools_skipped`` says about task-only tools, with the fix."""


def _task_only(tool: types.Tool) -> bool:
    execution = tool.execution
    return execution is not None and execution.task_support == "required"


def split_uncallable(tools: Sequence[types.Tool]) -> tuple[list[types.Tool], list[str]]:
    """``(callable tools, names of the task-only ones)``, each in the server's order."""
    usable = [t for t in tools if not _task_only(t)]
    skipped = [t.name for t in tools if _task_only(t)]
    return usable, skipped
