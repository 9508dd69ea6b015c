"""The sandbox's host side: what a watch filter may call, and the pool its runs use.

A filter runs in ``pydantic-monty`` in a worker thread; what it calls
(``read_resource``, ``list_resources`` and every tool an upstream marks
read-only that the tool policy offers) runs on the event loop
(:func:`agentd.watches.sandbox.call_on_loop`), each call bounded. Every other
tool name is *denied*: the filter learns it exists and that it may not call
it (rfcs/0076). The pool is opened on first use, off the event loop, and
closed at shutdown together with every filter still holding a worker.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Final, TypeAlias

import orjson
import trio

from agentd.core.jsonvalue import JSONValue, loads
from agentd.upstream.naming import namespaced
from agentd.upstream.resolve import resource_listing
from agentd.watches.limits import WatchLimits

if TYPE_CHECKING:  # the sandbox (pydantic-monty) is imported only when a watch filters
    from mcp import types

    from agentd.upstream.connection import Upstream
    from agentd.watches.sandbox import CatalogFunction, FilterPool, WatchFilter

#: An async catalog function: called with the filter's own arguments (checked
#: by the function), its result goes back into the sandbox.
AsyncCatalogFunction: TypeAlias = "Callable[..., Awaitable[object]]"

#: Bound on one catalog call a filter makes (``read_resource``, a read-only
#: tool), on top of the filter run's own time limit (which usually ends it
#: first, rfcs/0151): 5 s is far above a healthy call (~1 ms) and well below
#: the upstream's own 30 s request timeout, so a hung server costs a filter
#: an error line, not half a minute, even with a long ``filter_timeout``.
CATALOG_CALL_TIMEOUT_SECS: Final = 5.0

#: How long shutdown waits for the sandbox pool to stop its worker processes.
#: Monty kills them itself; this only bounds a wedged worker.
POOL_CLOSE_TIMEOUT_SECS: Final = 5.0


async def read_text(upstream: Upstream, uri: str) -> tuple[str, str | None]:
    """Read ``uri`` (bounded by the upstream's request timeout); return (body, mime type)."""
    result = await upstream.read_resource(uri)
    parts: list[str] = []
    mime: str | None = None
    for c in result.contents:
        mime = mime or getattr(c, "mime_type", None)
        text = getattr(c, "text", None)
        parts.append(text if text is not None else "")
    return "\n".join(parts), mime


class FilterHost:
    """The catalog a filter may call and the pool its runs use.

    Args:
        upstreams: Server name -> connection.
        limits: Watch limits (every filter runs within them).
        server_for: URI -> server name (the hub's routing rule).
        tool_allowed: The tool policy (server, tool) -> offered; a filter never
            reaches a tool agents are denied.
        pool: The sandbox pool; default: one opened on first use (and closed
            by :meth:`shut`).
    """

    def __init__(
        self,
        *,
        upstreams: Mapping[str, Upstream],
        limits: WatchLimits,
        server_for: Callable[[str], str | None],
        tool_allowed: Callable[[str, types.Tool], bool] | None = None,
        pool: FilterPool | None = None,
    ) -> None:
        self._upstreams = upstreams
        self._limits = limits
        self._server_for = server_for
        self._tool_allowed = tool_allowed
        self._pool = pool
        self._own_pool = pool is None
        self._pool_lock = trio.Lock()
        self._closing: set[WatchFilter] = set()
        """Filters of released watches whose close is still to run (closed at shutdown if it never ran)."""

    # ------------------------------------------------------------------ the catalog

    def catalog(self) -> tuple[dict[str, CatalogFunction], set[str]]:
        """The filter's read-only catalog and the names it is denied (mutating tools).

        Catalog functions are called from a filter's worker thread; each runs
        its call on the event loop, bounded by the run's time left
        (:func:`agentd.watches.sandbox.call_on_loop`).
        """
        catalog: dict[str, CatalogFunction] = {
            "read_resource": self._sync_call(self._read),
            "list_resources": self._sync_call(self._list),
        }
        denied: set[str] = set()
        for server, up in self._upstreams.items():
            for tool in getattr(up, "tools", None) or []:
                exposed = namespaced(server, tool.name)
                annotations = getattr(tool, "annotations", None)
                allowed = self._tool_allowed is None or self._tool_allowed(server, tool)
                if allowed and annotations is not None and annotations.read_only_hint is True:
                    catalog[exposed] = self._sync_call(self._tool_caller(server, tool.name))
                else:
                    denied.add(exposed)
        return catalog, denied

    def _sync_call(self, fn: AsyncCatalogFunction) -> CatalogFunction:
        """A callable for the filter's worker thread that runs ``fn`` on the event loop.

        Bounded by what is left of the filter run's time and by
        :data:`CATALOG_CALL_TIMEOUT_SECS`, whichever ends first.
        """

        def call(*args: object, **kwargs: object) -> object:
            from agentd.watches.sandbox import call_on_loop  # loaded: a filter is calling

            return call_on_loop(lambda: fn(*args, **kwargs), cap=CATALOG_CALL_TIMEOUT_SECS)

        return call

    async def _read(self, uri: str) -> JSONValue:
        server = self._server_for(uri)
        if server is None:
            raise KeyError(f"no connected server offers {uri!r}")
        body, _ = await read_text(self._upstreams[server], uri)
        try:
            return loads(body)
        except orjson.JSONDecodeError:
            return body

    async def _list(self) -> Sequence[Mapping[str, object]]:
        # The same entries as the list_resources self-tool.
        return resource_listing(self._upstreams)

    def _tool_caller(self, server: str, tool: str) -> AsyncCatalogFunction:
        async def call(*args: object, **kwargs: object) -> object:
            if args:
                raise TypeError("call tools with keyword arguments, e.g. memo__memo_get(key='todo')")
            result = await self._upstreams[server].call_tool(tool, kwargs)
            text = "\n".join(getattr(c, "text", "") or "" for c in result.content)
            if result.is_error:
                raise RuntimeError(text or "the tool returned an error")
            if result.structured_content is not None:
                return result.structured_content
            try:
                return loads(text)
            except orjson.JSONDecodeError:
                return text

        return call

    # ------------------------------------------------------------------ the pool and its filters

    async def pool(self) -> FilterPool:
        """The sandbox pool, opened on first use."""
        async with self._pool_lock:
            if self._pool is None:
                from agentd.watches.sandbox import FilterPool  # lazy: loads pydantic-monty

                pool = FilterPool()
                # Entering starts a sandbox worker process: keep it off the event loop.
                await trio.to_thread.run_sync(pool.__enter__)
                self._pool = pool
            return self._pool

    async def new_filter(self, source: str) -> WatchFilter:
        """A filter for checked ``source``, with the catalog as it is now."""
        from agentd.watches.sandbox import WatchFilter  # lazy: loads pydantic-monty

        catalog, denied = self.catalog()
        return WatchFilter(
            source, pool=await self.pool(), limits=self._limits, catalog=catalog, denied=denied
        )

    def retiring(self, filt: WatchFilter) -> None:
        """``filt``'s watch is gone: its close is due (made by :meth:`shut` if nothing makes it first)."""
        self._closing.add(filt)

    async def close_filter(self, filt: WatchFilter) -> None:
        self._closing.add(filt)
        await filt.aclose()
        self._closing.discard(filt)

    async def shut(self, live: Iterable[WatchFilter | None]) -> None:
        """At shutdown: close every filter (``live`` and the retiring ones), then the pool if it is ours.

        Bounded by :data:`POOL_CLOSE_TIMEOUT_SECS`; call it shielded.
        """
        # A filter whose close was scheduled but cancelled by the shutdown still holds a
        # sandbox worker that the pool's close would not stop: close them all first.
        filters = [*self._closing, *live]
        self._closing.clear()
        pool = self._pool if self._own_pool else None
        self._pool = None if self._own_pool else self._pool

        def shut() -> None:
            for f in filters:
                if f is not None:
                    f.close()
            if pool is not None:
                pool.close()

        with trio.move_on_after(POOL_CLOSE_TIMEOUT_SECS):
            await trio.to_thread.run_sync(shut, abandon_on_cancel=True)
