"""Self-MCP: the private MCP channel between the supervisor and each agent child.

A child is an MCP *client* of the supervisor over a socket it inherited at
fork. The supervisor serves it every upstream tool (namespaced
``server__tool``) plus the self-tools, and two control tools the model never
sees (:data:`USAGE_TOOL`, :data:`TURN_END_TOOL`) that carry token usage and
turn boundaries.
"""

from agentd.selfmcp.protocol import CONTROL_TOOLS, TURN_END_TOOL, USAGE_TOOL

__all__ = ["CONTROL_TOOLS", "TURN_END_TOOL", "USAGE_TOOL"]
