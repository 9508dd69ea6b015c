"""The budget's edges: each ceiling at exactly its value, the order they are checked in, garbage refused."""

from __future__ import annotations

import math

import pytest

from agentd.supervisor.loop.budget import Budget


def test_each_ceiling_is_reached_at_exactly_its_value() -> None:
    b = Budget(max_tokens=10)
    assert b.charge(input_tokens=4, output_tokens=5) is None
    assert b.remaining_tokens() == 1
    assert b.charge(input_tokens=1, output_tokens=0) == "tokens"
    assert b.remaining_tokens() == 0
    assert b.charge(input_tokens=3, output_tokens=2) == "tokens"
    assert (b.tokens, b.remaining_tokens()) == (15, 0)  # never negative
    s = Budget(max_steps=2)
    assert s.charge(input_tokens=0, output_tokens=0, steps=1) is None
    assert s.remaining_steps() == 1
    assert s.charge(input_tokens=0, output_tokens=0, steps=1) == "steps"
    assert s.charge(input_tokens=0, output_tokens=0, steps=3) == "steps"
    assert (s.steps, s.remaining_steps()) == (5, 0)
    u = Budget(max_usd=0.5)
    assert u.charge(input_tokens=0, output_tokens=0, cost_usd=0.25) is None
    assert u.charge(input_tokens=0, output_tokens=0, cost_usd=0.25) == "usd"
    assert Budget().remaining_tokens() is None
    assert Budget().remaining_steps() is None


def test_tokens_are_reported_before_dollars_and_dollars_before_steps() -> None:
    b = Budget(max_tokens=1, max_usd=1.0, max_steps=1)
    assert b.charge(input_tokens=0, output_tokens=0, steps=1, cost_usd=1.0) == "usd"
    assert b.charge(input_tokens=1, output_tokens=0) == "tokens"
    c = Budget(max_tokens=100, max_usd=1.0, max_steps=1)
    assert c.charge(input_tokens=0, output_tokens=0, steps=1) == "steps"


def test_an_unpriced_call_adds_nothing_to_the_dollars_and_makes_the_cost_unknown() -> None:
    b = Budget(max_usd=1.0)
    assert b.charge(input_tokens=1, output_tokens=1, cost_usd=0.123456789) is None
    assert b.cost_usd() == 0.12345679
    assert b.charge(input_tokens=1, output_tokens=1, cost_usd=None) is None
    assert (b.usd, b.unpriced_calls, b.cost_usd()) == (0.123456789, 1, "unknown")
    assert b.charge(input_tokens=0, output_tokens=0, cost_usd=None) is None
    assert b.unpriced_calls == 2
    assert b.charge(input_tokens=0, output_tokens=0) is None  # the default cost is a priced zero
    assert b.unpriced_calls == 2


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"input_tokens": -1, "output_tokens": 0}, r"input_tokens=-1 output_tokens=0 steps=0 is not valid: counts must be >= 0"),
        ({"input_tokens": 0, "output_tokens": -1}, r"output_tokens=-1 .* counts must be >= 0"),
        ({"input_tokens": 0, "output_tokens": 0, "steps": -1}, r"steps=-1 is not valid: counts must be >= 0"),
        ({"input_tokens": 0, "output_tokens": 0, "cost_usd": -0.01}, r"cost_usd=-0.01 is not valid: a cost is a finite amount >= 0"),
        ({"input_tokens": 0, "output_tokens": 0, "cost_usd": math.inf}, r"cost_usd=inf is not valid"),
    ],
)  # fmt: skip
def test_a_garbage_report_is_refused_and_charges_nothing(kw: dict[str, float], message: str) -> None:
    b = Budget(max_tokens=10)
    with pytest.raises(ValueError, match=message):
        b.charge(**kw)  # type: ignore[arg-type]
    assert (b.tokens, b.steps, b.usd, b.unpriced_calls) == (0, 0, 0.0, 0)


def test_a_zero_report_is_accepted() -> None:
    b = Budget(max_steps=1)
    assert b.charge(input_tokens=0, output_tokens=0, steps=0, cost_usd=0.0) is None


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"max_steps": 0}, r"max_steps: 0 is not valid: give a whole number >= 1, or leave it unset"),
        ({"max_tokens": 0}, r"max_tokens: 0 is not valid"),
        ({"max_tokens": True}, r"max_tokens: True is not valid"),
        ({"max_steps": 1.5}, r"max_steps: 1.5 is not valid"),
        ({"deadline_at": math.inf}, r"deadline_at: inf is not valid: give a finite monotonic time"),
        ({"deadline_at": math.nan}, r"deadline_at: nan is not valid"),
        ({"max_usd": 0.0}, r"max_usd: 0.0 is not valid: give a positive amount, or leave it unset"),
        ({"max_usd": math.inf}, r"max_usd: inf is not valid"),
    ],
)  # fmt: skip
def test_bad_ceilings_name_the_setting_and_the_fix(kw: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Budget(**kw)  # type: ignore[arg-type]


def test_the_smallest_valid_ceilings_are_accepted() -> None:
    b = Budget(max_steps=1, max_tokens=1, deadline_at=0.0, max_usd=0.001)
    assert b.snapshot() == {
        "steps": 0,
        "tokens": 0,
        "usd": 0.0,
        "max_steps": 1,
        "max_tokens": 1,
        "max_usd": 0.001,
        "deadline_at": 0.0,
    }


def test_the_deadline_is_reached_at_exactly_its_time() -> None:
    b = Budget(deadline_at=100.0)
    assert b.next_deadline() == 100.0
    assert not b.deadline_reached(99.999)
    assert b.deadline_reached(100.0)
    assert b.deadline_reached(100.5)
    assert not Budget().deadline_reached(1e12)
    assert Budget().next_deadline() is None


def test_the_snapshot_rounds_dollars_to_eight_places() -> None:
    b = Budget()
    b.charge(input_tokens=3, output_tokens=4, steps=2, cost_usd=0.1234567891)
    snap = b.snapshot()
    assert (snap["steps"], snap["tokens"], snap["usd"]) == (2, 7, 0.12345679)
