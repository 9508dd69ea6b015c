"""Which upstream subscriptions agentd wants, and why: events in, actions out (pure).

A ``(server, uri)`` subscription is wanted for one or more reasons:

* ``declared``: a declared subscription (``--subscribe [SERVER:]URI``,
  ``subscribe = [...]``) resolves to it; patterns are resolved against what
  each server offers by :func:`resolve` (rfcs/0134): a glob expands against
  the concrete resources of its server (or of every server, without a
  prefix); an exact URI with a server prefix is that pair; one without goes
  to every server that lists it, else to the first whose URI template
  matches it, else to the only server; anything else resolves to nothing,
  and says why, naming what the servers offer;
* ``self``, ``watch``, ``stage``, ``route``: an exact route owns the URI (a
  session's own ``subscribe``, also one restored from its journal, a watch,
  a staged declared route, a declared exact route): its changes must keep
  arriving;
* ``watched``: a watch holds it, from the moment ``watch_start`` picked its
  server (before its route exists) until it stops (the watch manager reports
  both).

:class:`Subscriptions` is the one place that decides whether an upstream
subscription is made or may be released (rfcs/0253). It keeps the declared
part (the pairs, what resolves to nothing, which subscribe is on its way,
which pair had its start-up re-read), the watches' holds and the restored
sessions' subscribes still to make, and answers, for each event, the
subscribe and unsubscribe actions to perform:

=====================================  ======================================================
event                                  actions
=====================================  ======================================================
start, a server (re)connected,         :meth:`~Subscriptions.refresh`: subscribe every declared
a catalog changed                      pair not subscribed yet (with the start-up re-read the
                                       first time) and every restored pair whose server is up;
                                       unsubscribe pairs no longer declared that nothing else
                                       needs
a subscribe finished                   :meth:`~Subscriptions.finished`
a session's subscription restored      :meth:`~Subscriptions.restored`: subscribed (with the
from its journal                       start-up re-read) by the next refresh its server is up
                                       for, unless its route went meanwhile
a watch picked its server             :meth:`~Subscriptions.watch_started` (its hold)
a watch stopped (its route gone)       :meth:`~Subscriptions.watch_stopped`: its hold goes;
                                       unsubscribe unless still needed (the watch manager
                                       performs it)
an agent unsubscribed                  :meth:`~Subscriptions.unsubscribed`: unsubscribe unless
                                       still needed (the hub performs it)
an agent exited                        :meth:`~Subscriptions.released`: unsubscribe its
                                       subscriptions nothing else needs
=====================================  ======================================================

Performing them is someone else's job: the declared shell
(:class:`agentd.supervisor.routing.declared.DeclaredSubscriptions`) runs the
subscribes of a refresh, the reactor (and through its answers the hub) and
the watch manager the unsubscribes. No trio, no I/O: the router it reads is
the pure router.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Literal, Protocol

from agentd.triggers.glob import compile_glob
from agentd.triggers.patterns import overlaps, template_atoms
from agentd.triggers.router import Router

__all__ = [
    "Action",
    "CatalogLike",
    "DeclaredRefresh",
    "Pair",
    "Reason",
    "RefreshReason",
    "Refreshed",
    "Resolution",
    "ServerView",
    "Subscribe",
    "SubscriptionPattern",
    "Subscriptions",
    "Unsubscribe",
    "WatchKey",
    "pattern_label",
    "resolve",
]


class CatalogLike(Protocol):
    """What one server offers (:class:`agentd.upstream.resolve.Catalog`)."""

    @property
    def uris(self) -> frozenset[str]: ...
    @property
    def templates(self) -> tuple[str, ...]: ...
    def matches_template(self, uri: str) -> bool: ...


#: Most resources / templates a warning lists per server (the rest are counted).
OFFER_SAMPLE = 5

Pair = tuple[str, str]
"""``(server, uri)``."""

RefreshReason = Literal["start", "connected", "catalog"]
"""Why the declared subscriptions are re-resolved: start-up, a server (re)connected, a catalog changed."""


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


def _offers(name: str, catalog: CatalogLike | None) -> str:
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
    catalogs: Mapping[str, CatalogLike | None],
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
            could: list[str] = []
            for name in candidates:
                catalog = catalogs.get(name)
                if catalog is not None:
                    found += [(name, uri) for uri in sorted(catalog.uris) if glob.match(uri)]
                    if any(overlaps(glob, template_atoms(t)) for t in catalog.templates):
                        could.append(name)
            if not found and could:
                # Resolved, to nothing for now: the server lists resources of this shape as
                # they come (a webhook's pending deliveries); each is subscribed and routed when
                # it appears (rfcs/0350), and an empty listing is no error (readiness holds).
                continue
            why = (
                f"no concrete resource matches the glob {sub.uri!r}, and no resource template of the "
                "servers could produce one (resource templates are not subscribable)"
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


# --------------------------------------------------------------------------- events in, actions out

Reason = Literal["declared", "self", "watch", "stage", "route", "watched"]
"""Why a subscription is wanted (see the module docstring)."""


@dataclass(frozen=True, slots=True)
class Subscribe:
    """Subscribe ``uri`` on ``server``; then post one "possibly changed" (``startup``: the start-up re-read).

    ``restored``: for a session restored from its journal (its failure is a
    ``journal.subscription_failed``; no :meth:`Subscriptions.finished` follows).

    ``created``: the URI newly appeared under a declared glob in a catalog
    change (rfcs/0350): its change (``kind="list_changed"``) is routed at
    once, by the caller, instead of after the subscribe; reads of it wait for
    the subscribe to end, and no re-read follows it.
    """

    server: str
    uri: str
    startup: bool
    restored: bool = False
    created: bool = False


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    """Drop the upstream subscription to ``uri`` on ``server``: nothing needs it any more."""

    server: str
    uri: str


Action = Subscribe | Unsubscribe
"""What the caller performs."""


@dataclass(frozen=True, slots=True)
class ServerView:
    """One server as :meth:`Subscriptions.refresh` needs it, now."""

    connected: bool
    """Its connection is up (a subscribe can be made)."""
    subscribed: AbstractSet[str]
    """The URIs it is subscribed to now (may be a live view: read it during the refresh only)."""
    catalog: CatalogLike | None
    """What it offers; None if it never connected."""


@dataclass(frozen=True, slots=True)
class Refreshed:
    """The outcome of :meth:`Subscriptions.refresh`."""

    actions: tuple[Action, ...]
    """Unsubscribes of pairs no longer declared, then subscribes of declared pairs not made."""
    forgotten: tuple[Pair, ...]
    """Pairs no longer declared (their subscription states are stale)."""
    unresolved: tuple[tuple[str, str, bool], ...]
    """Patterns that newly resolve to nothing: ``(pattern, why, required)``."""


@dataclass(frozen=True, slots=True)
class DeclaredRefresh:
    """What one :meth:`DeclaredSubscriptions.refresh` leaves to the reactor."""

    forgotten: list[Pair]
    """Pairs no longer declared (their subscription states are stale)."""
    created: list[Pair]
    """Pairs that appeared under a declared glob in a catalog change: the reactor routes each
    at once as a change (``kind="list_changed"``); their subscribes are on their way, with
    reads held until they end, and no re-read follows them (rfcs/0350)."""


WatchKey = tuple[str, str]
"""``(session, name)`` of a watch."""


@dataclass(eq=False)
class Subscriptions:
    """Which subscriptions are wanted and why; each event's actions (see the module docstring).

    Args:
        patterns: the declared subscriptions, in configuration order.
        router: the reactor's router (its exact routes keep their URIs
            subscribed; the default queue caps follow the declared URIs).
        required: names of required servers.
        keep: ``--shard``: whether this replica subscribes a declared pair (it
            handles its updates); the others are left to the replicas that own them.
    """

    patterns: Sequence[SubscriptionPattern]
    router: Router
    required: frozenset[str] = frozenset()
    keep: Callable[[Pair], bool] | None = None
    pairs: set[Pair] = field(default_factory=set, init=False)
    """(server, uri) of every declared subscription (globs expanded against the catalogs)."""
    version: int = field(default=0, init=False)
    """Bumped by every :meth:`refresh` (when :attr:`pairs` may have changed): readers cache on it."""
    unresolved: dict[str, str] = field(default_factory=dict, init=False)
    """Declared patterns that resolve to nothing now -> why (rfcs/0134)."""
    unresolved_required: frozenset[str] = field(default=frozenset(), init=False)
    """The patterns of :attr:`unresolved` that name a required server: readiness fails."""
    _inflight: set[Pair] = field(default_factory=set, init=False)
    """Pairs with a subscribe on its way (never two at once)."""
    _seeded: set[Pair] = field(default_factory=set, init=False)
    """Pairs whose first establishment was followed by the start-up re-read."""
    _watches: dict[WatchKey, Pair] = field(default_factory=dict, init=False)
    """The watches' holds: (session, name) -> the pair it reads."""
    _restoring: set[Pair] = field(default_factory=set, init=False)
    """Restored sessions' pairs whose subscribe waits for their server."""

    # -- why --------------------------------------------------------------------------

    def why(self, server: str, uri: str) -> frozenset[Reason]:
        """Every reason ``(server, uri)`` is wanted now (empty: nothing needs it)."""
        reasons: set[Reason] = set()
        if (server, uri) in self.pairs:
            reasons.add("declared")
        for route in self.router.routes():
            if route.glob.exact and route.glob.literal == uri:
                kind = route.kind
                reasons.add("route" if kind == "declared" or kind == "added" else kind)
        if (server, uri) in self._watches.values():
            reasons.add("watched")
        return frozenset(reasons)

    def needed(self, server: str, uri: str) -> bool:
        """Whether anything needs ``(server, uri)`` subscribed: a declared pair, an exact route, a watch."""
        return (
            (server, uri) in self.pairs
            or any(r.glob.exact and r.glob.literal == uri for r in self.router.routes())
            or (server, uri) in self._watches.values()
        )

    # -- events -----------------------------------------------------------------------

    def refresh(self, servers: Mapping[str, ServerView], reason: RefreshReason) -> Refreshed:
        """Start-up, a server (re)connected or a catalog changed: re-resolve every pattern.

        Args:
            servers: every configured server, in configuration order.
            reason: why (a URI that appeared in a catalog is subscribed and
                seeded too, but that is no start-up re-read).
        """
        self.version += 1
        if not self.patterns:
            return Refreshed(self._restore(servers, reason, []), (), ())
        result = resolve(self.patterns, {name: view.catalog for name, view in servers.items()}, self.required)
        wanted = [p for p in result.pairs if self.keep is None or self.keep(p)]
        forgotten = sorted(self.pairs - set(wanted))
        actions: list[Action] = []
        for pair in forgotten:
            self.pairs.discard(pair)
            server, uri = pair
            if server in servers and not self.needed(server, uri):
                actions.append(Unsubscribe(server, uri))
        for pair in wanted:
            first = pair not in self.pairs
            self.pairs.add(pair)
            view = servers.get(pair[0])
            if view is None or pair in self._inflight or not view.connected or pair[1] in view.subscribed:
                continue  # subscribed, on its way, or made when the server connects
            self._inflight.add(pair)
            actions.append(
                Subscribe(
                    pair[0],
                    pair[1],
                    startup=reason != "catalog" and pair not in self._seeded,
                    # Appeared in a catalog change while its server is up: routed at once (rfcs/0350).
                    # A pair declared before (a subscribe that failed, made again) is re-read as ever.
                    created=reason == "catalog" and first,
                )
            )
        new = tuple(
            (label, why, label in result.required)
            for label, why in result.unresolved.items()
            if label not in self.unresolved
        )
        self.unresolved = dict(result.unresolved)
        self.unresolved_required = result.required
        return Refreshed(self._restore(servers, reason, actions), tuple(forgotten), new)

    def _restore(
        self, servers: Mapping[str, ServerView], reason: RefreshReason, actions: list[Action]
    ) -> tuple[Action, ...]:
        """``actions`` plus the restored pairs' subscribes (at start-up or when their server connects).

        Once each: a pair a declared subscribe of this refresh makes too gets
        that one subscribe, with the start-up re-read; a pair whose route went
        meanwhile (its session's agent ran and exited) is not subscribed.
        """
        if reason == "catalog" or not self._restoring:
            return tuple(actions)
        for pair in sorted(self._restoring):
            view = servers.get(pair[0])
            if view is None or not view.connected:
                continue  # its server connects later
            self._restoring.discard(pair)
            if not self.needed(*pair):
                continue
            made = next(
                (n for n, a in enumerate(actions) if isinstance(a, Subscribe) and (a.server, a.uri) == pair),
                None,
            )
            if made is not None:
                actions[made] = Subscribe(pair[0], pair[1], startup=True)
            else:
                actions.append(Subscribe(pair[0], pair[1], startup=True, restored=True))
        return tuple(actions)

    def restored(self, server: str, uri: str) -> None:
        """A journaled session's subscription is back (its route is in the router): subscribe it when its server is up."""
        self._restoring.add((server, uri))

    def watch_started(self, key: WatchKey, server: str, uri: str) -> None:
        """A watch picked ``server`` for ``uri``: it holds the pair (before its route exists) until it stops."""
        self._watches[key] = (server, uri)

    def watch_stopped(self, key: WatchKey) -> bool:
        """The watch ``key`` stopped (or never started), its route already gone: its hold is gone.

        Returns:
            Whether the watch manager unsubscribes the pair the watch held
            (nothing else needs it, as :meth:`released` decides).
        """
        pair = self._watches.pop(key, None)
        return pair is not None and bool(self.released([pair]))

    def finished(self, server: str, uri: str, *, ok: bool) -> None:
        """A subscribe of :meth:`refresh` ended (``ok``: made, and its re-read follows)."""
        self._inflight.discard((server, uri))
        if ok:
            self._seeded.add((server, uri))

    def unsubscribed(self, server: str, uri: str) -> list[Unsubscribe]:
        """An agent's ``unsubscribe`` removed its route: the unsubscribe, unless still needed."""
        return self.released([(server, uri)])

    def released(self, held: Iterable[tuple[str, str]]) -> list[Unsubscribe]:
        """An agent exited holding these ``(server, uri)`` (its routes already gone): what to unsubscribe.

        A restored pair whose server never came up was never made: nothing to release.
        """
        actions = []
        for pair in held:
            if self.needed(*pair):
                continue
            if pair in self._restoring:
                self._restoring.discard(pair)
                continue
            actions.append(Unsubscribe(*pair))
        return actions

    def queue_caps(self) -> dict[str, int]:
        """Default queue caps: the number of declared URIs each route owns (one queue entry per URI)."""
        owned: Counter[str] = Counter()
        for _server, uri in self.pairs:
            route = self.router.first_match(uri)
            if route is not None:
                owned[route.id] += 1
        return dict(owned)
