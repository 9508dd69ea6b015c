"""An idle reactive daemon with 100 subscriptions: CPU seconds and context switches over a window.

Run: ``/work/venv/bin/python bench/bench_idle.py [--window 30]`` (about 40 s).

agentd ``--mode reactive`` runs with ``bench/_storm_server.py`` (100 URIs,
stdio, 2026-07-28 era) subscribed as ``storm://*``: one listen stream carrying
them and the catalog's notices (rfcs/0260), routed into a continue session that never starts
because nothing changes. Once the server reports the stream with every URI open,
the bench takes CPU seconds (``psutil cpu_times``, user + system) and context
switches (voluntary + involuntary, summed over every thread from
``/proc/PID/task/*/status``) of agentd, its zygote and the server; waits the
window; takes them again. The floor, measured in the same window: a Python
process running a 100 ms polling loop (``while True: time.sleep(0.1)``).

The goal is zero wake-ups of agentd while idle: voluntary context switches
of agentd over the window should be 0.

agentd runs as under systemd's ``Type=notify`` (``NOTIFY_SOCKET`` names a
socket the bench listens on, and the window starts after ``READY=1``): the
notifier arms no timer. ``--watchdog SECONDS`` sets ``WATCHDOG_USEC`` as
``WatchdogSec=`` does, to show what the pings cost (one per half timeout).

It runs twice: tracing off, then on (``OTEL_EXPORTER_OTLP_ENDPOINT`` names a
loopback OTLP/HTTP sink in the bench): exporting must not wake an idle daemon
either (``--tracing off|on|both``, default both).
"""

from __future__ import annotations

import argparse
import functools
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import trio
from _util import (
    ENV,
    PY,
    REPO,
    STEP_TIMEOUT,
    Usage,
    UsageDelta,
    descendants,
    fmt,
    machine_note,
    role_of,
    run_agentd,
    table,
    write_script,
)

sys.path.insert(1, str(REPO))

from agentd.observe.telemetry import RATE_WINDOW_S
from tests.support.otlp import http_requests

N_URIS = 100

CONFIG = """
mode = "reactive"
model = "{model}"
instruction = "idle bench"
subscribe = ["storm:storm://*"]

[[routes]]
name = "idle"
match = "storm://*"
disposition = "continue"
session = "s"
reread_on_start = false
"""


async def _otlp_sink(stream: trio.SocketStream, counter: list[int]) -> None:
    """Answer every OTLP/HTTP request 200 with an empty body (the bench counts them, decodes nothing)."""
    try:
        async for _request in http_requests(stream):
            counter[0] += 1
            await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
    except trio.BrokenResourceError:
        return


async def main(window: float, watchdog: float | None, tracing: str) -> None:
    for on in {"off": (False,), "on": (True,), "both": (False, True)}[tracing]:
        if not on:
            await run_one(window, watchdog, None)
            continue
        exports = [0]
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(
                functools.partial(
                    trio.serve_tcp, functools.partial(_otlp_sink, counter=exports), 0, host="127.0.0.1"
                )
            )
            port = listeners[0].socket.getsockname()[1]
            await run_one(window, watchdog, f"http://127.0.0.1:{port}")
            print(f"tracing on: OTLP export requests during the whole run: {exports[0]}")
            nursery.cancel_scope.cancel()


async def run_one(window: float, watchdog: float | None, otlp: str | None) -> None:
    print(
        f"bench_idle: {machine_note()}; window {window:g} s, {N_URIS} subscriptions, "
        f"watchdog {f'{watchdog:g} s' if watchdog else 'off'}, tracing {'on' if otlp else 'off'}"
    )
    with tempfile.TemporaryDirectory(prefix="agentd-bench-") as tmpdir:
        tmp = Path(tmpdir)
        notify = trio.socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        await notify.bind(str(tmp / "notify"))
        notify_env = {"NOTIFY_SOCKET": str(tmp / "notify")}
        if otlp:
            notify_env["OTEL_EXPORTER_OTLP_ENDPOINT"] = otlp
        if watchdog:
            notify_env["WATCHDOG_USEC"] = str(int(watchdog * 1e6))
        model = write_script(tmp / "idle.json", [{"text": "NO_REPLY"}])
        cfg = tmp / "idle.toml"
        cfg.write_text(CONFIG.format(model=model))
        progress_path = tmp / "progress"
        os.mkfifo(progress_path)
        # O_RDWR: the read end never sees EOF before the server opens its end.
        progress = trio.lowlevel.FdStream(os.open(progress_path, os.O_RDWR | os.O_NONBLOCK))
        server = (
            f"storm={PY} {REPO / 'bench' / '_storm_server.py'} --uris {N_URIS}"
            f" --ready {progress_path} --expect {N_URIS}"
        )
        poller = await trio.lowlevel.open_process(
            [PY, "-c", "import time\nwhile True:\n    time.sleep(0.1)"], stdin=subprocess.DEVNULL, env=ENV
        )
        try:
            async with run_agentd(["--config", str(cfg), "--mcp-stdio", server], env=notify_env) as a:
                buf = b""
                with trio.fail_after(STEP_TIMEOUT):
                    while b"ready" not in buf:
                        buf += await progress.receive_some(64)
                    while b"READY=1" not in await notify.recv(4096):
                        pass
                # Let the last acknowledgements and the reactor's bookkeeping settle: the
                # window should see the steady idle state, not the tail of start-up. The
                # start-up re-read's skips are rate-limited telemetry: their summary line is
                # written when the rate window ends (one wake-up of the writer, then none).
                await a.wait_for("reactor.start")
                await trio.sleep(RATE_WINDOW_S + 1.0)
                procs = {"agentd": psutil.Process(a.proc.pid)}
                for p in descendants(a.proc.pid):
                    procs[f"{role_of(p)} ({p.pid})"] = p
                procs["floor: 100 ms polling loop"] = psutil.Process(poller.pid)
                before = {k: Usage.of(p.pid) for k, p in procs.items()}
                notified = 0
                # The measurement window itself (not a wait for a condition), counting notifications.
                with trio.move_on_after(window):
                    while True:
                        await notify.recv(4096)
                        notified += 1
                rows = []
                for k, p in procs.items():
                    if not p.is_running() or p.status() == psutil.STATUS_ZOMBIE:
                        rows.append([k, "exited during the window", "-", "-", "-"])
                        continue
                    d = UsageDelta.between(before[k], Usage.of(p.pid))
                    rows.append(
                        [k, fmt(d.cpu_s, 3), d.vol, d.invol, f"+{d.threads_started} / -{d.threads_exited}"]
                    )
                lost = [ln.ev for ln in a.lines if ln.ev.get("event") == "zygote.degraded"]
                events = len(a.lines)
        finally:
            poller.kill()
            await poller.wait()
            await progress.aclose()
            notify.close()
    table(
        f"idle reactive daemon, {N_URIS} subscriptions, {window:g} s window, tracing {'on' if otlp else 'off'}",
        ["process", "CPU s", "voluntary ctx sw", "involuntary ctx sw", "threads started / exited"],
        rows,
    )
    agentd_row = rows[0]
    # Without a watchdog: no wake-up at all. With one: one wake-up per ping (half WatchdogSec).
    allowed = round(window / (watchdog / 2)) if watchdog else 0
    print(
        f"goal: {allowed} wake-ups of agentd while idle: voluntary ctx switches = {agentd_row[2]} "
        f"({'met' if agentd_row[2] <= allowed else 'NOT met'}); telemetry lines during the run: {events}; "
        f"service-manager notifications in the window: {notified}"
    )
    if lost:
        print(f"zygote lost during the run: {lost} (bench/README.md, Findings 1)")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--window", type=float, default=30.0, help="idle window in seconds (default 30)")
    ap.add_argument(
        "--watchdog", type=float, default=None, help="WatchdogSec in seconds (default: no watchdog)"
    )
    ap.add_argument(
        "--tracing", choices=("off", "on", "both"), default="both", help="run with traces off, on, or both"
    )
    ns = ap.parse_args()
    trio.run(main, ns.window, ns.watchdog, ns.tracing)
