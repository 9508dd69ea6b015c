"""One server's catalogs: its tools, resources and templates, fetched on connect and on list_changed.

:class:`Catalogs` belongs to one :class:`~agentd.upstream.connection.Upstream`;
the connection calls its refreshes with the live client and reads its lists.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

import mcp_types as types
import trio
from mcp import Client
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from agentd.events import CatalogChanged, ReactorEvent
from agentd.observe.telemetry import Telemetry
from agentd.observe.timeline import mark
from agentd.upstream.describe import describe as _describe
from agentd.upstream.resolve import Catalog
from agentd.upstream.tooluse import TASK_ONLY_REASON, split_uncallable

_PAGE_CAP = 100
"""Most pages fetched for one list: a server whose cursor never ends cannot hang a refresh."""

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

    async def refresh_tools(self, client: Client) -> None:
        caps = client.server_capabilities
        if caps.tools is None:
            self.set_tools([])
            return
        tools: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(_PAGE_CAP):
            with trio.fail_after(self.request_timeout):
                page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        usable, skipped = split_uncallable(tools)
        if skipped and tuple(skipped) != self.skipped_tools:
            # Said once per change of the set, not on every reconnect's refresh.
            self._telemetry.emit(
                "upstream.tools_skipped", server=self.name, tools=skipped, reason=TASK_ONLY_REASON
            )
        self.skipped_tools = tuple(skipped)
        self.set_tools(usable)

    async def refresh_resources(self, client: Client) -> None:
        caps = client.server_capabilities
        if caps.resources is None:
            self.resources, self.templates = [], []
            return
        # Both lists at once: a new resource (a glob's next URI) is routed one round trip sooner.
        # The first failure is raised as itself (callers tell a refusal from a timeout), not in a group.
        resources: list[types.Resource] = []
        templates: list[types.ResourceTemplate] = []
        errors: list[Exception] = []

        async def fetch_resources() -> None:
            try:
                resources.extend(await self.paginate(client.list_resources, lambda p: p.resources))
            except Exception as exc:
                errors.append(exc)

        async def fetch_templates() -> None:
            try:
                templates.extend(
                    await self.paginate(client.list_resource_templates, lambda p: p.resource_templates)
                )
            except Exception as exc:
                errors.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(fetch_resources)
            nursery.start_soon(fetch_templates)
        if errors:
            raise errors[0]
        self.resources, self.templates = resources, templates

    async def paginate(
        self, fetch: Callable[..., Awaitable[_Page]], items: Callable[[_Page], list[_T]]
    ) -> list[_T]:
        out: list[_T] = []
        cursor: str | None = None
        for _ in range(_PAGE_CAP):
            with trio.fail_after(self.request_timeout):
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
