"""The subscriptions' guard tests (docs/testing.md): each kills a mutant the other tests let live.

What a declared pattern resolves to on which server, what the warning for one that
resolves to nothing says, and what an exiting agent releases.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentd.supervisor.routing.sessionroutes import SessionRoutes
from agentd.supervisor.routing.subscriptions import ServerView, Subscribe, Subscriptions, Unsubscribe, resolve
from agentd.triggers.router import Router, RouteSpec
from agentd.upstream.resolve import Catalog


@dataclass(frozen=True)
class Sub:
    uri: str
    server: str | None = None


def test_a_glob_without_a_server_expands_on_every_server_in_order() -> None:
    catalogs = {
        "a": Catalog(uris=frozenset({"note://1"})),
        "b": Catalog(uris=frozenset({"note://2", "note://3"})),
    }
    assert resolve([Sub("note://*")], catalogs).pairs == (
        ("a", "note://1"),
        ("b", "note://2"),
        ("b", "note://3"),
    )


def test_a_glob_with_a_server_prefix_expands_on_that_server_only() -> None:
    catalogs = {"a": Catalog(uris=frozenset({"note://1"})), "b": Catalog(uris=frozenset({"note://2"}))}
    assert resolve([Sub("note://*", "b")], catalogs).pairs == (("b", "note://2"),)


def test_with_no_server_configured_the_warning_says_so_and_how_to_prefix() -> None:
    why = resolve([Sub("memo://x")], {}).unresolved["memo://x"]
    assert why == (
        "no server lists 'memo://x' or has a template matching it, and 0 servers are configured; "
        "prefix it with the server's name (e.g. NAME:memo://x); no servers are configured"
    )


def test_the_warning_names_what_each_server_offers() -> None:
    catalogs = {
        "empty": Catalog(),
        "five": Catalog(uris=frozenset(f"n://{i}" for i in range(5))),
        "six": Catalog(uris=frozenset(f"m://{i}" for i in range(6)), templates=("m://{id}", "m://x/{id}")),
    }
    why = resolve([Sub("q://*")], catalogs).unresolved["q://*"]
    assert why.split("; ")[1:] == [
        "server 'empty' offers no resources",
        "server 'five' offers resources n://0, n://1, n://2, n://3, n://4",
        "server 'six' offers resources m://0, m://1, m://2, m://3, m://4 and 1 more"
        " and templates m://{id}, m://x/{id}",
    ]


def _view(uris: frozenset[str], connected: bool = True) -> ServerView:
    return ServerView(connected=connected, subscribed=frozenset(), catalog=Catalog(uris=uris))


def test_an_exited_agent_releases_what_nothing_needs_after_a_pair_still_needed() -> None:
    router = Router()
    router.add_route(RouteSpec(match="memo://routed"))
    subs = Subscriptions([Sub("memo://declared", "memo")], router)
    subs.refresh({"memo": _view(frozenset())}, "start")
    held = [
        ("memo", "memo://declared"),
        ("memo", "memo://routed"),
        ("memo", "memo://a"),
        ("memo", "memo://b"),
    ]
    assert subs.released(held) == [Unsubscribe("memo", "memo://a"), Unsubscribe("memo", "memo://b")]


def test_a_restored_pair_released_before_its_server_came_up_is_not_subscribed_later() -> None:
    router = Router()
    routes = SessionRoutes(router)
    subs = Subscriptions([], router)
    routes.subscribe("s1", "memo://notes")
    subs.restored("memo", "memo://notes")
    assert subs.refresh({"memo": _view(frozenset(), connected=False)}, "start").actions == ()
    routes.unsubscribe("s1", "memo://notes")
    assert subs.released([("memo", "memo://notes")]) == []  # never made: nothing to unsubscribe
    # The session subscribes again (the hub makes that subscription itself, live): the
    # journal's subscribe is not made a second time when the server connects.
    routes.subscribe("s1", "memo://notes")
    assert subs.refresh({"memo": _view(frozenset({"memo://notes"}))}, "connected").actions == ()


def test_every_refresh_changes_the_version_readiness_watches() -> None:
    subs = Subscriptions([Sub("memo://x", "memo")], Router())
    seen = {subs.version}
    for reason in ("start", "catalog", "connected"):
        subs.refresh({"memo": _view(frozenset())}, reason)  # type: ignore[arg-type]
        seen.add(subs.version)
    assert len(seen) == 4


def test_a_refresh_with_nothing_declared_forgets_and_reports_nothing() -> None:
    refreshed = Subscriptions([], Router()).refresh({"memo": _view(frozenset())}, "start")
    assert (refreshed.actions, refreshed.forgotten, refreshed.unresolved) == ((), (), ())


def test_a_declared_pair_already_subscribed_does_not_hold_back_the_next() -> None:
    subs = Subscriptions([Sub("memo://a", "memo"), Sub("memo://b", "memo")], Router())
    view = ServerView(connected=True, subscribed=frozenset({"memo://a"}), catalog=Catalog())
    assert subs.refresh({"memo": view}, "start").actions == (Subscribe("memo", "memo://b", startup=True),)


def test_a_restored_pair_waits_for_a_start_or_a_connect_not_a_catalog_change() -> None:
    router = Router()
    SessionRoutes(router).subscribe("s1", "memo://notes")
    subs = Subscriptions([Sub("memo://declared", "memo")], router)
    subs.restored("memo", "memo://notes")
    up = {"memo": _view(frozenset({"memo://declared", "memo://notes"}))}
    # The declared pair first appears in a catalog change: routed at once when made (rfcs/0350).
    assert subs.refresh(up, "catalog").actions == (
        Subscribe("memo", "memo://declared", startup=False, created=True),
    )
    assert subs.refresh(up, "connected").actions == (
        Subscribe("memo", "memo://notes", startup=True, restored=True),
    )


def test_a_restored_pair_whose_server_is_down_does_not_hold_back_another_servers() -> None:
    router = Router()
    routes = SessionRoutes(router)
    subs = Subscriptions([], router)
    for server, uri in (("a", "a://1"), ("b", "b://1")):
        routes.subscribe("s1", uri)
        subs.restored(server, uri)
    servers = {"a": _view(frozenset(), connected=False), "b": _view(frozenset())}
    assert subs.refresh(servers, "start").actions == (Subscribe("b", "b://1", startup=True, restored=True),)


def test_a_restored_pair_never_made_does_not_hold_back_the_release_of_the_next() -> None:
    router = Router()
    subs = Subscriptions([], router)
    subs.restored("memo", "memo://a")  # its server never came up: never made
    held = [("memo", "memo://a"), ("memo", "memo://b")]
    assert subs.released(held) == [Unsubscribe("memo", "memo://b")]
