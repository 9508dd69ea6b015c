"""Declared subscriptions: what the configuration asks to watch, and keeping it watched.

A declared subscription (``--subscribe [SERVER:]URI``, ``subscribe = [...]``)
is a pattern; :func:`resolve` turns the patterns into concrete
``(server, uri)`` pairs against what each server offers (rfcs/0134):

* a glob expands against the concrete resources of its server (or of every
  server, without a prefix); resource templates are not subscribable;
* an exact URI with a server prefix is that pair;
* an exact URI without one goes to every server that lists it, else to the
  first server whose URI template matches it, else to the only server;
* anything else resolves to nothing, and says why, naming what the servers
  offer.

:class:`DeclaredSubscriptions` is the thin shell that acts on a resolution:
it subscribes every pair (at start-up, and again whenever its server
connects, so a subscription that was never made or was lost comes back),
follows each first establishment with one synthetic "possibly changed"
event marked ``startup`` (the start-up re-read, rfcs/0130), drops pairs whose
resource left the catalog, and reports patterns that resolve to nothing
(``subscription.unresolved``, ``/metrics``, and readiness when a required
server is named).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import trio

from agentd.errors import AgentdError
from agentd.events import ReactorEvent, ResourceChanged, ServerState, SubscriptionStateChanged
from agentd.telemetry import Telemetry
from agentd.triggers.glob import compile_glob
from agentd.triggers.router import Router
from agentd.upstream.resolve import Catalog

__all__ = ["DeclaredSubscriptions", "Resolution", "SubscriptionPattern", "pattern_label", "resolve"]

#: Most resources / templates a warning lists per server (the rest are counted).
OFFER_SAMPLE = 5

Pair = tuple[str, str]
"""``(server, uri)``."""

RefreshReason = Literal["start", "connected", "catalog"]
"""Why :meth:`DeclaredSubscriptions.refresh` runs: start-up, a server (re)connected, a catalog changed."""


class SubscriptionPattern(Protocol):
    """What :func:`resolve` needs of a declared subscription (``agentd.config.SubscriptionSpec``)."""

    @property
    def server(self) -> str | None: ...
    @property
    def uri(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Resolution:
    """The concrete subscriptions a set of patterns resolves to.

    Attributes:
        pairs: every ``(server, uri)`` to subscribe, in pattern order.
        unresolved: pattern label (:func:`pattern_label`) -> why it resolves
            to nothing, naming what the servers offer.
        required: the unresolved patterns that name a required server (or,
            without a prefix, could only be served by one): readiness fails.
    """

    pairs: tuple[Pair, ...]
    unresolved: Mapping[str, str]
    required: frozenset[str]


def pattern_label(sub: SubscriptionPattern) -> str:
    """The pattern as the user wrote it: ``server:uri`` or ``uri``."""
    return f"{sub.server}:{sub.uri}" if sub.server else sub.uri


def _offers(name: str, catalog: Catalog | None) -> str:
    if catalog is None:
        return f"server {name!r} has not connected yet"
    uris = sorted(catalog.uris)
    parts = []
    if uris:
        more = f" and {len(uris) - OFFER_SAMPLE} more" if len(uris) > OFFER_SAMPLE else ""
        parts.append(f"resources {', '.join(uris[:OFFER_SAMPLE])}{more}")
    if catalog.templates:
        parts.append(f"templates {', '.join(catalog.templates[:OFFER_SAMPLE])}")
    offered = " and ".join(parts) if parts else "no resources"
    return f"server {name!r} offers {offered}"


def resolve(
    subs: Sequence[SubscriptionPattern],
    catalogs: Mapping[str, Catalog | None],
    required: frozenset[str] = frozenset(),
) -> Resolution:
    """Resolve declared patterns against the servers' catalogs (see the module docstring).

    Args:
        subs: the declared subscriptions, in configuration order.
        catalogs: server name -> its catalog, or None if it never connected;
            in configuration order (the order decides "first").
        required: names of required servers.
    """
    pairs: dict[Pair, None] = {}
    unresolved: dict[str, str] = {}
    needs_required: set[str] = set()
    for sub in subs:
        label = pattern_label(sub)
        candidates = [sub.server] if sub.server else list(catalogs)
        glob = compile_glob(sub.uri)
        found: list[Pair] = []
        if not glob.exact:
            for name in candidates:
                catalog = catalogs.get(name)
                if catalog is not None:
                    found += [(name, uri) for uri in sorted(catalog.uris) if glob.match(uri)]
            why = (
                f"no concrete resource matches the glob {sub.uri!r} (resource templates are not subscribable)"
            )
        else:
            # An exact pattern may escape a literal '?' (a query string, rfcs/0010):
            # subscribe to the URI itself, never to the escaped spelling.
            uri = glob.literal
            listed = [n for n in candidates if (c := catalogs.get(n)) is not None and uri in c.uris]
            templated = [
                n for n in candidates if (c := catalogs.get(n)) is not None and c.matches_template(uri)
            ]
            if sub.server:
                found = [(sub.server, uri)]
            elif listed:
                found = [(n, uri) for n in listed]
            elif templated:
                found = [(templated[0], uri)]
            elif len(candidates) == 1:
                found = [(candidates[0], uri)]
            why = (
                f"no server lists {uri!r} or has a template matching it, and {len(candidates)} servers are "
                f"configured; prefix it with the server's name (e.g. {candidates[0] if candidates else 'NAME'}:{uri})"
            )
        if found:
            for pair in found:
                pairs[pair] = None
            continue
        offered = "; ".join(_offers(n, catalogs.get(n)) for n in candidates) or "no servers are configured"
        unresolved[label] = f"{why}; {offered}"
        if any(n in required for n in candidates):
            needs_required.add(label)
    return Resolution(tuple(pairs), unresolved, frozenset(needs_required))


class _UpstreamLike(Protocol):
    state: ServerState

    @property
    def subscriptions(self) -> frozenset[str]: ...
    @property
    def capabilities(self) -> object | None: ...
    def catalog(self) -> Catalog: ...
    async def subscribe(self, uri: str) -> None: ...
    async def unsubscribe(self, uri: str) -> None: ...


class DeclaredSubscriptions:
    """Keeps every declared subscription made (see the module docstring).

    It owns the declared set (:attr:`pairs`) and what resolves to nothing
    (:attr:`unresolved`, :attr:`unresolved_required`); the reactor reads them
    for readiness, ``/metrics`` and "is this URI still needed".

    :meth:`refresh` is synchronous and never blocks: the app calls it once
    before the reactor runs, then the reactor calls it (from its event
    handlers) when a server connects or its catalog changes; subscribing runs
    in tasks that report back through the reactor's channel.

    Args:
        subs: the declared subscriptions.
        upstreams: server name -> its connection, in configuration order.
        router: the reactor's router (queue sizes; exact routes keep a URI subscribed).
        events: the reactor's channel (subscription outcomes, the start-up re-read).
        telemetry: NDJSON events.
        nursery: where subscribe/unsubscribe tasks run.
        required: names of required servers.
        watched: whether a live watch still needs ``(server, uri)`` subscribed.
        keep: ``--shard``: whether this replica subscribes a pair (it handles
            its updates); the others are left to the replicas that own them.
    """

    def __init__(
        self,
        subs: Sequence[SubscriptionPattern],
        upstreams: Mapping[str, _UpstreamLike],
        *,
        router: Router,
        events: trio.MemorySendChannel[ReactorEvent],
        telemetry: Telemetry,
        nursery: trio.Nursery,
        required: frozenset[str] = frozenset(),
        watched: Callable[[str, str], bool] = lambda _server, _uri: False,
        keep: Callable[[Pair], bool] | None = None,
    ) -> None:
        self._subs = list(subs)
        self._keep = keep
        self._upstreams = upstreams
        self._router = router
        self._events = events
        self._telemetry = telemetry
        self._nursery = nursery
        self._required = required
        self._watched = watched
        self.pairs: set[Pair] = set()
        """(server, uri) of every declared subscription (globs expanded against the catalogs)."""
        self.unresolved: dict[str, str] = {}
        """Declared subscription patterns that resolve to nothing now -> why (rfcs/0134)."""
        self.unresolved_required: frozenset[str] = frozenset()
        """The patterns of :attr:`unresolved` that name a required server: readiness fails."""
        self._inflight: set[Pair] = set()
        """Pairs with a subscribe task running (never two at once)."""
        self._seeded: set[Pair] = set()
        """Pairs whose first establishment was followed by the start-up re-read."""

    def _catalogs(self) -> dict[str, Catalog | None]:
        return {
            name: (up.catalog() if up.capabilities is not None else None)
            for name, up in self._upstreams.items()
        }

    def refresh(self, reason: RefreshReason) -> list[Pair]:
        """Re-resolve every pattern; subscribe what is missing, drop what left a catalog, report the rest.

        Returns:
            the pairs that are no longer declared (their subscription states are stale).
        """
        if not self._subs:
            return []
        result = resolve(self._subs, self._catalogs(), self._required)
        if self._keep is not None:
            result = Resolution(
                tuple(p for p in result.pairs if self._keep(p)), result.unresolved, result.required
            )
        wanted = set(result.pairs)
        dropped = sorted(self.pairs - wanted)
        for pair in dropped:
            self._drop(pair)
        for pair in result.pairs:
            self.pairs.add(pair)
            up = self._upstreams.get(pair[0])
            if (
                up is None
                or pair in self._inflight
                or up.state is not ServerState.CONNECTED
                or pair[1] in up.subscriptions
            ):
                continue  # subscribed, on its way, or made when the server connects
            self._inflight.add(pair)
            # A URI that appeared in a catalog is seeded too (it may already
            # hold state worth acting on), but it is no start-up re-read.
            startup = reason != "catalog" and pair not in self._seeded
            self._nursery.start_soon(self._subscribe, pair, startup)
        for label, why in result.unresolved.items():
            if label not in self.unresolved:
                self._telemetry.emit(
                    "subscription.unresolved",
                    pattern=label,
                    error=why,
                    required=label in result.required,
                )
        self.unresolved = dict(result.unresolved)
        self.unresolved_required = result.required
        self._size_queues()
        return dropped

    def _drop(self, pair: Pair) -> None:
        self.pairs.discard(pair)
        server, uri = pair
        routed = any(r.glob.exact and r.glob.literal == uri for r in self._router.routes())
        up = self._upstreams.get(server)
        if up is not None and not routed and not self._watched(server, uri):
            self._nursery.start_soon(self._unsubscribe, up, uri)

    async def _subscribe(self, pair: Pair, startup: bool) -> None:
        server, uri = pair
        up = self._upstreams[server]
        try:
            await up.subscribe(uri)
        except AgentdError as exc:
            self._telemetry.emit("subscription.failed", server=server, uri=uri, error=str(exc))
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await self._events.send(SubscriptionStateChanged(server, uri, "failed", error=str(exc)))
            return
        finally:
            self._inflight.discard(pair)
        self._seeded.add(pair)
        # Read-after-subscribe: whatever changed before the subscription was
        # live (while agentd was down, while it started, or while this URI was
        # not subscribed) is delivered now, as one "possibly changed".
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await self._events.send(
                ResourceChanged(server=server, uri=uri, kind="synthetic", startup=startup)
            )

    async def _unsubscribe(self, up: _UpstreamLike, uri: str) -> None:
        with contextlib.suppress(AgentdError):
            await up.unsubscribe(uri)

    def _size_queues(self) -> None:
        """Default queue caps = the number of declared URIs each route owns (one queue entry per URI)."""
        owned: Counter[str] = Counter()
        for _server, uri in self.pairs:
            route = self._router.first_match(uri)
            if route is not None:
                owned[route.id] += 1
        for route_id, count in owned.items():
            self._router.set_watched(route_id, count)
