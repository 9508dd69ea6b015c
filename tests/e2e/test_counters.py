"""One counter set: ``/metrics`` and ``supervisor.exit`` report the same numbers (the real command).

agentd keeps its run's counts in one typed object (``agentd.counters``);
the Prometheus families and the totals of the last telemetry line are two
views of it. A run that routes, coalesces or drops, spends tokens and
publishes results is scraped once it is quiet, then drained; every count
the two views share must be equal.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from agentd.exitcodes import ExitCode
from tests.support.routing import (
    FAULT_SERVER,
    START,
    STEP,
    drain,
    health_base,
    scrape,
    script,
    sdk_server,
    server_process,
    supervised,
)


def _total(metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, lbl), v in metrics.items() if n == name and want <= set(lbl))


@pytest.mark.parametrize("overflow", ["drop_oldest", "coalesce"])
async def test_metrics_and_supervisor_exit_report_the_same_counts(tmp_path: Path, overflow: str) -> None:
    # One agent at a time, a queue of one: the 1st change starts the agent, the 2nd waits, the 3rd is lost.
    model = script(tmp_path, [{"text": "busy", "latency_ms": 1000}, {"text": "done"}])
    route = f"item://*=spawn:1,queue_cap=1,overflow={overflow},debounce=0,reread_on_start=false"
    args = [
        "--mode", "reactive", "--verbose", "--mcp-stdio", sdk_server(tmp_path, "many", "--items", "3", server=FAULT_SERVER),
        "--subscribe", "many:item://*", "--route", route, "--health-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0",
        "--model", model, "work",
    ]  # fmt: skip
    async with supervised(args) as a:
        base = await health_base(a)
        await a.wait_event("subscription.established", count=3, timeout=START)
        (tmp_path / "many.json.storm").write_text(json.dumps({"items": 3, "rounds": 1}))
        server_process(a, "fault_server.py").send_signal(signal.SIGUSR1)
        await a.wait_event("route.dropped", timeout=STEP)
        # Quiet: both agents (the first change's and the queued one's) ended their turns.
        await a.wait_event("turn.end", count=2, timeout=STEP)
        metrics = await scrape(base)
        assert await drain(a) == ExitCode.OK
    exit_line = a.find("supervisor.exit")[0]
    counters = exit_line["counters"]
    assert counters["routed"] == _total(metrics, "agentd_events_routed_total") == 3
    assert counters["unrouted"] == _total(metrics, "agentd_events_unrouted_total")
    assert counters["coalesced"] == _total(metrics, "agentd_events_coalesced_total")
    assert counters["dropped_events"] == _total(metrics, "agentd_events_dropped_total") == 1
    for reason, n in exit_line["dropped"].items():
        assert _total(metrics, "agentd_events_dropped_total", reason=reason) == n
    assert counters["restarts"] == _total(metrics, "agentd_agent_restarts_total")
    assert counters["model_calls"] == 2
    assert counters["input_tokens"] == _total(metrics, "agentd_tokens_total", direction="input") > 0
    assert counters["output_tokens"] == _total(metrics, "agentd_tokens_total", direction="output") > 0
    assert counters["cached_input_tokens"] == _total(metrics, "agentd_cache_tokens_total", kind="read")
    assert counters["cache_creation_input_tokens"] == _total(
        metrics, "agentd_cache_tokens_total", kind="write"
    )
    assert counters["unpriced_calls"] == _total(metrics, "agentd_model_calls_unpriced_total")
    assert counters["outputs_lost"] == _total(metrics, "agentd_outputs_lost_total")
    assert exit_line["telemetry_dropped"] == _total(metrics, "agentd_telemetry_dropped_total") == 0
