"""ResubscribePolicy: when a subscription stream that ended is re-opened, and when it is given up."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentd.upstream.backoff import RESUBSCRIBE_BACKOFF, GiveUp, ResubscribePolicy, Retry


def test_a_flapping_stream_backs_off_1_to_16_s_then_gives_up_after_the_attempts() -> None:
    policy = ResubscribePolicy(RESUBSCRIBE_BACKOFF, attempts=5, stable_after=10.0)
    # Acknowledged, then ended after a few milliseconds, every time.
    decisions = [policy.on_end(lived=0.003) for _ in range(6)]
    assert decisions == [
        Retry(1, 1.0),
        Retry(2, 2.0),
        Retry(3, 4.0),
        Retry(4, 8.0),
        Retry(5, 16.0),
        GiveUp(5),
    ]


def test_refused_attempts_count_like_short_lived_ones() -> None:
    policy = ResubscribePolicy((1.0, 2.0), attempts=3, stable_after=10.0)
    assert policy.on_end(lived=0.0) == Retry(1, 1.0)
    assert policy.on_end(lived=None) == Retry(2, 2.0)  # refused: never established
    assert policy.on_end(lived=None) == Retry(3, 2.0)  # the last delay repeats
    assert policy.on_end(lived=None) == GiveUp(3)


def test_a_stable_stream_or_one_that_delivered_updates_starts_a_new_run() -> None:
    policy = ResubscribePolicy(RESUBSCRIBE_BACKOFF, attempts=2, stable_after=10.0)
    assert policy.on_end(lived=1.0) == Retry(1, 1.0)
    assert policy.on_end(lived=1.0) == Retry(2, 2.0)
    assert policy.on_end(lived=10.0) == Retry(1, 1.0)  # it stayed up: healthy
    assert policy.on_end(lived=0.5) == Retry(2, 2.0)
    # Ended early, but after delivering updates (a server's backlog filled): healthy too.
    assert policy.on_end(lived=0.5, delivered=1000) == Retry(1, 1.0)
    assert policy.on_end(lived=None, delivered=0) == Retry(2, 2.0)
    assert policy.on_end(lived=0.1) == GiveUp(2)


def test_zero_attempts_gives_up_at_the_first_end() -> None:
    assert ResubscribePolicy((), attempts=0).on_end(lived=3600.0) == GiveUp(0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"delays": (1.0,), "attempts": -1}, r"attempts must be 0 or more, got -1"),
        ({"delays": (), "attempts": 2}, r"backoff schedule is empty"),
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ResubscribePolicy(**kwargs)  # type: ignore[arg-type]


ends = st.lists(
    st.tuples(st.none() | st.floats(0.0, 30.0), st.integers(0, 3)),
    max_size=40,
)


@given(ends, st.integers(0, 6))
def test_never_more_than_the_attempts_in_a_row_without_a_healthy_stream(
    history: list[tuple[float | None, int]], attempts: int
) -> None:
    policy = ResubscribePolicy(RESUBSCRIBE_BACKOFF, attempts=attempts, stable_after=10.0)
    run = 0  # ends since (and including) the last healthy one, or since the first subscription
    for lived, delivered in history:
        healthy = lived is not None and (lived >= 10.0 or delivered > 0)
        run = 1 if healthy else run + 1
        decision = policy.on_end(lived=lived, delivered=delivered)
        if isinstance(decision, GiveUp):
            assert decision.attempts == attempts
            assert run == attempts + 1
            return
        # Retry n waits the n-th delay; n counts the re-opens since the last healthy stream.
        assert decision.attempt == run
        assert 1 <= decision.attempt <= attempts
        assert decision.delay == RESUBSCRIBE_BACKOFF[min(decision.attempt, 5) - 1]
