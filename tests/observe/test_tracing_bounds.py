"""The spans tracing holds between events stay bounded (rfcs/0281).

The SDK's own in-memory exporter stands in for the collector; the tap is fed
the telemetry events the reactor writes.
"""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentd.observe.tracing import MAX_PENDING_UPDATES, QuietBatchProcessor, Tracing


def tracing() -> Tracing:
    processor = QuietBatchProcessor(InMemorySpanExporter())
    provider = TracerProvider()
    provider.add_span_processor(processor)  # type: ignore[arg-type]
    return Tracing(provider, processor, capture=False)


def test_updates_no_route_delivers_do_not_accumulate() -> None:
    t = tracing()
    try:
        # A change per new URI (an inbox message each), coalesced or dropped, never delivered.
        for n in range(3 * MAX_PENDING_UPDATES):
            t.on_event(
                "resource.updated", {"uri": f"inbox://m{n}", "route": "r", "server": "s", "kind": "updated"}
            )
        assert len(t._pending) == MAX_PENDING_UPDATES
        newest = f"inbox://m{3 * MAX_PENDING_UPDATES - 1}"
        assert newest in t._pending  # the oldest went first
        t.on_event("route.deliver", {"route": "r", "uris": [newest]})
        assert newest not in t._pending
    finally:
        t.shutdown(1.0)


def test_an_agents_spans_go_when_it_exits() -> None:
    t = tracing()
    try:
        for n in range(100):
            agent = f"a{n}"
            t.on_event("subagent.spawn", {"agent": agent, "role": "spawn", "route": "r"})
            t.on_event(
                "subagent.exit", {"agent": agent, "status": "crashed"}
            )  # never started, never ended a turn
        assert (t._turns, t._spawns) == ({}, {})
    finally:
        t.shutdown(1.0)
