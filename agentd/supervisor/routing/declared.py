"""Declared subscriptions: keeping what the configuration asks to watch, watched.

What is wanted and why is decided by the pure
:class:`~agentd.supervisor.routing.subscriptions.Subscriptions` (the patterns, their
expansion against each server's catalog, rfcs/0134); this shell performs
its actions: it subscribes every declared pair (at start-up, and again
whenever its server connects, so a subscription that was never made or was
lost comes back), follows each first establishment with one synthetic
"possibly changed" event marked ``startup`` (the start-up re-read,
rfcs/0130), unsubscribes pairs whose resource left the catalog, and reports
patterns that resolve to nothing (``subscription.unresolved``, ``/metrics``,
and readiness when a required server is named). It also makes the
subscribes of sessions restored from their journals
(:mod:`agentd.state.resume`) that the component returns.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Mapping
from collections.abc import Set as AbstractSet
from typing import Protocol, assert_never

import trio

from agentd.core.errors import AgentdError
from agentd.events import ReactorEvent, ResourceChanged, ServerState, SubscriptionStateChanged
from agentd.observe.telemetry import Telemetry
from agentd.observe.timeline import mark
from agentd.supervisor.routing.subscriptions import (
    DeclaredRefresh,
    Pair,
    RefreshReason,
    Resolution,
    ServerView,
    Subscribe,
    SubscriptionPattern,
    Subscriptions,
    Unsubscribe,
    pattern_label,
    resolve,
)
from agentd.supervisor.routing.unmatched import subscription_fix
from agentd.upstream.resolve import Catalog
from agentd.upstream.subscriptions import ReadHold, sample

# The pure part (resolution, what is wanted) lives in agentd.supervisor.routing.subscriptions.
__all__ = [
    "DeclaredRefresh",
    "DeclaredSubscriptions",
    "RefreshReason",
    "Resolution",
    "SubscriptionPattern",
    "pattern_label",
    "resolve",
]


class _UpstreamLike(Protocol):
    state: ServerState

    @property
    def subscriptions(self) -> AbstractSet[str]: ...
    @property
    def capabilities(self) -> object | None: ...
    def catalog(self) -> Catalog: ...
    def hold_reads(self, uris: Collection[str]) -> ReadHold: ...
    async def subscribe_many(self, uris: Collection[str]) -> dict[str, str]: ...
    async def unsubscribe(self, uri: str) -> None: ...


class DeclaredSubscriptions:
    """Performs the declared subscriptions' actions (see the module docstring).

    :meth:`refresh` is synchronous and never blocks: the app calls it once
    before the reactor runs, then the reactor calls it (from its event
    handlers) when a server connects or its catalog changes; subscribing runs
    in tasks that report back through the reactor's channel.

    Args:
        subscriptions: the component that decides (its patterns are the
            declared subscriptions; the reactor, the watch manager and the
            restored sessions share it).
        upstreams: server name -> its connection, in configuration order.
        events: the reactor's channel (subscription outcomes, the start-up re-read).
        telemetry: NDJSON events.
        nursery: where subscribe/unsubscribe tasks run.
    """

    def __init__(
        self,
        subscriptions: Subscriptions,
        upstreams: Mapping[str, _UpstreamLike],
        *,
        events: trio.MemorySendChannel[ReactorEvent],
        telemetry: Telemetry,
        nursery: trio.Nursery,
    ) -> None:
        self.subscriptions = subscriptions
        """What is wanted and why (pure); the reactor reads it too."""
        self._upstreams = upstreams
        self._events = events
        self._telemetry = telemetry
        self._nursery = nursery

    @property
    def pairs(self) -> set[Pair]:
        """(server, uri) of every declared subscription (globs expanded against the catalogs)."""
        return self.subscriptions.pairs

    @property
    def unresolved(self) -> dict[str, str]:
        """Declared subscription patterns that resolve to nothing now -> why (rfcs/0134)."""
        return self.subscriptions.unresolved

    @property
    def unresolved_required(self) -> frozenset[str]:
        """The patterns of :attr:`unresolved` that name a required server: readiness fails."""
        return self.subscriptions.unresolved_required

    def refresh(self, reason: RefreshReason) -> DeclaredRefresh:
        """Re-resolve every pattern; subscribe what is missing, drop what left a catalog, report the rest.

        Returns:
            the pairs no longer declared, and those to route at once (see :class:`DeclaredRefresh`).
        """
        views = {
            name: ServerView(
                connected=up.state is ServerState.CONNECTED,
                subscribed=up.subscriptions,
                catalog=up.catalog() if up.capabilities is not None else None,
            )
            for name, up in self._upstreams.items()
        }
        refreshed = self.subscriptions.refresh(views, reason)
        # One subscribe per server for all its URIs: they share one listen stream (rfcs/0260).
        by_server: dict[str, list[Subscribe]] = {}
        for action in refreshed.actions:
            match action:
                case Subscribe():
                    by_server.setdefault(action.server, []).append(action)
                case Unsubscribe():
                    self._nursery.start_soon(self._unsubscribe, self._upstreams[action.server], action.uri)
                case _:
                    assert_never(action)
        created: list[Pair] = []
        for server, actions in by_server.items():
            fresh = [a.uri for a in actions if a.created]
            # Held now, before the reactor routes them: no read of a created URI can come first.
            hold = self._upstreams[server].hold_reads(fresh) if fresh else None
            created += [(server, uri) for uri in fresh]
            self._nursery.start_soon(self._subscribe, server, actions, hold)
        patterns = {pattern_label(p): p.uri for p in self.subscriptions.patterns}
        for label, why, required in refreshed.unresolved:
            self._telemetry.emit(
                "subscription.unresolved",
                pattern=label,
                error=why,
                required=required,
                fix=subscription_fix(patterns.get(label, label)),
            )
        for route_id, count in self.subscriptions.queue_caps().items():
            self.subscriptions.router.set_watched(route_id, count)
        return DeclaredRefresh(list(refreshed.forgotten), created)

    async def _subscribe(self, server: str, actions: list[Subscribe], hold: ReadHold | None) -> None:
        """Subscribe ``actions``' URIs on ``server`` at once; report failures per reason; then the re-reads.

        ``hold``: the held reads of the created URIs, released once the subscribe ended.
        """
        try:
            await self._subscribe_held(server, actions)
        finally:
            if hold is not None:
                hold.release()

    async def _subscribe_held(self, server: str, actions: list[Subscribe]) -> None:
        up = self._upstreams[server]
        uris = [a.uri for a in actions if not a.restored or a.uri not in up.subscriptions]
        whole: str | None = None
        try:
            failed = await up.subscribe_many(uris)
        except AgentdError as exc:
            # The server cannot subscribe at all (not connected, no capability): its own message.
            whole = str(exc)
            failed = dict.fromkeys(uris, whole)
        refused: dict[str, set[str]] = {}
        ok: list[Subscribe] = []
        for action in actions:
            why = failed.get(action.uri)
            if not action.restored:
                self.subscriptions.finished(server, action.uri, ok=why is None)
            if why is None:
                ok.append(action)
            elif action.restored:
                error = whole or f"server {server!r} could not subscribe to {action.uri!r}: {why}"
                self._telemetry.emit(
                    "journal.subscription_failed", server=server, uri=action.uri, error=error
                )
            else:
                refused.setdefault(why, set()).add(action.uri)
        # One line per reason, not per URI: a refused glob of 10,000 URIs is one line.
        for why, group in refused.items():
            if whole is not None:
                error = whole
            elif len(group) == 1:
                error = f"server {server!r} could not subscribe to {next(iter(group))!r}: {why}"
            else:
                error = f"server {server!r} could not subscribe to {len(group)} URIs: {why}"
            self._telemetry.emit(
                "subscription.failed", server=server, uris=len(group), sample=sample(group), error=error
            )
            await self._send(SubscriptionStateChanged(server, frozenset(group), "failed", error=error))
        # Read-after-subscribe: whatever changed before the subscription was
        # live (while agentd was down, while it started, or while this URI was
        # not subscribed) is delivered now, as one "possibly changed".
        for action in ok:
            if action.created:
                continue  # routed when it appeared; reads waited for this subscribe (rfcs/0350)
            mark("declared.reread", action.uri)
            await self._send(
                ResourceChanged(server=server, uri=action.uri, kind="synthetic", startup=action.startup)
            )

    async def _send(self, event: ReactorEvent) -> None:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await self._events.send(event)

    async def _unsubscribe(self, up: _UpstreamLike, uri: str) -> None:
        with contextlib.suppress(AgentdError):
            await up.unsubscribe(uri)
