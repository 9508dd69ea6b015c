"""The pure part of one stream per server (rfcs/0260): what is wanted, carried, and re-read."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given
from hypothesis import strategies as st

from agentd.upstream.uriset import Narrowing, NarrowingPhase, Switch, UriSet


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


def cap_server(cap: int, base: int = 0) -> Callable[[tuple[str, ...]], str | None]:
    """A server that takes the URIs in order and refuses the first past ``cap`` (None: it takes them all)."""

    def ask(added: tuple[str, ...]) -> str | None:
        past = cap - base
        return added[past] if len(added) > past else None

    return ask


def narrow(
    added: list[str], ask: Callable[[tuple[str, ...]], str | None], *, named: bool
) -> tuple[int, tuple[str, ...]]:
    """Run a narrowing against ``ask`` after a refusal of all of ``added``; returns (tries, refused)."""
    first = ask(tuple(added))
    assert first is not None
    n = Narrowing(added, named=first if named else None)
    tries = 0
    while (trial := n.next_try()) is not None:
        tries += 1
        refused_at = ask(trial)
        if refused_at is None:
            n.accepted()
        else:
            n.refused_by(refused_at if named else None)
    assert n.phase is NarrowingPhase.DONE
    return tries, n.refused


def test_a_named_refusal_is_narrowed_in_two_tries_to_the_uris_past_the_cap() -> None:
    added = [f"u{i}" for i in range(10_000)]
    tries, refused = narrow(added, cap_server(32, base=1), named=True)
    assert refused == tuple(added[31:])
    assert tries == 2  # the prefix before the named URI, then the rest without it once


def test_an_unnamed_refusal_is_bisected() -> None:
    added = [f"u{i}" for i in range(10_000)]
    tries, refused = narrow(added, cap_server(32), named=False)
    assert refused == tuple(added[32:])
    assert tries <= 16  # log2(10,000) + the rest once, not one try per URI


def test_one_bad_uri_among_good_ones_costs_only_itself() -> None:
    added = ["a", "b", "bad", "c", "d"]

    def ask(trial: tuple[str, ...]) -> str | None:
        return "bad" if "bad" in trial else None

    assert narrow(added, ask, named=True)[1] == ("bad",)
    assert narrow(added, ask, named=False)[1] == ("bad",)


def test_nothing_added_is_nothing_to_narrow() -> None:
    n = Narrowing([])
    assert n.phase is NarrowingPhase.DONE
    assert n.next_try() is None
    assert n.refused == ()


@given(st.integers(0, 40), st.integers(1, 60), st.booleans())
def test_narrowing_carries_exactly_what_a_cap_allows(cap: int, count: int, named: bool) -> None:
    added = [f"u{i}" for i in range(count)]
    if count <= cap:
        return  # the first request was taken: nothing to narrow
    tries, refused = narrow(added, cap_server(cap), named=named)
    assert refused == tuple(added[cap:])
    assert tries <= count.bit_length() + 2
