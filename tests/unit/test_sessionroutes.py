"""The routes sessions make for themselves: their kinds, and one kind of owner per URI."""

from __future__ import annotations

import pytest

from agentd.errors import RouteError
from agentd.supervisor.sessionroutes import SessionRoutes
from agentd.triggers.router import Router


def test_routes_carry_their_kind_and_a_uri_is_either_subscribed_or_watched() -> None:
    router = Router()
    routes = SessionRoutes(router)
    assert routes.subscribe("s1", "memo://a").kind == "self"
    route_id = routes.add_watch("s2", "w", "memo://b")
    assert router.get(route_id).kind == "watch"  # type: ignore[union-attr]
    assert routes.watches("s2") == {"w"}
    with pytest.raises(
        RouteError, match=r"'memo://b' is already watched by this session .*call watch_stop first"
    ):
        routes.subscribe("s2", "memo://b")
    with pytest.raises(RouteError, match=r"already subscribed by session 's1'.*call unsubscribe first"):
        routes.add_watch("s3", "w", "memo://a")
    assert router.first_match("memo://a") is not None
    assert router.first_match("memo://b") is not None
    assert routes.drop_session("s2") == ["w"]
    assert not routes.has_session("s2")
    assert router.first_match("memo://b") is None
    routes.unsubscribe("s1", "memo://a")
    routes.unsubscribe("s1", "memo://never")  # unknown: no error
    assert router.first_match("memo://a") is None
