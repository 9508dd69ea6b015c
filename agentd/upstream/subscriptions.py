"""A server's resource subscriptions: one listen stream per connection, replaced when the set changes.

Size: over 600 lines because one server's subscriptions (both eras, the
switch, stream ends and retries, the queue of changes, pause) are one state
machine; what is wanted and carried is the pure ``uriset.py``.

:class:`Subscriber` keeps every URI subscribed on one upstream server
established, across stream ends and reconnects, with no task and no stream
per URI (rfcs/0260):

* **2026-07-28**: one ``subscriptions/listen`` stream per connection carries
  the whole set (``SubscriptionFilter.resource_subscriptions`` is a list) and
  the catalog's ``list_changed`` flags. When the set changes, a new stream
  with the new set is opened; once the server acknowledged it, the old one is
  closed: no gap, so nothing is lost across the switch (a change in the
  window may arrive twice). Changes made while one stream is being opened
  wait and go into the next one: a burst of subscribes costs a couple of
  replacements, not one each.
* **Handshake era**: one ``resources/subscribe`` per URI on the one session,
  a bounded number in flight, batched the same way; updates arrive through
  the SDK's message handler (:meth:`Subscriber.on_updated`).

Every change read is queued by URI (one entry per URI, newest kind wins) and
posted to the reactor by one task, so a slow reactor never stops the stream
from being read (the SDK ends a stream whose backlog reaches 1,024 events)
and a paused server (rfcs/0131) keeps at most one entry per URI.

At-least-once: a URI carried once and carried again (a new stream after a
loss, a reconnect) gets one synthetic "possibly changed"; a fresh subscribe
gets none (its caller re-reads). A stream that ends on a live connection
(the server closed it, or its backlog filled) is re-opened after the
resubscribe backoff; a stream that dies young without delivering counts as a
failed attempt (:class:`agentd.upstream.backoff.ResubscribePolicy`), and
after the configured attempts its URIs are given up (``failed``) until they
are subscribed again or the server reconnects.

Telemetry is per establishment and per stream, not per URI, except
``subscription.established`` (debug), one per URI newly carried.
"""

from __future__ import annotations

import enum
import heapq
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Iterable, KeysView
from collections.abc import Set as AbstractSet
from typing import Literal, Protocol

import mcp_types as types
import trio
from mcp import Client
from mcp.client.subscriptions import ResourcesListChanged, ResourceUpdated, ServerEvent, ToolsListChanged
from mcp.shared.exceptions import MCPError

from agentd.events import ReactorEvent, ResourceChanged, SubscriptionStateChanged
from agentd.observe.counters import RunCounters
from agentd.observe.telemetry import Telemetry
from agentd.observe.timeline import mark
from agentd.triggers.router import ChangeKind
from agentd.upstream.backoff import MAX_CONSECUTIVE_FAILURES, GiveUp, ResubscribePolicy
from agentd.upstream.describe import describe
from agentd.upstream.uriset import Narrowing, NarrowingPhase, Switch, UriSet

__all__ = ["HANDSHAKE_CONCURRENCY", "SAMPLE", "ConnectionLike", "ReadHold", "StreamState", "Subscriber"]

HANDSHAKE_CONCURRENCY = 16
"""``resources/subscribe`` requests in flight at once on a handshake-era session: enough
to subscribe 10,000 URIs in seconds over stdio, few enough that an HTTP server sees at
most this many concurrent requests (and connections) from one burst."""

SAMPLE = 5
"""URIs named in a per-stream telemetry line (the rest are counted)."""

CatalogKind = Literal["tools", "resources"]


class ConnectionLike(Protocol):
    """What the subscriber needs of one live connection (``agentd.upstream.connection._Conn``)."""

    @property
    def client(self) -> Client: ...
    @property
    def modern(self) -> bool: ...
    @property
    def nursery(self) -> trio.Nursery: ...
    @property
    def lost(self) -> trio.Event: ...
    @property
    def lost_reason(self) -> str | None: ...


class _Batch:
    """Subscribers waiting for the next establishment (one event for all of them)."""

    __slots__ = ("done", "errors", "uris")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.uris: set[str] = set()
        """The URIs its subscribers wait for."""
        self.errors: dict[str, str] = {}
        """URI -> why it was not established (complete once :attr:`done` is set)."""

    def finish(self, carried: AbstractSet[str], error: str | None = None) -> None:
        """The establishment is over: a URI waited for and not in ``carried`` failed (``error``: why)."""
        if self.done.is_set():
            return
        for uri in self.uris:
            if uri not in carried and uri not in self.errors:
                self.errors[uri] = error or "the server did not acknowledge it"
        self.done.set()


class ReadHold:
    """Reads of some URIs wait until :meth:`release` (their subscribe is on its way; rfcs/0350).

    A URI whose change was routed before its subscription was made (it
    appeared under a declared glob) must not be read before the subscription
    is live: a change between that read and the subscription would reach
    nobody. Holding its reads until the subscribe ended (made or failed)
    closes that window without a second delivery.
    """

    __slots__ = ("_holds", "_uris", "released")

    def __init__(self, holds: dict[str, ReadHold], uris: Collection[str]) -> None:
        self._holds = holds
        self._uris = tuple(uris)
        self.released = trio.Event()
        for uri in self._uris:
            holds[uri] = self

    def release(self) -> None:
        """The subscribe ended: reads go ahead (idempotent)."""
        self.released.set()
        for uri in self._uris:
            if self._holds.get(uri) is self:
                del self._holds[uri]


class StreamState(enum.Enum):
    """Where one listen stream is."""

    OPENING = "opening"
    """The request is sent; the server has not acknowledged it."""
    LIVE = "live"
    """Acknowledged: it carries :attr:`_Stream.uris` and is read."""
    ENDED = "ended"
    """The server ended it (closed it, or its buffer filled): what it carried may have changed."""
    CLOSED = "closed"
    """agentd closed it (replaced, or no longer needed)."""


class _Stream:
    """One ``subscriptions/listen`` stream and the task holding it."""

    __slots__ = ("asked", "delivered", "order", "reason", "scope", "since", "state", "uris")

    def __init__(self, order: Iterable[str]) -> None:
        self.order = tuple(order)
        """The URIs asked for, in the order sent (a refusal naming one is read against it)."""
        self.asked = frozenset(self.order)
        self.state = StreamState.OPENING
        self.uris: frozenset[str] = frozenset()
        """The URIs the server acknowledged (what it carries)."""
        self.scope = trio.CancelScope()
        self.since = 0.0
        """When it was acknowledged."""
        self.delivered = 0
        self.reason = ""
        """Why it ended (:attr:`StreamState.ENDED`)."""

    def acknowledged(self, uris: frozenset[str]) -> None:
        if self.state is not StreamState.OPENING:
            raise RuntimeError(
                f"a listen stream is acknowledged once, when opening; it is {self.state.value}"
            )
        self.uris, self.since = uris, trio.current_time()
        self.state = StreamState.LIVE  # OPENING -> LIVE

    def end(self, reason: str) -> None:
        """The server ended it (no-op once agentd closed it)."""
        if self.state is StreamState.LIVE:
            self.reason = reason
            self.state = StreamState.ENDED  # LIVE -> ENDED

    def close(self) -> None:
        self.state = StreamState.CLOSED  # any -> CLOSED
        self.scope.cancel()

    def lived(self) -> float | None:
        """Seconds it was acknowledged for (None: never)."""
        return None if self.state is StreamState.OPENING else trio.current_time() - self.since


class _Started:
    """Calls ``task_status.started()`` the first time it is called, never again."""

    __slots__ = ("_status", "done")

    def __init__(self, status: trio.TaskStatus[None]) -> None:
        self._status = status
        self.done = False

    def __call__(self) -> None:
        if not self.done:
            self.done = True
            self._status.started()


class _Listening:
    """One connection's listen stream (2026-07-28): the live one, the retry policies, the catalog flags."""

    __slots__ = ("_make_policy", "_policies", "catalog", "conn", "given_up", "live", "on_catalog", "started")

    def __init__(
        self,
        conn: ConnectionLike,
        catalog: tuple[bool, bool],
        on_catalog: Callable[[CatalogKind], None],
        started: _Started,
        make_policy: Callable[[int | None], ResubscribePolicy],
    ) -> None:
        self.conn = conn
        self.catalog = catalog
        self.on_catalog = on_catalog
        self.started = started
        self._make_policy = make_policy
        self.live: _Stream | None = None
        """The acknowledged stream (None: none open)."""
        self.given_up = False
        """Re-opening failed too often: nothing is opened until something is subscribed again."""
        self._policies = (make_policy(None), make_policy(MAX_CONSECUTIVE_FAILURES))

    @property
    def flags(self) -> bool:
        """Whether the stream carries catalog notices (it is wanted even with no URI)."""
        return any(self.catalog)

    def policy(self, uris: frozenset[str]) -> ResubscribePolicy:
        """The resubscribe policy for a stream carrying ``uris``; the catalog alone keeps the built-in count."""
        return self._policies[0] if uris else self._policies[1]

    def fresh(self) -> None:
        self.given_up = False
        self._policies = (self._make_policy(None), self._make_policy(MAX_CONSECUTIVE_FAILURES))

    def refresh_catalog(self) -> None:
        """A stream ended: a catalog notice may have been missed meanwhile."""
        if self.catalog[0]:
            self.on_catalog("tools")
        if self.catalog[1]:
            self.on_catalog("resources")


def _named_uri(refusal: MCPError) -> str | None:
    """The URI a refusal names in its ``data`` (the bundled servers' ``data.uri``), if any."""
    data = refusal.data
    uri = data.get("uri") if isinstance(data, dict) else None
    return uri if isinstance(uri, str) else None


def sample(uris: Iterable[str]) -> list[str]:
    """The first :data:`SAMPLE` URIs in sorted order (a telemetry line names these, counts the rest)."""
    return heapq.nsmallest(SAMPLE, uris)


class Subscriber:
    """Keeps one server's subscribed URIs established (see the module docstring).

    :class:`agentd.upstream.connection.Upstream` owns one for the life of
    the process and hands it each connection: :meth:`serve` runs in the
    connection's nursery from before the catalog fetch (so the catalog's
    ``list_changed`` flags are listened to first), :meth:`connected` then
    lets the subscribed URIs in, :meth:`disconnected` reports the loss.

    Args:
        server: the server's configured name.
        post: sends one event to the reactor (never raises).
        telemetry: NDJSON telemetry.
        counters: the run's counters (updates nobody subscribed to count as unrouted).
        request_timeout: bound on one request (a listen acknowledgement, one ``resources/subscribe``), seconds.
        resubscribe_backoff: seconds before re-opening an ended stream, attempt 1, 2, ...
        resubscribe_attempts: failed re-opens in a row before the URIs are given up.
        stable_subscription: seconds a stream that delivered nothing must stay
            open to count as healthy.
    """

    def __init__(
        self,
        server: str,
        post: Callable[[ReactorEvent], Awaitable[None]],
        telemetry: Telemetry,
        counters: RunCounters,
        *,
        request_timeout: float,
        resubscribe_backoff: tuple[float, ...],
        resubscribe_attempts: int,
        stable_subscription: float,
    ) -> None:
        self._server = server
        self._post = post
        self._telemetry = telemetry
        self._counters = counters
        self._request_timeout = request_timeout
        self._backoff = resubscribe_backoff
        self._attempts = resubscribe_attempts
        self._stable = stable_subscription
        # Checked here, not at the first lost stream: a bad schedule is a configuration error.
        self._policy(resubscribe_attempts)
        self._set = UriSet()
        self._serving = False
        """A connection is up and its subscribed URIs are let in (:meth:`connected`)."""
        self._wake = trio.Event()
        """Set when the establishment loop has something to do."""
        self._pending = _Batch()
        """Subscribers waiting for the next establishment."""
        self._inflight: _Batch | None = None
        self._outbox: dict[str, ChangeKind] = {}
        """URIs changed and not posted yet -> the kind of change (one entry per URI)."""
        self._order: deque[str] = deque()
        """:attr:`_outbox`'s URIs, oldest first (a dict's front is slow to pop)."""
        self._outbox_wake = trio.Event()
        self._poster_running = False
        self._paused = False
        self._holds: dict[str, ReadHold] = {}
        """URI -> the hold its reads wait for (:meth:`hold_reads`)."""

    # ------------------------------------------------------------------ views

    @property
    def wanted(self) -> KeysView[str]:
        """Every URI subscribed (a live view; re-established after every reconnect)."""
        return self._set.wanted

    @property
    def paused(self) -> bool:
        return self._paused

    # ------------------------------------------------------------------ subscribe / unsubscribe

    async def subscribe(self, uris: Collection[str]) -> dict[str, str]:
        """Subscribe ``uris``; returns URI -> why (a clause: "the server refused it: ...") for those that failed.

        Returns once the establishment that carries them ended: acknowledged
        (the stream carrying them, or ``resources/subscribe`` answered), or
        failed. It is not bounded as a whole: each request of it is
        (``request_timeout``), so a handshake-era batch of 10,000 URIs may
        take minutes and still succeed, where one bound for all would fail
        them and then carry them unwanted. A URI subscribed while no
        connection is up is remembered and made on reconnect, followed by a
        synthetic change. A URI that failed is forgotten (the caller decides
        what to tell).
        """
        need: list[str] = []
        for uri in uris:
            due = self._set.want(uri, carried_once=not self._serving)
            if self._serving and (due or uri not in self._set.carried):
                need.append(uri)
        if not need:
            return {}
        batch = self._pending
        batch.uris.update(need)
        self._wake.set()
        await batch.done.wait()
        failed: dict[str, str] = {}
        for uri in need:
            why = batch.errors.get(uri)
            if why is None or uri not in self._set:
                continue  # established (it may be lost again by now: the stream's business), or unsubscribed
            failed[uri] = why
            self._set.drop(uri)
        return failed

    def hold_reads(self, uris: Collection[str]) -> ReadHold:
        """Reads of ``uris`` wait (:meth:`wait_readable`) until the returned hold is released."""
        return ReadHold(self._holds, uris)

    async def wait_readable(self, uri: str) -> None:
        """Return once no hold is on ``uri`` (at once, nearly always), or after ``request_timeout``.

        The bound is the subscribe's own: its requests are bounded by it, so a
        hold that outlives it belongs to a subscribe that is failing anyway.
        """
        hold = self._holds.get(uri)
        if hold is not None:
            with trio.move_on_after(self._request_timeout):
                await hold.released.wait()

    def unsubscribe(self, uri: str) -> bool:
        """Stop carrying ``uri`` (the next establishment leaves it out); True if it was subscribed."""
        if not self._set.drop(uri):
            return False
        self._outbox.pop(uri, None)  # its entry in _order is skipped when posted
        if self._set.dirty:
            self._wake.set()
        return True

    # ------------------------------------------------------------------ one connection

    def connected(self) -> None:
        """The connection is up (catalogs fetched, ``CONNECTED`` posted): establish the URIs now."""
        self._serving = True
        self._set.dirty = True
        self._wake.set()

    async def disconnected(self, reason: str | None) -> None:
        """The connection is gone (its nursery exited): report the URIs lost, post what was read."""
        lost = self.detach(reason)
        if lost:
            await self._post(SubscriptionStateChanged(self._server, lost, "lost", error=reason))
        if not self._paused:
            await self._flush()

    def detach(self, reason: str | None = None) -> frozenset[str]:
        """The connection is gone: subscribers waiting hear it; returns what the server carried.

        Idempotent (the connection owner calls it however the connection ended).
        """
        self._serving = False
        error = f"the connection was lost ({reason})"
        for batch in (self._inflight, self._pending):
            if batch is not None:
                batch.finish(frozenset(), error)
        self._inflight, self._pending = None, _Batch()
        lost = self._set.lost()
        self._set.reset()
        return lost

    async def server_failed(self, attempts: int) -> None:
        """The server was given up: every subscribed URI failed."""
        if len(self._set):
            uris = frozenset(self._set.wanted)
            await self._post(
                SubscriptionStateChanged(
                    self._server, uris, "failed", attempt=attempts, error="the server connection failed"
                )
            )

    async def serve(
        self,
        conn: ConnectionLike,
        catalog: tuple[bool, bool],
        on_catalog: Callable[[CatalogKind], None],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Keep the subscriptions established on ``conn`` until it is cancelled (its nursery).

        ``catalog``: whether to listen for ``tools``, ``resources`` list
        changes (2026-07-28: they arrive only on a listen stream), reported
        through ``on_catalog``. ``started()`` once the first stream (the
        catalog's, before any URI is let in) settled.
        """
        self._set.reset()
        self._poster_running = True
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._post_changes)
                if conn.modern:
                    await self._serve_modern(conn, catalog, on_catalog, task_status)
                else:
                    task_status.started()
                    await self._serve_handshake(conn)
        finally:
            self._poster_running = False

    async def _wait_for_work(self, stream: _Stream | None = None) -> None:
        while not (
            self._set.dirty
            or self._pending.uris
            or (stream is not None and stream.state is StreamState.ENDED)
        ):
            self._wake = trio.Event()
            await self._wake.wait()

    def _take_batch(self) -> tuple[frozenset[str], _Batch]:
        target = self._set.target()  # (clears dirty)
        if not self._serving:
            target = frozenset()  # the URIs wait for connected()
        batch, self._pending = self._pending, _Batch()
        self._inflight = batch
        return target, batch

    def _finish(self, batch: _Batch, error: str | None = None) -> None:
        batch.finish(self._set.carried, error)
        if self._inflight is batch:
            self._inflight = None

    def _policy(self, attempts: int | None = None) -> ResubscribePolicy:
        """A resubscribe policy with ``attempts`` (None: the configured ``resubscribe_attempts``)."""
        return ResubscribePolicy(
            self._backoff, self._attempts if attempts is None else attempts, stable_after=self._stable
        )

    async def _serve_modern(
        self,
        conn: ConnectionLike,
        catalog: tuple[bool, bool],
        on_catalog: Callable[[CatalogKind], None],
        task_status: trio.TaskStatus[None],
    ) -> None:
        """2026-07-28: keep one listen stream carrying the catalog flags and the target set."""
        run = _Listening(conn, catalog, on_catalog, _Started(task_status), self._policy)
        # The catalog's stream first (before any URI is let in); started() once it settled.
        self._set.dirty = run.flags
        if not run.flags:
            run.started()
        try:
            while True:
                await self._wait_for_work(run.live)
                if run.live is not None and run.live.state is StreamState.ENDED:
                    await self._stream_ended(run)
                elif not await self._switch(run):
                    return  # the connection is lost
        finally:
            if run.live is not None:
                run.live.close()

    async def _stream_ended(self, run: _Listening) -> None:
        """The live stream ended on a live connection: report it; re-open after the backoff, or give up."""
        ended, run.live = run.live, None
        assert ended is not None
        carried = self._set.lost()
        run.refresh_catalog()
        policy = run.policy(carried)
        decision = policy.on_end(lived=ended.lived(), delivered=ended.delivered)
        await self._report_end(ended, carried, policy)
        if isinstance(decision, GiveUp):
            run.given_up = True
            await self._give_up(decision.attempts, ended.reason)
            return
        if carried:
            await self._post(
                SubscriptionStateChanged(self._server, carried, "resubscribing", attempt=decision.attempt)
            )
        await trio.sleep(decision.delay)
        self._set.dirty = True

    async def _switch(self, run: _Listening) -> bool:
        """Open a stream with the target set, then close the one it replaces; False if the connection is lost.

        The old stream stays open until the new one is acknowledged, so a
        change in between arrives on one of them (or both); a change
        subscribed meanwhile waits for the next switch. A request the server
        refuses as a whole is narrowed (:class:`Narrowing`), never asked again as is.
        """
        if run.given_up:
            run.fresh()  # something was subscribed again after giving up: a fresh first attempt
        target, batch = self._take_batch()
        live = run.live
        if live is not None and target == live.uris:
            self._finish(batch)
            return True
        if not target and not run.flags:
            if live is not None:
                live.close()
                run.live = None
                await self._report_switch(self._set.established(()), 0, 0.0)
            self._finish(batch)
            return True
        policy = run.policy(target)
        began = trio.current_time()
        # What is carried now goes first, then the new URIs in the order they were
        # subscribed: a refusal naming one of them says which prefix the server took
        # (Narrowing), and a cap refuses the latest ones.
        kept = live.uris & target if live is not None else frozenset()
        base = tuple(kept)
        added = [u for u in self._set.wanted if u in target and u not in kept]
        opened = await self._open(run, (*base, *added))
        if isinstance(opened, _Stream):
            await self._adopt(run, opened, batch, policy, began)
        elif run.conn.lost.is_set():
            self._finish(batch, f"the connection was lost ({run.conn.lost_reason})")
            return False
        elif isinstance(opened, MCPError) and added:
            return await self._narrow(run, base, added, batch, opened, policy)
        else:
            await self._open_failed(run, target, batch, self._why(opened))
            return True
        self._finish(batch)
        run.started()
        return True

    async def _open(self, run: _Listening, order: Iterable[str]) -> _Stream | Exception:
        """Open a stream asking for ``order``: the stream once acknowledged, or why it was not."""
        opening = _Stream(order)
        try:
            await run.conn.nursery.start(self._hold, run.conn, opening, run.catalog, run.on_catalog)
        except Exception as exc:
            return exc
        return opening

    async def _adopt(
        self, run: _Listening, opening: _Stream, batch: _Batch, policy: ResubscribePolicy, began: float
    ) -> None:
        """``opening`` was acknowledged: it replaces the live stream (closed now); report what changed."""
        live, run.live = run.live, opening
        if live is not None:
            ended = live.state is StreamState.ENDED
            live.close()
            if ended:
                # It ended while its successor was being opened: what it carried may have
                # changed in between, so every URI is re-read as after any loss.
                carried = self._set.lost()
                run.refresh_catalog()
                await self._report_end(live, carried, run.policy(carried))
        await self._refuse(batch, opening.asked - opening.uris, "the server did not acknowledge it", 0)
        switch = self._set.established(opening.uris)
        await self._report_switch(switch, policy.attempt, trio.current_time() - began)

    async def _narrow(
        self,
        run: _Listening,
        base: tuple[str, ...],
        added: list[str],
        batch: _Batch,
        refusal: MCPError,
        policy: ResubscribePolicy,
    ) -> bool:
        """The server refused ``base`` + ``added`` as a whole: carry what it takes, refuse the rest.

        ``base`` is what the live stream carries (taken before); ``added``
        is narrowed (:class:`Narrowing`). The refused URIs are dropped from
        the set and reported with the server's reason (its fix, for the
        bundled servers' ``--max-watchers``); the rest stays subscribed.
        False if the connection is lost meanwhile.
        """
        narrowing = Narrowing(added, named=_named_uri(refusal))
        why = self._why(refusal)
        began = trio.current_time()
        while (trial := narrowing.next_try()) is not None:
            opened = await self._open(run, (*base, *trial))
            if isinstance(opened, _Stream):
                narrowing.accepted()
                await self._adopt(run, opened, batch, policy, began)
                continue
            if run.conn.lost.is_set():
                self._finish(batch, f"the connection was lost ({run.conn.lost_reason})")
                return False
            if not isinstance(opened, MCPError):
                break  # not a refusal (a timeout): what is left is refused with it
            if narrowing.phase is NarrowingPhase.BISECT:
                why = self._why(opened)  # the refusal of the first URI that does not fit
            narrowing.refused_by(_named_uri(opened))
        refused = narrowing.refused if narrowing.phase is NarrowingPhase.DONE else added
        await self._refuse(batch, (u for u in refused if u not in self._set.carried), why, policy.attempt)
        # What is carried now may differ from the target (a URI dropped meanwhile, no
        # stream for the catalog's flags yet): the next switch settles it.
        self._set.dirty = True
        self._finish(batch)
        run.started()
        return True

    async def _open_failed(self, run: _Listening, target: frozenset[str], batch: _Batch, why: str) -> None:
        """Opening a stream failed on a live connection."""
        policy = run.policy(target)
        if run.live is not None:
            # The stream in place keeps what it carries; what this one would
            # have added is refused (a waiting subscriber hears why).
            await self._refuse(batch, target - run.live.uris, why, policy.attempt)
            self._finish(batch)
            return
        # Nothing is carried: subscribers waiting hear why now, the rest waits
        # for the retry (or is given up with the stream).
        self._finish(batch, why)
        run.started()
        decision = policy.on_end(lived=None)
        if isinstance(decision, GiveUp):
            run.given_up = True
            await self._give_up(decision.attempts, why)
            return
        await trio.sleep(decision.delay)
        self._set.dirty = True

    async def _hold(
        self,
        conn: ConnectionLike,
        stream: _Stream,
        catalog: tuple[bool, bool],
        on_catalog: Callable[[CatalogKind], None],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Open ``stream`` (``started()`` once acknowledged; an error before that is raised) and read it."""
        tools, resources = catalog
        with stream.scope:
            try:
                async with conn.client.listen(
                    tools_list_changed=tools,
                    resources_list_changed=resources,
                    resource_subscriptions=list(stream.order),
                ) as sub:
                    honored = sub.honored.resource_subscriptions
                    stream.acknowledged(stream.asked.intersection(honored) if honored else frozenset())
                    mark("upstream.listen_acknowledged")
                    task_status.started()
                    async for event in sub:
                        self._on_event(stream, event, on_catalog)
                stream.end("the server closed the listen stream")
            except Exception as exc:
                if stream.state is StreamState.OPENING:
                    raise
                stream.end(describe(exc))
        if stream.state is StreamState.ENDED:
            self._wake.set()

    def _on_event(
        self, stream: _Stream, event: ServerEvent, on_catalog: Callable[[CatalogKind], None]
    ) -> None:
        stream.delivered += 1
        if isinstance(event, ResourceUpdated):
            uri = event.uri
            # A URI the stream was not opened with is a sub-resource the server stamped;
            # one it was opened with and nobody wants any more waits for the next
            # stream to leave it out (dropped: nobody subscribed to it).
            if uri in self._set or uri not in stream.uris:
                mark("upstream.updated", uri)
                self._queue(uri, "updated")
        elif isinstance(event, ToolsListChanged):
            on_catalog("tools")
        elif isinstance(event, ResourcesListChanged):
            mark("upstream.list_changed")
            on_catalog("resources")

    async def _serve_handshake(self, conn: ConnectionLike) -> None:
        """Handshake era: one ``resources/subscribe`` per URI added, ``resources/unsubscribe`` per URI dropped."""
        while True:
            await self._wait_for_work()
            target, batch = self._take_batch()
            carried = self._set.carried
            added = target - carried
            dropped = carried - target
            began = trio.current_time()
            errors = await self._requests(conn, added, dropped)
            if conn.lost.is_set():
                self._finish(batch, f"the connection was lost ({conn.lost_reason})")
                return
            # Refused URIs are reported per reason, one line each.
            by_reason: dict[str, set[str]] = {}
            for uri, why in errors.items():
                by_reason.setdefault(why, set()).add(uri)
            for why, uris in by_reason.items():
                await self._refuse(batch, uris, why, 0)
            switch = self._set.established((carried | (added - errors.keys())) - dropped)
            await self._report_switch(switch, 0, trio.current_time() - began)
            self._finish(batch)

    async def _requests(
        self, conn: ConnectionLike, added: Collection[str], dropped: Collection[str]
    ) -> dict[str, str]:
        """Subscribe ``added`` and unsubscribe ``dropped``, :data:`HANDSHAKE_CONCURRENCY` at a time.

        Returns URI -> why, for the subscribes that failed (a failed
        unsubscribe is only told: the server may keep notifying, and those
        notices are dropped).
        """
        work = iter([(uri, True) for uri in added] + [(uri, False) for uri in dropped])
        errors: dict[str, str] = {}

        async def worker() -> None:
            for uri, on in work:
                try:
                    await self._request(conn, uri, on=on)
                except Exception as exc:
                    if on:
                        errors[uri] = self._why(exc)
                    else:
                        self._telemetry.emit(
                            "upstream.unsubscribe_failed", server=self._server, uri=uri, error=describe(exc)
                        )

        async with trio.open_nursery() as workers:
            for _ in range(min(HANDSHAKE_CONCURRENCY, len(added) + len(dropped))):
                workers.start_soon(worker)
        return errors

    def _why(self, exc: BaseException) -> str:
        """Why a subscribe failed, as a clause ("server X could not subscribe to U: <clause>")."""
        if isinstance(exc, MCPError):
            return f"the server refused it: {exc}"
        if isinstance(exc, TimeoutError | trio.TooSlowError):
            return f"no answer within {self._request_timeout:g}s (request_timeout)"
        return describe(exc)

    async def _request(self, conn: ConnectionLike, uri: str, *, on: bool) -> None:
        request: types.SubscribeRequest | types.UnsubscribeRequest = (
            types.SubscribeRequest(params=types.SubscribeRequestParams(uri=uri))
            if on
            else types.UnsubscribeRequest(params=types.UnsubscribeRequestParams(uri=uri))
        )
        with trio.fail_after(self._request_timeout):
            await conn.client.session.send_request(request, types.EmptyResult)

    def on_updated(self, uri: str) -> None:
        """Handshake era: the server pushed ``notifications/resources/updated`` for ``uri``."""
        if uri in self._set:
            self._queue(uri, "updated")
        else:
            self._unsubscribed_update(uri)

    def _unsubscribed_update(self, uri: str) -> None:
        # Nobody subscribed (or it was just unsubscribed): never routed, but counted.
        self._counters.unroute()
        self._telemetry.emit("upstream.unsubscribed_update", server=self._server, uri=uri)

    # ------------------------------------------------------------------ reporting

    async def _report_switch(self, switch: Switch, attempt: int, took: float) -> None:
        """One establishment: a line for it, one debug line and one state per URI added, the re-reads."""
        if not (switch.added or switch.removed):
            return
        self._telemetry.emit(
            "subscription.synced",
            server=self._server,
            uris=len(self._set.carried),
            added=len(switch.added),
            removed=len(switch.removed),
            attempt=attempt,
            ms=round(took * 1000, 1),
        )
        if not switch.added:
            return
        # The lines first: whatever the reactor does about it (ready.changed, a
        # delivery) is then logged after them, never before.
        for uri in switch.added:
            self._telemetry.emit("subscription.established", server=self._server, uri=uri, attempt=attempt)
        await self._post(SubscriptionStateChanged(self._server, switch.added, "established", attempt=attempt))
        # Read-after-subscribe: whatever changed while these were not carried is delivered now.
        for uri in switch.reread:
            self._queue(uri, "synthetic")

    async def _report_end(self, stream: _Stream, carried: frozenset[str], policy: ResubscribePolicy) -> None:
        reason = stream.reason
        if not carried:
            self._telemetry.emit("upstream.catalog_stream_lost", server=self._server, error=reason)
            return
        lived = stream.lived() or 0.0
        self._telemetry.emit(
            "subscription.lost",
            server=self._server,
            uris=len(carried),
            sample=sample(carried),
            error=reason,
            lived_s=round(lived, 3),
            updates=stream.delivered,
            counted_as_failure=not policy.healthy(lived=lived, delivered=stream.delivered),
        )
        await self._post(SubscriptionStateChanged(self._server, carried, "lost", error=reason))

    async def _give_up(self, attempts: int, reason: str) -> None:
        """Re-opening failed ``attempts`` times in a row: every URI is given up (nothing is carried)."""
        uris = self._set.target()
        self._set.fail(uris)
        if not uris:
            self._telemetry.emit("upstream.catalog_stream_failed", server=self._server, attempts=attempts)
            return
        await self._report_failed(uris, attempts, reason)

    async def _refuse(self, batch: _Batch, uris: Iterable[str], why: str, attempt: int) -> None:
        """The server refused ``uris``: a subscriber waiting for one hears why; the others are given up."""
        given_up: set[str] = set()
        for uri in uris:
            if uri in batch.uris:
                batch.errors[uri] = why
            elif uri in self._set:
                given_up.add(uri)
        if not given_up:
            return
        self._set.fail(given_up)
        await self._report_failed(frozenset(given_up), attempt, why)

    async def _report_failed(self, uris: frozenset[str], attempts: int, error: str) -> None:
        """Tell the user (``subscription.failed``) and the supervisor that ``uris`` are given up."""
        self._telemetry.emit(
            "subscription.failed",
            server=self._server,
            uris=len(uris),
            sample=sample(uris),
            attempts=attempts,
            error=error,
        )
        await self._post(
            SubscriptionStateChanged(self._server, uris, "failed", attempt=attempts, error=error)
        )

    # ------------------------------------------------------------------ changes out

    def _queue(self, uri: str, kind: ChangeKind) -> None:
        if uri not in self._outbox:
            self._order.append(uri)
            if not self._paused:
                self._outbox_wake.set()
        self._outbox[uri] = kind

    async def _post_changes(self) -> None:
        """Post queued changes one at a time (an entry leaves the queue once it is sent)."""
        while True:
            while self._paused or not self._order:
                self._outbox_wake = trio.Event()
                await self._outbox_wake.wait()
            await self._post_first()

    async def _post_first(self) -> None:
        uri = self._order[0]
        kind = self._outbox.get(uri)
        if kind is not None:
            await self._post(ResourceChanged(self._server, uri, kind))
        # Sent (or skipped: unsubscribed meanwhile). A change that arrived while it
        # was being sent is covered by it: the reactor has not read it yet.
        self._order.popleft()
        self._outbox.pop(uri, None)

    async def _flush(self) -> None:
        while self._order:
            await self._post_first()

    # ------------------------------------------------------------------ backpressure

    def pause(self) -> None:
        """Stop posting changes; keep reading them, one entry per URI (rfcs/0131)."""
        self._paused = True

    def resume(self) -> list[str]:
        """Post again; returns the URIs held meanwhile if no connection is up to post them."""
        self._paused = False
        if self._poster_running:
            self._outbox_wake.set()
            return []
        held = [uri for uri in self._order if uri in self._outbox]
        self._order.clear()
        self._outbox.clear()
        return held
