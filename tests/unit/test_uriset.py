"""The pure part of one stream per server (rfcs/0260): what is wanted, carried, and re-read."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agentd.upstream.uriset import Switch, UriSet


def test_a_fresh_subscription_is_not_reread_and_a_lost_one_is() -> None:
    s = UriSet()
    assert s.want("a")
    assert s.dirty
    assert s.target() == {"a"}
    assert not s.dirty
    assert s.established({"a"}) == Switch(added=frozenset({"a"}), removed=frozenset(), reread=frozenset())
    assert not s.want("a")  # carried already: nothing to do
    assert s.lost() == {"a"}
    assert s.dirty
    assert s.established(s.target()).reread == {"a"}  # carried once, carried again: re-read


def test_a_switch_rereads_only_what_it_adds_back() -> None:
    s = UriSet()
    for uri in "abc":
        s.want(uri)
    s.established(s.target())
    s.want("d")
    switch = s.established(s.target())
    assert switch == Switch(added=frozenset({"d"}), removed=frozenset(), reread=frozenset())
    s.drop("b")
    assert s.dirty
    switch = s.established(s.target())
    assert (switch.added, switch.removed) == (frozenset(), frozenset({"b"}))


def test_a_uri_dropped_while_its_establishment_was_on_its_way_is_left_out_next() -> None:
    s = UriSet()
    s.want("a")
    s.want("b")
    target = s.target()
    s.drop("b")  # not carried yet: no establishment is due for it now
    assert not s.dirty
    s.established(target)
    assert s.dirty
    assert s.target() == {"a"}


def test_a_uri_wanted_while_disconnected_is_reread_on_its_first_establishment() -> None:
    s = UriSet()
    s.want("a", carried_once=True)
    assert s.established(s.target()).reread == {"a"}


def test_a_refused_uri_leaves_the_target_until_wanted_again_or_a_new_connection() -> None:
    s = UriSet()
    s.want("a")
    s.want("b")
    s.fail(["b"])
    assert s.target() == {"a"}
    assert s.failed == {"b"}
    assert s.want("b")  # wanted again: tried again
    assert s.target() == {"a", "b"}
    s.fail(["b"])
    s.reset()
    assert s.target() == {"a", "b"}
    assert not s.carried


@given(st.lists(st.tuples(st.sampled_from(["want", "drop", "est", "lost"]), st.sampled_from("abcdef"))))
def test_carried_is_what_was_acknowledged_and_every_uri_carried_again_is_reread(
    ops: list[tuple[str, str]],
) -> None:
    s = UriSet()
    ever: set[str] = set()
    for op, uri in ops:
        if op == "want":
            s.want(uri)
        elif op == "drop":
            s.drop(uri)
            ever.discard(uri)
        elif op == "lost":
            s.lost()
        else:
            target = s.target()
            before = s.carried
            switch = s.established(target)
            assert s.carried == target
            assert switch.added == target - before
            assert switch.reread == {u for u in switch.added if u in ever}
            ever |= target
        assert set(s.wanted) >= s.target()
