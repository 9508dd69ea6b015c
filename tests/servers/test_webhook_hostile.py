"""The webhook intake against hostile clients (fault catalog WH10-WH11, issue 37 items 2 and 3).

* WH10: 64 connections that each send half a request line and reopen the
  moment they are cut, through the real ``agentd serve webhook``: signed
  deliveries are still answered 200 (the oldest connection still sending its
  head is cut to make room; one client holds at most a quarter of the slots
  with requests still arriving). Was: 503 to nearly every sender.
* WH11: header values over the whole latin-1 range (a hypothesis property
  through the real listener on a real socket, and ``²`` as a Slack timestamp
  through the real command): every request is answered, a number that is
  not ASCII digits is a 400, nothing logs a traceback. Was: no answer and a
  traceback per request.

The attacker is a separate process (``tests.support.webhooks.HOSTILE_CLIENTS``)
whose loop ends by itself; every wait is bounded; nothing sleeps.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from mcp import Client

from agentd.servers.webhook.listener import Limits, Listener, bind
from agentd.servers.webhook.sources import Credential, SourceSpec
from agentd.servers.webhook.store import DeliveryStore
from tests.support.leftovers import AllowedFiles
from tests.support.webhooks import (
    ALERTMANAGER_TOKEN,
    GENERIC_SECRET,
    GITHUB_SECRET,
    HOSTILE_CLIENTS,
    REPLY_BOUND,
    SLACK_SECRET,
    START_BOUND,
    dumps,
    github_headers,
    github_issue_labeled,
    post,
    read_reply,
    slack_headers,
    slack_message_event,
    webhook_argv,
    webhook_server,
)

pytestmark = pytest.mark.fault


@pytest.fixture(autouse=True)
def _webhook_files(allow_files: AllowedFiles) -> None:
    allow_files("seg-*.jsonl", "state.json", "lock")


# --------------------------------------------------------------------------- WH10: 64 hostile connections

HOSTILE = 64
"""Connections the attacker holds: as many as the server's default --max-connections."""
SENDERS = 4
PER_SENDER = 40
ATTACK_BOUND = 300.0
"""Seconds the attacker runs at most (it is stopped when the senders are done): a hang guard."""
ANSWER_GOAL = 1.0
"""Seconds within which a delivery counts as answered in time (issue 37; bench_webhooks --attack measures it)."""


async def test_wh10_sixty_four_connections_holding_half_a_request_line_deny_no_sender(tmp_path: Path) -> None:
    async with webhook_server(webhook_argv(str(tmp_path / "deliveries"))) as server:
        attacker = await trio.lowlevel.open_process(
            [sys.executable, "-c", HOSTILE_CLIENTS, str(server.hooks_port), str(HOSTILE), str(ATTACK_BOUND)],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
        answered: dict[str, float] = {}
        other: list[str] = []
        try:
            assert attacker.stdout is not None
            seen = b""
            with trio.fail_after(START_BOUND):  # every hostile connection sent its half line
                while b"ready" not in seen:
                    chunk = await attacker.stdout.receive_some()
                    assert chunk, f"the attacker ended early: {seen!r}"
                    seen += chunk

            async def sender(k: int) -> None:
                for n in range(PER_SENDER):
                    delivery = f"s{k}-{n}"
                    body = dumps({**github_issue_labeled(number=n), "sender": k})
                    t0 = time.perf_counter()
                    try:
                        reply = await post(
                            server.hooks_port, "/hooks/github", body, github_headers(body, delivery)
                        )
                    except (OSError, ConnectionError, trio.BrokenResourceError) as exc:
                        other.append(f"{delivery}: {exc!r}")
                        continue
                    if reply.status == 200:
                        answered[delivery] = time.perf_counter() - t0
                    else:
                        other.append(f"{delivery}: {reply.status} {reply.body[:200]!r}")

            async with trio.open_nursery() as nursery:
                for k in range(SENDERS):
                    nursery.start_soon(sender, k)
            async with Client(server.mcp_url) as client:
                status = orjson.loads(
                    (await client.read_resource("webhook://status")).contents[0].text  # type: ignore[union-attr]
                )
        finally:
            attacker.terminate()
            with trio.fail_after(START_BOUND):
                await attacker.wait()
        assert "Traceback" not in server.text
    total = SENDERS * PER_SENDER
    in_time = sum(1 for t in answered.values() if t <= ANSWER_GOAL)
    print(f"WH10: {len(answered)}/{total} answered 200, {in_time} within {ANSWER_GOAL:g} s; not 200: {other}")
    # At least 99% answered 200 (was: 24 of 25 refused with 503); the attack was on: cut connections.
    assert len(answered) >= 0.99 * total, other
    assert status["connections"]["evicted"] > 0
    assert status["connections"]["overloaded"] == 0
    stored = {
        orjson.loads(line)["id"]
        for seg in (tmp_path / "deliveries" / "github").glob("seg-*.jsonl")
        for line in seg.read_bytes().splitlines()
    }
    assert stored >= set(answered)  # every 200 is on disk


async def test_a_503_only_when_every_slot_holds_a_request_that_arrived(tmp_path: Path) -> None:
    """*component*: a delivery waiting for its sync is never cut; a connection still arriving is, for a
    newer one; with no connection arriving, the newest is refused with 503 (Retry-After)."""
    spec = SourceSpec("github", "github", secret=Credential((GITHUB_SECRET.encode(),), "$S"))
    store = DeliveryStore(spec, str(tmp_path / "github"))
    store.open()
    listener = Listener(bind("127.0.0.1", 0), {"github": (spec, store)}, Limits(max_connections=2))
    feed = socket.create_server(("127.0.0.1", 0))
    clients: list[socket.socket] = []

    def connect(data: bytes) -> socket.socket:
        client = socket.create_connection(feed.getsockname()[:2])
        clients.append(client)
        client.sendall(data)
        conn, _ = feed.accept()
        listener.take(conn)
        return client

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(listener.run)  # the store's group commit is not running: nothing syncs
            await trio.testing.wait_all_tasks_blocked()
            body = dumps(github_issue_labeled())
            head = "".join(f"{k}: {v}\r\n" for k, v in github_headers(body, "w-1").items())
            whole = (
                f"POST /hooks/github HTTP/1.1\r\nHost: h\r\nContent-Length: {len(body)}\r\n{head}\r\n".encode()
                + body
            )
            waiting = connect(whole)  # written, waiting for its sync: holds a slot, never cut
            arriving = connect(b"POST /hooks/github HT")
            newer = connect(b"POST /hooks/git")  # the slots are full: the arriving one is cut
            with trio.fail_after(REPLY_BOUND):
                await trio.lowlevel.wait_readable(arriving)
            assert arriving.recv(100) == b""
            assert listener.evicted == 1
            await trio.testing.wait_all_tasks_blocked()  # the cut connection's task closed it
            newer.close()
            await trio.testing.wait_all_tasks_blocked()
            assert listener.active == 1  # only the one waiting for its sync
            third = connect(b"POST /hooks/github HTTP/1.1\r\n")
            fourth = connect(b"POST /")  # one waiting, one arriving: the arriving one is cut again
            assert listener.evicted == 2
            with trio.fail_after(REPLY_BOUND):
                await trio.lowlevel.wait_readable(third)
            assert third.recv(100) == b""
            fourth.close()
            await trio.testing.wait_all_tasks_blocked()
            # Now make every slot hold a request that arrived: a second delivery waiting for its sync.
            body2 = dumps(github_issue_labeled(number=2))
            head2 = "".join(f"{k}: {v}\r\n" for k, v in github_headers(body2, "w-2").items())
            connect(
                f"POST /hooks/github HTTP/1.1\r\nHost: h\r\nContent-Length: {len(body2)}\r\n{head2}\r\n".encode()
                + body2
            )
            turned_away = connect(b"POST /hooks/github HTTP/1.1\r\n")
            with trio.fail_after(REPLY_BOUND):
                await trio.lowlevel.wait_readable(turned_away)
            answer = turned_away.recv(4096)
            assert answer.startswith(b"HTTP/1.1 503 ")
            assert b"retry-after: 5" in answer
            assert listener.overloaded == 1
            with pytest.raises(BlockingIOError):  # the delivery waiting for its sync: not answered, not cut
                waiting.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            nursery.cancel_scope.cancel()
    finally:
        for c in clients:
            c.close()
        feed.close()
        store.close()


# --------------------------------------------------------------------------- WH11: header values, latin-1


async def test_wh11_a_superscript_slack_timestamp_is_a_400_through_the_real_command(tmp_path: Path) -> None:
    """``²`` passes ``str.isdigit()``; ``int()`` refuses it. Was: no answer, a 4.3 KB traceback."""
    async with webhook_server(webhook_argv(str(tmp_path))) as server:
        body = dumps(slack_message_event())
        for stamp in ("\u00b2", "\u00b9\u00b3", "\u0661\u0662"):
            headers = {**slack_headers(body), "X-Slack-Request-Timestamp": stamp}
            raw = (
                f"POST /hooks/slack HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\nConnection: close\r\n"
                + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
                + "\r\n"
            ).encode("utf-8") + body
            with trio.fail_after(REPLY_BOUND):
                stream = await trio.open_tcp_stream("127.0.0.1", server.hooks_port)
                async with stream:
                    await stream.send_all(raw)
                    reply = await read_reply(stream)
            assert reply.status == 400, (stamp, reply)
            assert "Unix seconds in ASCII digits" in reply.json()["error"]
        # The server is unharmed: a delivery right after is stored.
        ok = await post(server.hooks_port, "/hooks/slack", body, slack_headers(body))
        assert ok.status == 200
    assert "Traceback" not in server.text


_SOURCES = {
    "github": SourceSpec("github", "github", secret=Credential((GITHUB_SECRET.encode(),), "$G")),
    "slack": SourceSpec("slack", "slack", secret=Credential((SLACK_SECRET.encode(),), "$S")),
    "alerts": SourceSpec(
        "alerts", "alertmanager", token=Credential((ALERTMANAGER_TOKEN.encode(),), "$A"), dedupe_window=300.0
    ),
    "hex": SourceSpec(
        "hex",
        "generic",
        secret=Credential((GENERIC_SECRET.encode(),), "$D"),
        signature_header="X-Signature-256",
        signature_prefix="sha256=",
        event_header="X-Event",
    ),
    "b64": SourceSpec(
        "b64",
        "generic",
        secret=Credential((GENERIC_SECRET.encode(),), "$D"),
        signature_header="X-Sig",
        signature_encoding="base64",
    ),
}
_FUZZED = [
    "content-length",
    "content-type",
    "x-slack-request-timestamp",
    "x-slack-signature",
    "x-hub-signature-256",
    "x-github-event",
    "x-github-delivery",
    "authorization",
    "idempotency-key",
    "x-event",
    "x-signature-256",
    "x-sig",
    "host",
    "expect",
    "transfer-encoding",
]
#: Every latin-1 character but CR and LF (those end a header line: they frame, they are no value).
LATIN1 = st.characters(min_codepoint=0, max_codepoint=255, exclude_characters="\r\n")
ANSWERED = frozenset({200, 400, 401, 404, 405, 408, 411, 413, 417, 431, 501, 505})
"""What a request may be answered: anything but a 5xx of the server's own making (503 needs a full
intake or disk, neither happens here); 408 for a Content-Length longer than the body sent."""
FUZZ_REQUEST_TIMEOUT = 5.0
"""The intake's --request-timeout here: a fuzzed Content-Length longer than the body is answered 408
after it (a bound on each such example, not a speed assertion)."""


class _Errors(logging.Handler):
    """Records logged with a traceback (``log.exception``): a request that broke the code."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seen: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info is not None:
            self.seen.append(record)


@contextlib.contextmanager
def _intake_in_a_thread() -> Iterator[tuple[int, Listener, _Errors]]:
    """The real listener and stores (a source of every kind) on a real socket, run by trio in a
    thread, so each example is one blocking client request (one server for all the examples)."""
    directory = tempfile.mkdtemp(prefix="wh11-")
    stores = {name: DeliveryStore(spec, f"{directory}/{name}") for name, spec in _SOURCES.items()}
    for store in stores.values():
        store.open()
    listener = Listener(
        bind("127.0.0.1", 0),
        {name: (spec, stores[name]) for name, spec in _SOURCES.items()},
        Limits(max_body=64 * 1024, request_timeout=FUZZ_REQUEST_TIMEOUT),
    )
    errors = _Errors()
    logger = logging.getLogger("agentd.servers.webhook")
    logger.addHandler(errors)
    started = threading.Event()
    scope: list[trio.CancelScope] = []
    token: list[trio.lowlevel.TrioToken] = []

    async def serve() -> None:
        async with trio.open_nursery() as nursery:
            scope.append(nursery.cancel_scope)
            token.append(trio.lowlevel.current_trio_token())
            for store in stores.values():
                nursery.start_soon(store.run)
            nursery.start_soon(listener.run)
            await trio.testing.wait_all_tasks_blocked()
            started.set()

    thread = threading.Thread(target=trio.run, args=(serve,), daemon=True)
    thread.start()
    try:
        assert started.wait(START_BOUND)
        yield int(listener.address.rsplit(":", 1)[1]), listener, errors
    finally:
        if token:
            trio.from_thread.run_sync(scope[0].cancel, trio_token=token[0])
        thread.join(START_BOUND)
        logger.removeHandler(errors)
        for store in stores.values():
            store.close()
        shutil.rmtree(directory)


def _signed(source: str, body: bytes) -> dict[str, str]:
    """Headers that pass each kind's checks for ``body`` (the fuzzed ones then replace some)."""
    import base64
    import hashlib
    import hmac

    if source == "github":
        return github_headers(body, "fuzz-1")
    if source == "slack":
        return slack_headers(body)
    if source == "alerts":
        return {"Content-Type": "application/json", "Authorization": f"Bearer {ALERTMANAGER_TOKEN}"}
    digest = hmac.new(GENERIC_SECRET.encode(), body, hashlib.sha256).digest()
    if source == "hex":
        return {"X-Signature-256": "sha256=" + digest.hex(), "X-Event": "e", "Idempotency-Key": "k"}
    return {"X-Sig": base64.b64encode(digest).decode()}


def _exchange(port: int, raw: bytes) -> bytes:
    """One request on a fresh connection; the whole answer (the server closes it), bounded."""
    with socket.create_connection(("127.0.0.1", port), timeout=REPLY_BOUND) as s:
        s.sendall(raw)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


@pytest.fixture(scope="module")
def intake() -> Iterator[tuple[int, Listener, _Errors]]:
    with _intake_in_a_thread() as it:
        yield it


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    source=st.sampled_from(sorted(_SOURCES)),
    fuzzed=st.dictionaries(st.sampled_from(_FUZZED), st.text(LATIN1, max_size=24), min_size=1, max_size=4),
    body=st.sampled_from([b'{"a": 1}', dumps(github_issue_labeled()), b"<a>1</a>", b"x=1&y=2", b""]),
)
@example(source="slack", fuzzed={"x-slack-request-timestamp": "\u00b2"}, body=b'{"type": "event_callback"}')
@example(source="github", fuzzed={"content-length": "\u00b2"}, body=b'{"a": 1}')
@example(source="b64", fuzzed={"x-sig": "\u00e9\u00ff"}, body=b'{"a": 1}')
@example(source="hex", fuzzed={"x-signature-256": "sha256=\u00c0"}, body=b'{"a": 1}')
def test_wh11_header_values_over_latin1_are_answered_and_never_a_traceback(
    intake: tuple[int, Listener, _Errors], source: str, fuzzed: dict[str, str], body: bytes
) -> None:
    port, _listener, errors = intake
    headers = {k.lower(): v for k, v in _signed(source, body).items()}
    headers["content-length"] = str(len(body))
    headers["connection"] = "close"
    headers["host"] = "hooks.example"
    headers.update(fuzzed)
    raw = (
        f"POST /hooks/{source} HTTP/1.1\r\n".encode()
        + b"".join(f"{k}: {v}\r\n".encode("latin-1") for k, v in headers.items())
        + b"\r\n"
        + body
    )
    answer = _exchange(port, raw)
    assert answer, f"no answer to {raw[:300]!r}"
    if answer.startswith(b"HTTP/1.1 100 "):  # Expect: 100-continue, then the answer
        answer = answer.partition(b"\r\n\r\n")[2]
    status = int(answer.split(b" ", 2)[1])
    assert status in ANSWERED, answer[:300]
    if not headers["content-length"].strip(" \t").isascii():
        # A Content-Length with a character outside ASCII (``²``, ``١``) is no number: refused as
        # malformed (501 if h11 met a bad Transfer-Encoding first).
        assert status in (400, 501), answer[:300]
    assert not errors.seen, [r.getMessage() for r in errors.seen]
