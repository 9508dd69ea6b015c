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
from typing import Any

import trio

from agentd.state.sessions import SessionJournals
from agentd.supervisor.events import ResourceChanged, ServerState, SubscriptionStateChanged
from agentd.telemetry import Telemetry


class RestoredSubscriptions:
    """The self-subscriptions of journaled sessions, kept made until their session's agent takes them.

    Args:
        journals: the scanned session journals.
        reactor: its router gets the routes; updates go to its channel.
        upstreams: server name -> connection.
        telemetry: ``journal.subscription_restored`` / ``journal.subscription_failed``.
        nursery: where subscribe tasks run.
    """

    def __init__(
        self,
        journals: SessionJournals,
        reactor: Any,
        upstreams: Mapping[str, Any],
        telemetry: Telemetry,
        nursery: trio.Nursery,
    ) -> None:
        self._reactor = reactor
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
            self._reactor.router.add_route(
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
        send = self._reactor.send
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


__all__ = ["RestoredSubscriptions"]
