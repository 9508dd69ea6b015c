"""The router's inflight accounting never goes below zero (docs/testing.md)."""

from __future__ import annotations

from agentd.triggers.router import QueuedEvent, Router, RouteSpec, Spawn, SpawnDelivery


def ev(uri: str, t: float = 0.0) -> QueuedEvent:
    return QueuedEvent(uri, "srv", None, "updated", t)


def spawned(router: Router, now: float) -> list[str]:
    out = router.take_deliveries(now, session_idle=lambda _s: True, may_spawn=lambda: True, draining=False)
    return [d.event.uri for d in out if isinstance(d, SpawnDelivery)]


def test_a_spawn_done_with_nothing_inflight_frees_no_extra_slot() -> None:
    router = Router()
    route = router.add_route(RouteSpec("file:///in/*", Spawn(max_inflight=1), debounce=0.0, route_id="r"))
    # A late or duplicate done (the agent was counted already) must be ignored.
    router.on_spawn_done("r")
    router.on_spawn_done("r")
    assert route.inflight == 0
    for name in ("a", "b", "c"):
        router.ingest(ev(f"file:///in/{name}"), 0.0)
    assert spawned(router, 0.0) == ["file:///in/a"]  # one slot, not three
    assert route.inflight == 1
    router.on_spawn_done("r")
    assert spawned(router, 1.0) == ["file:///in/b"]
    router.on_spawn_done("r")
    router.on_spawn_done("r")  # one too many
    assert spawned(router, 2.0) == ["file:///in/c"]
    assert route.inflight == 1
    router.on_spawn_done("r")
    router.on_spawn_done("r")
    assert route.inflight == 0


def test_a_spawn_done_for_a_removed_route_is_ignored() -> None:
    router = Router()
    router.add_route(RouteSpec("file:///in/*", Spawn(max_inflight=1), debounce=0.0, route_id="r"))
    router.remove_route("r")
    router.on_spawn_done("r")
    assert router.get("r") is None
