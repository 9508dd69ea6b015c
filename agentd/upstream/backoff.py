"""Reconnect and resubscribe schedules. Pure and synchronous."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "MAX_CONSECUTIVE_FAILURES",
    "RECONNECT_BACKOFF",
    "RESUBSCRIBE_BACKOFF",
    "STABLE_SUBSCRIPTION",
    "GiveUp",
    "ResubscribePolicy",
    "Retry",
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

STABLE_SUBSCRIPTION = 10.0
"""Seconds a subscription stream must stay open to count as healthy when it
delivered nothing. A server that acknowledges each subscription and ends it at
once would otherwise make every re-open look like a success, and the watch
would re-read the resource every second forever; the same value as a stable
connection (``agentd.upstream.connection.STABLE_CONNECTION``)."""


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


@dataclass(frozen=True, slots=True)
class Retry:
    """Open the stream again: resubscribe attempt ``attempt`` (1-based) after ``delay`` seconds."""

    attempt: int
    delay: float


@dataclass(frozen=True, slots=True)
class GiveUp:
    """Stop re-opening: ``attempts`` resubscribe attempts in a row failed."""

    attempts: int


class ResubscribePolicy:
    """When to re-open one subscription stream that ended, and when to give up.

    One instance per subscription on one connection. Call :meth:`on_end` each
    time the stream ends (or an attempt to open it fails):

    * A stream that was **healthy** (established and open for at least
      ``stable_after`` seconds, or that delivered at least one update) ends a
      run of failures: the next attempt is attempt 1 again.
    * Anything else (refused, or acknowledged and ended before
      ``stable_after`` without an update) is a failed attempt: the backoff
      keeps growing, and once ``attempts`` resubscribe attempts in a row have
      failed the answer is :class:`GiveUp`.

    A stream that delivered updates and then ended (a server ending a stream
    whose backlog filled) is healthy: each of its re-reads answered a push
    from the server, so re-opening it is not polling.

    Args:
        delays: Seconds before attempt 1, 2, ...; the last repeats.
        attempts: Resubscribe attempts in a row before giving up (0: give up
            at the first end).
        stable_after: See :data:`STABLE_SUBSCRIPTION`.
    """

    def __init__(
        self, delays: Sequence[float], attempts: int, stable_after: float = STABLE_SUBSCRIPTION
    ) -> None:
        if attempts < 0:
            raise ValueError(f"attempts must be 0 or more, got {attempts!r}")
        if attempts and not delays:
            raise ValueError("backoff schedule is empty: give at least one delay in seconds")
        self.delays = tuple(delays)
        self.attempts = attempts
        self.stable_after = stable_after
        self.attempt = 0
        """Resubscribe attempts made since the last healthy stream."""

    def healthy(self, *, lived: float | None, delivered: int) -> bool:
        """Whether a stream that lived ``lived`` seconds (``None``: never established) was healthy."""
        return lived is not None and (lived >= self.stable_after or delivered > 0)

    def on_end(self, *, lived: float | None, delivered: int = 0) -> Retry | GiveUp:
        """The stream ended after ``lived`` seconds (``None``: it was never established)."""
        if self.healthy(lived=lived, delivered=delivered):
            self.attempt = 0
        if self.attempt >= self.attempts:
            return GiveUp(self.attempt)
        self.attempt += 1
        return Retry(self.attempt, delay_before_attempt(self.attempt, self.delays))
