"""Subscriptions at scale: 10,000 URIs on one server through one declared glob, stdio and Streamable HTTP.

Run: ``/work/venv/bin/python bench/bench_subscriptions.py [--uris 10000] [--window 20]
[--transport stdio|http|both] [--soak 600]`` (about 3 minutes for both transports;
``--soak S`` adds S seconds per transport).

agentd ``--mode reactive`` runs with ``bench/_storm_server.py`` (``--uris N``
resources ``storm://0`` …, 2026-07-28 era) over stdio or over Streamable HTTP
(the server on a socket the bench owns), ``subscribe = ["storm:storm://*"]``
and a spawn route for ``storm://*`` with ``reread_on_start = false`` (so the
start-up does not spawn N agents). For each transport the bench reports:

* **none refused**: ``subscription.failed`` lines (goal 0), and the URIs the
  server's one listen stream carries (its progress line ``ready`` once a stream
  with N URIs joined its bus);
* **time to all subscribed**: from ``server.state connected`` (the reactor
  has the connected server and subscribes the declared glob) to the
  ``subscription.synced`` line with ``uris = N`` (both read here as they
  arrive; goal ≤ 2 s), and agentd's own figure for the establishment (the
  line's ``ms``). Floor in the same run: the SDK's ``Client.listen`` with
  the same N URIs on the same server, from this process (request → ack);
* **TCP connections held idle** (HTTP): agentd's ESTABLISHED connections to
  the server's port after a quiet second (goal ≤ 2: the listen stream, the
  calls' kept-alive connection);
* **wake-ups idle**: voluntary context switches of agentd (every thread)
  over ``--window`` quiet seconds (goal 0). Floor in the same window: a
  100 ms polling loop (stdio); over HTTP the SDK's client holding one listen
  stream on the same server, since the server's SSE keepalive (a ping every
  15 s) wakes whoever holds a stream;
* **memory per subscribed URI**: agentd's RSS, USS and peak RSS with N URIs
  subscribed, minus the same with 10 (``storm://1?``: ``storm://10`` …
  ``storm://19``; same server, same N resources, so the catalog costs the
  same), over N - 10 (goal ≤ 2 KiB);
* **one change → one routed event**: ``burst(1)`` changes ``storm://0``; the
  ``resource.updated`` lines routed for it within a quiet second after its
  agent ended (goal exactly 1; ``route.deliver`` 1).

``--soak S``: after the measurements, S more seconds idle with N URIs: RSS
every 30 s (goal: flat), and any ``upstream.lost``, ``subscription.lost`` or
``server.state restarting`` line (goal: none).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import trio
from _util import (
    ENV,
    PY,
    REPO,
    STEP_TIMEOUT,
    Agentd,
    MiB,
    Usage,
    UsageDelta,
    fmt,
    machine_note,
    run_agentd,
    table,
    uss,
    write_script,
)
from mcp import Client, StdioServerParameters

sys.path.insert(1, str(REPO))

from agentd.observe.telemetry import RATE_WINDOW_S

STORM = REPO / "bench" / "_storm_server.py"

MODERN = "2026-07-28"
"""The floor's client speaks it outright: a probe that times out on a loaded machine would fall
back to the handshake era, which has no listen stream to time."""

CONFIG = """
mode = "reactive"
model = "{model}"
instruction = "subscriptions bench"
subscribe = ["storm:{glob}"]

[[routes]]
name = "storm"
match = "storm://*"
disposition = "spawn"
max_inflight = 2
template = "{{uri}}"
debounce = "50ms"
reread_on_start = false

[servers.storm]
{server}
# Creating and listing 10,000 resources takes the server longer than the default 15 s on a loaded machine.
startup_timeout = "120s"
"""

SETTLE = RATE_WINDOW_S + 2.0
"""Seconds after all subscribed before memory, connections and wake-ups are taken: the
start-up's last acknowledgements are over, and so is the rate window of its telemetry (the
start-up re-read's skips are folded into one summary line, written when the window ends: one
wake-up, then none). A measurement pause, not a wait for a condition."""

QUIET = 1.5
"""Seconds after the changed URI's agent ended in which a duplicate event would show."""

SUBSCRIBE_TIMEOUT = 120.0
"""Bound on start-up plus 10,000 subscriptions on a loaded machine."""


@dataclass
class Case:
    transport: str
    uris: int
    subscribed: int
    failed: int = 0
    to_subscribed_ms: float = float("nan")
    synced_ms: float = float("nan")
    rss: int = 0
    uss: int = 0
    hwm: int = 0
    """Peak RSS (``VmHWM``): what the start-up's transients cost."""
    tcp: int | None = None
    idle: UsageDelta | None = None
    floor_idle: UsageDelta | None = None
    routed: int | None = None
    delivered: int | None = None
    soak: list[tuple[float, int]] = field(default_factory=list)
    soak_trouble: list[str] = field(default_factory=list)


class Progress:
    """The storm server's progress lines (``ready``, ``done N``) read from its FIFO."""

    def __init__(self, path: Path) -> None:
        self.path = path
        os.mkfifo(path)
        # O_RDWR: the read end never sees EOF before the server opens its end.
        self.stream = trio.lowlevel.FdStream(os.open(path, os.O_RDWR | os.O_NONBLOCK))
        self.buf = b""

    async def wait_line(self, line: str, timeout: float = SUBSCRIBE_TIMEOUT) -> None:
        with trio.fail_after(timeout):
            while (line + "\n").encode() not in self.buf:
                self.buf += await self.stream.receive_some(4096)


@asynccontextmanager
async def http_server(args: list[str]) -> AsyncIterator[tuple[str, int]]:
    """The storm server over Streamable HTTP on a socket this process listens on; yields (url, port)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    port = listener.getsockname()[1]
    fd = listener.fileno()
    proc = await trio.lowlevel.open_process(
        [PY, str(STORM), *args, "--fd", str(fd)], pass_fds=(fd,), stdin=subprocess.DEVNULL, env=ENV
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        # Up before agentd connects: a server still starting (10,000 resources, a loaded machine)
        # can outlast the SDK's era probe, which then settles on the handshake era (no listen).
        with trio.fail_after(SUBSCRIBE_TIMEOUT):
            async with Client(url, mode=MODERN) as client:
                await client.list_resources()
        yield url, port
    finally:
        proc.terminate()
        with trio.move_on_after(10):
            await proc.wait()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        listener.close()


def peak_rss(pid: int) -> int:
    """``VmHWM`` of ``pid`` in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def tcp_to(pid: int, port: int) -> int:
    """ESTABLISHED TCP connections of ``pid`` to ``port`` on loopback."""
    return sum(
        1
        for c in psutil.Process(pid).net_connections(kind="tcp")
        if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED
    )


async def run_case(
    transport: str, n_uris: int, glob: str, subscribed: int, *, window: float, change: bool, soak: float
) -> Case:
    case = Case(transport, n_uris, subscribed)
    with tempfile.TemporaryDirectory(prefix="agentd-bench-") as tmpdir:
        tmp = Path(tmpdir)
        progress = Progress(tmp / "progress")
        trigger = tmp / "trigger"
        os.mkfifo(trigger)
        trigger_fd = os.open(trigger, os.O_RDWR | os.O_NONBLOCK)
        model = write_script(tmp / "quiet.json", [{"text": "NO_REPLY"}])
        cfg = tmp / "agentd.toml"
        server_args = [
            "--uris", str(n_uris), "--trigger", str(trigger), "--ready", str(progress.path),
            "--expect", str(subscribed),
        ]  # fmt: skip
        async with (
            _server(transport, server_args) as (server, port),
            run_agentd(_configure(cfg, model, glob, server)) as a,
        ):
            try:
                _, connected = await a.wait_for(
                    "server.state", lambda e: e["state"] == "connected", timeout=SUBSCRIBE_TIMEOUT
                )
                _, synced = await a.wait_for(
                    "subscription.synced", lambda e: e["uris"] == subscribed, timeout=SUBSCRIBE_TIMEOUT
                )
            except trio.TooSlowError:
                tail = "\n".join(str(ln.ev)[:300] for ln in a.lines[-15:])
                raise RuntimeError(
                    f"{transport}: not all {subscribed} subscribed; last lines:\n{tail}"
                ) from None
            case.to_subscribed_ms = (synced.t - connected.t) * 1000
            case.synced_ms = float(synced.ev["ms"])
            await progress.wait_line("ready")
            await trio.sleep(SETTLE)
            case.failed = a.count("subscription.failed")
            mem = psutil.Process(a.proc.pid).memory_info()
            case.rss, case.uss, case.hwm = mem.rss, uss(a.proc.pid), peak_rss(a.proc.pid)
            if port is not None:
                case.tcp = tcp_to(a.proc.pid, port)
            case.idle, case.floor_idle = await idle_window(a, window, port)
            if change:
                case.routed, case.delivered = await one_change(a, trigger_fd, progress)
            if soak:
                await soak_for(a, soak, case)
        os.close(trigger_fd)
        await progress.stream.aclose()
    return case


def _configure(cfg: Path, model: str, glob: str, server: str) -> list[str]:
    """Write agentd's configuration; its command-line arguments."""
    cfg.write_text(CONFIG.format(model=model, glob=glob, server=server))
    return ["--config", str(cfg), "--log-level", "info"]


@asynccontextmanager
async def _server(transport: str, server_args: list[str]) -> AsyncIterator[tuple[str, int | None]]:
    """The ``[servers.storm]`` lines for ``transport`` (and the HTTP port)."""
    if transport == "stdio":
        yield f"command = {json.dumps(PY)}\nargs = {json.dumps([str(STORM), *server_args])}", None
        return
    async with http_server(server_args) as (url, port):
        yield f"url = {json.dumps(url)}", port


LISTENER = """
import sys, trio
from mcp import Client

async def main():
    async with Client(sys.argv[1], mode="2026-07-28") as client:
        async with client.listen(resource_subscriptions=["storm://0"]):
            print("listening", flush=True)
            await trio.sleep_forever()

trio.run(main)
"""
"""The HTTP floor: the SDK's own client holding one listen stream on the same server."""


async def idle_window(a: Agentd, window: float, port: int | None) -> tuple[UsageDelta, UsageDelta]:
    """agentd's and the floor's CPU and context switches over the same quiet window.

    The floor: a 100 ms polling loop (stdio); over HTTP, the SDK's client
    holding one listen stream on the same server (the server's SSE keepalive
    pings, every 15 s, wake any client).
    """
    if port is None:
        argv = [PY, "-c", "import time\nwhile True:\n    time.sleep(0.1)"]
    else:
        argv = [PY, "-c", LISTENER, f"http://127.0.0.1:{port}/mcp"]
    poller = await trio.lowlevel.open_process(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE if port else None, env=ENV
    )
    try:
        if port is not None:
            assert poller.stdout is not None
            with trio.fail_after(STEP_TIMEOUT):
                await poller.stdout.receive_some(64)  # "listening"
            await trio.sleep(1.0)  # its start-up's last switches are not the window's
        before = Usage.of(a.proc.pid), Usage.of(poller.pid)
        await trio.sleep(window)  # the measurement window itself
        after = Usage.of(a.proc.pid), Usage.of(poller.pid)
    finally:
        poller.kill()
        await poller.wait()
    return UsageDelta.between(before[0], after[0]), UsageDelta.between(before[1], after[1])


async def one_change(a: Agentd, trigger_fd: int, progress: Progress) -> tuple[int, int]:
    """``burst(1)`` (``storm://0`` changes once); the routed events and deliveries for it."""
    os.write(trigger_fd, b"1\n")
    await progress.wait_line("done 1", timeout=STEP_TIMEOUT)
    _, spawn = await a.wait_for("subagent.spawn", lambda e: e.get("route") == "storm")
    await a.wait_for("subagent.exit", lambda e: e.get("agent") == spawn.ev["agent"])
    await trio.sleep(QUIET)  # a duplicate would arrive within this
    routed = a.count(
        "resource.updated", lambda e: e["uri"] == "storm://0" and e["kind"] == "updated" and e["route"]
    )
    return routed, a.count("route.deliver", lambda e: e["route"] == "storm")


async def soak_for(a: Agentd, seconds: float, case: Case) -> None:
    """Idle for ``seconds``: RSS every 30 s; any sign of a reconnect or a lost stream."""
    start = time.monotonic()
    proc = psutil.Process(a.proc.pid)
    while (elapsed := time.monotonic() - start) < seconds:
        case.soak.append((elapsed, proc.memory_info().rss))
        await trio.sleep(min(30.0, seconds - elapsed))  # sampling cadence of the soak itself
    case.soak.append((time.monotonic() - start, proc.memory_info().rss))
    for name in ("upstream.lost", "subscription.lost", "upstream.connect_failed"):
        if a.count(name):
            case.soak_trouble.append(f"{name} x{a.count(name)}")
    if a.count("server.state", lambda e: e["state"] != "connected"):
        case.soak_trouble.append("server.state not connected")


async def sdk_listen_floor(transport: str, n_uris: int) -> float:
    """ms from ``Client.listen`` with the N URIs to its acknowledgement, on the same server, from here."""
    uris = [f"storm://{i}" for i in range(n_uris)]
    if transport == "stdio":
        params = StdioServerParameters(command=PY, args=[str(STORM), "--uris", str(n_uris)], env=ENV)
        async with Client(params, mode=MODERN) as client:
            return await _time_listen(client, uris)
    async with http_server(["--uris", str(n_uris)]) as (url, _port), Client(url, mode=MODERN) as client:
        return await _time_listen(client, uris)


async def _time_listen(client: Client, uris: list[str]) -> float:
    await client.list_resources()  # the server is up and has answered once: only the listen is timed
    t0 = time.perf_counter()
    async with client.listen(resource_subscriptions=uris):
        return (time.perf_counter() - t0) * 1000


async def main(n_uris: int, window: float, transports: list[str], soak: float) -> None:
    print(f"bench_subscriptions: {machine_note()}; {n_uris} URIs, idle window {window:g} s, soak {soak:g} s")
    rows = []
    for transport in transports:
        full = await run_case(transport, n_uris, "storm://*", n_uris, window=window, change=True, soak=soak)
        few = await run_case(transport, n_uris, "storm://1?", 10, window=window, change=False, soak=0)
        floor_ms = await sdk_listen_floor(transport, n_uris)
        per_uri_rss = (full.rss - few.rss) / (n_uris - 10)
        per_uri_uss = (full.uss - few.uss) / (n_uris - 10)
        per_uri_hwm = (full.hwm - few.hwm) / (n_uris - 10)
        assert full.idle is not None
        assert full.floor_idle is not None
        rows.append(
            [
                transport,
                f"{full.failed} / {few.failed}",
                f"{fmt(full.to_subscribed_ms, 0)} (agentd's own: {fmt(full.synced_ms, 0)})",
                f"{fmt(floor_ms, 0)} ({fmt(full.to_subscribed_ms / floor_ms, 1)}x)",
                "-" if full.tcp is None else str(full.tcp),
                f"{full.idle.vol} (floor {full.floor_idle.vol}: {'an SDK listener' if full.tcp is not None else '100 ms poll'})",
                f"{full.rss / MiB:.1f} / {few.rss / MiB:.1f}",
                f"{per_uri_rss / 1024:.2f} / {per_uri_uss / 1024:.2f} / {per_uri_hwm / 1024:.2f}",
                f"{full.routed} / {full.delivered}",
            ]
        )
        if soak:
            first, last = full.soak[0][1], full.soak[-1][1]
            peak = max(r for _, r in full.soak)
            print(
                f"soak {transport}: {soak:g} s idle with {n_uris} URIs: RSS {first / MiB:.1f} -> "
                f"{last / MiB:.1f} MiB (peak {peak / MiB:.1f}); "
                f"{', '.join(full.soak_trouble) or 'no reconnect, no lost stream'}"
            )
    table(
        f"{n_uris} URIs on one server through one glob (the floor row: 10 URIs, same server)",
        [
            "transport",
            "refused (N / 10)",
            "server connected -> all subscribed, ms",
            "SDK listen floor, ms (ratio)",
            "TCP held idle",
            f"wake-ups in {window:g} s",
            "RSS MiB (N / 10)",
            "KiB per URI (RSS / USS / peak RSS)",
            "one change: routed / delivered",
        ],
        rows,
    )
    print(
        "goals: none refused; all subscribed <= 2000 ms; <= 2 TCP connections idle; 0 wake-ups idle; "
        "<= 2 KiB per URI; one change -> exactly 1 routed event"
    )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--uris", type=int, default=10_000)
    ap.add_argument("--window", type=float, default=20.0, help="idle window in seconds (default 20)")
    ap.add_argument("--transport", choices=("stdio", "http", "both"), default="both")
    ap.add_argument("--soak", type=float, default=0.0, help="idle soak per transport, seconds (default 0)")
    ns = ap.parse_args()
    transports = ["stdio", "http"] if ns.transport == "both" else [ns.transport]
    trio.run(main, ns.uris, ns.window, transports, ns.soak)
