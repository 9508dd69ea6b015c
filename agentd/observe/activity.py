"""What the run did lately: the last routing decisions and per-minute counts for the last hour.

The status view (``GET /status``, ``agentd status``, the status page) shows
what woke the daemon recently and a small chart of wakes and model calls
per minute. Nothing else in the reactor keeps either (the counters only
grow, telemetry is written and forgotten), so this is the one place that
does, bounded: :data:`DECISIONS` decisions and :data:`MINUTES` minutes,
whatever the traffic (rfcs/0335). Pure: time is passed in; the reactor
alone writes it (through :class:`agentd.observe.counters.RunCounters`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Final

__all__ = ["DECISIONS", "MINUTES", "ROUTES_REMEMBERED", "Activity", "Decision", "Minute"]

DECISIONS: Final = 50
"""Routing decisions kept: enough to see a burst, small enough to scrape every second."""

MINUTES: Final = 60
"""Minutes of per-minute counts kept (the chart's hour)."""


ROUTES_REMEMBERED: Final = 4096
"""Routes whose last wake is kept (sessions make routes of their own: the count is bounded here too)."""


@dataclass(frozen=True, slots=True)
class Decision:
    """One routing decision: a change taken (or not) by a route, or a delivery that woke an agent."""

    at: float
    """Monotonic time of the decision."""
    uri: str
    route: str | None
    """The owning route; None when no route took the change."""
    outcome: str
    """``enqueued``, ``coalesced``, ``blocked``, ``dropped:<reason>``, ``unrouted``,
    ``skipped:<why>`` or ``delivered`` (then ``agent`` names who woke)."""
    agent: str | None = None


@dataclass(slots=True)
class Minute:
    """The counts of one minute (``minute`` = monotonic seconds // 60)."""

    minute: int
    wakes: int = 0
    model_calls: int = 0


class Activity:
    """The last :data:`DECISIONS` routing decisions and :data:`MINUTES` minutes of counts."""

    __slots__ = ("_decisions", "_last_wake", "_minutes")

    def __init__(self) -> None:
        self._decisions: deque[Decision] = deque(maxlen=DECISIONS)
        self._minutes: deque[Minute] = deque(maxlen=MINUTES)
        self._last_wake: dict[str, float] = {}

    def decision(
        self, now: float, uri: str, route: str | None, outcome: str, agent: str | None = None
    ) -> None:
        """Remember one routing decision (the oldest is forgotten past :data:`DECISIONS`)."""
        self._decisions.append(Decision(now, uri, route, outcome, agent))

    def wake(self, now: float, route: str) -> None:
        """A delivery on ``route`` woke (or started) an agent."""
        self._minute(now).wakes += 1
        last = self._last_wake
        last.pop(route, None)
        last[route] = now
        if len(last) > ROUTES_REMEMBERED:  # forget the route woken longest ago
            del last[next(iter(last))]

    def last_wake(self, route: str) -> float | None:
        """When a delivery on ``route`` last woke an agent (None: not in this run, or long forgotten)."""
        return self._last_wake.get(route)

    def model_call(self, now: float) -> None:
        """An agent's model call was reported."""
        self._minute(now).model_calls += 1

    def _minute(self, now: float) -> Minute:
        minute = int(now // 60)
        if not self._minutes or self._minutes[-1].minute != minute:
            self._minutes.append(Minute(minute))
        return self._minutes[-1]

    def decisions(self) -> list[Decision]:
        """The kept decisions, oldest first."""
        return list(self._decisions)

    def per_minute(self, now: float) -> list[Minute]:
        """One entry per minute of the last hour up to ``now``'s minute, oldest first (zeros filled in)."""
        current = int(now // 60)
        kept = {m.minute: m for m in self._minutes}
        return [kept.get(minute) or Minute(minute) for minute in range(current - MINUTES + 1, current + 1)]
