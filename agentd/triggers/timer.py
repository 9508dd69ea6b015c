"""Clock event sources: a fixed interval and a 5-field UTC cron expression.

A source only answers "when is the next fire?" in monotonic seconds
(:meth:`next_fire`) and advances when told it fired (:meth:`fire`). The
reactor folds ``next_fire()`` into its receive deadline and, when it passes,
calls :meth:`fire` and hands a clock event to the router's timer route
(rfcs/0032). Nothing here sleeps or reads a clock.

Cron is evaluated against wall time (UTC) but scheduled in monotonic time:
after each fire the next wall fire is recomputed from the *current* wall time
and converted to a monotonic deadline. A wall-clock jump therefore moves at
most the next fire; it never causes a burst of catch-up fires (RFC 0013).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Final, TypeAlias

CRON_FIELDS: Final = "minute hour day-of-month month day-of-week"

_CRON_ALIASES: Final = frozenset(
    ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
)


class IntervalSource:
    """Fires at ``start``, ``start + period``, ``start + 2*period`` … (monotonic).

    A late fire does not cause catch-up fires: the next fire is the first
    multiple of ``period`` after ``now`` on the original grid.
    """

    __slots__ = ("_next", "period")

    def __init__(self, period: float, start: float) -> None:
        """Args:
        period: seconds between fires (> 0).
        start: monotonic time of the first fire.

        Raises:
            ValueError: ``period`` is not a positive finite number.
        """
        if not (0 < period < math.inf):
            raise ValueError(f"interval: {period!r} is not valid: give a period in seconds > 0")
        self.period = period
        self._next = start

    def next_fire(self) -> float:
        """Monotonic time of the next fire."""
        return self._next

    def fire(self, now_mono: float, now_wall: datetime | None = None) -> None:
        """Record a fire at ``now_mono`` and advance to the next grid point after it."""
        del now_wall  # intervals ignore wall time
        if now_mono < self._next:
            return  # early call: nothing due yet
        missed = math.floor((now_mono - self._next) / self.period) + 1
        self._next += missed * self.period


def validate_cron(expr: str) -> str | None:
    """Check a cron expression; None if valid, else a message naming it and the fix.

    Accepted: 5 fields (``CRON_FIELDS``) in UTC, or one of ``@hourly``,
    ``@daily``/``@midnight``, ``@weekly``, ``@monthly``, ``@yearly``/``@annually``.
    Rejected: 6/7-field forms (seconds, years) and ``@reboot``.
    """
    text = expr.strip()
    if not text:
        return f"cron {expr!r} is empty: expected 5 fields: {CRON_FIELDS} (e.g. '*/5 * * * *')"
    if text.startswith("@"):
        if text.lower() == "@reboot":
            return f"cron {expr!r} is not supported: agentd has no boot event; use --mode once at startup instead"
        if text.lower() not in _CRON_ALIASES:
            return f"cron {expr!r} is not a known alias: use one of {', '.join(sorted(_CRON_ALIASES))} or 5 fields: {CRON_FIELDS}"
        return None
    fields = text.split()
    if len(fields) != 5:
        extra = " (seconds and years are not supported)" if len(fields) in (6, 7) else ""
        return f"cron {expr!r} has {len(fields)} fields{extra}: expected 5 fields: {CRON_FIELDS}"
    from croniter import CroniterError, croniter  # only a run that uses cron pays its import

    try:
        croniter(text, datetime(2000, 1, 1, tzinfo=UTC)).get_next(datetime)
    except (CroniterError, ValueError, KeyError) as exc:
        return f"cron {expr!r} is not valid ({exc}): expected 5 fields: {CRON_FIELDS}, each in range"
    return None


class CronSource:
    """Fires at the wall-clock (UTC) times of a cron expression, scheduled monotonically."""

    __slots__ = ("_next_mono", "_target_wall", "expr")

    def __init__(self, expr: str, *, now_mono: float, now_wall: datetime) -> None:
        """Args:
        expr: a cron expression (see :func:`validate_cron`).
        now_mono: the current monotonic time.
        now_wall: the current wall time (aware; converted to UTC).

        Raises:
            ValueError: the expression is invalid (the message says the fix),
                or ``now_wall`` is naive.
        """
        problem = validate_cron(expr)
        if problem is not None:
            raise ValueError(problem)
        self.expr = expr.strip()
        self._target_wall = _utc(now_wall)
        self._next_mono = 0.0
        self._schedule(now_mono, self._target_wall, strictly_after=None)

    def _schedule(self, now_mono: float, now_wall: datetime, strictly_after: datetime | None) -> None:
        # Base on the later of "now" and the slot just fired, so a fire that
        # arrives a hair early by the wall clock cannot fire the same slot twice.
        base = now_wall if strictly_after is None or now_wall > strictly_after else strictly_after
        from croniter import croniter

        nxt: datetime = croniter(self.expr, base).get_next(datetime)
        self._target_wall = nxt
        self._next_mono = now_mono + max(0.0, (nxt - now_wall).total_seconds())

    def next_fire(self) -> float:
        """Monotonic time of the next fire."""
        return self._next_mono

    def next_fire_wall(self) -> datetime:
        """The UTC wall time the next fire is aiming at (for logs)."""
        return self._target_wall

    def fire(self, now_mono: float, now_wall: datetime) -> None:
        """Record a fire and schedule the next one from the current wall time."""
        if now_mono < self._next_mono:
            return  # early call: nothing due yet
        self._schedule(now_mono, _utc(now_wall), strictly_after=self._target_wall)


def _utc(when: datetime) -> datetime:
    if when.tzinfo is None:
        raise ValueError(f"wall time {when!r} is naive: pass an aware datetime (e.g. datetime.now(UTC))")
    return when.astimezone(UTC)


ClockSource: TypeAlias = IntervalSource | CronSource
