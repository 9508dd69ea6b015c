"""Restoring journaled sessions' self-subscriptions at start (before the reactor turns).

A session that had subscribed itself gets its ``self:<session>:<uri>`` routes
back at once (front, exact, owned by the session: what ``subscribe`` made),
and each URI is subscribed again upstream as soon as its server is connected,
followed by one synthetic "possibly changed" marked ``startup`` (the start-up
re-read, rfcs/0130): a change made while agentd was down wakes the session,
which is then started from its journal. The session's agent itself starts
only at that delivery (lazy restore).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING

import trio

from agentd.events import ResourceChanged, ServerState, SubscriptionStateChanged
from agentd.state.sessions import SessionJournals
from agentd.telemetry import Telemetry

if TYPE_CHECKING:
    from agentd.events import ReactorEvent
    from agentd.supervisor.declared import DeclaredSubscriptions, RefreshReason
    from agentd.triggers.router import Router
    from agentd.upstream import Upstream


class RestoredSubscriptions:
    """The self-subscriptions of journaled sessions, kept made until their session's agent takes them.

    Args:
        journals: the scanned session journals.
        router: the reactor's router (the routes are added at once).
        events: the reactor's channel (subscription outcomes, the start-up re-read).
        upstreams: server name -> connection.
        telemetry: ``journal.subscription_restored`` / ``journal.subscription_failed``.
        nursery: where subscribe tasks run.
    """

    def __init__(
        self,
        journals: SessionJournals,
        router: Router,
        events: trio.MemorySendChannel[ReactorEvent],
        upstreams: Mapping[str, Upstream],
        telemetry: Telemetry,
        nursery: trio.Nursery,
    ) -> None:
        self._router = router
        self._events = events
        self._upstreams = upstreams
        self._telemetry = telemetry
        self._nursery = nursery
        self._pending: set[tuple[str, str]] = set()
        for session, subs in sorted(journals.sessions_with_subscriptions().items()):
            for uri, server in subs:
                self._restore_route(session, uri, server)

    def _restore_route(self, session: str, uri: str, server: str | None) -> None:
        from agentd.errors import RouteError
        from agentd.triggers.router import Continue, RouteSpec

        if server is None or server not in self._upstreams:
            self._telemetry.emit(
                "journal.subscription_failed",
                session=session,
                uri=uri,
                server=server,
                error="its server is not configured any more",
            )
            return
        try:
            self._router.add_route(
                RouteSpec(match=uri, disposition=Continue(session=session), route_id=f"self:{session}:{uri}"),
                front=True,
                owner=session,
            )
        except (RouteError, ValueError) as exc:
            self._telemetry.emit(
                "journal.subscription_failed", session=session, uri=uri, server=server, error=str(exc)
            )
            return
        self._telemetry.emit("journal.subscription_restored", session=session, uri=uri, server=server)
        self._pending.add((server, uri))

    def refresh(self, _reason: str = "start") -> None:
        """Subscribe every restored pair whose server is connected now (the rest wait for it)."""
        for server, uri in sorted(self._pending):
            up = self._upstreams[server]
            if up.state is not ServerState.CONNECTED:
                continue
            self._pending.discard((server, uri))
            self._nursery.start_soon(self._subscribe, server, uri)

    async def _subscribe(self, server: str, uri: str) -> None:
        from agentd.errors import AgentdError

        up = self._upstreams[server]
        send = self._events
        try:
            if uri not in up.subscriptions:
                await up.subscribe(uri)
        except AgentdError as exc:
            self._telemetry.emit("journal.subscription_failed", server=server, uri=uri, error=str(exc))
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await send.send(SubscriptionStateChanged(server, uri, "failed", error=str(exc)))
            return
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await send.send(ResourceChanged(server=server, uri=uri, kind="synthetic", startup=True))

    def alongside(self, declared: DeclaredSubscriptions) -> _Alongside:
        """``declared`` for the reactor, refreshing these too whenever a server connects."""
        return _Alongside(declared, self)


class _Alongside:
    """The reactor's view of the declared subscriptions, with the restored ones kept made as well."""

    def __init__(self, declared: DeclaredSubscriptions, restored: RestoredSubscriptions) -> None:
        self._declared = declared
        self._restored = restored

    @property
    def pairs(self) -> set[tuple[str, str]]:
        return self._declared.pairs

    @property
    def unresolved(self) -> Mapping[str, str]:
        return self._declared.unresolved

    @property
    def unresolved_required(self) -> frozenset[str]:
        return self._declared.unresolved_required

    def refresh(self, reason: RefreshReason) -> list[tuple[str, str]]:
        dropped = self._declared.refresh(reason)
        if reason == "connected":
            self._restored.refresh(reason)
        return dropped


__all__ = ["RestoredSubscriptions"]
