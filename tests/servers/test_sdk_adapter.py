"""The MCP SDK's private surface the bundled servers use, checked against the installed SDK.

Everything agentd's servers do past ``MCPServer``'s public API goes through
:mod:`agentd.servers._sdk`; each test here fails if an SDK release moves
what that module relies on (the server then needs the adapter fixed, not a
search through every bundled server).
"""

from __future__ import annotations

from typing import Any

from mcp import Client
from mcp.server.lowlevel.server import Server
from mcp.server.mcpserver import MCPServer
from mcp_types import EmptyResult, SubscribeRequestParams

from agentd.servers import _sdk


def _server() -> MCPServer:
    mcp = MCPServer("adapter-test")

    @mcp.tool()
    def ping() -> str:
        return "pong"

    @mcp.resource("memo://notes")
    def notes() -> str:
        return "{}"

    return mcp


def test_the_low_level_server_and_its_request_handlers_are_reachable() -> None:
    mcp = _server()
    low = _sdk.lowlevel(mcp)
    assert isinstance(low, Server)
    assert _sdk.request_handler(mcp, "resources/read") is not None
    assert low.middleware is mcp.middleware  # the public list is the low-level one


def test_initialization_options_carry_experimental_capabilities() -> None:
    mcp = _server()
    caps = {"claude/channel": {}}
    assert _sdk.initialization_options(mcp, caps).capabilities.experimental == caps
    assert not _sdk.initialization_options(mcp, None).capabilities.experimental
    # What the HTTP session manager calls (with no arguments) carries them once advertised.
    _sdk.advertise_experimental(mcp, caps)
    assert _sdk.lowlevel(mcp).create_initialization_options().capabilities.experimental == caps


def test_resources_list_changed_is_advertised_to_handshake_era_clients_when_asked() -> None:
    """The webhook server's list of pending deliveries changes; handshake-era clients learn that they
    may expect ``notifications/resources/list_changed`` only from these options (stdio and HTTP)."""
    mcp = _server()
    assert not _sdk.initialization_options(mcp, None).capabilities.resources.list_changed  # type: ignore[union-attr]
    on = _sdk.initialization_options(mcp, None, resources_changed=True)
    assert on.capabilities.resources.list_changed  # type: ignore[union-attr]
    _sdk.advertise(mcp, None, resources_changed=True)
    options = _sdk.lowlevel(mcp).create_initialization_options()
    assert options.capabilities.resources.list_changed  # type: ignore[union-attr]
    assert not options.capabilities.experimental


async def test_a_replaced_handler_answers_and_every_request_of_one_client_shares_one_connection() -> None:
    """Handshake-era clients (the ones whose subscriptions the servers track by connection)."""
    mcp = _server()
    sessions: list[Any] = []
    subscribed: list[str] = []

    async def record(ctx: Any, call_next: Any) -> Any:
        if ctx.request_id is not None and ctx.method not in ("initialize", "server/discover"):
            sessions.append(ctx.session)
        return await call_next(ctx)

    async def on_subscribe(ctx: Any, params: SubscribeRequestParams) -> EmptyResult:
        subscribed.append(str(params.uri))
        return EmptyResult()

    mcp.middleware.append(record)
    _sdk.set_request_handler(mcp, "resources/subscribe", SubscribeRequestParams, on_subscribe)
    async with Client(mcp, mode="legacy") as client:
        await client.call_tool("ping", {})
        await client.call_tool("ping", {})
        await client.subscribe_resource("memo://notes")
    assert len(sessions) >= 2
    connections = {id(_sdk.connection_of(s)) for s in sessions}
    # One client, one connection, though each request has a session of its own.
    assert len(connections) == 1
    connection = _sdk.connection_of(sessions[0])
    assert connection is not sessions[0], "ServerSession._connection is gone: fix agentd.servers._sdk"
    assert hasattr(connection, "exit_stack"), "the connection has no exit_stack: fix agentd.servers._sdk"
    assert subscribed == ["memo://notes"]
