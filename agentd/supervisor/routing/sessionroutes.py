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

A model's subscriptions are capped (rfcs/0265): a session holds at most
``per_session`` ``self`` routes and all sessions together ``total``
(:class:`SubscriptionCaps`); the router counts them, restored ones included.
A ``subscribe`` past a cap raises :class:`~agentd.core.errors.LimitReached`, whose
``first`` is true once per cap hit: until a subscription of that scope goes
(or a subscribe passes), later refusals are not news.

Pure and synchronous (the reactor calls it; it never awaits).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import NoReturn

from agentd.core.errors import ConfigError, LimitReached, RouteError
from agentd.core.limits import (
    DEFAULT_MAX_SELF_SUBSCRIPTIONS,
    DEFAULT_MAX_SELF_SUBSCRIPTIONS_PER_SESSION,
    ModelLimit,
)
from agentd.triggers.router import Continue, Route, Router, RouteSpec


@dataclass(frozen=True, slots=True)
class SubscriptionCaps:
    """How many self-subscriptions a session, and all sessions together, may hold.

    Attributes:
        per_session: ``max_self_subscriptions_per_session``.
        total: ``max_self_subscriptions``.
    """

    per_session: int = DEFAULT_MAX_SELF_SUBSCRIPTIONS_PER_SESSION
    total: int = DEFAULT_MAX_SELF_SUBSCRIPTIONS

    def __post_init__(self) -> None:
        for name, value in (
            ("max_self_subscriptions_per_session", self.per_session),
            ("max_self_subscriptions", self.total),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(name, value, "give a whole number of 1 or more")


#: The setting behind each subscription cap, as flag and variable (for the refusal's text).
_SPELLED: dict[ModelLimit, str] = {
    "max_self_subscriptions_per_session": (
        "--max-self-subscriptions-per-session / AGENTD_MAX_SELF_SUBSCRIPTIONS_PER_SESSION"
    ),
    "max_self_subscriptions": "--max-self-subscriptions / AGENTD_MAX_SELF_SUBSCRIPTIONS",
}


class SessionRoutes:
    """Adds and removes the ``self`` and ``watch`` routes of sessions in ``router``.

    Args:
        router: the reactor's router.
        caps: the caps on self-subscriptions (rfcs/0265).
    """

    def __init__(self, router: Router, caps: SubscriptionCaps | None = None) -> None:
        self._router = router
        self.caps = caps or SubscriptionCaps()
        self._watches: dict[str, set[str]] = {}
        """Session -> names of the watches it owns."""
        self._refusing: set[tuple[ModelLimit, str]] = set()
        """Caps refusing now, by (limit, session; "" for the total): told once per hit, cleared when one goes."""

    # -- subscribe ---------------------------------------------------------------------

    def subscribe(self, session: str, uri: str) -> Route:
        """The session's exact ``self`` route for ``uri`` (idempotent: a held URI is no new one).

        Raises:
            LimitReached: the session, or all sessions together, hold as many
                subscriptions as the caps allow (names the cap, its setting and the fix).
            RouteError: another session owns the URI, or this session watches it
                (the message names the route and the fix).
            ValueError: ``uri`` is no valid match.
        """
        if self._router.get(_self_route_id(session, uri)) is None:
            self._check_caps(session, uri)
        route = self._router.add_route(
            RouteSpec(
                match=uri, disposition=Continue(session=session), route_id=_self_route_id(session, uri)
            ),
            front=True,
            owner=session,
        )
        if route.kind == "watch":
            raise RouteError(
                f"{uri!r} is already watched by this session (route {route.id!r}); its changes arrive as "
                "watch notices: call watch_stop first to be woken by every change instead"
            )
        # Below both caps again: a later refusal is a new hit.
        self._refusing.discard(("max_self_subscriptions_per_session", session))
        self._refusing.discard(("max_self_subscriptions", ""))
        return route

    def _check_caps(self, session: str, uri: str) -> None:
        held = self._router.owned(session)
        if held >= self.caps.per_session:
            self._refuse(
                "max_self_subscriptions_per_session",
                session,
                self.caps.per_session,
                f"subscribe {uri!r} refused: this session already holds {held} subscriptions, the limit "
                f"(max_self_subscriptions_per_session = {self.caps.per_session})",
            )
        total = self._router.owned()
        if total >= self.caps.total:
            self._refuse(
                "max_self_subscriptions",
                "",
                self.caps.total,
                f"subscribe {uri!r} refused: the sessions of this agentd already hold {total} subscriptions "
                f"together, the limit (max_self_subscriptions = {self.caps.total})",
            )

    def _refuse(self, limit: ModelLimit, scope: str, value: int, what: str) -> NoReturn:
        first = (limit, scope) not in self._refusing
        self._refusing.add((limit, scope))
        raise LimitReached(
            f"{what}; unsubscribe from a URI you no longer need and try again (an operator raises the "
            f"limit with {_SPELLED[limit]})",
            limit=limit,
            value=value,
            first=first,
        )

    def unsubscribe(self, session: str, uri: str, *, withdrawn: bool = False) -> None:
        """Remove the session's ``self`` route for ``uri`` (a URI it never subscribed is fine).

        ``withdrawn``: what is queued on it was handed over another way (not a drop).
        """
        # remove_route raises RouteError (not KeyError) for an unknown id: an
        # unsubscribe of a URI the agent never subscribed must not crash the reactor.
        with contextlib.suppress(RouteError):
            self._router.remove_route(_self_route_id(session, uri), withdrawn=withdrawn)
            # Below both caps again: a later refusal is a new hit (and a gone session leaves nothing behind).
            self._refusing.discard(("max_self_subscriptions_per_session", session))
            self._refusing.discard(("max_self_subscriptions", ""))

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


def _self_route_id(session: str, uri: str) -> str:
    return f"self:{session}:{uri}"


def _watch_route_id(session: str, name: str) -> str:
    return f"watch:{session}:{name}"
