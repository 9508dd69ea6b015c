"""The webhook intake's two ways of reading a connection give the same answers, durable before 200.

A connection whose request has arrived whole when it is accepted is handled at
once (``whole_on_arrival``: :mod:`agentd.servers.webhook.wire`, no task); any
other is read by a task with h11 (``streamed``). Which one a connection takes
depends on timing a real client does not control, so these tests choose it:
the listener's own accept loop idles on a socket nobody connects to, and each
test hands it connections from a second listening socket, accepted after the
client's request is in the server's receive buffer (``arrived``) or before the
client has written a byte (``streamed``). Real loopback TCP, the real store on
real files, its group commit running.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pytest
import trio
import trio.testing

from agentd.servers.webhook import store as store_module
from agentd.servers.webhook.listener import Limits, Listener, bind
from agentd.servers.webhook.sources import Credential, SourceSpec
from agentd.servers.webhook.store import DeliveryStore, Step
from tests.support.webhooks import GITHUB_SECRET, dumps, github_headers, github_issue_labeled

SPEC = SourceSpec("github", "github", secret=Credential((GITHUB_SECRET.encode(),), "$GITHUB_WEBHOOK_SECRET"))
BODY = dumps(github_issue_labeled())


def body_of(delivery: str) -> bytes:
    """A delivery's own body: GitHub's bodies differ from event to event (the same signed body under
    another delivery id is a replay, answered as a duplicate, rfcs/0374)."""
    return dumps({**github_issue_labeled(), "test_delivery": delivery})


BOUND = 30.0
"""Seconds for any one step (a sync on a busy disk included)."""

Way = str
WAYS = ["arrived", "streamed"]


def request(
    delivery: str,
    *,
    body: bytes | None = None,
    path: str = "/hooks/github",
    method: str = "POST",
    version: str = "1.1",
    close: bool = True,
    secret: str = GITHUB_SECRET,
    extra: tuple[str, ...] = (),
) -> bytes:
    body = body_of(delivery) if body is None else body
    headers = github_headers(body, delivery, secret=secret)
    lines = [f"{method} {path} HTTP/{version}", f"Content-Length: {len(body)}"]
    if version == "1.1":
        lines.append("Host: hooks.example")
    if close:
        lines.append("Connection: close")
    lines += [f"{k}: {v}" for k, v in headers.items()]
    lines += extra
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: dict[str, object]


@dataclass
class Intake:
    listener: Listener
    store: DeliveryStore
    feed: socket.socket
    """Where test clients connect; the test accepts and hands the connection to the listener."""
    steps: list[str] = field(default_factory=list)
    clients: list[socket.socket] = field(default_factory=list)

    async def connect(self, way: Way, data: bytes) -> socket.socket:
        """A client connection carrying ``data``, handed to the listener the ``way`` chosen."""
        client = socket.create_connection(self.feed.getsockname()[:2])
        self.clients.append(client)
        client.setblocking(False)
        server, _ = self.feed.accept()
        if way == "arrived":
            client.sendall(data)  # loopback: in the server's receive buffer when sendall returns
            assert len(server.recv(1 << 20, socket.MSG_PEEK)) == len(data), "the request did not arrive whole"
            self.listener.take(server)
        else:
            self.listener.take(server)  # nothing to read yet: a task waits for it
            await send_all(client, data)
        return client


async def send_all(sock: socket.socket, data: bytes) -> None:
    view = memoryview(data)
    while view:
        await trio.lowlevel.wait_writable(sock)
        try:
            view = view[sock.send(view) :]
        except BlockingIOError:
            continue


async def read_answer(sock: socket.socket, buf: bytearray | None = None) -> Answer:
    """One HTTP answer from ``sock`` (``buf``: bytes read already, left holding what follows it)."""
    data = buf if buf is not None else bytearray()
    with trio.fail_after(BOUND):
        while b"\r\n\r\n" not in data:
            await _more(sock, data)
        head, _, rest = bytes(data).partition(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
        length = int(headers["content-length"])
        data[:] = rest
        while len(data) < length:
            await _more(sock, data)
    body = bytes(data[:length])
    del data[:length]
    return Answer(int(status_line.split()[1]), headers, orjson.loads(body))


async def _more(sock: socket.socket, data: bytearray) -> None:
    await trio.lowlevel.wait_readable(sock)
    try:
        chunk = sock.recv(65536)
    except BlockingIOError:
        return
    if not chunk:
        raise ConnectionError(f"closed after {bytes(data)!r}")
    data += chunk


async def closed(sock: socket.socket) -> bool:
    """Whether the server closed its side (EOF next)."""
    with trio.fail_after(BOUND):
        await trio.lowlevel.wait_readable(sock)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


@asynccontextmanager
async def intake(
    tmp_path: Path,
    *,
    limits: Limits | None = None,
    segment_bytes: int | None = None,
    hook: Callable[[Step], None] | None = None,
) -> AsyncIterator[Intake]:
    steps: list[str] = []

    def step(at: Step) -> None:
        steps.append(at)
        if hook is not None:
            hook(at)

    extra = {} if segment_bytes is None else {"segment_bytes": segment_bytes}
    store = DeliveryStore(SPEC, str(tmp_path / "github"), step_hook=step, **extra)  # type: ignore[arg-type]
    store.open()
    listener = Listener(bind("127.0.0.1", 0), {"github": (SPEC, store)}, limits or Limits())
    feed = socket.create_server(("127.0.0.1", 0))
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.run)
            nursery.start_soon(listener.run)
            await trio.testing.wait_all_tasks_blocked()
            it = Intake(listener, store, feed, steps)
            try:
                yield it
            finally:
                for client in it.clients:
                    client.close()
            nursery.cancel_scope.cancel()
    finally:
        feed.close()
        store.close()


def counted(intake: Intake, way: Way) -> None:
    """The connections went the way the test chose."""
    if way == "arrived":
        assert intake.listener.whole_on_arrival >= 1
    else:
        assert intake.listener.streamed >= 1
        assert intake.listener.whole_on_arrival == 0


@pytest.mark.parametrize("way", WAYS)
async def test_a_delivery_is_answered_200_once_durable_and_a_retry_is_a_duplicate(
    tmp_path: Path, way: Way
) -> None:
    async with intake(tmp_path) as it:
        client = await it.connect(way, request("d-1"))
        answer = await read_answer(client)
        assert (answer.status, answer.body) == (200, {"ok": True, "id": "d-1", "duplicate": False})
        assert answer.headers["connection"] == "close"
        assert await closed(client)
        assert it.steps[:2] == ["written", "synced"]
        record = it.store.read("d-1")
        assert record is not None
        assert record.body == orjson.loads(body_of("d-1"))
        retry = await it.connect(way, request("d-1"))
        assert (await read_answer(retry)).body == {"ok": True, "id": "d-1", "duplicate": True}
        assert await closed(retry)
        assert (it.store.counters.accepted, it.store.counters.duplicates) == (1, 1)
        counted(it, way)
        assert it.listener.active == 0


@pytest.mark.parametrize("way", WAYS)
async def test_no_answer_leaves_before_the_sync(tmp_path: Path, way: Way) -> None:
    seen: list[tuple[str, bytes | None]] = []
    running: list[Intake] = []

    def peek(at: Step) -> None:  # runs inside the store, at each step of the delivery
        try:
            got: bytes | None = running[0].clients[0].recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            got = None
        seen.append((at, got))

    async with intake(tmp_path, hook=peek) as it:
        running.append(it)
        client = await it.connect(way, request("d-1"))
        assert (await read_answer(client)).status == 200
    assert seen[:2] == [("written", None), ("synced", None)]


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize(
    ("data", "status", "reason"),
    [
        (request("d-1", secret="wrong"), 401, "does not match"),
        (request("d-1", path="/hooks/nope"), 404, "no webhook source"),
        (request("d-1", body=b"[" * 70 + b"]" * 70), 400, "nests deeper"),
        (request("d-1", body=b'{"a": "\xff"}'), 400, "not valid JSON"),
        (request("d-1", body=b"x" * 2048), 413, "over this endpoint's limit"),
    ],
    ids=["bad-signature", "no-such-source", "deep-json", "invalid-utf8", "too-large"],
)
async def test_refusals_are_the_same_either_way_and_store_nothing(
    tmp_path: Path, way: Way, data: bytes, status: int, reason: str
) -> None:
    async with intake(tmp_path, limits=Limits(max_body=1024)) as it:
        client = await it.connect(way, data)
        answer = await read_answer(client)
        assert answer.status == status
        assert reason in str(answer.body["error"])
        assert await closed(client)
        assert it.store.counters.accepted == 0
        assert it.steps == []
        counted(it, way)


@pytest.mark.parametrize("way", WAYS)
async def test_a_head_over_the_limit_by_the_listener_s_count_is_431_either_way(
    tmp_path: Path, way: Way
) -> None:
    """7,000 fields ``a:`` are 28 KiB on the wire, over 32 KiB as the limit counts them (name, value
    and 4 a field): the same 431 whichever way the request is read, and nothing stored."""
    async with intake(tmp_path) as it:
        client = await it.connect(way, request("big", extra=("a:",) * 7000))
        answer = await read_answer(client)
        assert (answer.status, answer.body["error"]) == (431, "request headers over 32768 bytes")
        assert it.store.counters.accepted == 0


@pytest.mark.parametrize("way", WAYS)
async def test_a_kept_alive_connection_is_read_on_after_its_first_answer(tmp_path: Path, way: Way) -> None:
    async with intake(tmp_path) as it:
        # Two requests in one write (pipelined), then a third after the answers.
        client = await it.connect(way, request("k-1", close=False) + request("k-2", close=False))
        buf = bytearray()
        first = await read_answer(client, buf)
        second = await read_answer(client, buf)
        assert [first.body["id"], second.body["id"]] == ["k-1", "k-2"]
        assert "connection" not in first.headers
        await send_all(client, request("k-3"))
        third = await read_answer(client, buf)
        assert (third.status, third.body["id"], third.headers["connection"]) == (200, "k-3", "close")
        assert await closed(client)
        assert [e.id for e in it.store.pending()] == ["k-1", "k-2", "k-3"]


@pytest.mark.parametrize("way", WAYS)
async def test_http_1_0_without_host_is_answered_and_closed(tmp_path: Path, way: Way) -> None:
    async with intake(tmp_path) as it:
        client = await it.connect(way, request("h-1", version="1.0", close=False))
        answer = await read_answer(client)
        assert (answer.status, answer.body["id"]) == (200, "h-1")
        assert await closed(client)
        counted(it, way)


async def test_requests_that_are_not_a_whole_simple_post_are_streamed(tmp_path: Path) -> None:
    """Arrived whole, but not the shape the at-once reader takes: h11 reads them, same answers."""
    signed = github_headers(BODY, "c-1")
    chunked = (
        (
            "POST /hooks/github HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in signed.items())
            + f"\r\n{len(BODY):x}\r\n"
        ).encode()
        + BODY
        + b"\r\n0\r\n\r\n"
    )
    cases = [
        (request("x", method="GET"), 405),
        (b"GET /healthz HTTP/1.1\r\nHost: h\r\n\r\n", 200),
        (request("c-1").replace(b"Content-Length", b"Content-Length: 1\r\nContent-Length"), 400),
    ]
    async with intake(tmp_path) as it:
        client = await it.connect("arrived", chunked)
        answer = await read_answer(client)
        # The signature covers the body, which is the same bytes de-chunked.
        assert (answer.status, answer.body.get("id")) == (200, "c-1")
        for data, status in cases:
            client = await it.connect("arrived", data)
            assert (await read_answer(client)).status == status
        assert it.listener.whole_on_arrival == 0
        assert it.listener.streamed == 1 + len(cases)


@pytest.mark.parametrize("way", WAYS)
async def test_many_deliveries_across_segment_rolls_are_each_stored_and_answered_once(
    tmp_path: Path, way: Way
) -> None:
    """Small segments: the log rolls every few deliveries, and a delivery that arrives while a
    roll is under way waits its turn on the task path."""
    n = 60
    async with intake(tmp_path, segment_bytes=4 * len(BODY)) as it:
        clients = [await it.connect(way, request(f"m-{i}")) for i in range(n)]
        answers = [await read_answer(c) for c in clients]
        assert all([await closed(c) for c in clients])
        assert sorted(str(a.body["id"]) for a in answers) == sorted(f"m-{i}" for i in range(n))
        assert all(a.status == 200 and a.body["duplicate"] is False for a in answers)
        assert it.store.counters.accepted == n
        assert len(list((tmp_path / "github").glob("seg-*.jsonl"))) > 3
        assert it.listener.active == 0
        # Each connection counted once, the way it was served.
        assert it.listener.whole_on_arrival + it.listener.streamed == n


@pytest.mark.parametrize("way", WAYS)
async def test_a_client_gone_before_its_answer_loses_nothing(tmp_path: Path, way: Way) -> None:
    closed_early: list[socket.socket] = []
    synced = trio.Event()

    def drop(at: Step) -> None:
        if at == "written" and closed_early:
            closed_early[0].close()  # the sender gives up while the delivery is being made durable
        if at == "synced":
            synced.set()

    async with intake(tmp_path, hook=drop) as it:
        client = socket.create_connection(it.feed.getsockname()[:2])
        it.clients.append(client)
        closed_early.append(client)
        server, _ = it.feed.accept()
        if way == "arrived":
            client.sendall(request("g-1"))
            it.listener.take(server)
        else:
            it.listener.take(server)
            client.sendall(request("g-1"))
        with trio.fail_after(BOUND):
            await synced.wait()
        await trio.testing.wait_all_tasks_blocked()  # the answer was tried, the connection closed
        assert it.listener.active == 0
        assert it.store.read("g-1") is not None  # stored: a retry is answered as a duplicate
        retry = await it.connect(way, request("g-1"))
        assert (await read_answer(retry)).body == {"ok": True, "id": "g-1", "duplicate": True}


@pytest.mark.parametrize("way", WAYS)
async def test_a_failed_sync_answers_503_and_no_200_leaves(
    tmp_path: Path, way: Way, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fails the group commit's fdatasync (EIO): the waiting sender hears 503 with
    Retry-After, never 200, and the next sender too (the log is broken until a restart re-reads it)."""

    def failing_sync(fd: int) -> float:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(store_module, "_timed_sync", failing_sync)
    async with intake(tmp_path) as it:
        client = await it.connect(way, request("e-1"))
        answer = await read_answer(client)
        assert (answer.status, answer.headers["retry-after"]) == (503, "5")
        assert "the delivery log failed; the server must be restarted" in str(answer.body["error"])
        assert str(tmp_path) not in str(answer.body["error"])  # the log names the files; senders never
        assert await closed(client)
        later = await it.connect(way, request("e-2"))
        assert (await read_answer(later)).status == 503
        assert await closed(later)
        assert it.listener.active == 0
