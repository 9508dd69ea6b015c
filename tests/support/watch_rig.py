"""The watch manager plus the reactor's routing part, over real upstream connections (for tests).

:class:`Rig` plays the reactor: a real :class:`Router` holds the watch routes
(exact, debounce 0), upstream changes are ingested into it, and due watch
routes are handed to ``manager.on_changed`` exactly as the reactor's
``_deliver`` does. Notices are collected instead of starting turns. No sleeps:
every wait is on a channel or an event, bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import html
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from agentd.events import ResourceChanged, SubscriptionStateChanged, WatchNotice
from agentd.observe.counters import RunCounters
from agentd.supervisor.routing.subscriptions import Subscriptions
from agentd.triggers.router import Continue, ContinueDelivery, QueuedEvent, Router, RouteSpec
from agentd.upstream import Upstream, resolve_server_for_uri
from agentd.watches.limits import WatchLimits
from agentd.watches.manager import WatchManager
from tests.support.telemetry import RecordingTelemetry
from tests.support.watch import Spec

#: Short debounce so a notice follows a change within a fraction of a second.
FAST = WatchLimits(debounce_quiet_secs=0.05, debounce_max_secs=0.5)

#: Bound on any single wait in these tests (generous for a loaded 2-core machine).
WAIT = 15.0


def memo_spec(path: Path) -> Spec:
    """The bundled memo server over stdio, its notes in ``path``."""
    return Spec(
        name="memo", command=sys.executable, args=["-m", "agentd", "serve", "memo", "--file", str(path)]
    )


@dataclass
class Rig:
    """The manager plus the reactor's routing part, over real upstream connections."""

    manager: WatchManager
    upstreams: dict[str, Upstream]
    router: Router
    telemetry: RecordingTelemetry
    send: trio.MemorySendChannel[Any]
    """The channel the upstreams and the manager post to (what the reactor reads)."""
    subscriptions: Subscriptions
    """The component that decides what stays subscribed (the reactor's)."""
    counters: RunCounters
    """The run's counter set the manager counts into (refusals by a watch cap)."""
    notices: list[WatchNotice] = field(default_factory=list)
    changes: list[ResourceChanged] = field(default_factory=list)
    """Every ``ResourceChanged`` the upstreams posted, routed or not."""
    _arrived: trio.Event = field(default_factory=trio.Event)

    async def add(self, *, session: str, name: str, uri: str) -> None:
        rid = f"watch:{session}:{name}"
        self.router.add_route(
            RouteSpec(match=uri, disposition=Continue(session=rid), debounce=0.0, route_id=rid, exact=True),
            front=True,
        )

    async def remove(self, *, session: str, name: str) -> None:
        self.router.remove_route(f"watch:{session}:{name}")

    async def pump(self, recv: trio.MemoryReceiveChannel[Any]) -> None:
        async for ev in recv:
            now = trio.current_time()
            if isinstance(ev, ResourceChanged):
                self.changes.append(ev)
                self.router.ingest(QueuedEvent(ev.uri, ev.server, ev.etag, ev.kind, now), now)
            elif isinstance(ev, SubscriptionStateChanged):
                self.manager.on_subscription_state(ev)
            elif isinstance(ev, WatchNotice):
                self.notices.append(ev)
            self._arrived.set()
            self._arrived = trio.Event()
            for d in self.router.take_deliveries(
                now, session_idle=lambda _s: True, may_spawn=lambda: True, draining=False
            ):
                assert isinstance(d, ContinueDelivery)
                self.router.on_session_idle(d.session)
                self.manager.on_changed(d.route_id, [e.uri for e in d.events])

    async def change(self, uri: str) -> ResourceChanged:
        """Wait for the first ``ResourceChanged`` of ``uri`` (subscribe to it first)."""
        with trio.fail_after(WAIT):
            while True:
                found = [c for c in self.changes if c.uri == uri]
                if found:
                    return found[0]
                await self._arrived.wait()

    async def notice(
        self, count: int = 1, pred: Callable[[WatchNotice], bool] = lambda n: True
    ) -> WatchNotice:
        """Wait for the ``count``-th notice matching ``pred``."""
        with trio.fail_after(WAIT):
            while True:
                found = [n for n in self.notices if pred(n)]
                if len(found) >= count:
                    return found[count - 1]
                await self._arrived.wait()

    async def start(
        self, name: str, uri: str, on_event: object = None, *, session: str = "s1"
    ) -> dict[str, Any]:
        return await self.manager.start(session=session, name=name, uri=uri, on_event=on_event, routes=self)

    async def memo_set(self, key: str, value: Any) -> None:
        result = await self.upstreams["memo"].call_tool("memo_set", {"key": key, "value": value})
        assert not result.is_error, result


@asynccontextmanager
async def rig(
    specs: list[Spec],
    *,
    limits: WatchLimits = FAST,
    state_path: Path | None = None,
    resubscribe: tuple[tuple[float, ...], int] | None = None,
) -> AsyncIterator[Rig]:
    """The rig over ``specs``; ``resubscribe`` = (delays, attempts) for the upstreams."""
    send, recv = trio.open_memory_channel[Any](1000)
    telemetry = RecordingTelemetry()
    options: dict[str, Any] = {}
    if resubscribe is not None:
        options = {"resubscribe_backoff": resubscribe[0], "resubscribe_attempts": resubscribe[1]}
    upstreams = {s.name: Upstream(s, send, telemetry, **options) for s in specs}

    def server_for(uri: str) -> str | None:
        return resolve_server_for_uri(uri, {n: u.catalog() for n, u in upstreams.items()})

    router = Router()
    subscriptions = Subscriptions((), router)  # decides, as in the reactor
    counters = RunCounters()
    manager = WatchManager(
        upstreams=upstreams,
        events=send,
        telemetry=telemetry,
        limits=limits,
        server_for=server_for,
        state_path=state_path,
        holds=subscriptions,
        counters=counters,
    )
    r = Rig(manager, upstreams, router, telemetry, send, subscriptions, counters)
    async with trio.open_nursery() as nursery:
        for up in upstreams.values():
            await nursery.start(up.run)
        nursery.start_soon(r.pump, recv)
        await nursery.start(manager.run)
        yield r
        nursery.cancel_scope.cancel()


def lines(n: WatchNotice) -> list[str]:
    """The lines of a notice (between the ``<watch-event>`` tags), unescaped."""
    body = n.text.split("\n</watch-event>")[0]
    return [html.unescape(line) for line in body.split("\n")[1:]]
