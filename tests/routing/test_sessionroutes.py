"""The routes sessions make for themselves: their kinds, and one kind of owner per URI."""

from __future__ import annotations

import pytest

from agentd.core.errors import ConfigError, LimitReached, RouteError
from agentd.supervisor.routing.sessionroutes import SessionRoutes, SubscriptionCaps
from agentd.triggers.router import Continue, Router, RouteSpec


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


# --------------------------------------------------------------------------- caps (rfcs/0265)


def test_a_session_past_its_subscription_cap_is_refused_naming_the_setting_and_the_fix() -> None:
    routes = SessionRoutes(Router(), SubscriptionCaps(per_session=2, total=10))
    routes.subscribe("s1", "memo://a")
    routes.subscribe("s1", "memo://b")
    routes.subscribe("s1", "memo://a")  # held already: no new subscription, never refused
    with pytest.raises(
        LimitReached,
        match=r"^subscribe 'memo://c' refused: this session already holds 2 subscriptions, the limit "
        r"\(max_self_subscriptions_per_session = 2\); unsubscribe from a URI you no longer need and try "
        r"again \(an operator raises the limit with --max-self-subscriptions-per-session / "
        r"AGENTD_MAX_SELF_SUBSCRIPTIONS_PER_SESSION\)$",
    ) as first:
        routes.subscribe("s1", "memo://c")
    assert (first.value.limit, first.value.value, first.value.first) == (
        "max_self_subscriptions_per_session",
        2,
        True,
    )
    # The same hit again is no news; another session has its own cap.
    for uri in ("memo://c", "memo://d"):
        with pytest.raises(LimitReached) as again:
            routes.subscribe("s1", uri)
        assert again.value.first is False
    routes.subscribe("s2", "memo://c")
    # One goes: the session is below its cap, and the next refusal is a new hit.
    routes.unsubscribe("s1", "memo://a")
    routes.subscribe("s1", "memo://d")
    with pytest.raises(LimitReached) as new_hit:
        routes.subscribe("s1", "memo://e")
    assert new_hit.value.first is True


def test_the_total_cap_counts_every_session_and_the_restored_routes() -> None:
    router = Router()
    # A session restored from its journal: its route is added to the router directly (state/resume.py).
    router.add_route(
        RouteSpec(match="memo://old", disposition=Continue(session="s0"), route_id="self:s0:memo://old"),
        front=True,
        owner="s0",
    )
    routes = SessionRoutes(router, SubscriptionCaps(per_session=5, total=3))
    routes.subscribe("s1", "memo://a")
    routes.add_watch("s1", "w", "memo://w")  # a watch is no subscription: it has caps of its own
    routes.subscribe("s2", "memo://b")
    with pytest.raises(
        LimitReached,
        match=r"^subscribe 'memo://c' refused: the sessions of this agentd already hold 3 subscriptions "
        r"together, the limit \(max_self_subscriptions = 3\); unsubscribe .* --max-self-subscriptions / "
        r"AGENTD_MAX_SELF_SUBSCRIPTIONS\)$",
    ) as refused:
        routes.subscribe("s2", "memo://c")
    assert refused.value.limit == "max_self_subscriptions"
    assert router.first_match("memo://c") is None  # nothing was made
    routes.unsubscribe("s0", "memo://old")
    routes.subscribe("s2", "memo://c")
    assert (router.owned("s1"), router.owned("s2"), router.owned()) == (1, 2, 3)


@pytest.mark.parametrize("value", [0, -1, True, 2.5])
def test_subscription_caps_refuse_what_is_no_count(value: object) -> None:
    with pytest.raises(
        ConfigError, match=r"max_self_subscriptions_per_session: .* give a whole number of 1 or more"
    ):
        SubscriptionCaps(per_session=value)  # type: ignore[arg-type]
