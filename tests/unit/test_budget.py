"""The tree-wide, lifetime budget."""

from __future__ import annotations

import pytest

from agentd.supervisor.budget import Budget


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
