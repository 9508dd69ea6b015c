"""Names and payload shapes of the self-MCP control tools.

Both are ordinary ``tools/call`` requests on the child's private channel, so
the whole conversation between a child and the supervisor is MCP:

``_agentd_usage`` (after every model call)
    arguments: ``{"input_tokens": int, "output_tokens": int, "steps": int}``
    result (JSON text): ``{"continue": bool, "reason": str | None}``; ``continue``
    false means the tree budget is spent (or the deadline passed): the child
    stops at this turn boundary.

``_agentd_turn_end`` (when a turn reaches a terminal status)
    arguments: ``{"status": TerminalStatus, "text": str, "idle": bool}``
    result (JSON text): ``{"action": "exit"}`` or
    ``{"action": "continue", "input": str}``; a warm session's call stays
    pending, at zero CPU, until the next delivery (or drain) answers it.
"""

from __future__ import annotations

from typing import Final

USAGE_TOOL: Final = "_agentd_usage"
TURN_END_TOOL: Final = "_agentd_turn_end"
CONTROL_TOOLS: Final = frozenset({USAGE_TOOL, TURN_END_TOOL})

#: Self-tools the model sees as ordinary tools (ARCHITECTURE.md decision 5).
SELF_TOOL_NAMES: Final = (
    "subscribe",
    "unsubscribe",
    "read_resource",
    "list_resources",
    "watch_start",
    "watch_stop",
    "watch_list",
)
