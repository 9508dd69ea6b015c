"""The health/readiness/metrics server over real HTTP on loopback.

These tests use real sockets, so they run on the real clock (marked
``realclock``); every bound under test is shrunk to a fraction of a second
and every wait is wrapped in ``trio.fail_after``.
"""

from __future__ import annotations

import httpx2
import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from agentd.core.errors import ConfigError
from agentd.events import HealthProbe, ServerState, ServerStateChanged, SubscriptionStateChanged
from agentd.observe import health
from agentd.observe.health import parse_addr, reactor_probe, serve_health, serve_metrics
from agentd.observe.metrics import MetricsSnapshot
from agentd.observe.telemetry import Telemetry
from agentd.supervisor.loop.budget import Budget
from agentd.supervisor.loop.governor import RestartGovernor
from agentd.supervisor.loop.reactor import Hooks, Reactor
from agentd.triggers import mode as modes
from agentd.triggers.router import Router
from tests.support.telemetry import RecordingTelemetry

pytestmark = pytest.mark.realclock

# Generous ceiling for one loopback request on a shared 2-core machine.
REQUEST_CEILING = 5.0


async def _true() -> bool:
    return True


async def _false() -> bool:
    return False


def _ready() -> tuple[bool, str]:
    return True, "all required servers connected"


async def _start_health(nursery: trio.Nursery, **kwargs) -> str:
    kwargs.setdefault("probe", _true)
    kwargs.setdefault("ready", _ready)
    port = await nursery.start(
        lambda task_status: serve_health("127.0.0.1:0", task_status=task_status, **kwargs)
    )
    return f"http://127.0.0.1:{port}"


async def _get(url: str, method: str = "GET") -> httpx2.Response:
    with trio.fail_after(REQUEST_CEILING):
        async with httpx2.AsyncClient() as client:
            return await client.request(method, url)


async def _raw(port: int, payload: bytes, *, close_write: bool = False) -> bytes:
    """Send ``payload`` over a raw TCP connection and read until the server closes."""
    with trio.fail_after(REQUEST_CEILING):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            if payload:
                await stream.send_all(payload)
            if close_write:
                await stream.send_eof()
            out = bytearray()
            while chunk := await stream.receive_some(65536):
                out += chunk
            return bytes(out)


def _port(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


# --- /healthz -----------------------------------------------------------------


async def test_healthz_ok_when_probe_answers(nursery):
    base = await _start_health(nursery)
    r = await _get(base + "/healthz")
    assert r.status_code == 200
    assert r.text == "ok\n"
    assert r.headers["connection"] == "close"


async def test_healthz_503_when_probe_reports_failure(nursery):
    base = await _start_health(nursery, probe=_false)
    r = await _get(base + "/healthz")
    assert r.status_code == 503
    assert "probe reported failure" in r.text


async def test_healthz_503_when_probe_raises(nursery):
    async def broken() -> bool:
        raise RuntimeError("boom")

    base = await _start_health(nursery, probe=broken)
    r = await _get(base + "/healthz")
    assert r.status_code == 503
    assert "RuntimeError('boom')" in r.text
    # The server survived the failing callable.
    assert (await _get(base + "/readyz")).status_code == 200


async def test_healthz_503_within_the_bound_when_the_reactor_never_answers(nursery):
    async def hangs() -> bool:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    bound = 0.2
    base = await _start_health(nursery, probe=hangs, probe_timeout=bound)
    start = trio.current_time()
    r = await _get(base + "/healthz")
    elapsed = trio.current_time() - start
    assert r.status_code == 503
    assert r.text == "unhealthy: the reactor did not answer within 0.2 s\n"
    assert bound <= elapsed < bound + REQUEST_CEILING / 2


async def test_reactor_probe_roundtrip_through_the_reactor_channel(nursery):
    send, receive = trio.open_memory_channel(8)
    seen: list[HealthProbe] = []

    async def fake_reactor() -> None:
        # What the real reactor does on receipt: set the reply event at once.
        async for event in receive:
            assert isinstance(event, HealthProbe)
            seen.append(event)
            event.reply.set()

    nursery.start_soon(fake_reactor)
    base = await _start_health(nursery, probe=reactor_probe(send))
    assert (await _get(base + "/healthz")).status_code == 200
    assert (await _get(base + "/healthz")).status_code == 200
    assert len(seen) == 2


async def test_reactor_probe_503_when_the_reactor_is_stuck(nursery):
    # An unbuffered channel nobody receives from: the send itself blocks.
    send, _receive = trio.open_memory_channel(0)
    base = await _start_health(nursery, probe=reactor_probe(send), probe_timeout=0.1)
    r = await _get(base + "/healthz")
    assert r.status_code == 503
    assert "did not answer within 0.1 s" in r.text


async def test_reactor_probe_503_when_the_reactor_is_gone(nursery):
    send, receive = trio.open_memory_channel(1)
    receive.close()
    base = await _start_health(nursery, probe=reactor_probe(send))
    r = await _get(base + "/healthz")
    assert r.status_code == 503
    assert r.text == "unhealthy: the reactor's channel is closed\n"


# --- /readyz ------------------------------------------------------------------


async def test_readyz_follows_the_injected_state(nursery):
    state = {"ready": False, "reason": "waiting for required server 'memo'"}
    base = await _start_health(nursery, ready=lambda: (state["ready"], state["reason"]))

    r = await _get(base + "/readyz")
    assert (r.status_code, r.text) == (503, "not ready: waiting for required server 'memo'\n")

    state.update(ready=True, reason="")
    r = await _get(base + "/readyz")
    assert (r.status_code, r.text) == (200, "ready\n")

    state.update(ready=False, reason="draining")
    r = await _get(base + "/readyz")
    assert (r.status_code, r.text) == (503, "not ready: draining\n")


async def test_readyz_503_when_the_check_raises(nursery):
    def broken() -> tuple[bool, str]:
        raise KeyError("servers")

    base = await _start_health(nursery, ready=broken)
    r = await _get(base + "/readyz")
    assert r.status_code == 503
    assert "readiness check failed: KeyError('servers')" in r.text


# --- /metrics -----------------------------------------------------------------

SNAPSHOT = MetricsSnapshot(
    routed={"inbox": 4},
    unrouted=1,
    tokens_input=120,
    tokens_output=30,
    server_state={"memo": ServerState.CONNECTED},
    subscription_state={("memo", 'memo://notes/"a"'): "established"},
)


def _families(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


async def test_metrics_on_the_health_port_parse_as_prometheus_text(nursery):
    base = await _start_health(nursery, snapshot=lambda: SNAPSHOT)
    r = await _get(base + "/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    fams = _families(r.text)
    assert fams["agentd_events_routed"][0].labels == {"route": "inbox"}
    assert fams["agentd_events_routed"][0].value == 4
    established = [s for s in fams["agentd_subscription_state"] if s.labels["state"] == "established"]
    assert established[0].labels["uri"] == 'memo://notes/"a"'
    assert established[0].value == 1


async def test_metrics_on_a_separate_listener_serve_only_metrics(nursery):
    calls = 0

    def snapshot() -> MetricsSnapshot:
        nonlocal calls
        calls += 1
        return SNAPSHOT

    port = await nursery.start(
        lambda task_status: serve_metrics("127.0.0.1:0", snapshot=snapshot, task_status=task_status)
    )
    base = f"http://127.0.0.1:{port}"
    r = await _get(base + "/metrics")
    assert r.status_code == 200
    assert _families(r.text)["agentd_up"][0].value == 1
    assert calls == 1  # computed on request only
    r = await _get(base + "/healthz")
    assert r.status_code == 404
    assert r.text == "not found: '/healthz'; this port serves /metrics\n"


async def test_health_port_without_snapshot_has_no_metrics(nursery):
    base = await _start_health(nursery)
    r = await _get(base + "/metrics")
    assert r.status_code == 404
    assert "this port serves /healthz, /readyz" in r.text


async def test_metrics_500_when_the_snapshot_fails(nursery):
    def broken() -> MetricsSnapshot:
        raise RuntimeError("no snapshot")

    base = await _start_health(nursery, snapshot=broken)
    r = await _get(base + "/metrics")
    assert r.status_code == 500
    assert "RuntimeError('no snapshot')" in r.text


# --- HTTP details and hostile clients -----------------------------------------


async def test_head_has_headers_but_no_body_and_query_is_ignored(nursery):
    base = await _start_health(nursery)
    raw = await _raw(_port(base), b"HEAD /healthz?verbose=1 HTTP/1.1\r\nHost: x\r\n\r\n")
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"Content-Length: 3" in head
    assert body == b""


async def test_other_methods_get_405_with_allow(nursery):
    base = await _start_health(nursery)
    r = await _get(base + "/healthz", method="POST")
    assert r.status_code == 405
    assert r.headers["allow"] == "GET, HEAD"


@pytest.mark.parametrize(
    ("payload", "status"),
    [
        (b"\x00\xff garbage\r\n\r\n", b"400"),
        (b"GET /healthz\r\n\r\n", b"400"),
        (b"GET /healthz HTTP/2.0\r\n\r\n", b"400"),
        (b"get /healthz HTTP/1.1\r\n\r\n", b"400"),
        (b"GET healthz HTTP/1.1\r\n\r\n", b"400"),
        (b"GET /h\xc3\xa9 HTTP/1.1\r\n\r\n", b"400"),
    ],
)
async def test_malformed_requests_get_400_and_the_server_keeps_serving(nursery, payload, status):
    base = await _start_health(nursery)
    raw = await _raw(_port(base), payload)
    assert raw.startswith(b"HTTP/1.1 " + status)
    assert (await _get(base + "/healthz")).status_code == 200


async def test_oversized_head_gets_431(nursery):
    base = await _start_health(nursery)
    huge = b"GET /healthz HTTP/1.1\r\nX-Pad: " + b"a" * (health.MAX_REQUEST_HEAD + 10) + b"\r\n\r\n"
    raw = await _raw(_port(base), huge)
    assert raw.startswith(b"HTTP/1.1 431 ")
    assert (await _get(base + "/healthz")).status_code == 200


async def test_oversized_head_without_terminator_gets_431(nursery):
    base = await _start_health(nursery)
    raw = await _raw(_port(base), b"A" * (health.MAX_REQUEST_HEAD + 2))
    assert raw.startswith(b"HTTP/1.1 431 ")


async def test_client_closing_early_is_harmless(nursery):
    base = await _start_health(nursery)
    assert await _raw(_port(base), b"GET /heal", close_write=True) == b""
    assert await _raw(_port(base), b"", close_write=True) == b""
    assert (await _get(base + "/healthz")).status_code == 200


async def test_slowloris_is_cut_off_and_does_not_block_others(nursery, monkeypatch):
    monkeypatch.setattr(health, "READ_TIMEOUT", 0.3)
    base = await _start_health(nursery)
    port = _port(base)

    with trio.fail_after(REQUEST_CEILING):
        slow = await trio.open_tcp_stream("127.0.0.1", port)
        await slow.send_all(b"GET /healthz HTTP/1.1\r\n")
        start = trio.current_time()
        # Others are served while the slow client dawdles.
        assert (await _get(base + "/healthz")).status_code == 200
        out = bytearray()
        while chunk := await slow.receive_some(4096):
            out += chunk
        await slow.aclose()
    assert out.startswith(b"HTTP/1.1 408 ")
    assert trio.current_time() - start >= 0.25


async def _answer_of(stream: trio.SocketStream) -> bytes:
    out = bytearray()
    while chunk := await stream.receive_some(65536):
        out += chunk
    await stream.aclose()
    return bytes(out)


async def test_past_the_limit_the_oldest_waiting_connection_makes_room(nursery, monkeypatch):
    monkeypatch.setattr(health, "connection_limit", lambda: 2)
    base = await _start_health(nursery)
    port = _port(base)
    with trio.fail_after(REQUEST_CEILING):
        # Accepted in connection order (the kernel's accept queue is FIFO).
        first = await trio.open_tcp_stream("127.0.0.1", port)
        second = await trio.open_tcp_stream("127.0.0.1", port)
        # A third connection (a probe) is served; the oldest idle one is closed unanswered.
        assert (await _raw(port, b"GET /healthz HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 200 ")
        assert await _answer_of(first) == b""
        await second.send_all(b"GET /readyz HTTP/1.1\r\n\r\n")
        assert (await _answer_of(second)).startswith(b"HTTP/1.1 200 ")


async def test_a_connection_being_answered_is_never_evicted(nursery, monkeypatch):
    monkeypatch.setattr(health, "connection_limit", lambda: 2)
    entered = trio.Event()
    release = trio.Event()

    async def held_probe() -> bool:
        entered.set()
        await release.wait()
        return True

    base = await _start_health(nursery, probe=held_probe, probe_timeout=REQUEST_CEILING)
    port = _port(base)
    with trio.fail_after(REQUEST_CEILING):
        answered = await trio.open_tcp_stream("127.0.0.1", port)
        await answered.send_all(b"GET /healthz HTTP/1.1\r\n\r\n")
        await entered.wait()
        idle = await trio.open_tcp_stream("127.0.0.1", port)
        # At the limit: the idle connection makes room, the one being answered does not.
        assert (await _raw(port, b"GET /readyz HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 200 ")
        assert await _answer_of(idle) == b""
        release.set()
        assert (await _answer_of(answered)).startswith(b"HTTP/1.1 200 ")


async def test_concurrent_healthz_requests_share_one_probe(nursery):
    """A flood of /healthz puts one probe at a time into the reactor, not one per request."""
    calls = 0

    async def stuck_probe() -> bool:
        nonlocal calls
        calls += 1
        await trio.sleep_forever()
        return True

    timeout = 3.0
    base = await _start_health(nursery, probe=stuck_probe, probe_timeout=timeout)
    port = _port(base)
    answers: list[bytes] = []

    async def one() -> None:
        answers.append(await _raw(port, b"GET /healthz HTTP/1.1\r\n\r\n"))

    with trio.fail_after(timeout + REQUEST_CEILING):
        async with trio.open_nursery() as inner:
            for _ in range(20):
                inner.start_soon(one)
    assert [a.split(b"\r\n", 1)[0] for a in answers] == [b"HTTP/1.1 503 Service Unavailable"] * 20
    assert all(b"did not answer within 3 s" in a for a in answers)
    assert calls == 1


def test_connection_limit_follows_the_open_files_limit(monkeypatch):
    import resource

    for soft, expected in [(20, health.MIN_CONNECTIONS), (1024, 512), (1 << 20, health.MAX_CONNECTIONS)]:
        monkeypatch.setattr(resource, "getrlimit", lambda _r, soft=soft: (soft, 1 << 20))
        assert health.connection_limit() == expected


# --- addresses ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("addr", "expected"),
    [
        ("0.0.0.0:8080", ("0.0.0.0", 8080)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("[::1]:9090", ("::1", 9090)),
        (":8080", (None, 8080)),
        ("localhost:65535", ("localhost", 65535)),
    ],
)
def test_parse_addr_accepts(addr, expected):
    assert parse_addr(addr) == expected


@pytest.mark.parametrize("addr", ["8080", "host:", "host:http", "host:70000", "::1:80", "[]:80", "[::1:80"])
def test_parse_addr_rejects_with_a_clear_message(addr):
    with pytest.raises(
        ConfigError, match=r"--metrics-addr: .* is not valid: use HOST:PORT, e\.g\. 0\.0\.0\.0:8080"
    ):
        parse_addr(addr, setting="--metrics-addr")


async def test_serve_health_rejects_bad_addr_before_listening():
    with pytest.raises(ConfigError, match=r"--health-addr: 'nope' is not valid"):
        await serve_health("nope", probe=_true, ready=_ready)


async def test_serve_health_rejects_a_bad_probe_timeout():
    with pytest.raises(ConfigError, match=r"probe_timeout: 0 is not valid: use a positive number"):
        await serve_health("127.0.0.1:0", probe=_true, ready=_ready, probe_timeout=0)


def test_public_surface_names_exist():
    assert all(hasattr(health, name) for name in health.__all__)


# --- wired to a real reactor --------------------------------------------------------


def _reactor(telemetry: Telemetry) -> Reactor:
    now = trio.current_time()
    noop = lambda *_: None  # noqa: E731
    reactor = Reactor(
        driver=modes.make_driver("reactive", now_mono=now),
        router=Router(),
        budget=Budget(max_steps=None, max_tokens=None, deadline_at=None),
        governor=RestartGovernor(intensity=3, period=60.0),
        hooks=Hooks(spawn=noop, kill_all=noop, unsubscribe=noop, publish=noop),
        telemetry=telemetry,
        instruction="",
        grace=25.0,
        mode="reactive",
        session="fresh",
        required=frozenset({"memo"}),
    )
    # As the app declares its subscriptions before the reactor turns.
    reactor.readiness.on_subscription_state("memo", "memo://notes", "pending")
    return reactor


async def test_readyz_follows_the_reactor_and_ready_changed_is_written_once_per_flip(nursery):
    telemetry = RecordingTelemetry(timeout=REQUEST_CEILING)
    reactor = _reactor(telemetry)
    nursery.start_soon(reactor.run)
    base = await _start_health(
        nursery, probe=reactor_probe(reactor.send), ready=reactor.ready, snapshot=reactor.metrics_snapshot
    )
    up = [
        ServerStateChanged("memo", ServerState.CONNECTED, required=True),
        SubscriptionStateChanged("memo", frozenset({"memo://notes"}), "established"),
    ]
    down = [
        SubscriptionStateChanged("memo", frozenset({"memo://notes"}), "lost", error="killed"),
        ServerStateChanged("memo", ServerState.RESTARTING, required=True, attempt=1),
    ]

    for event in up:
        await reactor.send.send(event)
    assert await telemetry.wait_fields("ready.changed", 2) == {"ready": True, "reason": "ok"}
    assert telemetry.fields("ready.changed")[0]["ready"] is False  # the first turn: not yet connected
    r = await _get(base + "/readyz")
    assert (r.status_code, r.text) == (200, "ready: ok\n")

    for event in down:
        await reactor.send.send(event)
    await telemetry.wait_fields("server.state", 2)  # the reactor applied both
    # One flip, one line: the reason changed twice while not ready.
    assert telemetry.fields("ready.changed")[2:] == [
        {"ready": False, "reason": "subscriptions not established: memo:memo://notes"}
    ]
    r = await _get(base + "/readyz")
    assert (r.status_code, r.text) == (503, "not ready: required server 'memo' is restarting\n")
    assert (await _get(base + "/healthz")).status_code == 200

    for event in up:
        await reactor.send.send(event)
    assert await telemetry.wait_fields("ready.changed", 4) == {"ready": True, "reason": "ok"}
    assert (await _get(base + "/readyz")).status_code == 200
    assert len(telemetry.fields("ready.changed")) == 4
