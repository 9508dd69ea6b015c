"""Declared subscriptions: resolution against catalogs (pure) and the shell that keeps them made."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import trio
import trio.testing

from agentd.events import ResourceChanged, ServerState, SubscriptionStateChanged
from agentd.supervisor.routing.declared import DeclaredSubscriptions, pattern_label, resolve
from agentd.supervisor.routing.subscriptions import Subscriptions
from agentd.triggers.router import Router, RouteSpec
from agentd.upstream.resolve import Catalog
from agentd.upstream.subscriptions import ReadHold
from tests.support.telemetry import RecordingTelemetry

NOTES = Catalog(
    uris=frozenset({"note://alpha", "note://beta", "config://server"}),
    templates=("note://{name}",),
    can_subscribe=True,
)
MEMO = Catalog(uris=frozenset({"memo://notes"}), can_subscribe=True)


@dataclass(frozen=True)
class Sub:
    uri: str
    server: str | None = None


def test_a_glob_expands_against_concrete_resources_only() -> None:
    r = resolve([Sub("note://*", "notes")], {"notes": NOTES})
    assert r.pairs == (("notes", "note://alpha"), ("notes", "note://beta"))
    assert r.unresolved == {}


def test_a_glob_matching_nothing_says_what_the_server_offers() -> None:
    r = resolve([Sub("file:///*", "notes")], {"notes": NOTES}, frozenset({"notes"}))
    assert r.pairs == ()
    why = r.unresolved["notes:file:///*"]
    assert why.startswith(
        "no concrete resource matches the glob 'file:///*', and no resource template of the servers could "
        "produce one (resource templates are not subscribable)"
    )
    assert (
        "server 'notes' offers resources config://server, note://alpha, note://beta and templates note://{name}"
        in why
    )
    assert r.required == {"notes:file:///*"}


def test_a_glob_over_a_listing_that_is_empty_now_is_resolved_to_nothing() -> None:
    # note://{name} could produce a URI the glob matches: none is listed now, which is no error
    # (an event-style listing, such as a webhook's pending deliveries, is often empty).
    r = resolve([Sub("note://gam*", "notes")], {"notes": NOTES}, frozenset({"notes"}))
    assert (r.pairs, dict(r.unresolved), r.required) == ((), {}, frozenset())


def test_an_exact_uri_resolves_by_prefix_listing_template_or_the_only_server() -> None:
    cats = {"notes": NOTES, "memo": MEMO}
    assert resolve([Sub("x://y", "memo")], cats).pairs == (("memo", "x://y"),)  # a prefix is trusted
    assert resolve([Sub("memo://notes")], cats).pairs == (("memo", "memo://notes"),)  # listed
    assert resolve([Sub("note://gamma")], cats).pairs == (("notes", "note://gamma"),)  # template
    assert resolve([Sub("x://y")], {"memo": MEMO}).pairs == (("memo", "x://y"),)  # the only server
    r = resolve([Sub("x://y")], cats, frozenset({"memo"}))
    assert r.pairs == ()
    assert "prefix it with the server's name (e.g. notes:x://y)" in r.unresolved["x://y"]
    assert r.required == {"x://y"}  # it could only be served by one of them, and one is required


def test_an_escaped_query_resolves_to_the_uri_itself() -> None:
    r = resolve([Sub("pods\\?ns=a", "kube")], {"kube": None})
    assert r.pairs == (("kube", "pods?ns=a"),)


def test_a_server_that_never_connected_is_named() -> None:
    r = resolve([Sub("note://*", "notes")], {"notes": None})
    assert "server 'notes' has not connected yet" in r.unresolved["notes:note://*"]
    assert r.required == frozenset()


def test_offers_are_sampled() -> None:
    many = Catalog(uris=frozenset(f"item://{i}" for i in range(12)))
    why = resolve([Sub("x://*", "m")], {"m": many}).unresolved["m:x://*"]
    assert "and 7 more" in why


def test_pattern_label() -> None:
    assert pattern_label(Sub("u://x", "s")) == "s:u://x"
    assert pattern_label(Sub("u://x")) == "u://x"


# --------------------------------------------------------------------------- the shell


@dataclass
class FakeUpstream:
    """Quacks like :class:`agentd.upstream.Upstream` for subscribing."""

    name: str
    cat: Catalog | None
    state: ServerState = ServerState.CONNECTED
    subs: set[str] = field(default_factory=set)
    calls: list[str] = field(default_factory=list)
    spec: Any = None
    holds: dict[str, ReadHold] = field(default_factory=dict)

    @property
    def subscriptions(self) -> frozenset[str]:
        return frozenset(self.subs)

    @property
    def capabilities(self) -> Any:
        return None if self.cat is None else object()

    def catalog(self) -> Catalog:
        assert self.cat is not None
        return self.cat

    def hold_reads(self, uris: Collection[str]) -> ReadHold:
        return ReadHold(self.holds, uris)

    async def subscribe(self, uri: str) -> None:
        self.calls.append(uri)
        await trio.lowlevel.checkpoint()
        self.subs.add(uri)

    async def subscribe_many(self, uris: Collection[str]) -> dict[str, str]:
        for uri in uris:
            await self.subscribe(uri)
        return {}

    async def unsubscribe(self, uri: str) -> None:
        self.subs.discard(uri)


@dataclass
class Rig:
    """A router and the reactor's channel, as DeclaredSubscriptions sees them."""

    router: Router
    send: trio.MemorySendChannel[Any]
    recv: trio.MemoryReceiveChannel[Any]

    def declared(
        self, subs: list[Sub], upstreams: dict[str, Any], tel: RecordingTelemetry, nursery: trio.Nursery
    ) -> DeclaredSubscriptions:
        return DeclaredSubscriptions(
            Subscriptions(subs, self.router), upstreams, events=self.send, telemetry=tel, nursery=nursery
        )

    def drain(self) -> list[Any]:
        out = []
        while True:
            try:
                out.append(self.recv.receive_nowait())
            except trio.WouldBlock:
                return out


def _rig(routes: list[RouteSpec]) -> Rig:
    router = Router()
    for spec in routes:
        router.add_route(spec)
    send, recv = trio.open_memory_channel[Any](100)
    return Rig(router, send, recv)


async def test_start_up_subscribes_then_posts_one_startup_re_read_per_uri() -> None:
    rig = _rig([RouteSpec("note://*", route_id="notes")])
    up = FakeUpstream("notes", NOTES)
    tel = RecordingTelemetry()
    async with trio.open_nursery() as nursery:
        d = rig.declared([Sub("note://*", "notes")], {"notes": up}, tel, nursery)
        d.refresh("start")
        assert d.pairs == {("notes", "note://alpha"), ("notes", "note://beta")}
        d.refresh("connected")  # in flight: not subscribed twice
    assert sorted(up.calls) == ["note://alpha", "note://beta"]
    events = rig.drain()
    assert sorted((e.uri, e.kind, e.startup) for e in events) == [
        ("note://alpha", "synthetic", True),
        ("note://beta", "synthetic", True),
    ]
    assert rig.router.get("notes").queue.cap == 16  # type: ignore[union-attr]


async def test_a_released_declared_subscription_is_made_again_when_its_server_connects() -> None:
    rig = _rig([])
    up = FakeUpstream("memo", MEMO)
    async with trio.open_nursery() as nursery:
        d = rig.declared([Sub("memo://notes", "memo")], {"memo": up}, RecordingTelemetry(), nursery)
        d.refresh("start")
    rig.drain()
    up.subs.clear()  # lost (e.g. refused on a reconnect, forgotten by the connection)
    async with trio.open_nursery() as nursery:
        d._nursery = nursery
        d.refresh("connected")
    assert up.calls == ["memo://notes", "memo://notes"]
    [again] = rig.drain()
    assert (again.kind, again.startup) == ("synthetic", False)  # a re-read, but no start-up one


async def test_a_server_not_connected_at_start_is_subscribed_when_it_connects() -> None:
    rig = _rig([])
    up = FakeUpstream("memo", None, state=ServerState.RESTARTING)
    tel = RecordingTelemetry()
    async with trio.open_nursery() as nursery:
        d = rig.declared([Sub("memo://*", "memo")], {"memo": up}, tel, nursery)
        d.refresh("start")
        assert up.calls == []
        [fields] = tel.find("subscription.unresolved")
        assert "has not connected yet" in fields["error"]
        up.cat, up.state = MEMO, ServerState.CONNECTED
        d.refresh("connected")
    assert up.calls == ["memo://notes"]
    assert d.unresolved == {}
    [seed] = rig.drain()
    assert seed.startup is True  # its first establishment since agentd started


async def test_a_uri_that_left_the_catalog_is_released_and_one_that_appeared_is_routed_at_once() -> None:
    rig = _rig([])
    cat = Catalog(uris=frozenset({"note://alpha"}), can_subscribe=True)
    up = FakeUpstream("notes", cat)
    async with trio.open_nursery() as nursery:
        d = rig.declared([Sub("note://*", "notes")], {"notes": up}, RecordingTelemetry(), nursery)
        d.refresh("start")
    rig.drain()
    up.cat = Catalog(uris=frozenset({"note://gamma"}), can_subscribe=True)
    async with trio.open_nursery() as nursery:
        d._nursery = nursery
        refreshed = d.refresh("catalog")
        assert refreshed.forgotten == [("notes", "note://alpha")]
        # The reactor routes it now (rfcs/0350); its reads wait for the subscribe.
        assert refreshed.created == [("notes", "note://gamma")]
        assert "note://gamma" in up.holds
    assert up.subs == {"note://gamma"}
    assert d.pairs == {("notes", "note://gamma")}
    assert up.holds == {}  # released once the subscribe ended
    assert rig.drain() == []  # no re-read after it: it was routed when it appeared


async def test_a_created_uri_is_held_until_its_subscribe_ends_even_when_it_fails() -> None:
    release = trio.Event()

    class Slow(FakeUpstream):
        async def subscribe_many(self, uris: Collection[str]) -> dict[str, str]:
            await release.wait()
            return dict.fromkeys(uris, "the server refused it: no")

    rig = _rig([])
    up = Slow("notes", Catalog(uris=frozenset(), can_subscribe=True))
    tel = RecordingTelemetry()
    async with trio.open_nursery() as nursery:
        d = rig.declared([Sub("note://*", "notes")], {"notes": up}, tel, nursery)
        d.refresh("start")
        up.cat = Catalog(uris=frozenset({"note://gamma"}), can_subscribe=True)
        assert d.refresh("catalog").created == [("notes", "note://gamma")]
        hold = up.holds["note://gamma"]
        await trio.testing.wait_all_tasks_blocked()
        assert not hold.released.is_set()  # the subscribe is on its way: reads wait
        release.set()
    assert hold.released.is_set()
    assert up.holds == {}
    [failed] = rig.drain()
    assert isinstance(failed, SubscriptionStateChanged)
    assert failed.state == "failed"
    # Made again by a later refresh: declared before, so re-read after the subscribe as ever.
    up2 = FakeUpstream("notes", up.cat)
    d._upstreams = {"notes": up2}
    async with trio.open_nursery() as nursery:
        d._nursery = nursery
        assert d.refresh("catalog").created == []
    [reread] = rig.drain()
    assert (reread.uri, reread.kind, reread.startup) == ("note://gamma", "synthetic", False)


async def test_a_refused_subscription_is_reported_failed() -> None:
    from agentd.core.errors import CapabilityMissing

    class Refusing(FakeUpstream):
        async def subscribe(self, uri: str) -> None:
            raise CapabilityMissing("server 'memo' cannot subscribe")

    rig = _rig([])
    tel = RecordingTelemetry()
    async with trio.open_nursery() as nursery:
        d = rig.declared([Sub("memo://notes", "memo")], {"memo": Refusing("memo", MEMO)}, tel, nursery)
        d.refresh("start")
    [failed] = rig.drain()
    assert isinstance(failed, SubscriptionStateChanged)
    assert (failed.state, failed.error) == ("failed", "server 'memo' cannot subscribe")
    assert tel.names() == ["subscription.failed"]


def test_only_the_start_up_re_read_is_marked() -> None:
    assert ResourceChanged("s", "u", "synthetic").startup is False
