"""Telemetry that records events in memory and lets a test await them (no sleeps).

The one recording telemetry of the suite: reactor, watch, health and
declared-subscription tests all use it (a test never defines its own).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import trio

from agentd.observe.telemetry import Telemetry

Pred = Callable[[dict[str, Any]], bool]


def _always(_event: dict[str, Any]) -> bool:
    return True


class RecordingTelemetry(Telemetry):
    """Keeps every event (``{"event": name, **fields}``) with the trio time it was emitted at.

    Args:
        timeout: how long :meth:`wait` waits (trio seconds: virtual under a MockClock).
    """

    def __init__(self, *, timeout: float = 30.0) -> None:
        super().__init__(stream=io.StringIO(), verbose=True)
        self.events: list[dict[str, Any]] = []
        self.times: list[float] = []
        """When each event was emitted (trio time; 0.0 outside a trio run)."""
        self.timeout = timeout
        self._changed = trio.Event()

    def emit(self, event: str, /, **fields: Any) -> None:
        try:
            now = trio.current_time()
        except RuntimeError:  # a synchronous test drives the reactor directly
            now = 0.0
        self.events.append({"event": event, **fields})
        self.times.append(now)
        self._changed.set()
        self._changed = trio.Event()

    def find(self, name: str, pred: Pred = _always, **where: Any) -> list[dict[str, Any]]:
        """Events named ``name`` for which ``pred`` holds and every ``where`` field is equal."""
        return [
            e
            for e in self.events
            if e["event"] == name and pred(e) and all(e.get(k) == v for k, v in where.items())
        ]

    def names(self) -> list[str]:
        """Every event's name, in order."""
        return [e["event"] for e in self.events]

    def fields(self, name: str) -> list[dict[str, Any]]:
        """The fields of every event named ``name`` (without the name)."""
        return [{k: v for k, v in e.items() if k != "event"} for e in self.find(name)]

    def timed(self, name: str) -> list[tuple[float, dict[str, Any]]]:
        """``(time, fields)`` of every event named ``name``."""
        return [
            (t, {k: v for k, v in e.items() if k != "event"})
            for t, e in zip(self.times, self.events, strict=True)
            if e["event"] == name
        ]

    async def wait_fields(self, name: str, count: int = 1) -> dict[str, Any]:
        """The fields of the ``count``-th event named ``name`` (fails after ``timeout`` s)."""
        event = await self.wait(name, count=count)
        return {k: v for k, v in event.items() if k != "event"}

    async def wait(self, name: str, pred: Pred = _always, *, count: int = 1) -> dict[str, Any]:
        """The ``count``-th event named ``name`` matching ``pred`` (fails after ``timeout`` s)."""
        with trio.fail_after(self.timeout):
            while len(found := self.find(name, pred)) < count:
                await self._changed.wait()
            return found[count - 1]
