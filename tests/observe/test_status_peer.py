"""``agentd status`` against whatever listens on ``--addr`` (fault catalog ST5, issue 37 item 3).

A loopback server in the test plays a peer that is not agentd's health
port, or a broken one: a status document of the wrong shape, an answer
that never ends, an answer trickled a byte a second, an answer that is not
HTTP. The real ``agentd status`` ends each with one line that says what
was wrong and exit 1: no traceback, memory bounded
(32 MiB), the whole exchange
bounded in time (:data:`~agentd.cli._status.REQUEST_TIMEOUT`). Was: a
traceback, an unbounded read, and a wait far past the 5 s bound.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Awaitable, Callable

import pytest
import trio

from agentd.cli._status import REQUEST_TIMEOUT
from tests.support.agentd_proc import REPO, agentd_cmd

pytestmark = pytest.mark.fault

MAX_RESPONSE_BYTES = 32 * 1024 * 1024
"""What ``agentd status`` reads of an answer at most (``agentd.cli._status.MAX_RESPONSE_BYTES``)."""
COMMAND = 60.0
"""Bound on one ``agentd status`` command (its imports on a loaded machine, and its own 5 s bound)."""

Peer = Callable[[trio.SocketStream], Awaitable[None]]


def _head(extra: str = "") -> bytes:
    return f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n{extra}\r\n".encode()


async def _request(stream: trio.SocketStream) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some(4096)
        if not chunk:
            return
        data += chunk


def _document(**fields: object) -> bytes:
    return json.dumps({"schema": "agentd.status/1", "version": "0", **fields}).encode()


def wrong_shape(fields: dict[str, object]) -> Peer:
    async def peer(stream: trio.SocketStream) -> None:
        await _request(stream)
        body = _document(**fields)
        await stream.send_all(_head(f"Content-Length: {len(body)}\r\n") + body)

    return peer


async def endless(stream: trio.SocketStream) -> None:
    await _request(stream)
    await stream.send_all(_head() + b'{"schema": "agentd.status/1", "pad": "')
    block = b"x" * (1 << 20)
    sent = 0
    while sent <= 4 * MAX_RESPONSE_BYTES:  # bounded here too: far past what the reader may take
        await stream.send_all(block)
        sent += len(block)


async def trickled(stream: trio.SocketStream) -> None:
    await _request(stream)
    body = _document()
    await stream.send_all(_head(f"Content-Length: {len(body)}\r\n"))
    for byte in body:  # a byte a second: every single read is well inside the 5 s bound
        await stream.send_all(bytes([byte]))
        await trio.sleep(1)  # the hostile peer's pace (what it does), not a wait for a condition


async def infinity(stream: trio.SocketStream) -> None:
    """JSON's ``Infinity``, which Python's ``json.loads`` takes (and the view's arithmetic does not)."""
    await _request(stream)
    body = _document(uptime_s=0).replace(b'"uptime_s": 0', b'"uptime_s": Infinity')
    await stream.send_all(_head(f"Content-Length: {len(body)}\r\n") + body)


async def not_http(stream: trio.SocketStream) -> None:
    await _request(stream)
    await stream.send_all(b"SSH-2.0-OpenSSH_9.6\r\n")


CASES: list[tuple[str, Peer, str]] = [
    (
        "agents-not-objects",
        wrong_shape({"agents": [1, 2]}),
        "wrong shape ('agents' is not a list of objects)",
    ),
    ("budget-a-list", wrong_shape({"budget": [1]}), "wrong shape ('budget' is not an object)"),
    ("unhashable-id", wrong_shape({"agents": [{"id": [1]}]}), "wrong shape (an agent's 'id' is not a name)"),
    (
        "woken-by-numbers",
        wrong_shape({"agents": [{"id": "a", "woken_by": [1]}]}),
        "'woken_by' is not a list of URIs",
    ),
    ("infinite-number", infinity, "not agentd's status"),
    ("endless", endless, f"answered more than {MAX_RESPONSE_BYTES // (1024 * 1024)} MiB"),
    ("trickled", trickled, f"did not answer whole within {REQUEST_TIMEOUT:g} s"),
    ("not-http", not_http, "does not speak HTTP"),
]


@pytest.mark.parametrize(("what", "peer", "message"), CASES, ids=[c[0] for c in CASES])
async def test_st5_status_from_a_peer_that_is_not_agentd_is_one_line_and_bounded(
    what: str, peer: Peer, message: str
) -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]

    async def handler(stream: trio.SocketStream) -> None:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await peer(stream)  # agentd status may cut it off: what it should do

    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_listeners, handler, listeners)
        started = trio.current_time()
        with trio.fail_after(COMMAND):
            done = await trio.run_process(
                agentd_cmd("status", "--addr", f"127.0.0.1:{port}"),
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                env={**env, "PYTHONPATH": str(REPO)},
                stdin=subprocess.DEVNULL,
            )
        took = trio.current_time() - started
        nursery.cancel_scope.cancel()
    lines = done.stderr.decode().splitlines()
    assert done.returncode == 1, done.stderr.decode()
    assert len(lines) == 1, lines
    assert lines[0].startswith("agentd: error: status: "), lines
    assert message in lines[0], lines
    assert "fix:" in lines[0]
    assert done.stdout == b""
    if what == "trickled":
        # The bound is on the whole answer: cut at 5 s, not after 5 s without a byte (the body is ~50 s).
        assert took < COMMAND
