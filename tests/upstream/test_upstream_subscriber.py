"""One listen stream per server (rfcs/0260): :class:`Subscriber` against a real SDK server, in process.

The server is an ``MCPServer`` with the SDK's own ``ListenHandler`` behind a
thin wrapper that counts listen requests and can hold one unacknowledged; the
client is the SDK's ``Client`` on the in-memory transport. Nothing sleeps:
every wait is on an event, bounded by ``trio.fail_after``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
import trio
import trio.testing
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourceUpdated

from agentd.events import ReactorEvent, ResourceChanged, SubscriptionStateChanged
from agentd.observe.counters import RunCounters
from agentd.upstream.subscriptions import Subscriber
from tests.support.telemetry import RecordingTelemetry

WAIT = 20.0
"""Bound on one awaited outcome (in process: milliseconds, unless the machine is very busy)."""

FAST = (0.01, 0.02)
"""Resubscribe waits: the schedule's shape is the pure policy's test."""


@dataclass(eq=False)
class Server:
    """The SDK's listen handler, counted and optionally held."""

    bus: InMemorySubscriptionBus = field(default_factory=InMemorySubscriptionBus)
    requests: list[int] = field(default_factory=list)
    """URIs carried by each listen request, in arrival order."""
    open_now: int = 0
    open_max: int = 0
    hold: trio.Event | None = None
    """While set to an unset event, the next listen request waits for it before it is served."""
    held: trio.Event = field(default_factory=trio.Event)
    refuse: str | None = None
    """A URI whose listen requests are refused."""

    def __post_init__(self) -> None:
        self.handler = ListenHandler(self.bus)

    async def listen(self, ctx: Any, params: types.SubscriptionsListenRequestParams) -> Any:
        uris = params.notifications.resource_subscriptions or []
        self.requests.append(len(uris))
        if self.refuse is not None and self.refuse in uris:
            from mcp.shared.exceptions import MCPError

            raise MCPError(types.INVALID_PARAMS, f"no subscriptions to {self.refuse}")
        if self.hold is not None:
            gate, self.hold = self.hold, None
            self.held.set()
            await gate.wait()
        self.open_now += 1
        self.open_max = max(self.open_max, self.open_now)
        try:
            return await self.handler(ctx, params)
        finally:
            self.open_now -= 1

    async def publish(self, *uris: str) -> None:
        for uri in uris:
            await self.bus.publish(ResourceUpdated(uri=uri))


@dataclass(eq=False)
class Conn:
    """What the subscriber needs of a connection."""

    client: Client
    nursery: trio.Nursery
    modern: bool = True
    lost: trio.Event = field(default_factory=trio.Event)
    lost_reason: str | None = None


@dataclass(eq=False)
class Rig:
    server: Server
    sub: Subscriber
    telemetry: RecordingTelemetry
    recv: trio.MemoryReceiveChannel[ReactorEvent]
    seen: list[ReactorEvent] = field(default_factory=list)

    async def next(self, kind: type[Any], **attrs: Any) -> Any:
        with trio.fail_after(WAIT):
            while True:
                event = await self.recv.receive()
                self.seen.append(event)
                if isinstance(event, kind) and all(getattr(event, k) == v for k, v in attrs.items()):
                    return event

    async def changes(self, n: int) -> list[ResourceChanged]:
        """The next ``n`` resource changes posted (other events are kept in :attr:`seen`)."""
        return [await self.next(ResourceChanged) for _ in range(n)]

    def drained(self) -> list[ReactorEvent]:
        out = []
        while True:
            try:
                out.append(self.recv.receive_nowait())
            except trio.WouldBlock:
                return out


@asynccontextmanager
async def rig(**options: Any) -> AsyncIterator[Rig]:
    server = Server()
    app: MCPServer[Any] = MCPServer("many", subscriptions=server.bus)
    app._lowlevel_server.add_request_handler(
        "subscriptions/listen", types.SubscriptionsListenRequestParams, server.listen
    )
    send, recv = trio.open_memory_channel[ReactorEvent](100_000)
    telemetry = RecordingTelemetry()
    sub = Subscriber(
        "many",
        send.send,
        telemetry,
        RunCounters(),
        request_timeout=WAIT,
        resubscribe_backoff=FAST,
        resubscribe_attempts=options.pop("attempts", 3),
        stable_subscription=options.pop("stable", 10.0),
    )
    async with Client(app) as client, trio.open_nursery() as nursery:
        conn = Conn(client, nursery)
        await nursery.start(sub.serve, conn, (False, False), lambda kind: None)
        sub.connected()
        yield Rig(server, sub, telemetry, recv)
        nursery.cancel_scope.cancel()


def uris(n: int, prefix: str = "item://") -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


async def test_two_thousand_subscribes_at_once_share_one_or_two_streams() -> None:
    async with rig() as r:
        failed: list[dict[str, str]] = []

        async def one(uri: str) -> None:
            failed.append(await r.sub.subscribe([uri]))

        async with trio.open_nursery() as callers:
            for uri in uris(2000):
                callers.start_soon(one, uri)
        assert failed == [{}] * 2000
        assert set(r.sub.wanted) == set(uris(2000))
        # Every subscribe arrived while the first stream was being opened, or before:
        # at most two opens carry all of them, and never more than two streams at once.
        assert len(r.server.requests) <= 2
        assert r.server.requests[-1] == 2000
        assert r.server.open_max <= 2
        synced = r.telemetry.find("subscription.synced")
        assert sum(e["added"] for e in synced) == 2000
        assert len(r.telemetry.find("subscription.established")) == 2000
        await r.server.publish("item://1999")
        assert await r.changes(1) == [ResourceChanged("many", "item://1999", "updated")]


async def test_a_change_while_the_next_stream_opens_arrives_on_the_old_one() -> None:
    async with rig() as r:
        assert await r.sub.subscribe(["item://a"]) == {}
        gate = trio.Event()
        r.server.hold = gate
        async with trio.open_nursery() as nursery:
            result: list[dict[str, str]] = []

            async def add_b() -> None:
                result.append(await r.sub.subscribe(["item://b"]))

            nursery.start_soon(add_b)
            with trio.fail_after(WAIT):
                await r.server.held.wait()
            # The replacement is not acknowledged yet: the old stream still carries item://a.
            await r.server.publish("item://a")
            assert await r.changes(1) == [ResourceChanged("many", "item://a", "updated")]
            gate.set()
        assert result == [{}]
        await r.server.publish("item://a", "item://b")
        assert {c.uri for c in await r.changes(2)} == {"item://a", "item://b"}
        # The old stream was closed once the new one was acknowledged: one open now.
        assert r.server.open_now == 1
        # The fresh subscription got no re-read; item://a was never lost, so none for it either.
        assert not [e for e in r.seen if isinstance(e, ResourceChanged) and e.kind == "synthetic"]


async def test_a_stream_the_server_ends_is_reopened_and_every_uri_reread_once() -> None:
    async with rig() as r:
        assert await r.sub.subscribe(uris(500)) == {}
        r.server.handler.close()  # the server ends every listen stream (gracefully)
        lost = await r.next(SubscriptionStateChanged, state="lost")
        assert lost.uris == frozenset(uris(500))
        again = await r.next(SubscriptionStateChanged, state="established")
        assert again.uris == frozenset(uris(500))
        rereads = await r.changes(500)
        assert sorted(c.uri for c in rereads) == sorted(uris(500))
        assert {c.kind for c in rereads} == {"synthetic"}
        [line] = r.telemetry.find("subscription.lost")
        assert (line["uris"], line["sample"]) == (500, sorted(uris(500))[:5])
        assert len(r.server.requests) == 2


async def test_paused_changes_are_kept_one_per_uri_and_the_stream_never_backs_up() -> None:
    """1,500 distinct URIs changed three times while paused: more than the SDK's 1,024-event backlog."""
    async with rig() as r:
        assert await r.sub.subscribe(uris(1500)) == {}
        r.sub.pause()
        for _ in range(3):
            for chunk in range(0, 1500, 250):
                # In chunks the server's own per-stream buffer (1,024 events) can carry;
                # each chunk is read by the client before the next is published.
                await r.server.publish(*uris(1500)[chunk : chunk + 250])
                await trio.testing.wait_all_tasks_blocked()
        assert [e for e in r.drained() if isinstance(e, ResourceChanged)] == []
        assert r.sub.resume() == []  # a connection is up: the changes kept are posted by it
        changes = await r.changes(1500)
        assert sorted(c.uri for c in changes) == sorted(uris(1500))
        assert {c.kind for c in changes} == {"updated"}
        assert r.telemetry.find("subscription.lost") == []
        assert len(r.server.requests) == 1


async def test_a_refused_addition_fails_its_subscriber_and_keeps_the_rest() -> None:
    async with rig() as r:
        assert await r.sub.subscribe(["item://a"]) == {}
        r.server.refuse = "item://bad"
        failed = await r.sub.subscribe(["item://bad"])
        assert list(failed) == ["item://bad"]
        assert failed["item://bad"] == "the server refused it: no subscriptions to item://bad"
        assert set(r.sub.wanted) == {"item://a"}
        await r.server.publish("item://a")
        assert await r.changes(1) == [ResourceChanged("many", "item://a", "updated")]


async def test_unsubscribed_uris_leave_the_stream_and_their_changes_are_not_posted() -> None:
    async with rig() as r:
        assert await r.sub.subscribe(uris(3)) == {}
        r.sub.unsubscribe("item://1")
        await r.telemetry.wait("subscription.synced", count=2)
        assert r.server.requests == [3, 2]
        await r.server.publish("item://1", "item://2")
        assert await r.changes(1) == [ResourceChanged("many", "item://2", "updated")]
        assert [e["removed"] for e in r.telemetry.find("subscription.synced")] == [0, 1]


async def test_a_held_uri_is_read_only_once_its_subscribe_ended_and_its_changes_are_pushed() -> None:
    """rfcs/0350: a URI routed before its subscription was made is not read before the subscribe ends."""
    async with rig() as r:
        hold = r.sub.hold_reads(["item://new"])
        gate = trio.Event()
        r.server.hold = gate
        read_at: list[str] = []

        async def subscribe_then_release() -> None:
            assert await r.sub.subscribe(["item://new"]) == {}
            read_at.append("subscribed")
            hold.release()

        async def reader() -> None:
            await r.sub.wait_readable("item://new")
            read_at.append("read")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(subscribe_then_release)
            nursery.start_soon(reader)
            with trio.fail_after(WAIT):
                await r.server.held.wait()
            await trio.testing.wait_all_tasks_blocked()
            assert read_at == []  # the listen stream is not acknowledged: the read waits
            with trio.fail_after(WAIT):
                await r.sub.wait_readable("item://other")  # reads of other URIs never wait
            gate.set()
        assert read_at == ["subscribed", "read"]
        await r.server.publish("item://new")
        assert await r.changes(1) == [ResourceChanged("many", "item://new", "updated")]


async def test_a_hold_never_released_delays_a_read_by_request_timeout_at_most(
    autojump_clock: trio.testing.MockClock,
) -> None:
    send, _recv = trio.open_memory_channel[ReactorEvent](1)
    sub = Subscriber(
        "s",
        send.send,
        RecordingTelemetry(),
        RunCounters(),
        request_timeout=7.0,
        resubscribe_backoff=FAST,
        resubscribe_attempts=3,
        stable_subscription=10.0,
    )
    sub.hold_reads(["u://a"])
    began = trio.current_time()
    await sub.wait_readable("u://a")
    assert trio.current_time() - began == 7.0
