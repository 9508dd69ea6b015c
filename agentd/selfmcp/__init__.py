"""The supervisor's private channels to each agent child.

A child is an MCP client of the supervisor over one socket (the tools the
model was offered: every upstream tool, namespaced ``server__tool``, plus the
self-tools) and exchanges typed control frames over a second one (spawn
payload, usage reports, turn ends, telemetry; :mod:`agentd.selfmcp.protocol`).
The model can reach the first only through the tools it was offered and the
second not at all.
"""

from agentd.selfmcp.protocol import SELF_TOOL_NAMES

__all__ = ["SELF_TOOL_NAMES"]
