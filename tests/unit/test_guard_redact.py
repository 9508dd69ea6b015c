"""Redaction's length boundary: a registered six-character secret is hidden everywhere (docs/testing.md)."""

from __future__ import annotations

from agentd.redact import MIN_REGISTERED_CHARS, REDACTED, redact, register_secrets

# Values no other test registers or prints (registration is process-wide and append-only).
SIX = "Q7zx2K"
FIVE = "W9vq4"


def test_a_registered_secret_of_exactly_the_minimum_length_is_hidden_alone_and_inside_text() -> None:
    assert len(SIX) == MIN_REGISTERED_CHARS == 6
    register_secrets([SIX])
    assert redact(SIX) == REDACTED
    assert redact(f"server said {SIX}!") == f"server said {REDACTED}!"
    assert redact({"note": SIX}) == {"note": REDACTED}
    assert redact(["run", SIX]) == ["run", REDACTED]
    assert redact("x", extra=[SIX]) == "x"


def test_a_value_one_character_shorter_is_not_registered() -> None:
    assert len(FIVE) == MIN_REGISTERED_CHARS - 1
    register_secrets([FIVE])
    assert redact(f"build {FIVE} done") == f"build {FIVE} done"


def test_an_extra_secret_of_six_characters_is_hidden_in_a_six_character_string() -> None:
    assert redact("Hj3kL0", extra=["Hj3kL0"]) == REDACTED
    assert redact("ab Hj3kL0", extra=["Hj3kL0"]) == f"ab {REDACTED}"
