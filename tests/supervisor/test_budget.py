"""The tree-wide, lifetime budget."""

from __future__ import annotations

import pytest

from agentd.supervisor.loop.budget import Budget


def test_tokens_spent_across_charges() -> None:
    b = Budget(max_tokens=100)
    assert b.charge(input_tokens=40, output_tokens=20) is None
    assert b.remaining_tokens() == 40
    assert b.charge(input_tokens=30, output_tokens=10, steps=1) == "tokens"
    assert b.spent() == "tokens"
    assert b.remaining_tokens() == 0
    assert b.snapshot()["tokens"] == 100


def test_steps_and_unlimited() -> None:
    b = Budget(max_steps=2)
    assert b.remaining_tokens() is None
    b.charge(input_tokens=5, output_tokens=5, steps=1)
    assert b.remaining_steps() == 1
    assert b.charge(input_tokens=0, output_tokens=0, steps=1) == "steps"
    assert Budget().charge(input_tokens=10**9, output_tokens=0, steps=10**6) is None


def test_deadline() -> None:
    b = Budget(deadline_at=50.0)
    assert b.next_deadline() == 50.0
    assert not b.deadline_reached(49.999)
    assert b.deadline_reached(50.0)
    assert not Budget().deadline_reached(1e12)
    assert Budget().next_deadline() is None


def test_bad_values() -> None:
    with pytest.raises(ValueError, match=r"max_tokens: 0 is not valid: give a whole number >= 1"):
        Budget(max_tokens=0)
    b = Budget(max_tokens=10)
    with pytest.raises(ValueError, match=r"counts must be >= 0"):
        b.charge(input_tokens=-1, output_tokens=0)
    assert b.tokens == 0  # nothing charged


def test_usd_ceiling_counts_priced_calls_only() -> None:
    b = Budget(max_usd=1.0)
    assert b.charge(input_tokens=1, output_tokens=1, steps=1, cost_usd=0.4) is None
    assert b.charge(input_tokens=1, output_tokens=1, steps=1, cost_usd=None) is None
    assert (b.usd, b.unpriced_calls, b.cost_usd()) == (0.4, 1, "unknown")
    assert b.charge(input_tokens=1, output_tokens=1, steps=1, cost_usd=0.6) == "usd"
    assert b.snapshot()["usd"] == 1.0


def test_cost_is_a_number_when_every_call_was_priced() -> None:
    b = Budget()
    b.charge(input_tokens=1, output_tokens=1, cost_usd=0.25)
    b.charge(input_tokens=1, output_tokens=1, cost_usd=0.5)
    assert b.cost_usd() == 0.75


def test_tokens_are_checked_before_usd() -> None:
    b = Budget(max_tokens=10, max_usd=0.01)
    assert b.charge(input_tokens=10, output_tokens=0, cost_usd=1.0) == "tokens"


@pytest.mark.parametrize("cost", [-0.1, float("inf"), float("nan")])
def test_a_garbage_cost_charges_nothing(cost: float) -> None:
    b = Budget(max_usd=1.0)
    with pytest.raises(ValueError, match=r"cost_usd=.* is not valid: a cost is a finite amount >= 0"):
        b.charge(input_tokens=1, output_tokens=1, cost_usd=cost)
    assert (b.tokens, b.usd) == (0, 0.0)


@pytest.mark.parametrize("ceiling", [0.0, -1.0, float("inf")])
def test_usd_ceiling_must_be_positive(ceiling: float) -> None:
    with pytest.raises(ValueError, match=r"max_usd: .* is not valid: give a positive amount"):
        Budget(max_usd=ceiling)
