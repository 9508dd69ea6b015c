"""The supervisor's side of self-MCP: one MCP server per agent child.

The server is a thin shell: every request is answered by a :class:`Hub`
(the supervisor), which knows the upstream connections, the self-tools and
the reactor. It lists exactly the tools the model is offered and nothing
else (control traffic has its own channel, :mod:`agentd.selfmcp.protocol`).
The server serves whichever protocol era the child opens with (children pin
2026-07-28).
"""

from __future__ import annotations

from typing import Protocol

import mcp_types as types
import trio
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server

from agentd.selfmcp.transport import stream_transport


class Hub(Protocol):
    """What a child's self-MCP server asks the supervisor."""

    def tools_for(self, agent: str) -> list[types.Tool]:
        """The tools ``agent`` may call (upstream tools namespaced, plus self-tools)."""
        ...

    async def call(self, agent: str, name: str, arguments: dict[str, object]) -> types.CallToolResult:
        """Answer ``tools/call`` from ``agent``; errors (an unknown tool too) come back as ``is_error`` results."""
        ...


def build_server(agent: str, hub: Hub) -> Server[object]:
    """An MCP server bound to one agent child (no lifespan state)."""

    async def on_list_tools(
        _ctx: ServerRequestContext[object], _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=hub.tools_for(agent))

    async def on_call_tool(
        _ctx: ServerRequestContext[object], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        return await hub.call(agent, params.name, dict(params.arguments or {}))

    return Server(f"agentd-self-{agent}", on_list_tools=on_list_tools, on_call_tool=on_call_tool)


async def serve_child(hub: Hub, agent: str, stream: trio.SocketStream) -> None:
    """Serve ``agent``'s channel until the child closes it (or dies)."""
    server = build_server(agent, hub)
    async with stream_transport(stream) as (read, write):
        await server.run(read, write, server.create_initialization_options())


def text_result(text: str, *, is_error: bool = False) -> types.CallToolResult:
    """A tool result holding one text block."""
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=is_error)
