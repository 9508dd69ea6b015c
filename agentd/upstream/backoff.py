"""Reconnect and resubscribe schedules. Pure and synchronous."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "MAX_CONSECUTIVE_FAILURES",
    "RECONNECT_BACKOFF",
    "RESUBSCRIBE_BACKOFF",
    "delay_before_attempt",
]

RECONNECT_BACKOFF: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0)
"""Seconds to wait before reconnect attempt 1, 2, 3, ...: doubling from 1 s rides out a
server restart in a second or two without hammering a crashing one; 31 s in all
before giving up keeps a dead required server from stalling startup for minutes."""

RESUBSCRIBE_BACKOFF: tuple[float, ...] = RECONNECT_BACKOFF
"""Seconds to wait before re-opening a subscription that ended on a live connection."""

MAX_CONSECUTIVE_FAILURES = 5
"""Failed attempts in a row after which a server (or one subscription) is given up."""


def delay_before_attempt(attempt: int, schedule: Sequence[float]) -> float:
    """Seconds to wait before retry number ``attempt`` (1-based); the last step repeats.

    Raises:
        ValueError: ``attempt`` is below 1 or ``schedule`` is empty.
    """
    if attempt < 1:
        raise ValueError(f"attempt must be 1 or more, got {attempt!r}")
    if not schedule:
        raise ValueError("backoff schedule is empty: give at least one delay in seconds")
    return schedule[min(attempt, len(schedule)) - 1]
