"""Restoring journaled sessions' self-subscriptions at start (before the reactor turns).

A session that had subscribed itself gets its ``self:<session>:<uri>`` routes
back at once (front, exact, owned by the session: what ``subscribe`` made),
and each URI is handed to the subscriptions component
(:class:`agentd.supervisor.routing.subscriptions.Subscriptions`), which subscribes it
again upstream as soon as its server is connected (the declared shell
performs it), followed by one synthetic "possibly changed" marked
``startup`` (the start-up re-read, rfcs/0130): a change made while agentd was
down wakes the session, which is then started from its journal. The
session's agent itself starts only at that delivery (lazy restore).

A subscription to one of agentd's own resources (``agent://ID``, an agent the
session had started; rfcs/0370) gets its route back too, with no server to
ask: that agent did not survive the restart, and the reactor completes it
``lost`` (:func:`restore_subscriptions` returns them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from agentd.core.errors import RouteError
from agentd.events import AGENT_SCHEME, OWN_SERVER
from agentd.observe.telemetry import Telemetry
from agentd.state.sessions import SessionJournals
from agentd.triggers.router import Continue, RouteSpec

if TYPE_CHECKING:
    from agentd.supervisor.routing.subscriptions import Subscriptions
    from agentd.triggers.router import Router
    from agentd.upstream import Upstream


def restore_subscriptions(
    journals: SessionJournals,
    router: Router,
    subscriptions: Subscriptions,
    upstreams: Mapping[str, Upstream],
    telemetry: Telemetry,
) -> list[tuple[str, str]]:
    """Add every journaled session's self-subscription routes back; their subscribes follow when a server is up.

    Returns ``(session, uri)`` of every restored ``agent://`` subscription: the
    agents those sessions were waiting for, which the reactor completes ``lost``.

    Args:
        journals: the scanned session journals.
        router: the reactor's router (the routes are added at once).
        subscriptions: decides the upstream subscribes (once each, when the server is connected).
        upstreams: server name -> connection (a server no longer configured is reported).
        telemetry: ``journal.subscription_restored`` / ``journal.subscription_failed``.
    """
    lost: list[tuple[str, str]] = []
    for session, subs in sorted(journals.sessions_with_subscriptions().items()):
        for uri, server in subs:
            own = uri.startswith(AGENT_SCHEME)
            if not own and (server is None or server not in upstreams):
                telemetry.emit(
                    "journal.subscription_failed",
                    session=session,
                    uri=uri,
                    server=server,
                    error="its server is not configured any more",
                )
                continue
            try:
                router.add_route(
                    RouteSpec(
                        match=uri, disposition=Continue(session=session), route_id=f"self:{session}:{uri}"
                    ),
                    front=True,
                    owner=session,
                )
            except (RouteError, ValueError) as exc:
                telemetry.emit(
                    "journal.subscription_failed", session=session, uri=uri, server=server, error=str(exc)
                )
                continue
            if own:
                telemetry.emit("journal.subscription_restored", session=session, uri=uri, server=OWN_SERVER)
                lost.append((session, uri))
                continue
            assert server is not None
            telemetry.emit("journal.subscription_restored", session=session, uri=uri, server=server)
            subscriptions.restored(server, uri)
    return lost


__all__ = ["restore_subscriptions"]
