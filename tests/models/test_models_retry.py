"""The retry policy's pure parts: Retry-After parsing and full-jitter backoff."""

from __future__ import annotations

import email.utils
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentd.models._http import (
    BACKOFF_BASE_S,
    BACKOFF_MAX_S,
    RETRY_AFTER_MAX_S,
    backoff_delay,
    provider_message,
    retry_after_seconds,
)
from tests.fakes.provider_server import FixedRandom

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, None),
        ({"Retry-After": "3"}, 3.0),
        ({"retry-after": " 0.25 "}, 0.25),
        ({"Retry-After": "-4"}, 0.0),
        ({"Retry-After": email.utils.formatdate(NOW + 42, usegmt=True)}, 42.0),
        ({"Retry-After": email.utils.formatdate(NOW - 42, usegmt=True)}, 0.0),
        ({"Retry-After": "soon"}, None),
        ({"Retry-After": "Mon, 01 Jan 2024 00:00:00"}, None),  # no zone: not an HTTP date
        ({"retry-after-ms": "250", "Retry-After": "9"}, 0.25),
        ({"retry-after-ms": "x", "Retry-After": "9"}, 9.0),
        # Other scripts' digits are no number (float() read "١٢" as 12).
        ({"Retry-After": "١٢"}, None),
        ({"retry-after-ms": "٢٥٠", "Retry-After": "9"}, 9.0),
    ],
)
def test_retry_after_seconds(headers: dict[str, str], expected: float | None) -> None:
    assert retry_after_seconds(headers, now_wall=NOW) == expected


def test_backoff_doubles_with_full_jitter_then_caps() -> None:
    rng = FixedRandom(1.0)
    windows = [backoff_delay(n, retry_after=None, rng=rng) for n in range(1, 9)]
    assert windows == [1.0, 2.0, 4.0, 8.0, 16.0, BACKOFF_MAX_S, BACKOFF_MAX_S, BACKOFF_MAX_S]
    assert backoff_delay(3, retry_after=None, rng=FixedRandom(0.25)) == 1.0
    assert backoff_delay(1, retry_after=None, rng=FixedRandom(0.0)) == 0.0


def test_retry_after_wins_and_is_capped() -> None:
    rng = FixedRandom(0.5)
    assert backoff_delay(4, retry_after=2.5, rng=rng) == 2.5
    assert backoff_delay(1, retry_after=0.0, rng=rng) == 0.0
    assert backoff_delay(1, retry_after=10_000.0, rng=rng) == RETRY_AFTER_MAX_S


@given(attempt=st.integers(1, 64), seed=st.integers(0, 2**32))
def test_jitter_stays_in_its_window(attempt: int, seed: int) -> None:
    delay = backoff_delay(attempt, retry_after=None, rng=random.Random(seed))
    assert 0.0 <= delay <= min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** (attempt - 1))


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"error": {"message": "bad key", "type": "x"}}', "bad key"),
        (b'{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}', "Overloaded"),
        (b'{"error": "model not loaded"}', "model not loaded"),
        (b'{"message": "nope"}', "nope"),
        (b"<html>502</html>", "'<html>502</html>'"),
        (b"", "(empty body)"),
        (b'{"error": {"code": 1}}', '\'{"error": {"code": 1}}\''),
    ],
)
def test_provider_message(body: bytes, expected: str) -> None:
    assert provider_message(body) == expected
