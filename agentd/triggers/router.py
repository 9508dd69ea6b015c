"""Reactive routing: which route owns a changed URI, and when it is delivered.

Size: over 600 lines because matching, queues, overflow and delivery are
one pure algorithm over one route table (glob matching lives in ``glob.py``).

Pure and synchronous: nothing here awaits, does I/O or reads a clock. The
reactor passes ``now`` (monotonic seconds) into every call that depends on
time and turns the returned decisions (:class:`SpawnDelivery`,
:class:`ContinueDelivery`) into process spawns and session turns.

The flow for one change (rfcs/0010 and rfcs/0011):

1. :meth:`Router.ingest` finds the single owning route (:meth:`Router.first_match`:
   exact beats glob, then the longest literal prefix, then declaration order;
   no fan-out) and pushes the event onto that route's :class:`RouteQueue`
   (keyed by URI, newest wins). It (re)arms the route's trailing debounce
   deadline, capped by ``max_wait``.
2. The reactor sleeps until :meth:`Router.next_deadline` (or its next event).
3. :meth:`Router.take_deliveries` hands out everything that is due and has
   capacity: one spawn per free inflight slot, or one continue delivery per
   idle session carrying every queued URI for it as a set.

Overflow policies (``RouteSpec.overflow``) apply when a *new* URI arrives at a
full queue (a URI already queued always coalesces in place):

* ``coalesce`` (default): the new URI is *deferred*: kept aside, by URI and
  newest wins, and moved into the queue as deliveries make room, oldest
  first (rfcs/0372: a change that will never come again, such as one webhook
  delivery, must not be stranded by a burst). Only past
  :data:`MAX_DEFERRED` URIs aside is a new one dropped, with reason
  ``coalesce_cap`` (RFC 0011 explains why not evict the oldest);
* ``drop_oldest``: the oldest queued URI is dropped, the new one is queued;
* ``drop_newest``: the new URI is dropped;
* ``block``: the new URI is held aside (coalesced by URI, never lost) and the
  route is reported in :meth:`Router.blocked_routes`. The reactor then pauses
  the update streams of the servers feeding it (:meth:`Router.held_servers`)
  and resumes them once the route leaves that set: deliveries make room, the
  held events move into the queue, oldest first (rfcs/0131).

Every drop has one reason from :data:`DropReason`; :class:`IngestResult` names
the URI that was lost (the new one, or the oldest one under ``drop_oldest``).
Telemetry, ``/metrics`` and ``supervisor.exit`` all use these reasons.
"""

from __future__ import annotations

import enum
import itertools
import string
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal, TypeAlias, get_args

from agentd.core.errors import RouteError
from agentd.triggers.glob import Glob, GlobIndex, compile_glob

ChangeKind = Literal["updated", "synthetic", "list_changed", "timer"]
"""Why a URI is delivered: a pushed update, a synthetic "possibly changed"
after a (re)subscribe, a catalog change (the URI appeared under a declared
glob; rfcs/0350), or a clock fire."""

Overflow = Literal["coalesce", "drop_oldest", "drop_newest", "block"]
"""What a full route queue does with a new distinct URI (see the module docstring)."""

OVERFLOWS: Final[tuple[Overflow, ...]] = get_args(Overflow)

RouteKind = Literal["declared", "added", "self", "watch", "stage"]
"""Who made a route, and so what a delivery on it becomes: a declared route (the
timer route too) spawns or continues a session, and so does an ``added`` one
(the route agentd adds for a subscription when the configuration declares no
route: ARCHITECTURE decision 22); a ``self`` route (a session's ``subscribe``)
wakes that session; a ``watch`` route and a ``stage`` route (a declared route
with a watch stage) hand their changes to the watch manager, whose notices
come back to the reactor."""

Mode = Literal["once", "loop", "reactive", "schedule"]
"""The four execution modes (rfcs/0032)."""

DropReason = Literal["coalesce_cap", "drop_oldest", "drop_newest", "route_removed"]
"""Why an event was dropped; each reason has its own counter."""

MAX_DEFERRED: Final = 65_536
"""URIs a ``coalesce`` route keeps aside while its queue is full (rfcs/0372): room for a
burst of tens of thousands of distinct changes (a few hundred bytes each), a bound on what
a runaway server can make the supervisor hold."""

DEFAULT_DEBOUNCE: Final = 0.25
"""Seconds of quiet before a route delivers: long enough to fold an editor's
burst of saves into one wake, short enough to feel immediate."""

DEFAULT_MAX_INFLIGHT: Final = 4
"""Concurrent roots per spawn route unless configured."""

MIN_QUEUE_CAP: Final = 16
"""Floor for the default queue cap (the number of distinct watched URIs)."""

TIMER_URI: Final = "agentd://timer"
"""The URI a clock fire carries; fires coalesce under this one key."""

TEMPLATE_FIELDS: Final = frozenset(("uri", "server", "etag", "kind"))
"""The placeholders a spawn template may use."""

DEFAULT_TEMPLATE: Final = (
    "The MCP resource {uri} changed (change: {kind}, etag: {etag}). "
    "Read its current state with read_resource and act on it."
)
DEFAULT_TIMER_TEMPLATE: Final = "A scheduled run started (a clock fire). Do the scheduled work."


# --------------------------------------------------------------------------- vocabulary


@dataclass(frozen=True, slots=True)
class Spawn:
    """Deliver each event into a fresh root subagent.

    Attributes:
        max_inflight: at most this many roots from this route run at once.
        template: the instruction template (placeholders ``{uri}``,
            ``{server}``, ``{etag}``, ``{kind}``); None = the default.
    """

    max_inflight: int = DEFAULT_MAX_INFLIGHT
    template: str | None = None

    def __post_init__(self) -> None:
        if (
            isinstance(self.max_inflight, bool)
            or not isinstance(self.max_inflight, int)
            or self.max_inflight < 1
        ):
            raise ValueError(f"max_inflight: {self.max_inflight!r} is not valid: give a whole number >= 1")
        if self.template is not None:
            validate_template(self.template)


@dataclass(frozen=True, slots=True)
class Continue:
    """Deliver queued events, as one set per turn, into the warm session ``session``."""

    session: str

    def __post_init__(self) -> None:
        if not self.session:
            raise ValueError("continue session: '' is not valid: name the session to deliver into")


Disposition: TypeAlias = Spawn | Continue


@dataclass(frozen=True, slots=True)
class QueuedEvent:
    """One change waiting on a route.

    Attributes:
        uri: the changed resource (``TIMER_URI`` for clock fires).
        server: the upstream server it came from (None for timer fires).
        etag: the latest etag/version seen, if the server sent one.
        kind: why it is delivered (newest wins on coalesce).
        first_seen: monotonic time the URI was first queued; kept on coalesce.
    """

    uri: str
    server: str | None
    etag: str | None
    kind: ChangeKind
    first_seen: float


@dataclass(frozen=True, slots=True)
class RouteSpec:
    """A route as configuration (or the self-subscribe tool) describes it.

    Attributes:
        match: an exact URI or a glob (see :mod:`agentd.triggers.glob`);
            ignored for the timer route.
        disposition: :class:`Spawn` or :class:`Continue`.
        debounce: seconds of quiet after the last event before delivering.
        max_wait: deliver at most this long after the first event of a burst,
            however chatty the source; None = no cap.
        queue_cap: most distinct URIs queued; None = the number of watched
            URIs for the route (``watched_uris`` given to ``add_route``),
            at least ``MIN_QUEUE_CAP``.
        overflow: what a full queue does with a new URI.
        route_id: stable id for logs; None = ``r<n>`` in declaration order
            (``self:<session>:<uri>`` for self-subscribe routes).
        timer: this is the one route clock fires go to (no URI matching).
        exact: treat ``match`` literally even if it holds ``*`` or ``?``;
            None = infer (a pattern without unescaped wildcards is exact).
        reread_on_start: deliver one synthetic "possibly changed" event for
            each URI this route owns once its subscription is established at
            start-up (rfcs/0130); False skips it for this route.
        kind: who made the route (:data:`RouteKind`); ``add_route`` with an
            ``owner`` makes it ``self``.
    """

    match: str
    disposition: Disposition = field(default_factory=Spawn)
    debounce: float = DEFAULT_DEBOUNCE
    max_wait: float | None = None
    queue_cap: int | None = None
    overflow: Overflow = "coalesce"
    route_id: str | None = None
    timer: bool = False
    exact: bool | None = None
    reread_on_start: bool = True
    kind: RouteKind = "declared"

    def __post_init__(self) -> None:
        if not isinstance(self.disposition, Spawn | Continue):
            raise ValueError(
                f"route {self.match!r} disposition: {self.disposition!r} is not valid: use Spawn(...) or Continue(session)"
            )
        if not (self.debounce >= 0):
            raise ValueError(
                f"route {self.match!r} debounce: {self.debounce!r} is not valid: give seconds >= 0"
            )
        if self.max_wait is not None and not (self.max_wait >= 0):
            raise ValueError(
                f"route {self.match!r} max_wait: {self.max_wait!r} is not valid: give seconds >= 0 or leave it unset"
            )
        if self.queue_cap is not None and (isinstance(self.queue_cap, bool) or self.queue_cap < 1):
            raise ValueError(
                f"route {self.match!r} queue_cap: {self.queue_cap!r} is not valid: give a whole number >= 1 or leave it unset"
            )
        if self.overflow not in OVERFLOWS:
            raise ValueError(
                f"route {self.match!r} overflow: {self.overflow!r} is not valid: use one of {', '.join(OVERFLOWS)}"
            )
        if not self.timer:
            compile_glob(self.match, exact=bool(self.exact))


class PushOutcome(enum.Enum):
    """What :meth:`RouteQueue.push` did with an event."""

    ENQUEUED = "enqueued"
    """A new URI joined the back of the queue."""
    COALESCED = "coalesced"
    """The URI was already queued: latest etag/kind kept, position and first_seen unchanged."""
    DROPPED_OLDEST = "dropped_oldest"
    """Queue full (drop_oldest): the oldest URI was dropped to make room."""
    DROPPED_NEWEST = "dropped_newest"
    """Queue full (drop_newest, or coalesce at cap): this event was dropped."""
    BLOCKED = "blocked"
    """Queue full (block): not queued; the caller holds it and pauses the source."""
    DEFERRED = "deferred"
    """Queue full (coalesce): kept aside by the router, queued as deliveries make room (rfcs/0372)."""


# --------------------------------------------------------------------------- queue

# Module-level aliases: enum attribute lookups are measurable on the push hot path.
_ENQUEUED: Final = PushOutcome.ENQUEUED
_COALESCED: Final = PushOutcome.COALESCED
_DROPPED_OLDEST: Final = PushOutcome.DROPPED_OLDEST
_DROPPED_NEWEST: Final = PushOutcome.DROPPED_NEWEST
_BLOCKED: Final = PushOutcome.BLOCKED


class RouteQueue:
    """A bounded, insertion-ordered queue of events keyed by URI.

    Push and pop are O(1) at any depth: a dict holds the live slot per URI and
    a deque holds ``(uri, slot)`` in arrival order. A slot is a small mutable
    cell ``[arrival order, event]``; coalescing replaces the event inside it,
    so the URI keeps its place. :meth:`discard` deletes lazily: a deque entry
    whose slot is no longer the URI's live one (checked by identity) is
    skipped. Nothing ever pops the front of a plain dict (quadratic: a dict
    leaves a hole at its front on each delete, and finding the first live
    key walks the holes).
    """

    __slots__ = ("_n", "_order", "_slots", "cap")

    def __init__(self, cap: int) -> None:
        if cap < 1:
            raise ValueError(f"queue_cap: {cap!r} is not valid: give a whole number >= 1")
        self.cap = cap
        self._slots: dict[str, list[Any]] = {}
        """uri -> [arrival order, event] (the live cell)."""
        self._order: deque[tuple[str, list[Any]]] = deque()
        self._n = 0

    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, uri: object) -> bool:
        return uri in self._slots

    def push(self, ev: QueuedEvent, overflow: Overflow, order: int | None = None) -> PushOutcome:
        """Queue ``ev`` under ``overflow``.

        ``order`` is an arrival number used to merge several queues in arrival
        order (the router passes a global one); it defaults to a per-queue one.
        """
        slots = self._slots
        uri = ev.uri
        old = slots.get(uri)
        if old is not None:
            # Newest wins, but the URI keeps its place in line and its age.
            old[1] = QueuedEvent(uri, ev.server, ev.etag, ev.kind, old[1].first_seen)
            return _COALESCED
        outcome = _ENQUEUED
        if len(slots) >= self.cap:
            if overflow == "drop_oldest":
                self.pop()
                outcome = _DROPPED_OLDEST
            elif overflow == "block":
                return _BLOCKED
            else:  # drop_newest, and coalesce at cap (RFC 0011)
                return _DROPPED_NEWEST
        if order is None:
            self._n = order = self._n + 1
        slot = [order, ev]
        slots[uri] = slot
        self._order.append((uri, slot))
        return outcome

    def _live(self, uri: str, slot: list[Any]) -> bool:
        return self._slots.get(uri) is slot

    def pop(self) -> QueuedEvent | None:
        """Remove and return the oldest queued event, or None if empty."""
        order, slots = self._order, self._slots
        while order:
            uri, slot = order.popleft()
            if slots.get(uri) is slot:
                del slots[uri]
                ev: QueuedEvent = slot[1]
                return ev
        return None

    def oldest(self) -> QueuedEvent | None:
        """The event :meth:`pop` would return, without removing it."""
        order = self._order
        while order:
            uri, slot = order[0]
            if self._live(uri, slot):
                ev: QueuedEvent = slot[1]
                return ev
            order.popleft()  # stale entry left by discard()
        return None

    def drain(self) -> list[QueuedEvent]:
        """Remove and return every queued event, oldest first."""
        return [ev for _, ev in self.drain_with_order()]

    def drain_with_order(self) -> list[tuple[int, QueuedEvent]]:
        """Like :meth:`drain`, with each event's arrival number (see :meth:`push`)."""
        out: list[tuple[int, QueuedEvent]] = [
            (slot[0], slot[1]) for uri, slot in self._order if self._live(uri, slot)
        ]
        self._slots.clear()
        self._order.clear()
        return out

    def get(self, uri: str) -> QueuedEvent | None:
        """The queued event for ``uri``, if queued."""
        slot = self._slots.get(uri)
        return None if slot is None else slot[1]

    def discard(self, uri: str) -> QueuedEvent | None:
        """Remove ``uri`` wherever it is queued (O(1), lazy); return its event."""
        slot = self._slots.pop(uri, None)
        return None if slot is None else slot[1]

    def peek_uris(self) -> list[str]:
        """Queued URIs, oldest first (for status pages and tests)."""
        return [uri for uri, slot in self._order if self._live(uri, slot)]


# --------------------------------------------------------------------------- routes


@dataclass(eq=False, slots=True)
class Route:
    """A live route: its spec plus the router's per-route state.

    Attributes:
        id: stable id logged on every routed event.
        spec: the configuration it was built from.
        glob: the compiled matcher (unused for the timer route).
        owner: the session that created it by self-subscribe, else None.
        order: tie-break key; front routes sort before declared ones.
        queue: pending events, keyed by URI.
        deadline: armed debounce deadline (monotonic), or None.
        first_armed: when the current burst armed the deadline (for max_wait).
        ready: the debounce elapsed but some events wait for capacity
            (a free inflight slot or an idle session); no new debounce needed.
        inflight: spawn routes: roots started and not yet done.
        held: ``block`` overflow: events refused by a full queue, by URI.
        deferred: ``coalesce`` overflow: events a full queue could not take yet, by URI
            (arrival number, event), queued as room frees (rfcs/0372).
    """

    id: str
    spec: RouteSpec
    glob: Glob
    owner: str | None
    order: tuple[int, int]
    queue: RouteQueue
    deadline: float | None = None
    first_armed: float | None = None
    ready: bool = False
    inflight: int = 0
    held: dict[str, tuple[int, QueuedEvent]] = field(default_factory=dict)
    deferred: dict[str, tuple[int, QueuedEvent]] = field(default_factory=dict)

    @property
    def disposition(self) -> Disposition:
        return self.spec.disposition

    @property
    def exact(self) -> bool:
        return self.glob.exact

    @property
    def kind(self) -> RouteKind:
        return self.spec.kind


@dataclass(frozen=True, slots=True)
class IngestResult:
    """What :meth:`Router.ingest` did with one event.

    Attributes:
        route_id: the owning route, or None when nothing matched (dropped).
        outcome: the queue outcome; None when unrouted.
        dropped_uri: the URI an overflow dropped (the new one, or the oldest).
        reason: the drop reason when something was dropped.
    """

    route_id: str | None
    outcome: PushOutcome | None
    dropped_uri: str | None = None
    reason: DropReason | None = None
    route_kind: RouteKind = "declared"
    """The owning route's kind (for :func:`metric_route`)."""


def metric_route(route_id: str, kind: RouteKind) -> str:
    """The route label counters and histograms use for a route.

    A declared (or staged) route is counted under its id; the routes
    sessions make for themselves (``self``, ``watch``) come and go with their
    sessions, so they are counted under their kind: the number of series
    stays the number of configured routes (plus two), however many sessions
    a long-running daemon sees.
    """
    return route_id if kind in ("declared", "added", "stage") else kind


@dataclass(frozen=True, slots=True)
class SpawnDelivery:
    """Start a fresh root for ``event`` with ``instruction`` (route ``route_id``)."""

    route_id: str
    event: QueuedEvent
    instruction: str


@dataclass(frozen=True, slots=True)
class ContinueDelivery:
    """Deliver ``events`` (as one set, in arrival order) into warm ``session``.

    Attributes:
        route_id: the route of the oldest event.
        session: the session to wake; the router treats it as busy until
            :meth:`Router.on_session_idle`.
        events: every due event for the session, oldest first.
        event_routes: the owning route id of each event (parallel to ``events``).
        kind: the kind of route ``route_id`` (a session's routes are all of one
            kind: watch and stage routes each have a session of their own).
    """

    route_id: str
    session: str
    events: list[QueuedEvent]
    event_routes: tuple[str, ...] = ()
    kind: RouteKind = "declared"


Delivery: TypeAlias = SpawnDelivery | ContinueDelivery


# --------------------------------------------------------------------------- templates


def validate_template(template: str) -> None:
    """Check a spawn instruction template.

    Raises:
        ValueError: a placeholder other than ``{uri}``, ``{server}``, ``{etag}``,
            ``{kind}``, a conversion/format spec, or an unbalanced brace. The
            message names the template and the fix.
    """
    allowed = ", ".join("{" + f + "}" for f in sorted(TEMPLATE_FIELDS))
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(
            f"template {template!r} is not valid ({exc}): write literal braces as '{{{{' and '}}}}'"
        ) from exc
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if name not in TEMPLATE_FIELDS:
            raise ValueError(f"template {template!r}: unknown placeholder {{{name}}}: use only {allowed}")
        if spec or conversion:
            raise ValueError(
                f"template {template!r}: placeholder {{{name}}} takes no conversion or format spec: write it as {{{name}}}"
            )


def render_template(template: str, ev: QueuedEvent) -> str:
    """Render a validated template for ``ev``; a missing server/etag renders as ``none``."""
    return template.format(uri=ev.uri, server=ev.server or "none", etag=ev.etag or "none", kind=ev.kind)


# --------------------------------------------------------------------------- router


class Router:
    """Routes, queues and debounce state for every route (see the module docstring).

    Counters (``counters()``): ``unrouted``, ``coalesced``, ``dropped_events``
    and ``dropped_events.<reason>`` for each :data:`DropReason`, ``blocked``.

    Args:
        on_drop: told ``(reason, n)`` whenever queued changes are lost (the
            run's counter set, :class:`agentd.observe.counters.RunCounters`).
    """

    def __init__(self, *, on_drop: Callable[[DropReason, int], None] | None = None) -> None:
        self._on_drop = on_drop
        self._routes: dict[str, Route] = {}
        self._exact: dict[str, list[Route]] = {}
        self._globs: GlobIndex[Route] = GlobIndex()
        self._timer: Route | None = None
        self._declared = itertools.count()
        self._front = itertools.count()
        self._seq = itertools.count()
        self._busy: set[str] = set()
        self._blocked: set[str] = set()
        self._owned: dict[str, int] = {}
        """Session -> its ``self`` routes (its own subscriptions, restored ones too; the caps count them)."""
        self._owned_total = 0
        self._counters: dict[str, int] = {
            "unrouted": 0,
            "coalesced": 0,
            "deferred": 0,
            "dropped_events": 0,
            "blocked": 0,
            **{f"dropped_events.{r}": 0 for r in get_args(DropReason)},
        }

    # -- route table ---------------------------------------------------------

    def add_route(
        self, spec: RouteSpec, *, front: bool = False, owner: str | None = None, watched_uris: int = 0
    ) -> Route:
        """Add a route and return it.

        Args:
            spec: the route.
            front: sort ahead of declared routes (self-subscribe).
            owner: the session creating it by self-subscribe; makes the route
                exact and ``front``, with id ``self:<owner>:<uri>``.
            watched_uris: distinct URIs this route watches (default queue cap).

        Raises:
            RouteError: the URI is already owned by another session's route
                (the message names the owner), the id is taken, or a second
                timer route is added.
        """
        if owner is not None:
            if spec.timer:
                raise RouteError(f"route {spec.match!r}: a self-subscribe route cannot be the timer route")
            front = True
            spec = replace(spec, exact=True, kind="self")
            for r in self._exact.get(spec.match, ()):
                if r.owner == owner:
                    return r  # re-subscribing is idempotent
                if r.owner is not None:
                    raise RouteError(
                        f"{spec.match!r} is already subscribed by session {r.owner!r} (route {r.id!r}): "
                        "one URI has exactly one owner; ask that session to unsubscribe first"
                    )
        order = (0, next(self._front)) if front else (1, next(self._declared))
        if spec.route_id is not None:
            rid = spec.route_id
        elif owner is not None:
            rid = f"self:{owner}:{spec.match}"
        else:
            rid = f"r{order[1]}" if not front else f"f{order[1]}"
        if rid in self._routes:
            raise RouteError(f"route id {rid!r} is already in use: give each route a unique id")
        if spec.timer and self._timer is not None:
            raise RouteError(
                f"route {rid!r}: there is already a timer route ({self._timer.id!r}): declare exactly one"
            )
        cap = spec.queue_cap if spec.queue_cap is not None else max(MIN_QUEUE_CAP, watched_uris)
        glob = compile_glob(TIMER_URI if spec.timer else spec.match, exact=bool(spec.exact) or spec.timer)
        route = Route(id=rid, spec=spec, glob=glob, owner=owner, order=order, queue=RouteQueue(cap))
        self._routes[rid] = route
        if owner is not None:
            self._owned[owner] = self._owned.get(owner, 0) + 1
            self._owned_total += 1
        if spec.timer:
            self._timer = route
        elif glob.exact:
            bucket = self._exact.setdefault(glob.literal, [])
            bucket.append(route)
            bucket.sort(key=lambda r: r.order)
        else:
            self._globs.add(glob, order, route)
        return route

    def remove_route(self, route_id: str, *, withdrawn: bool = False) -> Route:
        """Remove a route; its queued and held events are dropped (reason ``route_removed``).

        ``withdrawn``: the events' producer took them back (a finished agent's
        completion its parent already read, rfcs/0370): they are not drops.

        Raises:
            RouteError: no route has that id.
        """
        route = self._routes.pop(route_id, None)
        if route is None:
            raise RouteError(f"no route {route_id!r}: known routes are {sorted(self._routes)!r}")
        if route.kind == "self" and route.owner is not None:
            left = self._owned.pop(route.owner, 0) - 1
            if left > 0:
                self._owned[route.owner] = left
            self._owned_total -= 1
        if route is self._timer:
            self._timer = None
        elif route.glob.exact:
            bucket = self._exact[route.glob.literal]
            bucket.remove(route)
            if not bucket:
                del self._exact[route.glob.literal]
        else:
            self._globs.remove(route)
        lost = len(route.queue) + len(route.held) + len(route.deferred)
        if lost and not withdrawn:
            self._drop("route_removed", lost)
        route.queue.drain()
        route.held.clear()
        route.deferred.clear()
        self._blocked.discard(route_id)
        route.deadline = route.first_armed = None
        route.ready = False
        return route

    def set_watched(self, route_id: str, watched_uris: int) -> None:
        """Resize the default queue cap of ``route_id`` to ``watched_uris`` (at least ``MIN_QUEUE_CAP``).

        Only routes without an explicit ``queue_cap`` change; the cap never
        shrinks below what is queued (a queue holds one entry per URI, so a cap
        equal to the number of watched URIs never drops under ``coalesce``).
        """
        route = self._routes.get(route_id)
        if route is None or route.spec.queue_cap is not None:
            return
        route.queue.cap = max(MIN_QUEUE_CAP, watched_uris, len(route.queue))

    def get(self, route_id: str) -> Route | None:
        """The route with ``route_id``, if any."""
        return self._routes.get(route_id)

    def routes(self) -> Iterator[Route]:
        """Every route, in no particular order."""
        return iter(list(self._routes.values()))

    def owned(self, session: str | None = None) -> int:
        """How many ``self`` routes ``session`` owns (every session's together when None)."""
        return self._owned_total if session is None else self._owned.get(session, 0)

    def routes_for_session(self, session: str) -> list[Route]:
        """Every continue route delivering into ``session`` (declared and self-subscribed)."""
        return [
            r
            for r in self._routes.values()
            if isinstance(r.disposition, Continue) and r.disposition.session == session
        ]

    def remove_session(self, session: str) -> list[str]:
        """Remove the routes ``session`` created by self-subscribe; return their ids.

        Declared routes that deliver into the session stay (they are
        configuration); the session is forgotten as busy.
        """
        ids = [r.id for r in self._routes.values() if r.owner == session]
        for rid in ids:
            self.remove_route(rid)
        self._busy.discard(session)
        return ids

    @property
    def timer_route(self) -> Route | None:
        """The one route clock fires go to, if declared."""
        return self._timer

    # -- matching ------------------------------------------------------------

    def first_match(self, uri: str) -> Route | None:
        """The single route owning ``uri`` (exact > longest literal prefix > order), or None."""
        bucket = self._exact.get(uri)
        if bucket:
            return bucket[0]
        return self._globs.first(uri)

    # -- events --------------------------------------------------------------

    def ingest(self, ev: QueuedEvent, now: float) -> IngestResult:
        """Route one change (see the module docstring); never raises for a valid event."""
        route = self.first_match(ev.uri)
        if route is None:
            self._counters["unrouted"] += 1
            return IngestResult(None, None)
        return self._push(route, ev, now)

    def ingest_timer(self, now: float) -> IngestResult:
        """Queue a clock fire on the timer route (fires coalesce into one).

        Raises:
            RouteError: no timer route is declared.
        """
        if self._timer is None:
            raise RouteError(
                "a clock fire arrived but no timer route is declared: declare one route with timer=True"
            )
        return self._push(self._timer, QueuedEvent(TIMER_URI, None, None, "timer", now), now)

    def _push(self, route: Route, ev: QueuedEvent, now: float) -> IngestResult:
        q = route.queue
        seq = next(self._seq)
        overflow = route.spec.overflow
        dropped_uri: str | None = None
        reason: DropReason | None = None
        if route.held and ev.uri not in q:
            outcome = PushOutcome.BLOCKED  # already blocked: queue behind what is held
        elif overflow == "coalesce" and ev.uri not in q and (route.deferred or len(q) >= q.cap):
            # A full queue, or changes already waiting aside: this one waits behind them.
            outcome = self._defer(route, ev, seq)
            if outcome is PushOutcome.DROPPED_NEWEST:
                reason, dropped_uri = "coalesce_cap", ev.uri
        else:
            if overflow == "drop_oldest" and len(q) >= q.cap and ev.uri not in q:
                oldest = q.oldest()
                dropped_uri = oldest.uri if oldest else None
            outcome = q.push(ev, overflow, seq)
        if outcome is PushOutcome.COALESCED:
            self._counters["coalesced"] += 1
        elif outcome is PushOutcome.ENQUEUED:
            pass
        elif outcome is PushOutcome.DEFERRED:
            self._counters["deferred"] += 1
        elif reason is not None:
            pass  # coalesce past MAX_DEFERRED: dropped above
        elif outcome is PushOutcome.DROPPED_OLDEST:
            reason = "drop_oldest"
        elif outcome is PushOutcome.DROPPED_NEWEST:
            reason = "coalesce_cap" if overflow == "coalesce" else "drop_newest"
            dropped_uri = ev.uri
        else:  # BLOCKED
            self._counters["blocked"] += 1
            self._blocked.add(route.id)
            old = route.held.get(ev.uri)
            route.held[ev.uri] = (
                (seq, ev)
                if old is None
                else (old[0], QueuedEvent(ev.uri, ev.server, ev.etag, ev.kind, old[1].first_seen))
            )
        if reason is not None:
            self._drop(reason, 1)
        if outcome is not PushOutcome.DROPPED_NEWEST and not route.ready:
            # (Re)arm the trailing debounce, capped by max_wait from the burst's start.
            if route.first_armed is None:
                route.first_armed = now
            deadline = now + route.spec.debounce
            max_wait = route.spec.max_wait
            if max_wait is not None and route.first_armed + max_wait < deadline:
                deadline = route.first_armed + max_wait
            route.deadline = deadline
        return IngestResult(route.id, outcome, dropped_uri, reason, route.kind)

    def _defer(self, route: Route, ev: QueuedEvent, seq: int) -> PushOutcome:
        """Keep ``ev`` aside until its route's queue has room (newest wins, by URI); DROPPED_NEWEST past the bound."""
        old = route.deferred.get(ev.uri)
        if old is not None:
            route.deferred[ev.uri] = (
                old[0],
                QueuedEvent(ev.uri, ev.server, ev.etag, ev.kind, old[1].first_seen),
            )
            return PushOutcome.COALESCED
        if len(route.deferred) >= MAX_DEFERRED:
            return PushOutcome.DROPPED_NEWEST
        route.deferred[ev.uri] = (seq, ev)
        return PushOutcome.DEFERRED

    def _drop(self, reason: DropReason, n: int) -> None:
        self._counters["dropped_events"] += n
        self._counters[f"dropped_events.{reason}"] += n
        if self._on_drop is not None:
            self._on_drop(reason, n)

    def next_deadline(self) -> float | None:
        """The earliest armed debounce deadline, or None (the reactor's receive bound).

        Routes that are due but waiting for capacity do not count: they are
        delivered when :meth:`on_spawn_done` / :meth:`on_session_idle` happen.
        """
        best: float | None = None
        for r in self._routes.values():
            d = r.deadline
            if d is not None and (best is None or d < best):
                best = d
        return best

    def take_deliveries(
        self,
        now: float,
        *,
        session_idle: Callable[[str], bool],
        may_spawn: Callable[[], bool],
        draining: bool,
    ) -> list[Delivery]:
        """Everything deliverable at ``now``.

        Spawn routes yield one :class:`SpawnDelivery` per free inflight slot
        while ``may_spawn()`` is true (the router counts them inflight until
        :meth:`on_spawn_done`). Continue routes yield at most one
        :class:`ContinueDelivery` per session, merging every due route of that
        session, only if ``session_idle(session)`` and the router has not
        delivered to it since its last :meth:`on_session_idle`. Nothing is
        delivered while ``draining`` (events stay queued).
        """
        if draining:
            return []
        out: list[Delivery] = []
        per_session: dict[str, list[tuple[int, str, QueuedEvent]]] = {}
        for route in list(self._routes.values()):
            if route.deadline is not None:
                if route.deadline > now:
                    continue
                route.deadline = route.first_armed = None
                route.ready = True
            if not route.ready:
                continue
            disp = route.spec.disposition
            if isinstance(disp, Spawn):
                while route.inflight < disp.max_inflight and len(route.queue) and may_spawn():
                    ev = route.queue.pop()
                    assert ev is not None
                    route.inflight += 1
                    out.append(SpawnDelivery(route.id, ev, render_template(self._template(route), ev)))
                    self._refill(route)
            else:
                s = disp.session
                if s in self._busy or not session_idle(s):
                    continue
                items = per_session.setdefault(s, [])
                items.extend((seq, route.id, ev) for seq, ev in route.queue.drain_with_order())
                self._refill(route)
            if not len(route.queue) and not route.held and not route.deferred:
                route.ready = False
        for session, items in per_session.items():
            if not items:
                continue
            items.sort(key=lambda t: t[0])
            self._busy.add(session)
            out.append(
                ContinueDelivery(
                    route_id=items[0][1],
                    session=session,
                    events=[ev for _, _, ev in items],
                    event_routes=tuple(rid for _, rid, _ in items),
                    kind=self._routes[items[0][1]].kind,
                )
            )
        return out

    def _template(self, route: Route) -> str:
        disp = route.spec.disposition
        if isinstance(disp, Spawn) and disp.template is not None:
            return disp.template
        return DEFAULT_TIMER_TEMPLATE if route.spec.timer else DEFAULT_TEMPLATE

    def _refill(self, route: Route) -> None:
        """Move held (``block``) and deferred (``coalesce``) events into freed queue space, oldest first."""
        if route.deferred:
            q = route.queue
            deferred = route.deferred
            # Insertion order is arrival order (a coalesced URI keeps its place).
            for uri in list(deferred):
                if len(q) >= q.cap and uri not in q:
                    break
                seq, ev = deferred.pop(uri)
                q.push(ev, "coalesce", seq)
        if not route.held:
            return
        q = route.queue
        for uri, (seq, ev) in sorted(route.held.items(), key=lambda kv: kv[1][0]):
            if len(q) >= q.cap and uri not in q:
                break
            q.push(ev, "block", seq)
            del route.held[uri]
        if not route.held:
            self._blocked.discard(route.id)

    def on_spawn_done(self, route_id: str) -> None:
        """A root spawned from ``route_id`` ended; frees one inflight slot.

        Unknown ids (a route removed meanwhile) are ignored. A route with
        queued events is deliverable again at once (no new debounce).
        """
        route = self._routes.get(route_id)
        if route is None or route.inflight == 0:
            return
        route.inflight -= 1
        if len(route.queue) and route.deadline is None:
            route.ready = True

    def on_session_idle(self, session: str) -> None:
        """``session`` finished its turn; its due continue routes become deliverable."""
        self._busy.discard(session)

    def session_busy(self, session: str) -> bool:
        """Whether the router delivered to ``session`` and has not seen it go idle."""
        return session in self._busy

    def blocked_routes(self) -> frozenset[str]:
        """Routes holding ``block``-overflow events: pause the sources feeding them.

        Resume a source when none of its routes is in this set any more (check
        after :meth:`take_deliveries`). O(blocked routes), not O(routes): the
        set is kept as events are held and released.
        """
        return frozenset(self._blocked)

    def held_servers(self, route_id: str) -> frozenset[str]:
        """The servers whose events ``route_id`` holds (the sources to pause); timer fires have none."""
        route = self._routes.get(route_id)
        if route is None:
            return frozenset()
        return frozenset(ev.server for _, ev in route.held.values() if ev.server is not None)

    def counters(self) -> dict[str, int]:
        """A snapshot of the routing counters."""
        return dict(self._counters)


def default_route_for(uri: str, mode: Mode, session: str | None = None) -> RouteSpec:
    """The route for a subscribed URI that no declared route matches.

    Args:
        uri: the concrete subscribed URI.
        mode: the execution mode.
        session: the root session id when ``loop`` runs with ``--session warm``.

    Returns:
        ``Continue(session)`` for a warm loop, else a default :class:`Spawn`.
    """
    if mode == "loop" and session is not None:
        return RouteSpec(match=uri, disposition=Continue(session), exact=True, kind="added")
    return RouteSpec(match=uri, disposition=Spawn(), exact=True, kind="added")
