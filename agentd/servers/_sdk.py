"""The one place the bundled servers reach past the MCP SDK's public surface.

The bundled servers are built on ``MCPServer`` and use its documented API
(tools, resources, ``middleware``, ``streamable_http_app``). Three things the
SDK (2.3) has no public hook for are done here, and only here:

* **request handlers for the handshake era**: ``resources/subscribe`` and
  ``resources/unsubscribe`` handlers, and a wrapper around ``resources/read``,
  go on the low-level server (``MCPServer._lowlevel_server``);
* **the connection of a request**: subscriptions belong to a client
  connection, but a handler sees a per-request ``ServerSession``; its
  connection is ``ServerSession._connection``;
* **experimental capabilities and ``resources.listChanged`` over HTTP**: the
  Streamable HTTP session manager builds its own initialization options, so
  the server's ``create_initialization_options`` is wrapped to add agentd's
  (handshake-era clients learn ``listChanged`` only from these options;
  2026-07-28 ones from the listen handler, which the SDK derives itself).

``tests/servers/test_sdk_adapter.py`` exercises each of these against the
installed SDK: an SDK release that moves one of them fails that test, not a
bundled server in production.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeAlias, TypeVar

from mcp.server.context import HandlerResult, ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.mcpserver import MCPServer
from mcp.server.models import InitializationOptions
from pydantic import BaseModel

from agentd.core.jsonvalue import JSONObject

__all__ = [
    "advertise",
    "advertise_experimental",
    "connection_of",
    "initialization_options",
    "lowlevel",
    "request_handler",
    "set_request_handler",
]

_Params = TypeVar("_Params", bound=BaseModel)

Handler: TypeAlias = Callable[[ServerRequestContext, BaseModel], Awaitable[HandlerResult]]
"""A low-level request handler: ``async (ctx, params) -> result``."""


def lowlevel(mcp: MCPServer) -> Server:
    """The low-level server under ``mcp`` (private in the SDK: ``MCPServer._lowlevel_server``)."""
    server: Server = mcp._lowlevel_server
    return server


def set_request_handler(
    mcp: MCPServer,
    method: str,
    params_type: type[_Params],
    handler: Callable[[ServerRequestContext, _Params], Awaitable[HandlerResult]],
) -> None:
    """Answer ``method`` with ``handler`` (replacing the SDK's own handler for it, if any)."""
    lowlevel(mcp).add_request_handler(method, params_type, handler)


def request_handler(mcp: MCPServer, method: str) -> Handler | None:
    """The handler ``method`` has now (the SDK's own, until :func:`set_request_handler` replaces it)."""
    entry = lowlevel(mcp).get_request_handler(method)
    if entry is None:
        return None
    handler: Handler = entry.handler
    return handler


def connection_of(session: object) -> object:
    """The client connection a request's session belongs to (its subscriptions' owner).

    The SDK builds one ``ServerSession`` per request but one connection per
    client; the connection is only reachable through a private attribute. A
    session without one (another SDK layout) is its own key, which keeps the
    servers working, one subscription table per request, until this is fixed.
    """
    return getattr(session, "_connection", session)


def initialization_options(
    mcp: MCPServer, experimental: Mapping[str, JSONObject] | None, *, resources_changed: bool = False
) -> InitializationOptions:
    """The initialization options of ``mcp`` with ``experimental`` capabilities (for stdio).

    ``resources_changed``: advertise ``resources.listChanged`` to handshake-era clients.
    """
    caps = dict(experimental) if experimental is not None else None
    return lowlevel(mcp).create_initialization_options(
        notification_options=NotificationOptions(resources_changed=resources_changed),
        experimental_capabilities=caps,
    )


def advertise(
    mcp: MCPServer, experimental: Mapping[str, JSONObject] | None, *, resources_changed: bool = False
) -> None:
    """Make every initialization ``mcp`` answers (the HTTP session manager's too) carry
    ``experimental`` and, with ``resources_changed``, ``resources.listChanged``."""
    low = lowlevel(mcp)
    original = low.create_initialization_options

    def with_ours(*args: Any, **kwargs: Any) -> InitializationOptions:  # the SDK's own signature
        if experimental is not None:
            kwargs.setdefault("experimental_capabilities", dict(experimental))
        if resources_changed and not args and kwargs.get("notification_options") is None:
            kwargs["notification_options"] = NotificationOptions(resources_changed=True)
        return original(*args, **kwargs)

    low.create_initialization_options = with_ours  # type: ignore[method-assign]


def advertise_experimental(mcp: MCPServer, experimental: Mapping[str, JSONObject]) -> None:
    """Make every initialization ``mcp`` answers (the HTTP session manager's too) carry ``experimental``."""
    advertise(mcp, experimental)
