"""Scraping ``GET /status`` every second: what it costs a reactive daemon.

Run: ``python bench/bench_status.py [--window 20] [--rounds 2]`` (about 2 × rounds × window s).

agentd ``--mode reactive`` runs over the bundled memo server (its notes
subscribed, one spawn route) with ``--health-addr 127.0.0.1:0``. Once it
listens, the bench alternates three windows of the same length on the same
process: the floor (nobody reads anything) and the scraped window (one
``GET /status`` a second, a fresh connection each, as a dashboard or
``agentd status --watch`` would do), between them a window of one ``GET /healthz``
a second (what a kubelet's liveness probe already costs: the floor of any request). It reports agentd's CPU seconds (user +
system, ``psutil``) in each, their difference per scrape, and the latency of
one scrape (p50, max). The claim (rfcs/0335): scraping every second costs
nothing measurable next to the machine's noise, i.e. the scraped windows'
CPU is within the spread of the floor windows, a few milliseconds per scrape.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable


def _start(tmp: Path) -> tuple[subprocess.Popen[bytes], int]:
    notes = tmp / "notes.json"
    notes.write_text("{}")
    script = tmp / "script.json"
    script.write_text(json.dumps({"turns": [{"text": "ok"}], "then": "repeat"}))
    proc = subprocess.Popen(
        [
            PY,
            "-m",
            "agentd",
            "--mode",
            "reactive",
            "--mcp-stdio",
            f"memo={PY} -m agentd serve memo --file {notes}",
            "--subscribe",
            "memo:memo://notes",
            "--route",
            "memo://notes=spawn:1,reread_on_start=false",
            "--health-addr",
            "127.0.0.1:0",
            "--model",
            f"script:{script}",
            "bench",
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.stderr is not None
    port: list[int] = []
    ready = threading.Event()

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("event") == "health.listening":
                port.append(int(event["port"]))
            if event.get("event") == "ready.changed" and event.get("ready") and port:
                ready.set()

    threading.Thread(target=pump, daemon=True).start()
    if not ready.wait(120):
        proc.kill()
        raise SystemExit("agentd did not become ready within 120 s")
    return proc, port[0]


def _cpu(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def _window(pid: int, port: int, seconds: float, scrape: str | None) -> tuple[float, list[float]]:
    start_cpu, start = _cpu(pid), time.monotonic()
    latencies: list[float] = []
    tick = start
    while time.monotonic() < start + seconds:
        if scrape:
            t0 = time.perf_counter()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", scrape)
            body = conn.getresponse().read()
            conn.close()
            latencies.append(time.perf_counter() - t0)
            assert body.startswith(b'{"schema":"agentd.status/1"' if scrape == "/status" else b"ok")
        tick += 1.0
        time.sleep(max(0.0, min(tick, start + seconds) - time.monotonic()))  # the scrape period itself
    return _cpu(pid) - start_cpu, latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc, port = _start(Path(tmp))
        try:
            floor: list[float] = []
            probed: list[float] = []
            scraped: list[float] = []
            latencies: list[float] = []
            probe_latencies: list[float] = []
            for _ in range(args.rounds):
                cpu, _lat = _window(proc.pid, port, args.window, scrape=None)
                floor.append(cpu)
                cpu, lat = _window(proc.pid, port, args.window, scrape="/healthz")
                probed.append(cpu)
                probe_latencies += lat
                cpu, lat = _window(proc.pid, port, args.window, scrape="/status")
                scraped.append(cpu)
                latencies += lat
        finally:
            proc.terminate()
            proc.wait(30)
    load = os.getloadavg()
    per_scrape_ms = (
        (statistics.mean(scraped) - statistics.mean(floor)) / (len(latencies) / args.rounds) * 1000
    )
    print(
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {os.cpu_count()} cpus; window {args.window:g} s"
    )
    print(f"floor (no scraping)      agentd CPU s per window: {', '.join(f'{c:.3f}' for c in floor)}")
    print(f"/healthz every second    agentd CPU s per window: {', '.join(f'{c:.3f}' for c in probed)}")
    print(f"/status every second     agentd CPU s per window: {', '.join(f'{c:.3f}' for c in scraped)}")
    print(
        f"ratio /status vs /healthz (the kubelet's probe, the floor of any request) "
        f"{statistics.mean(scraped) / max(statistics.mean(probed), 1e-9):.2f}; "
        f"/healthz latency p50 {statistics.median(probe_latencies) * 1000:.1f} ms"
    )
    print(
        f"ratio /status vs nothing {statistics.mean(scraped) / max(statistics.mean(floor), 1e-9):.2f}; "
        f"≈ {per_scrape_ms:.2f} ms CPU per scrape; scrape latency p50 {statistics.median(latencies) * 1000:.1f} ms, "
        f"max {max(latencies) * 1000:.1f} ms ({len(latencies)} scrapes)"
    )


if __name__ == "__main__":
    main()
