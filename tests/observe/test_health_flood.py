"""Fault catalog: hostile clients on the health port cannot starve the probes.

Runs the real ``agentd`` command (a reactive daemon with the bundled memo
server) with ``--health-addr`` and ``/metrics`` on the same port, started with
a low soft open-files limit (256) as many hosts give a process. A thousand
connections are held open against it: idle ones that never send a byte,
slowloris ones that drip one byte a second, and ones that send a request and
never read the answer. Meanwhile ``/healthz``, ``/readyz`` and ``/metrics``
must each be answered while every hostile connection is still open (before the
server's first read deadline could free a slot: a starved probe waits for
that), and every hostile connection must be closed by the server's own
deadlines. How fast the probes answer (the kubelet's one second) is printed,
not asserted: on a busy 2-core machine a scheduling stall is not starvation.
"""

from __future__ import annotations

import json
import resource
from pathlib import Path

import pytest
import trio

from agentd.observe import health
from tests.support.agentd_proc import PY, Agentd, run_agentd, script
from tests.support.leftovers import tagged_env

pytestmark = [pytest.mark.fault, pytest.mark.realclock, pytest.mark.slow]


#: agentd's soft open-files limit at exec (a common default is 1024; lower shows the raise matters).
START_SOFT_NOFILE = 256

IDLE, SLOW, UNREAD = 500, 300, 200

#: Slack on the server's per-connection deadline (read 5 s + write 5 s) on a busy 2-core box.
CLOSE_SLACK_S = 5.0


def _low_nofile() -> None:  # runs in the child between fork and exec
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (START_SOFT_NOFILE, hard))


def _ensure_test_fds(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            pytest.skip(f"the test needs {needed} file descriptors; the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


async def _request(port: int, path: str) -> tuple[float, bytes]:
    """One request on a fresh connection; returns (seconds to the whole answer, answer)."""
    start = trio.current_time()
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            out = bytearray()
            while chunk := await stream.receive_some(65536):
                out += chunk
    return trio.current_time() - start, bytes(out)


async def _closed_by_server(stream: trio.SocketStream, closed: list[float], t0: float) -> None:
    """Read until the server closes the connection; record when."""
    try:
        while await stream.receive_some(65536):
            pass
    except trio.BrokenResourceError:
        pass
    closed.append(trio.current_time() - t0)


async def _drip(stream: trio.SocketStream) -> None:
    """Slowloris: one byte of a request head a second, for as long as the server keeps the socket."""
    head = b"GET /healthz HTTP/1.1\r\nX-Slow: " + b"a" * 1000
    for byte in head:
        try:
            await stream.send_all(bytes([byte]))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return
        await trio.sleep(1.0)  # the attack's own rhythm, not a wait for a condition


async def test_probes_are_answered_while_1000_hostile_connections_are_open(tmp_path: Path) -> None:
    _ensure_test_fds(IDLE + SLOW + UNREAD + 256)
    memo = tmp_path / "notes.json"
    memo.write_text(json.dumps({"todo": "milk"}))
    model = script(tmp_path, [{"text": "noted"}])
    args = [
        "--mode", "reactive", "--model", model,
        "--mcp-stdio", f"memo={PY} -m agentd serve memo --file {memo}",
        "--subscribe", "memo:memo://notes", "--route", "memo://notes=spawn",
        "--health-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0",
        "react to the memo",
    ]  # fmt: skip
    async with run_agentd(args, env=tagged_env(tmp_path), preexec_fn=_low_nofile) as a:
        started = await a.wait_event("supervisor.start")
        # agentd raised its own soft limit to the hard one, so a flood cannot run it out of descriptors.
        # (Its connection limit is half of it: all 1,000 fit, none needs evicting.)
        assert started["open_files"] >= 2 * (IDLE + SLOW + UNREAD), started
        port = (await a.wait_event("health.listening"))["port"]
        await a.wait_event("ready.changed", lambda e: e["ready"])
        await _flood_and_probe(a, port)
        a.signal()
        assert await a.wait_exit() == 0, a.tail()


async def _flood_and_probe(a: Agentd, port: int) -> None:
    closed: list[float] = []
    t0 = trio.current_time()
    streams: list[trio.SocketStream] = []
    try:
        await _flood(a, port, streams, closed, t0)
    finally:
        for stream in streams:
            stream.socket.close()
    assert len(closed) == IDLE + SLOW + UNREAD
    # The daemon still works: a probe after the flood, and no telemetry line about it.
    took, answer = await _request(port, "/healthz")
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert took < health.READ_TIMEOUT, took
    assert not a.find("supervisor.internal_error")


async def _flood(
    a: Agentd, port: int, streams: list[trio.SocketStream], closed: list[float], t0: float
) -> None:
    async with trio.open_nursery() as nursery:
        with trio.fail_after(30):
            for i in range(IDLE + SLOW + UNREAD):
                stream = await trio.open_tcp_stream("127.0.0.1", port)
                streams.append(stream)
                if IDLE <= i < IDLE + SLOW:
                    nursery.start_soon(_drip, stream)
                elif i >= IDLE + SLOW:
                    # A full request whose answer is never read (the kernel buffers it).
                    await stream.send_all(b"GET /metrics HTTP/1.1\r\n\r\n")
        opened_at = trio.current_time()
        # Every hostile connection is open now; the probes go through all the same.
        timings: dict[str, float] = {}
        for path, first_line in [
            ("/healthz", b"HTTP/1.1 200 OK"),
            ("/readyz", b"HTTP/1.1 200 OK"),
            ("/metrics", b"HTTP/1.1 200 OK"),
        ]:
            took, answer = await _request(port, path)
            assert answer.split(b"\r\n", 1)[0] == first_line, answer[:200]
            timings[path] = round(took, 3)
        # Answered before any read deadline could have freed a slot (the flood is still whole):
        # a server that queued the probes behind the hostile connections would answer only after.
        assert trio.current_time() - opened_at < health.READ_TIMEOUT, ("probes waited for the flood", timings)
        print(f"probe answer times under {IDLE + SLOW + UNREAD} hostile connections: {timings}")

        # The server's own deadlines close every hostile connection (read 5 s; write 5 s).
        with trio.fail_after(health.READ_TIMEOUT + health.WRITE_TIMEOUT + CLOSE_SLACK_S):
            async with trio.open_nursery() as readers:
                for stream in streams:
                    readers.start_soon(_closed_by_server, stream, closed, t0)
        nursery.cancel_scope.cancel()
