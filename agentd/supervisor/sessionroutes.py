"""The routes sessions make for themselves: ``subscribe`` (kind ``self``) and watches (kind ``watch``).

Both are exact routes at the front of the router, continuing into a session:

* ``self:<session>:<uri>``: the session's own ``subscribe(uri)``; a change
  wakes the session with the plain delivery text. One URI has one owner
  (the router refuses a second session, naming the owner).
* ``watch:<session>:<name>``: a watch's route; its deliveries go to the watch
  manager (which re-reads, filters and debounces) and come back as notices.
  Several watches may share a URI; a URI is either subscribed or watched by
  a session, never both.

The ids are for telemetry; what a route is, is its :data:`~agentd.triggers.router.RouteKind`.
Pure and synchronous (the reactor calls it; it never awaits).
"""

from __future__ import annotations

import contextlib

from agentd.errors import RouteError
from agentd.triggers.router import Continue, Route, Router, RouteSpec


class SessionRoutes:
    """Adds and removes the ``self`` and ``watch`` routes of sessions in ``router``."""

    def __init__(self, router: Router) -> None:
        self._router = router
        self._watches: dict[str, set[str]] = {}
        """Session -> names of the watches it owns."""

    # -- subscribe ---------------------------------------------------------------------

    def subscribe(self, session: str, uri: str) -> Route:
        """The session's exact ``self`` route for ``uri`` (idempotent).

        Raises:
            RouteError: another session owns the URI, or this session watches it
                (the message names the route and the fix).
            ValueError: ``uri`` is no valid match.
        """
        route = self._router.add_route(
            RouteSpec(match=uri, disposition=Continue(session=session), route_id=f"self:{session}:{uri}"),
            front=True,
            owner=session,
        )
        if route.kind == "watch":
            raise RouteError(
                f"{uri!r} is already watched by this session (route {route.id!r}); its changes arrive as "
                "watch notices: call watch_stop first to be woken by every change instead"
            )
        return route

    def unsubscribe(self, session: str, uri: str) -> None:
        """Remove the session's ``self`` route for ``uri`` (a URI it never subscribed is fine)."""
        # remove_route raises RouteError (not KeyError) for an unknown id: an
        # unsubscribe of a URI the agent never subscribed must not crash the reactor.
        with contextlib.suppress(RouteError):
            self._router.remove_route(f"self:{session}:{uri}")

    # -- watches -----------------------------------------------------------------------

    def add_watch(self, session: str, name: str, uri: str) -> str:
        """Add the exact, front route ``watch:<session>:<name>`` for ``uri``; return its id.

        Raises:
            RouteError: the URI has a ``self`` route, or the id is taken.
            ValueError: ``uri`` is no valid match.
        """
        for r in self._router.routes():
            if r.glob.exact and r.glob.literal == uri and r.kind == "self":
                raise RouteError(
                    f"{uri!r} is already subscribed by session {r.owner!r} (route {r.id!r}); a URI is either "
                    "subscribed or watched: call unsubscribe first (a watch also wakes you, with a filtered notice)"
                )
        route_id = _watch_route_id(session, name)
        route = self._router.add_route(
            RouteSpec(
                match=uri,
                disposition=Continue(session=route_id),
                debounce=0.0,
                route_id=route_id,
                exact=True,
                kind="watch",
            ),
            front=True,
        )
        route.owner = session  # a subscribe from another session names this owner
        self._watches.setdefault(session, set()).add(name)
        return route_id

    def remove_watch(self, session: str, name: str) -> None:
        """Remove a watch's route (idempotent)."""
        names = self._watches.get(session)
        if names is not None:
            names.discard(name)
            if not names:
                del self._watches[session]
        route_id = _watch_route_id(session, name)
        if self._router.get(route_id) is not None:
            self._router.remove_route(route_id)

    def drop_session(self, session: str) -> list[str]:
        """The session's agent exited: remove every watch route it owns; return the watch names."""
        names = sorted(self._watches.pop(session, set()))
        for name in names:
            route_id = _watch_route_id(session, name)
            if self._router.get(route_id) is not None:
                self._router.remove_route(route_id)
        return names

    def watches(self, session: str) -> frozenset[str]:
        """The names of the watches ``session`` owns."""
        return frozenset(self._watches.get(session, ()))

    def has_session(self, session: str) -> bool:
        """Whether ``session`` owns any watch (its name is taken even without an agent)."""
        return bool(self._watches.get(session))


def _watch_route_id(session: str, name: str) -> str:
    return f"watch:{session}:{name}"
