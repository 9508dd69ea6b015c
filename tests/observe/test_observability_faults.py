"""Observability must never cost a run: a dead or hung trace collector, a child killed mid-turn while traced."""

from __future__ import annotations

import json
import signal
import socket
from pathlib import Path

import psutil
import pytest
import trio

from agentd.core.exitcodes import ExitCode
from tests.support.agentd_proc import run_agentd, script
from tests.support.otlp import otlp_receiver

pytestmark = pytest.mark.fault


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


async def test_o1_a_dead_collector_costs_only_a_warning(tmp_path: Path) -> None:
    model = script(tmp_path, [{"text": "done"}])
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{_closed_port()}",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "1",
    }
    async with run_agentd(["--model", model, "--output", "json", "go"], env=env) as a:
        assert await a.wait_exit(timeout=60) == ExitCode.OK, a.tail()
    assert json.loads(a.out)["result"] == "done"
    failed = a.find("tracing.export_failed")
    assert failed
    assert {e["level"] for e in failed} == {"warning"}
    assert not a.find("supervisor.internal_error")


async def test_o2_a_collector_that_never_answers_does_not_hold_the_exit(tmp_path: Path) -> None:
    model = script(tmp_path, [{"text": "done"}])
    async with trio.open_nursery() as nursery:
        hung: list[trio.SocketStream] = []

        async def accept_and_hang(stream: trio.SocketStream) -> None:
            hung.append(stream)
            await trio.sleep_forever()

        listeners = await nursery.start(trio.serve_tcp, accept_and_hang, 0)
        port = listeners[0].socket.getsockname()[1]
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"}
        async with run_agentd(["--model", model, "--grace", "2s", "go"], env=env) as a:
            # The exporter's own timeout is 10 s; the exit flush is bounded by min(5 s, --grace).
            # An exit held by the collector would never come (the bound guards a hang; a busy
            # machine's start alone took over 30 s).
            assert await a.wait_exit() == ExitCode.OK, a.tail()
        assert hung  # the collector was reached
        nursery.cancel_scope.cancel()
    assert a.out.strip() == "done"


async def test_o3_a_child_sigkilled_mid_turn_still_yields_its_trace(tmp_path: Path) -> None:
    model = script(tmp_path, [{"text": "slow", "latency_ms": 60_000}])
    async with otlp_receiver() as rx:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": rx.endpoint}
        async with run_agentd(["--model", model, "go"], env=env) as a:
            started = await a.wait_event("subagent.started")
            psutil.Process(started["pid"]).send_signal(signal.SIGKILL)
            assert await a.wait_exit() == ExitCode.CRASHED, a.tail()
        invoke = await rx.wait_for(lambda s: s.name.startswith("invoke_agent"), timeout=10)
    assert invoke.status_code == 2  # STATUS_CODE_ERROR
    assert invoke.end_ns >= invoke.start_ns
