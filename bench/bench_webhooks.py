"""Webhooks: a delivery POST → the spawned agent's model request, and deliveries accepted per second.

Run: ``/work/venv/bin/python bench/bench_webhooks.py [-n 20] [--seconds 10]`` (about 2 minutes).

**Latency** (``--latency``). agentd ``--mode reactive`` runs ``agentd serve
webhook`` as its stdio server (a GitHub source) with a spawn route on
``webhook://github/event/*``, debounce 0, and an ``openai:`` model at a
loopback fake provider (``tests/fakes/provider_server.py``) that answers
``NO_REPLY``. Per sample, this process POSTs one signed delivery on a fresh
connection (as GitHub does) and notes, on its own clock: the 200 (the
delivery is on disk), and the arrival of the spawned agent's request at the
provider. A sample starts once the previous agent exited. The floor, in the
same run: a bare ``http.server`` in its own process whose POST handler
appends the body to a file and ``fdatasync``s it before answering 200,
POSTed the same way. Goal: POST → request p50 ≤ 20 ms at load ≤ 2.

**Throughput** (``--throughput``). ``agentd serve webhook`` alone (no MCP
client), C senders each POSTing signed deliveries back to back on fresh
connections for ``--seconds``; deliveries answered 200 per second, and how
many ``fdatasync`` calls they took (the group commit lets concurrent
deliveries share one). The floor: a bare loop in this process that appends a
line of the same size and ``fdatasync``s, once per delivery. Goal: ≥ 0.5× the
floor. Beside it, under the same senders: a bare ``http.server`` that syncs
each POST, and a ceiling, the least a trio server can do per delivery (no
HTTP parsing beyond Content-Length, no checks, the group commit in its event
loop): what no server built on trio's sockets would beat on this machine.
``--senders 1,8,32`` chooses the concurrency. Every delivery is durable (its line ``fdatasync``ed) before its 200;
concurrent ones share a sync (group commit), so the table says how many
``fdatasync`` calls a delivery took ("fdatasyncs per delivery": 1.00 with one
sender, less with eight).

The printout ends with the two goals, each with its figure, its floor and the
load average.

``--timeline FILE`` (latency): the marks of agentd, the server and the child
(rfcs/0231) in FILE, and each stage's median: where the time between the POST
and the agent's request goes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil
import trio
from _util import PY, REPO, STEP_TIMEOUT, fmt, machine_note, p50, pct, run_agentd, table

sys.path.insert(1, str(REPO))  # tests.support.webhooks: signing; tests.fakes: the provider

from tests.support.webhooks import (
    SECRET_ENV,
    dumps,
    free_port,
    github_headers,
    github_issue_labeled,
    post,
)

WARMUP = 5
BODY = dumps(github_issue_labeled())

FLOOR_SERVER = textwrap.dedent(
    """
    import os, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            os.write(fd, body + b"\\n")
            os.fdatasync(fd)
            out = b'{"ok":true}\\n'
            self.send_response(200)
            self.send_header("Content-Length", str(len(out)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(out)
        def log_message(self, *a):
            pass
    server = HTTPServer(("127.0.0.1", 0), H)
    print(server.server_address[1], flush=True)
    server.serve_forever()
    """
)

#: The least a trio server can do per delivery: accept in batches, take a request that arrived whole
#: where it is (no task per connection), no HTTP parsing beyond the end of the head and
#: Content-Length, no checks, the group commit in the event loop. Not a server anyone should run:
#: a ceiling for what agentd's server (its HTTP reading, the signature and body checks, the log's
#: records, dedupe) could reach on this machine under the same senders.
CEILING_SERVER = textwrap.dedent(
    """
    import os, socket, sys, trio
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    OK = b"HTTP/1.1 200 OK\\r\\nContent-Length: 0\\r\\nConnection: close\\r\\n\\r\\n"
    pending, socks, wake = [], [], [trio.Event()]
    def whole(buf):
        head, sep, body = buf.partition(b"\\r\\n\\r\\n")
        if not sep:
            return None
        i = head.lower().find(b"content-length:") + 15
        j = head.find(b"\\r\\n", i)
        return body if len(body) >= int(head[i:] if j < 0 else head[i:j]) else None
    def take(sock, body):
        pending.append(body + b"\\n"); socks.append(sock); wake[0].set()
    async def committer():
        while True:
            await wake[0].wait()
            wake[0] = trio.Event()
            batch, done = b"".join(pending), list(socks)
            pending.clear(); socks.clear()
            os.write(fd, batch); os.fdatasync(fd)
            for sock in done:
                try:
                    sock.send(OK)
                except OSError:
                    pass
                sock.close()
    async def rest(sock, buf):
        while (body := whole(buf)) is None:
            await trio.lowlevel.wait_readable(sock)
            data = sock.recv(65536)
            if not data:
                sock.close()
                return
            buf += data
        take(sock, body)
    async def main():
        listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        listener.setblocking(False)
        print(listener.getsockname()[1], flush=True)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(committer)
            while True:
                await trio.lowlevel.wait_readable(listener)
                for _ in range(64):
                    try:
                        sock, _ = listener.accept()
                    except BlockingIOError:
                        break
                    sock.setblocking(False)
                    try:
                        buf = sock.recv(65536)
                    except BlockingIOError:
                        buf = b""
                    body = whole(buf)
                    if body is None:
                        nursery.start_soon(rest, sock, buf)
                    else:
                        take(sock, body)
    trio.run(main)
    """
)

WAKE_CONFIG = """
mode = "reactive"
model = "openai:gpt-4o-mini"
subscribe = ["webhook:webhook://github/event/*"]

[[routes]]
name = "github"
match = "webhook://github/event/*"
disposition = "spawn"
debounce = "0"
template = "{{uri}}"

[servers.webhook]
command = "{py}"
args = ["-m", "agentd", "serve", "webhook", "--listen", "127.0.0.1:{port}", "--dir", "{dir}",
        "--source", "github=github,secret_env=GITHUB_WEBHOOK_SECRET"]
env = {{ GITHUB_WEBHOOK_SECRET = "${{GITHUB_WEBHOOK_SECRET}}", PYTHONPATH = "{repo}"{timeline} }}
required = true
"""


async def floor_latency(tmp: Path, n: int) -> list[float]:
    """POST → 200 of a bare http.server that appends and fdatasyncs."""
    proc = await trio.lowlevel.open_process(
        [PY, "-c", FLOOR_SERVER, str(tmp / "floor.log")], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    try:
        assert proc.stdout is not None
        with trio.fail_after(STEP_TIMEOUT):
            port = int((await proc.stdout.receive_some()).decode().split()[0])
        out = []
        for i in range(WARMUP + n):
            t0 = time.perf_counter()
            reply = await post(port, "/", BODY, {"Content-Type": "application/json"})
            assert reply.status == 200
            if i >= WARMUP:
                out.append(time.perf_counter() - t0)
        return out
    finally:
        proc.kill()
        await proc.wait()


async def wake_latency(tmp: Path, n: int, timeline: Path | None = None) -> tuple[list[float], list[float]]:
    """(POST → 200, POST → the spawned agent's request at the provider) per sample.

    ``timeline``: agentd's and the server's marks (rfcs/0231) go to this file, with the
    sample's start (``bench.t0``) and the provider's receipt (``provider.received``).
    """
    from _providers import TIMELINE_ENV, fake_provider, provider_env
    from _providers import mark as timeline_mark

    from tests.fakes.provider_server import openai_reply

    stamps: list[float] = []
    arrived = trio.Event()

    def answer(request: Any) -> Any:
        stamps.append(time.perf_counter())
        timeline_mark("provider.received")
        arrived.set()
        return openai_reply("NO_REPLY")

    port = free_port()
    cfg = tmp / "wake.toml"
    # A stdio server gets only the variables its env table names: the timeline's too.
    marks = f', AGENTD_TIMELINE = "{timeline}"' if timeline is not None else ""
    cfg.write_text(WAKE_CONFIG.format(py=PY, port=port, dir=tmp / "deliveries", repo=REPO, timeline=marks))
    answered: list[float] = []
    requested: list[float] = []
    async with fake_provider("openai", None) as (_fake, server):
        server._handler = answer
        env = {**provider_env("openai", server.base_url, tmp), **SECRET_ENV}
        if timeline is not None:
            env[TIMELINE_ENV] = str(timeline)
        async with run_agentd(["--config", str(cfg)], env=env) as a:
            await a.wait_for("reactor.start")
            for i in range(WARMUP + n):
                arrived = trio.Event()
                before = len(stamps)
                mark = len(a.lines)
                timeline_mark("bench.t0")
                t0 = time.perf_counter()
                with trio.fail_after(STEP_TIMEOUT):
                    reply = await post(port, "/hooks/github", BODY, github_headers(BODY, f"bench-{i}"))
                    t_ok = time.perf_counter()
                    assert reply.status == 200, reply
                    while len(stamps) == before:
                        await arrived.wait()
                    await a.wait_for("subagent.exit", after=mark)
                if i >= WARMUP:
                    answered.append(t_ok - t0)
                    requested.append(stamps[before] - t0)
            await a.stop_and_wait()
    return answered, requested


def floor_throughput(tmp: Path, seconds: float) -> float:
    """Appends of a delivery-sized line, each followed by fdatasync, per second (this process)."""
    line = b'{"v":1,"id":"00000000-0000-0000-0000-000000000000","body":' + BODY + b"}\n"
    fd = os.open(tmp / "floor-loop.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        count, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            os.write(fd, line)
            os.fdatasync(fd)
            count += 1
        return count / (time.perf_counter() - t0)
    finally:
        os.close(fd)


async def _send_for(
    tmp: Path, port: int, path: str, seconds: float, senders: int
) -> tuple[int, float, float]:
    """``senders`` sender processes (bench/_sender.py) POSTing signed deliveries back to back on fresh
    connections for ``seconds``: (answered 200, elapsed, the senders' CPU seconds)."""
    headers = {k: v for k, v in github_headers(BODY, "").items() if k != "X-GitHub-Delivery"}
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {len(BODY)}\r\n"
        "Connection: close\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "X-GitHub-Delivery: "
    )
    (tmp / "head.bin").write_bytes(head.encode())
    (tmp / "tail.bin").write_bytes(b"\r\n\r\n" + BODY)
    start = time.time() + 0.5  # every sender started and waiting
    files = [str(tmp / "head.bin"), str(tmp / "tail.bin")]
    argv = [PY, str(REPO / "bench" / "_sender.py"), str(port), repr(start), str(seconds)]
    procs = [
        await trio.lowlevel.open_process(
            [*argv, f"s{k}", *files], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL
        )
        for k in range(senders)
    ]
    done = other = 0
    cpu = 0.0
    with trio.fail_after(seconds + STEP_TIMEOUT):
        for proc in procs:
            assert proc.stdout is not None
            out = b""
            while chunk := await proc.stdout.receive_some():
                out += chunk
            assert await proc.wait() == 0, f"a sender failed (exit {proc.returncode})"
            ok, bad, used = out.split()
            done, other, cpu = done + int(ok), other + int(bad), cpu + float(used)
    assert other == 0, f"{other} deliveries were not answered 200"
    return done, seconds, cpu


def _cpu(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


async def server_throughput(tmp: Path, seconds: float, senders: int) -> tuple[float, int, int, float, float]:
    """(deliveries answered 200 per second, deliveries, fdatasync calls, server CPU ms per delivery,
    the senders' CPU ms per delivery)."""
    from mcp import Client

    from tests.support.webhooks import webhook_argv, webhook_server

    argv = webhook_argv(str(tmp / f"tput-{senders}"), "--retain-count", "1000000")
    async with webhook_server(argv) as srv:
        for i in range(WARMUP):
            await post(srv.hooks_port, "/hooks/github", BODY, github_headers(BODY, f"warm-{i}"))
        cpu0 = _cpu(srv.proc.pid)
        done, elapsed, sending = await _send_for(tmp, srv.hooks_port, "/hooks/github", seconds, senders)
        cpu = _cpu(srv.proc.pid) - cpu0
        async with Client(srv.mcp_url) as client:
            status = json.loads((await client.read_resource("webhook://status")).contents[0].text)  # type: ignore[union-attr]
        syncs = int(status["sources"]["github"]["syncs"])
        return done / elapsed, done, syncs, 1000 * cpu / max(done, 1), 1000 * sending / max(done, 1)


async def http_floor_throughput(
    tmp: Path, seconds: float, senders: int, server: str = FLOOR_SERVER
) -> tuple[float, float, float]:
    """A bare server (``server``: the http.server, or the trio ceiling) under the same senders:
    (per second, its CPU ms per request, the senders' CPU ms per request)."""
    proc = await trio.lowlevel.open_process(
        [PY, "-c", server, str(tmp / f"floor-{senders}-{len(server)}.log")],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        with trio.fail_after(STEP_TIMEOUT):
            port = int((await proc.stdout.receive_some()).decode().split()[0])
        cpu0 = _cpu(proc.pid)
        done, elapsed, sending = await _send_for(tmp, port, "/", seconds, senders)
        return done / elapsed, 1000 * (_cpu(proc.pid) - cpu0) / max(done, 1), 1000 * sending / max(done, 1)
    finally:
        proc.kill()
        await proc.wait()


async def main(args: argparse.Namespace) -> None:
    print(f"bench_webhooks: {machine_note()}")
    goals: list[str] = []
    with tempfile.TemporaryDirectory() as raw:
        tmp = Path(raw)
        if args.latency:
            floor = await floor_latency(tmp, args.n)
            path = None
            if args.timeline:
                from _providers import reopen_timeline

                path = Path(args.timeline)
                reopen_timeline(path)
            answered, requested = await wake_latency(tmp, args.n, path)
            if path is not None:
                from _timeline import report

                report(path, "POST → the spawned agent's request", skip=WARMUP)
            ms = 1000.0
            rows = [
                ["bare http.server + fdatasync: POST → 200 (floor)", fmt(p50(floor) * ms), fmt(pct(floor, 95) * ms), "1.00"],
                ["agentd serve webhook: POST → 200 (durable)", fmt(p50(answered) * ms), fmt(pct(answered, 95) * ms),
                 fmt(p50(answered) / p50(floor))],
                ["POST → the spawned agent's request at the provider", fmt(p50(requested) * ms),
                 fmt(pct(requested, 95) * ms), fmt(p50(requested) / p50(floor))],
            ]  # fmt: skip
            table(f"latency, n={args.n} (+{WARMUP} warm-up), ms", ["path", "p50", "p95", "p50 ÷ floor"], rows)
            goals.append(
                f"goal 1: POST → the spawned agent's request at the provider, p50 ≤ 20 ms at load ≤ 2: "
                f"{fmt(p50(requested) * ms)} ms (the 200 itself {fmt(p50(answered) * ms)} ms; floor, a bare "
                f"http.server + fdatasync POST → 200: {fmt(p50(floor) * ms)} ms); "
                f"{'met' if p50(requested) * ms <= 20 else 'not met'} at {machine_note()}"
            )
        if args.throughput:
            floor_rate = floor_throughput(tmp, args.seconds)
            rows = [["append + fdatasync loop (floor)", fmt(floor_rate, 0), "1.00", "1.00", "", ""]]
            ratios: dict[int, tuple[float, float, float]] = {}
            ceilings: dict[int, float] = {}
            for senders in args.senders:
                http_rate, http_cpu, http_send = await http_floor_throughput(tmp, args.seconds, senders)
                rows.append(
                    [f"bare http.server + fdatasync, {senders} sender(s)", fmt(http_rate, 0),
                     fmt(http_rate / floor_rate), "1.00", fmt(http_cpu), fmt(http_send)]
                )  # fmt: skip
                top = await http_floor_throughput(tmp, args.seconds, senders, CEILING_SERVER)
                ceilings[senders] = top[0] / floor_rate
                rows.append(
                    [f"ceiling: least trio server + group commit, {senders} sender(s)", fmt(top[0], 0),
                     fmt(top[0] / floor_rate), "", fmt(top[1]), fmt(top[2])]
                )  # fmt: skip
                rate, done, syncs, cpu, sending = await server_throughput(tmp, args.seconds, senders)
                per_delivery = syncs / max(done + WARMUP, 1)
                ratios[senders] = (rate, rate / floor_rate, per_delivery)
                rows.append(
                    [f"agentd serve webhook, {senders} sender(s)", fmt(rate, 0), fmt(rate / floor_rate),
                     fmt(per_delivery), fmt(cpu), fmt(sending)]
                )  # fmt: skip
            table(
                f"deliveries per second, {args.seconds:g} s each (sender processes, bench/_sender.py)",
                ["what", "per s", "÷ floor", "fdatasyncs per delivery", "server CPU ms per delivery",
                 "senders' CPU ms per delivery"],
                rows,
            )  # fmt: skip
            best = max(r for _, r, _ in ratios.values())
            goals.append(
                f"goal 2: deliveries answered 200 per second, each fdatasync'd before its 200, ≥ 0.5× the "
                f"append + fdatasync loop (floor {fmt(floor_rate, 0)}/s): "
                + "; ".join(
                    f"{n} sender{'s' if n > 1 else ''} {fmt(rate, 0)}/s = {fmt(r)}× ({fmt(per)} fdatasyncs per "
                    f"delivery; the least trio server under the same senders {fmt(ceilings[n])}×)"
                    for n, (rate, r, per) in sorted(ratios.items())
                )
                + f"; {'met' if best >= 0.5 else 'not met'} at {machine_note()}"
            )
        print()
        for line in goals:
            print(line)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=20, help="latency samples (default 20)")
    ap.add_argument("--seconds", type=float, default=10.0, help="throughput: seconds per run (default 10)")
    ap.add_argument(
        "--senders",
        type=lambda v: [int(x) for x in v.split(",")],
        default=[1, 8],
        help="throughput: concurrent senders per run, comma-separated (default 1,8)",
    )
    ap.add_argument("--latency", action="store_true", help="only the latency part")
    ap.add_argument("--throughput", action="store_true", help="only the throughput part")
    ap.add_argument(
        "--timeline",
        metavar="FILE",
        help="latency: write the marks of agentd and the server (AGENTD_TIMELINE) to FILE and print the stages",
    )
    parsed = ap.parse_args()
    if not parsed.latency and not parsed.throughput:
        parsed.latency = parsed.throughput = True
    trio.run(main, parsed)
