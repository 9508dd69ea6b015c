"""Test helpers for upstream tests: server specs for the notes server, event waiting."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import trio

from agentd.observe.telemetry import NullTelemetry, Telemetry
from agentd.upstream import Upstream
from tests.support.watch import Spec

NOTES_SERVER = str(Path(__file__).with_name("notes_server.py"))

E = TypeVar("E")


def notes_spec(name: str, state: Path, *extra: str, era: str = "modern", required: bool = False) -> Spec:
    """A stdio spec running the notes server with its state in ``state``."""
    return Spec(
        name=name,
        command=sys.executable,
        args=[NOTES_SERVER, "--era", era, "--state", str(state), *extra],
        required=required,
    )


class Events:
    """Reads the upstream's event channel, keeping everything seen."""

    def __init__(self, recv: trio.MemoryReceiveChannel[Any]) -> None:
        self.recv = recv
        self.seen: list[Any] = []

    async def next(self, kind: type[E], within: float = 10.0, **attrs: Any) -> E:
        """The next event of type ``kind`` whose attributes equal ``attrs`` (others are kept in ``seen``)."""
        with trio.fail_after(within):
            while True:
                event = await self.recv.receive()
                self.seen.append(event)
                if isinstance(event, kind) and all(getattr(event, k) == v for k, v in attrs.items()):
                    return event

    def of(self, kind: type[E]) -> list[E]:
        return [e for e in self.seen if isinstance(e, kind)]


@asynccontextmanager
async def running_upstream(
    spec: Spec, *, telemetry: Telemetry | None = None, **options: Any
) -> AsyncIterator[tuple[Upstream, Events]]:
    """An upstream for ``spec`` connected (``Upstream.run`` started) for the block, and its event reader."""
    send, recv = trio.open_memory_channel[object](1000)
    up = Upstream(spec, send, telemetry or NullTelemetry(), **options)
    async with trio.open_nursery() as nursery:
        await nursery.start(up.run)
        yield up, Events(recv)
        nursery.cancel_scope.cancel()


def restarting_upstream(spec: Spec) -> tuple[Upstream, Events]:
    """An upstream for ``spec`` that retries (and resubscribes) every 0.2 s, and its event reader."""
    send, recv = trio.open_memory_channel[object](100)
    return Upstream(spec, send, NullTelemetry(), backoff=(0.2,), resubscribe_backoff=(0.2,)), Events(recv)
