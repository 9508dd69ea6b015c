"""The restart governor: OTP-style restart intensity as a circuit breaker.

Like an Erlang/OTP supervisor: keep the times of restarts newer than
``now - period``; if recording one more makes them exceed ``intensity``, the
breaker opens and stays open (loop/reactive/schedule then exit 1). Monotonic
time only, passed in.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Final

RESTART_DELAY_BASE: Final = 0.5
"""First restart waits half a second: enough for a crashed child's resources to clear."""
RESTART_DELAY_CAP: Final = 30.0
"""Longest wait between restarts; beyond this the breaker should have opened anyway."""


def add_restart(
    times: Iterable[float], now: float, intensity: int, period: float
) -> tuple[list[float], bool]:
    """Record a restart at ``now``.

    Returns:
        The restart times still inside the window (``> now - period``, ``now``
        included) and whether the restart is allowed (their count is at most
        ``intensity``).
    """
    kept = [t for t in times if t > now - period]
    kept.append(now)
    return kept, len(kept) <= intensity


class RestartGovernor:
    """At most ``intensity`` restarts in any ``period`` seconds, else the breaker opens."""

    __slots__ = ("_open", "_times", "intensity", "period")

    def __init__(self, intensity: int, period: float) -> None:
        """Raises: ValueError: ``intensity`` < 0 or ``period`` <= 0."""
        if isinstance(intensity, bool) or intensity < 0:
            raise ValueError(f"max_restarts: {intensity!r} is not valid: give a whole number >= 0")
        if not (period > 0):
            raise ValueError(f"restart period: {period!r} is not valid: give seconds > 0")
        self.intensity = intensity
        self.period = period
        self._times: deque[float] = deque()
        self._open = False

    def record_restart(self, now: float) -> bool:
        """Record a restart at ``now``; False means the breaker is open (do not restart)."""
        if self._open:
            return False
        times = self._times
        while times and times[0] <= now - self.period:
            times.popleft()
        times.append(now)
        if len(times) > self.intensity:
            self._open = True
        return not self._open

    @property
    def breaker_open(self) -> bool:
        """True once the intensity was exceeded; it never closes again."""
        return self._open

    def recent(self) -> int:
        """Restarts recorded in the current window (as of the last record)."""
        return len(self._times)

    def restart_delay(self, attempt: int | None = None) -> float:
        """Backoff before restart number ``attempt`` (1-based; default: the latest recorded).

        0.5 s, 1 s, 2 s … capped at ``RESTART_DELAY_CAP``.
        """
        n = len(self._times) if attempt is None else attempt
        return min(RESTART_DELAY_CAP, RESTART_DELAY_BASE * float(2 ** max(0, n - 1)))
