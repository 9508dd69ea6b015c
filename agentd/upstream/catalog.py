"""One server's catalogs: its tools, resources and templates, fetched on connect and on list_changed.

:class:`Catalogs` belongs to one :class:`~agentd.upstream.connection.Upstream`;
the connection calls its refreshes with the live client and reads its lists.

A list the server does not implement is empty, not a failure (rfcs/0378):

* answered -32601 "Method not found" (many low-level servers have no
  ``resources/templates/list`` handler): the list is empty, said once per
  connection at debug level (``upstream.list_skipped``), and not asked again
  on that connection;
* ``resources/templates/list``, the one list agentd can do without, is also
  given up when it is not answered within :data:`OPTIONAL_LIST_TIMEOUT`
  (``upstream.list_skipped``) or answered with another error
  (``upstream.list_failed``, a warning): its templates stay as last known.

Any other failure of a list raises :class:`ListFailed`, whose message names the call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal, Protocol, TypeVar

import mcp_types as types
import trio
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from agentd.core.errors import UpstreamError
from agentd.events import CatalogChanged, ReactorEvent
from agentd.observe.telemetry import Telemetry
from agentd.observe.timeline import mark
from agentd.upstream.describe import describe as _describe
from agentd.upstream.resolve import Catalog
from agentd.upstream.tooluse import TASK_ONLY_REASON, split_uncallable

__all__ = ["OPTIONAL_LIST_TIMEOUT", "Catalogs", "ListFailed", "ListMethod", "listen_flags"]

_PAGE_CAP = 100
"""Most pages fetched for one list: a server whose cursor never ends cannot hang a refresh."""

OPTIONAL_LIST_TIMEOUT = 5.0
"""Seconds one page of an optional list (``resources/templates/list``) may take before the list
is given up (rfcs/0378). A server answers a list in milliseconds; one that drops requests for
methods it lacks never does, and must cost a connection seconds, not its whole start-up bound."""

ListMethod = Literal["tools/list", "resources/list", "resources/templates/list"]
"""The lists agentd fetches from a server."""

OPTIONAL_LISTS: frozenset[ListMethod] = frozenset({"resources/templates/list"})
"""Lists a connection can do without: a failure leaves them as last known (templates only
widen which URIs route to the server; a server's tools and resources are what it is for)."""

_Skip = Literal["unsupported", "unanswered"]


class ListFailed(UpstreamError):
    """A list the connection needs failed; the message names the server and the call.

    ``clause`` is the message without the server's name (``"failed tools/list: …"``).
    """

    def __init__(self, server: str, clause: str) -> None:
        super().__init__(f"server {server!r} {clause}")
        self.clause = clause


_T = TypeVar("_T")


class _PageLike(Protocol):
    """One page of a paginated MCP listing."""

    @property
    def next_cursor(self) -> str | None: ...


_Page = TypeVar("_Page", bound=_PageLike)


class Catalogs:
    """One server's tool, resource and template lists, and the routing view built from them.

    Args:
        name: the server's name (telemetry).
        telemetry: for ``upstream.tools_*`` and ``upstream.refresh_failed``.
        post: posts a reactor event (``CatalogChanged``).
        request_timeout: bound on one list request, seconds.
    """

    def __init__(
        self,
        name: str,
        telemetry: Telemetry,
        post: Callable[[ReactorEvent], Awaitable[None]],
        *,
        request_timeout: float,
    ) -> None:
        self.name = name
        self._telemetry = telemetry
        self._post = post
        self.request_timeout = request_timeout
        self.tools: list[types.Tool] = []
        """The server's tools, refreshed on connect and on ``tools/list_changed``."""
        self.resources: list[types.Resource] = []
        """Concrete resources, refreshed on connect and on ``resources/list_changed``."""
        self.templates: list[types.ResourceTemplate] = []
        """Resource templates, refreshed with :attr:`resources`."""
        self.tools_version = 0
        """Bumped every time :attr:`tools` is replaced (see :meth:`wait_tools_changed`)."""
        self.skipped_tools: tuple[str, ...] = ()
        """Listed tools agentd cannot call (task-only), kept out of :attr:`tools` (rfcs/0296)."""
        self._tools_changed = trio.Event()
        self._skipped: dict[ListMethod, _Skip] = {}
        """Lists this connection does not ask for again: not implemented, or (optional) never answered."""
        self._catalog_cache: (
            tuple[list[types.Resource], list[types.ResourceTemplate], bool, Catalog] | None
        ) = None

    def routing(self, can: bool) -> Catalog:
        """The routing view of this server (for :func:`agentd.upstream.resolve_server_for_uri`).

        Built once per catalog refresh (the lists are replaced, never mutated,
        on refresh), not per call: every resource read and watch resolves a
        URI through it, and building it parses the URI templates.
        """
        cached = self._catalog_cache
        if (
            cached is not None
            and cached[0] is self.resources
            and cached[1] is self.templates
            and cached[2] == can
        ):
            return cached[3]
        catalog = Catalog(
            uris=frozenset(str(r.uri) for r in self.resources),
            templates=tuple(t.uri_template for t in self.templates),
            can_subscribe=can,
        )
        self._catalog_cache = (self.resources, self.templates, can, catalog)
        return catalog

    async def wait_tools_changed(self, seen_version: int) -> int:
        """Wait until :attr:`tools_version` differs from ``seen_version``; return the new version.

        The reactor has no event for tool-list changes (tools are not routed),
        so whoever serves the tool catalog to agents waits here.
        """
        while self.tools_version == seen_version:
            await self._tools_changed.wait()
        return self.tools_version

    def set_tools(self, tools: list[types.Tool]) -> None:
        self.tools = tools
        self.tools_version += 1
        self._tools_changed.set()
        self._tools_changed = trio.Event()

    def new_connection(self) -> None:
        """A new connection to the server: ask again for every list (the server may have changed)."""
        self._skipped.clear()

    async def refresh_tools(self, client: Client) -> None:
        """Fetch the tools (``tools/list``) and replace :attr:`tools`.

        Raises:
            ListFailed: the server failed the list or did not answer in time.
        """
        caps = client.server_capabilities
        if caps.tools is None:
            self.set_tools([])
            return
        tools = await self.fetch("tools/list", client.list_tools, lambda p: p.tools)
        assert tools is not None  # a required list is a list or an error
        usable, skipped = split_uncallable(tools)
        if skipped and tuple(skipped) != self.skipped_tools:
            # Said once per change of the set, not on every reconnect's refresh.
            self._telemetry.emit(
                "upstream.tools_skipped", server=self.name, tools=skipped, reason=TASK_ONLY_REASON
            )
        self.skipped_tools = tuple(skipped)
        self.set_tools(usable)

    async def refresh_resources(self, client: Client) -> None:
        """Fetch the resources and the templates (at once) and replace :attr:`resources` and :attr:`templates`.

        Raises:
            ListFailed: the server failed ``resources/list`` or did not answer it in time
                (the templates are optional: see the module docstring).
        """
        caps = client.server_capabilities
        if caps.resources is None:
            self.resources, self.templates = [], []
            return
        # Both lists at once: a new resource (a glob's next URI) is routed one round trip sooner.
        # The first failure is raised as itself (callers tell a refusal from a timeout), not in a group.
        resources: list[types.Resource] = []
        templates: list[types.ResourceTemplate] | None = None
        errors: list[Exception] = []

        async def fetch_resources() -> None:
            try:
                got = await self.fetch("resources/list", client.list_resources, lambda p: p.resources)
                assert got is not None  # a required list is a list or an error
                resources.extend(got)
            except Exception as exc:
                errors.append(exc)

        async def fetch_templates() -> None:
            nonlocal templates
            try:
                templates = await self.fetch(
                    "resources/templates/list", client.list_resource_templates, lambda p: p.resource_templates
                )
            except Exception as exc:
                errors.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(fetch_resources)
            nursery.start_soon(fetch_templates)
        if errors:
            raise errors[0]
        self.resources = resources
        if templates is not None:
            self.templates = templates

    async def fetch(
        self, method: ListMethod, fetch: Callable[..., Awaitable[_Page]], items: Callable[[_Page], list[_T]]
    ) -> list[_T] | None:
        """The whole of one list, by the rules of the module docstring; ``None``: an optional list
        given up (keep what is known).

        Raises:
            ListFailed: the server failed a required list, or did not answer it within ``request_timeout``.
            MCPError: the connection closed (``CONNECTION_CLOSED``): the caller reports the loss.
        """
        skip = self._skipped.get(method)
        if skip is not None:
            return [] if skip == "unsupported" else None
        optional = method in OPTIONAL_LISTS
        bound = min(OPTIONAL_LIST_TIMEOUT, self.request_timeout) if optional else self.request_timeout
        try:
            return await self.paginate(fetch, items, timeout=bound)
        except MCPError as exc:
            if exc.code == types.CONNECTION_CLOSED:
                raise
            if exc.code == types.METHOD_NOT_FOUND:
                self._skip(
                    method, "unsupported", "the server does not implement it (-32601 Method not found)"
                )
                return []
            if exc.code == types.REQUEST_TIMEOUT:
                self._unanswered(method, bound)
                return None
            if optional:
                self._telemetry.emit(
                    "upstream.list_failed", server=self.name, method=method, error=_describe(exc)
                )
                return None
            raise ListFailed(self.name, f"failed {method}: {_describe(exc)}") from exc
        except trio.TooSlowError:
            self._unanswered(method, bound)
            return None

    def _unanswered(self, method: ListMethod, bound: float) -> None:
        """An optional list given up for a timeout; a required one raises."""
        if method not in OPTIONAL_LISTS:
            raise ListFailed(
                self.name,
                f"did not answer {method} within {bound:g}s (request_timeout); it may be hung or overloaded",
            ) from None
        self._skip(method, "unanswered", f"no answer within {bound:g}s; not asked again on this connection")

    def _skip(self, method: ListMethod, skip: _Skip, reason: str) -> None:
        self._skipped[method] = skip
        self._telemetry.emit("upstream.list_skipped", server=self.name, method=method, reason=reason)

    async def paginate(
        self,
        fetch: Callable[..., Awaitable[_Page]],
        items: Callable[[_Page], list[_T]],
        *,
        timeout: float | None = None,
    ) -> list[_T]:
        """Every page of one list, each bounded by ``timeout`` (default ``request_timeout``)."""
        bound = self.request_timeout if timeout is None else timeout
        out: list[_T] = []
        cursor: str | None = None
        for _ in range(_PAGE_CAP):
            with trio.fail_after(bound):
                page = await fetch(cursor=cursor)
            out.extend(items(page))
            cursor = page.next_cursor
            if cursor is None:
                break
        return out

    async def refresher(self, client: Client, refresh_recv: trio.MemoryReceiveChannel[str]) -> None:
        """Apply list_changed notices one at a time (a burst coalesces in the channel)."""
        async for kind in refresh_recv:
            try:
                if kind == "tools":
                    await self.refresh_tools(client)
                    self._telemetry.emit("upstream.tools_changed", server=self.name, tools=len(self.tools))
                else:
                    await self.refresh_resources(client)
                    mark("upstream.listed")
                    await self._post(
                        CatalogChanged(self.name, uris=frozenset(str(r.uri) for r in self.resources))
                    )
            except (Exception, trio.TooSlowError) as exc:
                self._telemetry.emit(
                    "upstream.refresh_failed", server=self.name, kind=kind, error=_describe(exc)
                )


def listen_flags(client: Client) -> tuple[bool, bool]:
    """Whether to listen for (tools, resources) list changes: the server announces them."""
    caps = client.server_capabilities
    if client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False, False  # handshake era: they arrive through the message handler
    return bool(caps.tools and caps.tools.list_changed), bool(caps.resources and caps.resources.list_changed)
