"""What redaction costs a telemetry line (run: .venv/bin/python bench/bench_redact.py).

Every telemetry field goes through :func:`agentd.core.redact.redact` before the
line is encoded. This times ``redact`` on the fields of three typical events
(a plain routed event, a tool call with an error, a connect failure that
quotes a URL with credentials), both as telemetry sees them (the same server
names, URIs and messages again and again: remembered) and at first sight,
against the floor measured in the same run: ``orjson.dumps`` of the same
record, which every line pays anyway. Quick: a few seconds.
"""

from __future__ import annotations

import sys
import timeit
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson

from agentd.core import redact as redact_module
from agentd.core.redact import redact

REPEAT = 5
NUMBER = 20_000

EVENTS: dict[str, dict[str, Any]] = {
    "resource.updated": {
        "ts": "2026-11-30T12:00:00.000Z",
        "event": "resource.updated",
        "server": "memo",
        "uri": "memo://notes",
        "route": "notes",
        "kind": "pushed",
    },
    "tool.call": {
        "ts": "2026-11-30T12:00:00.000Z",
        "event": "tool.call",
        "agent": "a-12",
        "server": "files",
        "tool": "read_file",
        "latency_ms": 1.234,
        "error": "server 'files' failed tools/call 'read_file': no such file '/srv/data/report.json'",
    },
    "upstream.connect_failed": {
        "ts": "2026-11-30T12:00:00.000Z",
        "event": "upstream.connect_failed",
        "server": "web",
        "attempt": 2,
        "error": "server 'web' ConnectError: all attempts to connect to 10.0.0.7:443 failed (server 'web' is "
        "unreachable at https://bot:hunter2hunter2@mcp.internal/mcp?token=0123456789abcdef: "
        "ConnectError('all attempts to connect'))",
    },
}


def best_us(stmt: Any) -> float:
    return min(timeit.repeat(stmt, number=NUMBER, repeat=REPEAT)) / NUMBER * 1e6


def first_sight(record: dict[str, Any]) -> None:
    """``redact`` on values never seen before (the per-string cache cleared first)."""
    redact_module._cached_text.cache_clear()
    redact(record)


def main() -> None:
    rows = []
    for name, record in EVENTS.items():
        floor = best_us(lambda record=record: orjson.dumps(record))
        cost = best_us(lambda record=record: redact(record))
        cold = best_us(lambda record=record: first_sight(record))
        rows.append((name, floor, cost, cold))
    print(
        f"{'event':<26} {'orjson.dumps (floor) µs':>24} {'redact µs':>10} {'× floor':>8}"
        f" {'first sight µs':>15} {'× floor':>8}"
    )
    for name, floor, cost, cold in rows:
        print(
            f"{name:<26} {floor:>24.2f} {cost:>10.2f} {cost / floor:>8.1f} {cold:>15.2f} {cold / floor:>8.1f}"
        )


if __name__ == "__main__":
    main()
