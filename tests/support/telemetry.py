"""Telemetry that records events in memory and lets a test await them (no sleeps)."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import trio

from agentd.telemetry import Telemetry

Pred = Callable[[dict[str, Any]], bool]


class RecordingTelemetry(Telemetry):
    """Keeps every event (``{"event": name, **fields}``) and wakes waiters."""

    def __init__(self, *, timeout: float = 30.0) -> None:
        super().__init__(stream=io.StringIO(), verbose=True)
        self.events: list[dict[str, Any]] = []
        self.timeout = timeout
        self._changed = trio.Event()

    def emit(self, event: str, /, **fields: Any) -> None:
        self.events.append({"event": event, **fields})
        self._changed.set()
        self._changed = trio.Event()

    def find(self, name: str, pred: Pred = lambda e: True) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == name and pred(e)]

    async def wait(self, name: str, pred: Pred = lambda e: True, *, count: int = 1) -> dict[str, Any]:
        """The ``count``-th event named ``name`` matching ``pred`` (fails after ``timeout`` s)."""
        with trio.fail_after(self.timeout):
            while len(found := self.find(name, pred)) < count:
                await self._changed.wait()
            return found[count - 1]
