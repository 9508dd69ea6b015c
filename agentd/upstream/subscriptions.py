"""Resource subscriptions of one upstream connection (moved from ``connection.py``).

:class:`SubscriptionsMixin` holds :class:`agentd.upstream.connection.Upstream`'s
subscription, listen-stream and pause code; ``Upstream`` inherits it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import mcp_types as types
import trio
from mcp.client.subscriptions import ResourcesListChanged, ResourceUpdated, ToolsListChanged

from agentd.errors import CapabilityMissing, ServerUnavailable, UpstreamError
from agentd.events import ReactorEvent, ResourceChanged, ServerState, SubscriptionStateChanged
from agentd.telemetry import Telemetry
from agentd.timeline import mark
from agentd.upstream.backoff import (
    MAX_CONSECUTIVE_FAILURES,
    GiveUp,
    ResubscribePolicy,
)
from agentd.upstream.describe import describe as _describe

if TYPE_CHECKING:
    from agentd.upstream.connection import _Conn

__all__ = ["SubscriptionsMixin"]


@dataclass(eq=False)
class _Sub:
    """A remembered subscription to one URI."""

    uri: str
    established_once: bool = False
    """Set after the first establishment: every later one is followed by a synthetic change."""
    waiter: trio.Event | None = None
    """Set by :meth:`Upstream.subscribe` while it waits for the first outcome."""
    first_error: str | None = None
    scope: trio.CancelScope | None = None
    failed: bool = False
    """Re-opening gave up on this connection (see :class:`ResubscribePolicy`); the next
    reconnect, or the next :meth:`Upstream.subscribe` of the URI, tries again."""


class SubscriptionsMixin:
    """The subscription part of :class:`agentd.upstream.connection.Upstream` (see its docstrings)."""

    name: str
    state: ServerState
    capabilities: types.ServerCapabilities | None
    request_timeout: float
    _telemetry: Telemetry
    _subs: dict[str, _Sub]
    _updates_open: trio.Event
    _missed: set[str]
    _conn: _Conn | None
    _resubscribe_backoff: tuple[float, ...]
    _resubscribe_attempts: int
    _stable_subscription: float

    if TYPE_CHECKING:

        def _can_subscribe(self) -> bool: ...
        async def _post(self, event: ReactorEvent) -> None: ...
        async def _bounded(self, what: str, conn: _Conn, op: Any) -> Any: ...
        def _request_refresh(self, conn: _Conn, kind: str) -> None: ...

    async def _catalog_listener(
        self, conn: _Conn, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """2026-07-28: list_changed arrives only on a listen stream; keep one open.

        ``started()`` once the first attempt settled (acknowledged or failed).
        """
        caps = conn.client.server_capabilities
        want_tools = bool(caps.tools and caps.tools.list_changed)
        want_resources = bool(caps.resources and caps.resources.list_changed)
        if not (want_tools or want_resources):
            task_status.started()
            return
        # Not a watch: list_changed streams keep the built-in attempt count, but a
        # stream acknowledged and ended at once counts as a failure here too.
        policy = ResubscribePolicy(
            self._resubscribe_backoff, MAX_CONSECUTIVE_FAILURES, stable_after=self._stable_subscription
        )
        started = False
        while True:
            since: float | None = None
            delivered = 0
            try:
                async with conn.client.listen(
                    tools_list_changed=want_tools, resources_list_changed=want_resources
                ) as stream:
                    since = trio.current_time()
                    if not started:
                        started = True
                        task_status.started()
                    async for event in stream:
                        if isinstance(event, ToolsListChanged):
                            delivered += 1
                            self._request_refresh(conn, "tools")
                        elif isinstance(event, ResourcesListChanged):
                            delivered += 1
                            self._request_refresh(conn, "resources")
            except Exception as exc:
                self._telemetry.emit("upstream.catalog_stream_lost", server=self.name, error=_describe(exc))
            if not started:
                started = True
                task_status.started()
            if conn.lost.is_set():
                return
            # The stream ended on a live connection: anything may have changed meanwhile.
            self._request_refresh(conn, "tools")
            self._request_refresh(conn, "resources")
            decision = policy.on_end(
                lived=None if since is None else trio.current_time() - since, delivered=delivered
            )
            if isinstance(decision, GiveUp):
                self._telemetry.emit(
                    "upstream.catalog_stream_failed", server=self.name, attempts=decision.attempts
                )
                return
            await trio.sleep(decision.delay)

    # ------------------------------------------------------------------ backpressure

    @property
    def updates_paused(self) -> bool:
        """Whether :meth:`pause_updates` is in force."""
        return not self._updates_open.is_set()

    def pause_updates(self) -> None:
        """Stop reading this server's update streams (a ``block`` route is full; rfcs/0131).

        2026-07-28: the listen streams are not read any more; the client keeps
        at most one pending change per URI (it drops repeats), so memory stays
        flat and nothing is lost. Handshake era: updates share the connection
        with replies, which agents need to drain the route, so the connection
        keeps being read; an update for a subscribed URI is remembered (one
        entry per URI) instead of posted. Either way nothing is posted while
        paused. Tool calls and reads are unaffected. Idempotent; synchronous.
        """
        if self._updates_open.is_set():
            self._updates_open = trio.Event()

    def resume_updates(self) -> list[str]:
        """Read update streams again; returns the URIs changed while paused (handshake era).

        The caller posts one synthetic "possibly changed" per returned URI
        (:meth:`post_possibly_changed`). Idempotent; synchronous.
        """
        self._updates_open.set()
        missed = sorted(self._missed)
        self._missed.clear()
        return missed

    async def post_possibly_changed(self, uris: Iterable[str]) -> None:
        """Post one synthetic change per URI still subscribed (after a pause, rfcs/0131)."""
        for uri in uris:
            if uri in self._subs:
                await self._post(ResourceChanged(self.name, uri, "synthetic"))

    # ------------------------------------------------------------------ subscriptions

    async def subscribe(self, uri: str) -> None:
        """Subscribe to changes of ``uri``; every change is posted as ``ResourceChanged``.

        Idempotent. Returns once the subscription is live (listen stream
        acknowledged, or ``resources/subscribe`` answered). While the server
        is reconnecting the URI is remembered and subscribed on reconnect.
        The subscription survives reconnects and stream ends; each
        re-establishment is followed by a ``ResourceChanged(kind="synthetic")``.

        Raises:
            CapabilityMissing: the server does not advertise ``resources.subscribe``.
            ServerUnavailable: the server never connected.
            UpstreamError: the server refused or did not answer in time.
        """
        self._gate_subscribe(uri, "subscribe to")
        known = self._subs.get(uri)
        if known is not None and not known.failed:
            return
        if known is not None:
            # Re-opening gave up on this connection: a new subscriber asks, so try again now.
            self._forget(known)
        sub = _Sub(uri)
        self._subs[uri] = sub
        conn = self._conn
        if conn is None:
            sub.established_once = True  # established on reconnect, then a synthetic change
            return
        sub.waiter = waiter = trio.Event()
        conn.nursery.start_soon(self._sub_task, conn, sub)
        try:
            with trio.fail_after(self.request_timeout):
                await waiter.wait()
        except trio.TooSlowError:
            self._forget(sub)
            raise UpstreamError(
                f"server {self.name!r} did not confirm the subscription to {uri!r} within "
                f"{self.request_timeout:g}s (request_timeout)"
            ) from None
        if sub.first_error is not None:
            self._forget(sub)
            raise UpstreamError(
                f"server {self.name!r} refused the subscription to {uri!r}: {sub.first_error}"
            )

    async def unsubscribe(self, uri: str) -> None:
        """Stop watching ``uri`` (idempotent).

        Raises:
            CapabilityMissing: the server does not advertise ``resources.subscribe``.
        """
        self._gate_subscribe(uri, "unsubscribe from")
        sub = self._subs.get(uri)
        if sub is None:
            return
        self._forget(sub)
        conn = self._conn
        if conn is not None and not conn.modern:
            request = types.UnsubscribeRequest(params=types.UnsubscribeRequestParams(uri=uri))
            try:
                await self._bounded(
                    f"resources/unsubscribe {uri!r}",
                    conn,
                    lambda c: c.session.send_request(request, types.EmptyResult),
                )
            except UpstreamError as exc:
                # The server may keep notifying; those notices are dropped (URI no longer remembered).
                self._telemetry.emit("upstream.unsubscribe_failed", server=self.name, uri=uri, error=str(exc))

    def _forget(self, sub: _Sub) -> None:
        if self._subs.get(sub.uri) is sub:
            del self._subs[sub.uri]
        if sub.scope is not None:
            sub.scope.cancel()

    def _gate_subscribe(self, uri: str, verb: str) -> None:
        if self.capabilities is None:
            raise ServerUnavailable(
                f"server {self.name!r} has not connected yet ({self.state.value}); cannot {verb} {uri!r}"
            )
        if not self._can_subscribe():
            raise CapabilityMissing(
                f"server {self.name!r} cannot {verb} {uri!r}: it does not advertise the "
                "resources.subscribe capability; watch this resource with a timer route instead"
            )

    async def _establish(self, sub: _Sub, attempt: int) -> None:
        # The line first: whatever the reactor does about it (ready.changed, a
        # delivery) is then logged after it, never before.
        self._telemetry.emit("subscription.established", server=self.name, uri=sub.uri, attempt=attempt)
        await self._post(SubscriptionStateChanged(self.name, sub.uri, "established", attempt=attempt))
        if sub.established_once:
            # Read-after-subscribe: whatever changed while we were not listening is delivered now.
            await self._post(ResourceChanged(self.name, sub.uri, "synthetic"))
        sub.established_once = True
        if sub.waiter is not None:
            sub.waiter.set()
            sub.waiter = None

    def _resubscribe_policy(self) -> ResubscribePolicy:
        return ResubscribePolicy(
            self._resubscribe_backoff, self._resubscribe_attempts, stable_after=self._stable_subscription
        )

    async def _sub_task(self, conn: _Conn, sub: _Sub) -> None:
        """Keep ``sub`` established on ``conn`` (a reconnect starts a new task).

        A stream that ends on a live connection is reported ``lost`` and
        re-opened after the resubscribe backoff. A stream that was acknowledged
        and ended before :data:`STABLE_SUBSCRIPTION` without delivering an
        update counts as a failed attempt, as does a refused one
        (:class:`ResubscribePolicy`), so a server that ends every stream right
        after acknowledging it is given up after the configured attempts
        (reported ``failed`` and left alone until the next reconnect or
        :meth:`subscribe`) instead of being re-read every second forever.
        """
        with trio.CancelScope() as scope:
            sub.scope = scope
            if self._subs.get(sub.uri) is not sub:
                return  # unsubscribed before this task started
            policy = self._resubscribe_policy()
            attempt = 0
            while True:
                reason, lived, delivered = await self._hold(conn, sub, attempt)
                if conn.lost.is_set():
                    reason = f"the connection was lost ({conn.lost_reason})"
                if sub.waiter is not None:
                    # subscribe() is waiting on the first attempt: report, do not retry.
                    sub.first_error = reason
                    sub.waiter.set()
                    sub.waiter = None
                    return
                if conn.lost.is_set():
                    return  # the reconnect re-establishes every remembered subscription
                decision = policy.on_end(lived=lived, delivered=delivered)
                if lived is not None:
                    healthy = policy.healthy(lived=lived, delivered=delivered)
                    self._telemetry.emit(
                        "subscription.lost",
                        server=self.name,
                        uri=sub.uri,
                        error=reason,
                        lived_s=round(lived, 3),
                        updates=delivered,
                        counted_as_failure=not healthy,
                    )
                    await self._post(SubscriptionStateChanged(self.name, sub.uri, "lost", error=reason))
                if isinstance(decision, GiveUp):
                    sub.failed = True
                    self._telemetry.emit(
                        "subscription.failed",
                        server=self.name,
                        uri=sub.uri,
                        attempts=decision.attempts,
                        error=reason,
                    )
                    await self._post(
                        SubscriptionStateChanged(
                            self.name, sub.uri, "failed", attempt=decision.attempts, error=reason
                        )
                    )
                    return
                attempt = decision.attempt
                await self._post(
                    SubscriptionStateChanged(self.name, sub.uri, "resubscribing", attempt=attempt)
                )
                await trio.sleep(decision.delay)

    async def _hold(self, conn: _Conn, sub: _Sub, attempt: int) -> tuple[str, float | None, int]:
        """Establish ``sub`` and hold it until it ends.

        Returns why it ended, how long it was established (``None``: it never
        was) and how many updates it delivered.
        """
        since: float | None = None
        delivered = 0

        def lived() -> float | None:
            return None if since is None else trio.current_time() - since

        try:
            if conn.modern:
                async with conn.client.listen(resource_subscriptions=[sub.uri]) as stream:
                    since = trio.current_time()
                    await self._establish(sub, attempt)
                    while True:
                        # Paused (rfcs/0131): the stream is not read; the client
                        # keeps one pending change per URI meanwhile. (Checked
                        # first, so an open gate adds no schedule point.)
                        if not self._updates_open.is_set():
                            await self._updates_open.wait()
                        try:
                            event = await anext(stream)
                        except StopAsyncIteration:
                            break
                        # Paused while this read was waiting: hold the one change
                        # it returned until resumed (nothing is posted while paused).
                        if not self._updates_open.is_set():
                            await self._updates_open.wait()
                        if isinstance(event, ResourceUpdated):
                            mark("upstream.updated", event.uri)
                            delivered += 1
                            await self._post(ResourceChanged(self.name, event.uri, "updated"))
                return "the server closed the listen stream", lived(), delivered
            request = types.SubscribeRequest(params=types.SubscribeRequestParams(uri=sub.uri))
            with trio.fail_after(self.request_timeout):
                await conn.client.session.send_request(request, types.EmptyResult)
            since = trio.current_time()
            await self._establish(sub, attempt)
            # Handshake era: updates arrive through the message handler until the connection drops.
            await trio.sleep_forever()
        except Exception as exc:
            return _describe(exc), lived(), delivered
        raise AssertionError("unreachable")  # pragma: no cover
