"""The pure subscriptions component: which subscriptions are wanted and why; each event's actions."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from agentd.supervisor.sessionroutes import SessionRoutes
from agentd.supervisor.subscriptions import (
    ServerView,
    Subscribe,
    Subscriptions,
    Unsubscribe,
    resolve,
)
from agentd.triggers.router import Router, RouteSpec
from agentd.upstream.resolve import Catalog


@dataclass(frozen=True)
class Sub:
    uri: str
    server: str | None = None


PATTERNS = [Sub("note://*", "notes"), Sub("memo://notes", "memo"), Sub("memo://shared")]
URIS = ["note://a", "note://b", "note://c", "memo://notes", "memo://shared", "memo://other"]


def _view(
    uris: frozenset[str], subscribed: frozenset[str] = frozenset(), connected: bool = True
) -> ServerView:
    return ServerView(connected=connected, subscribed=subscribed, catalog=Catalog(uris=uris))


class Upstreams:
    """Performs the actions as the declared shell does: at once, and every subscribe succeeds."""

    def __init__(self) -> None:
        self.subscribed: dict[str, set[str]] = {"notes": set(), "memo": set()}
        self.performed: list[Subscribe | Unsubscribe] = []

    def views(self, catalogs: dict[str, frozenset[str]]) -> dict[str, ServerView]:
        return {name: _view(catalogs[name], frozenset(self.subscribed[name])) for name in ("notes", "memo")}

    def perform(self, subs: Subscriptions, actions: tuple[Subscribe | Unsubscribe, ...]) -> None:
        for action in actions:
            self.performed.append(action)
            if isinstance(action, Subscribe):
                self.subscribed[action.server].add(action.uri)
                subs.finished(action.server, action.uri, ok=True)
            else:
                self.subscribed[action.server].discard(action.uri)


catalog_sets = st.fixed_dictionaries(
    {"notes": st.frozensets(st.sampled_from(URIS[:3])), "memo": st.frozensets(st.sampled_from(URIS[3:]))}
)


@settings(max_examples=200, deadline=None)
@given(st.lists(catalog_sets, min_size=1, max_size=6))
def test_what_is_subscribed_follows_the_catalogs_exactly(catalogs: list[dict[str, frozenset[str]]]) -> None:
    subs = Subscriptions(PATTERNS, Router())
    ups = Upstreams()
    seeded: set[tuple[str, str]] = set()
    for n, cats in enumerate(catalogs):
        reason = "start" if n == 0 else "catalog"
        refreshed = subs.refresh(ups.views(cats), reason)
        for action in refreshed.actions:
            if isinstance(action, Subscribe):
                # The start-up re-read follows a pair's first subscribe, never one a catalog change made.
                assert action.startup == (reason == "start" and (action.server, action.uri) not in seeded)
                seeded.add((action.server, action.uri))
        ups.perform(subs, refreshed.actions)
        wanted = set(resolve(PATTERNS, {name: Catalog(uris=uris) for name, uris in cats.items()}).pairs)
        assert subs.pairs == wanted
        assert {(s, u) for s, uris in ups.subscribed.items() for u in uris} == wanted
        # Nothing is subscribed twice, nothing unsubscribed that was not subscribed.
        again = subs.refresh(ups.views(cats), "connected")
        assert again.actions == ()


def test_a_subscribe_on_its_way_is_not_asked_again_and_a_failed_one_is_retried() -> None:
    subs = Subscriptions([Sub("memo://notes", "memo")], Router())
    servers = {"memo": _view(frozenset({"memo://notes"}))}
    assert subs.refresh(servers, "start").actions == (Subscribe("memo", "memo://notes", startup=True),)
    assert subs.refresh(servers, "connected").actions == ()  # on its way
    subs.finished("memo", "memo://notes", ok=False)
    # Not seeded: the retry still carries the start-up re-read.
    assert subs.refresh(servers, "connected").actions == (Subscribe("memo", "memo://notes", startup=True),)


def test_a_server_that_is_down_gets_its_subscriptions_when_it_connects() -> None:
    subs = Subscriptions([Sub("memo://notes", "memo")], Router())
    down = {"memo": _view(frozenset(), connected=False)}
    assert subs.refresh(down, "start").actions == ()
    assert subs.pairs == {("memo", "memo://notes")}  # declared all the same (readiness waits for it)
    up = {"memo": _view(frozenset())}
    assert subs.refresh(up, "connected").actions == (Subscribe("memo", "memo://notes", startup=True),)


def test_a_uri_that_left_the_catalog_is_unsubscribed_unless_a_route_or_a_watch_needs_it() -> None:
    router = Router()
    watched: set[tuple[str, str]] = set()
    subs = Subscriptions(
        [Sub("note://*", "notes")], router, watched=lambda server, uri: (server, uri) in watched
    )
    ups = Upstreams()
    ups.perform(
        subs, subs.refresh(ups.views({"notes": frozenset(URIS[:3]), "memo": frozenset()}), "start").actions
    )
    SessionRoutes(router).subscribe("s1", "note://a")  # a session's own route
    watched.add(("notes", "note://b"))  # a live watch reads it
    refreshed = subs.refresh(ups.views({"notes": frozenset(), "memo": frozenset()}), "catalog")
    assert refreshed.actions == (Unsubscribe("notes", "note://c"),)
    assert refreshed.forgotten == (("notes", "note://a"), ("notes", "note://b"), ("notes", "note://c"))
    assert subs.why("notes", "note://a") == {"self"}
    assert subs.why("notes", "note://b") == {"watched"}
    assert subs.why("notes", "note://c") == frozenset()


def test_an_exited_agents_subscriptions_are_released_unless_still_needed() -> None:
    router = Router()
    router.add_route(RouteSpec(match="memo://routed"))
    routes = SessionRoutes(router)
    subs = Subscriptions([Sub("memo://declared", "memo")], router)
    subs.refresh({"memo": _view(frozenset())}, "start")
    routes.subscribe("other", "memo://theirs")  # another session still subscribes it
    held = [("memo", u) for u in ("memo://mine", "memo://declared", "memo://routed", "memo://theirs")]
    assert subs.released(held) == [Unsubscribe("memo", "memo://mine")]
    # An unsubscribe (or a watch_stop) releases what nothing else needs; the rest is kept.
    assert [subs.unsubscribed(server, uri) for server, uri in held] == [
        [Unsubscribe("memo", "memo://mine")],
        [],
        [],
        [],
    ]
    assert subs.why("memo", "memo://declared") == {"declared"}
    assert subs.why("memo", "memo://routed") == {"route"}
    assert subs.needed("memo", "memo://theirs")
    assert not subs.needed("memo", "memo://mine")


def test_patterns_that_resolve_to_nothing_are_reported_once_and_named_required() -> None:
    subs = Subscriptions([Sub("file:///*", "files")], Router(), required=frozenset({"files"}))
    first = subs.refresh({"files": _view(frozenset())}, "start")
    assert [(label, required) for label, _why, required in first.unresolved] == [("files:file:///*", True)]
    assert subs.unresolved_required == {"files:file:///*"}
    assert subs.refresh({"files": _view(frozenset())}, "catalog").unresolved == ()  # reported once
    subs.refresh({"files": _view(frozenset({"file:///a"}))}, "catalog")
    assert subs.unresolved == {}
    assert subs.pairs == {("files", "file:///a")}


def test_shard_keep_leaves_other_replicas_pairs_alone() -> None:
    subs = Subscriptions([Sub("note://*", "notes")], Router(), keep=lambda pair: pair[1] != "note://b")
    refreshed = subs.refresh({"notes": _view(frozenset(URIS[:3]))}, "start")
    assert {a.uri for a in refreshed.actions} == {"note://a", "note://c"}


def test_queue_caps_count_the_declared_uris_each_route_owns() -> None:
    router = Router()
    router.add_route(RouteSpec(match="note://*", route_id="notes"))
    subs = Subscriptions([Sub("note://*", "notes")], router)
    subs.refresh({"notes": _view(frozenset(URIS[:3]))}, "start")
    assert subs.queue_caps() == {"notes": 3}
