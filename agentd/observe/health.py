"""Health, readiness and metrics over a tiny HTTP/1.1 server on trio.

Kubernetes probes and Prometheus need three answers; agentd gives them
without letting an HTTP client near the reactor:

- ``GET /healthz`` (liveness): awaits an injected ``probe()``. In agentd that
  is :func:`reactor_probe`: it sends a :class:`~agentd.events.HealthProbe`
  into the reactor's channel and waits for the reactor to set its event, so
  a 200 proves the reactor loop is turning. The wait is bounded by
  ``probe_timeout`` (:data:`PROBE_TIMEOUT`); past it the answer is 503.
  Nothing runs unless a request arrives: there is no background check.
- ``GET /readyz`` (readiness): calls an injected sync ``ready() -> (bool, reason)``.
- ``GET /metrics``: calls an injected sync ``snapshot() -> MetricsSnapshot``
  and answers Prometheus text format 0.0.4 (:func:`agentd.observe.metrics.render`).
- ``GET /status`` (when given a ``status``): calls an injected sync
  ``status() -> JSONObject`` (the status document, docs/status.md) and
  answers it as JSON; ``GET /`` is the status page that reads it
  (:mod:`agentd.observe.statuspage`). Both follow :class:`StatusAccess`: loopback
  without a token, beyond loopback only with one (rfcs/0336).

Two entry points, both long-lived trio tasks that report the bound port
through ``task_status.started(port)``:

- :func:`serve_health` serves ``/healthz`` and ``/readyz``, plus ``/metrics``
  when given a ``snapshot`` (one port for everything).
- :func:`serve_metrics` serves only ``/metrics`` (a separate ``--metrics-addr``).

Every connection answers one request and is closed (``Connection: close``);
probes and scrapes open a fresh connection each time anyway.

Hostile or broken clients (anything that can reach the port: another pod, a
port scanner, a slowloris script) cost a bounded amount and can never keep a
probe from being answered:

- every connection has deadlines: the request head (at most
  :data:`MAX_REQUEST_HEAD` bytes) must arrive within :data:`READ_TIMEOUT`
  (one byte a second does not extend it), the answer is bounded by the probe
  timeout, and handing the answer to a client that does not read it is bounded
  by :data:`WRITE_TIMEOUT`;
- there is no small fixed connection cap a client could fill. Connections are
  admitted up to :func:`connection_limit` (derived from the open-files limit,
  which agentd raises to its hard limit at start-up, see
  :func:`raise_open_files_limit`); past it the *oldest* connection that is
  still waiting for its request (or stuck writing) is closed to make room, so
  the newest connection, which is where a probe is, is always served;
- concurrent ``/healthz`` requests share one probe of the reactor
  (:class:`_SharedProbe`): a flood of requests puts at most one
  ``HealthProbe`` at a time into the reactor's channel.

A failing injected callable turns into a 503/500 for that request; the server
keeps serving.
"""

from __future__ import annotations

import hmac
import math
import resource
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import NoReturn

import orjson
import trio

from agentd.core.durations import ascii_int
from agentd.core.errors import ConfigError
from agentd.core.hosts import host_of, is_loopback
from agentd.core.jsonvalue import JSONObject
from agentd.core.limits import raise_open_files_limit
from agentd.core.redact import redact
from agentd.events import HealthProbe
from agentd.observe.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from agentd.observe.metrics import MetricsSnapshot, render_with_process
from agentd.observe.statuspage import PAGE as STATUS_PAGE

__all__ = [
    "MAX_CONNECTIONS",
    "MAX_REQUEST_HEAD",
    "MIN_CONNECTIONS",
    "PROBE_TIMEOUT",
    "READ_TIMEOUT",
    "WRITE_TIMEOUT",
    "Probe",
    "Ready",
    "Snapshot",
    "Status",
    "StatusAccess",
    "connection_limit",
    "parse_addr",
    "raise_open_files_limit",
    "reactor_probe",
    "serve_health",
    "serve_metrics",
]

PROBE_TIMEOUT = 2.0
"""Seconds ``/healthz`` waits for the reactor to answer a probe. The reactor
answers between two events (microseconds when healthy); 2 s tolerates a long
synchronous step (say, a large route table rebuild) and stays well inside the
5 s ``timeoutSeconds`` the manifests give the kubelet's liveness probe."""

READ_TIMEOUT = 5.0
"""Seconds a client has to send its whole request head, counted from accept
(a deadline, not an idle timeout: a byte a second does not extend it). Probes
and scrapers send the head in one packet; the bound only stops slow-drip
(slowloris) and idle clients from holding a connection."""

WRITE_TIMEOUT = 5.0
"""Seconds to hand a response to a client that stopped reading; then the
connection is dropped rather than held."""

MAX_REQUEST_HEAD = 8 * 1024
"""Bytes of request line plus headers accepted (answers 431 past it). Real
probe and scrape requests are a few hundred bytes."""

MAX_CONNECTIONS = 4096
"""Most connections held open at once, whatever the open-files limit allows.
A kubelet and one or two scrapers need a handful; the ceiling bounds what a
flood costs (a task and an 8 KiB head buffer each: ~40 MiB at worst). It is
not a refusal threshold: past the limit the oldest waiting connection is
closed to admit the new one (see the module docstring)."""

MIN_CONNECTIONS = 16
"""Connections admitted even when the open-files limit is tiny."""

_RECV_CHUNK = 4096

Probe = Callable[[], Awaitable[bool]]
"""Liveness check: returns True when the reactor answered (False or an error means unhealthy)."""

Ready = Callable[[], tuple[bool, str]]
"""Readiness check (sync, never blocks): ``(ready, reason)``; the reason is shown either way."""

Snapshot = Callable[[], MetricsSnapshot]
"""Metrics source (sync, never blocks): a frozen copy of the reactor's numbers."""

Status = Callable[[], JSONObject]
"""Status source (sync, never blocks): the status document (:mod:`agentd.supervisor.statusview`)."""


@dataclass(frozen=True, slots=True)
class StatusAccess:
    """Who may read ``GET /status`` and the page at ``GET /`` (rfcs/0336).

    On a loopback bind anyone on this host may, without a token (a browser's
    ``Host`` must still name a loopback host: a DNS-rebound page cannot read
    it); beyond loopback only a client that sends ``Authorization: Bearer
    TOKEN``. A non-loopback bind without a token serves neither (403 with the
    fix): the probes and ``/metrics`` on the same port are not affected.
    """

    token: str | None
    loopback: bool
    addr: str

    @classmethod
    def for_bind(cls, addr: str, token: str | None) -> StatusAccess:
        host, _port = parse_addr(addr)
        return cls(token=token, loopback=host is not None and is_loopback(host), addr=addr)

    @property
    def enabled(self) -> bool:
        return self.loopback or self.token is not None

    def refusal(self, headers: dict[str, str]) -> _Response | None:
        """None when the request may read the status; else the answer that refuses it."""
        if not self.enabled:
            return _Response(
                HTTPStatus.FORBIDDEN,
                f"the status page is off: --health-addr {self.addr!r} is not a loopback address and no "
                "token is set — fix: name a file holding a bearer token with --status-token-file, or "
                "bind --health-addr to 127.0.0.1\n",
            )
        if self.token is None:
            host = host_of(headers.get("host", ""))
            if not is_loopback(host):
                return _Response(
                    HTTPStatus.MISDIRECTED_REQUEST,
                    f"Host {redact(host)!r} is not a loopback host: the status page answers only "
                    "http://127.0.0.1:PORT or http://localhost:PORT without a token\n",
                )
            return None
        given = headers.get("authorization", "")
        scheme, _, credential = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            credential.strip().encode(), self.token.encode()
        ):
            return _Response(
                HTTPStatus.UNAUTHORIZED,
                "the status needs Authorization: Bearer TOKEN (the token in --status-token-file); "
                "agentd status --token-file FILE sends it, the page reads it from #token=TOKEN\n",
                www_authenticate='Bearer realm="agentd"',
            )
        return None


def connection_limit() -> int:
    """How many connections one listener admits before it evicts the oldest waiting one.

    Half the soft open-files limit (the other half stays for child sockets,
    server pipes and pidfds), between :data:`MIN_CONNECTIONS` and
    :data:`MAX_CONNECTIONS`.
    """
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(MIN_CONNECTIONS, min(MAX_CONNECTIONS, soft // 2))


def parse_addr(addr: str, *, setting: str = "--health-addr") -> tuple[str | None, int]:
    """Parse ``HOST:PORT`` (``[v6]:PORT``; ``:PORT`` means every interface; port 0 picks a free one).

    Returns:
        ``(host, port)``; ``host`` is None for every interface.

    Raises:
        ConfigError: naming ``setting``, the value and the expected shape.
    """
    fix = (
        "use HOST:PORT, e.g. 0.0.0.0:8080, 127.0.0.1:0 or [::1]:8080 (':8080' listens on every interface; "
        "the port in ASCII digits 0-65535)"
    )
    host, sep, port_text = addr.rpartition(":")
    try:
        port = ascii_int(port_text) if sep else -1  # never isdigit()/int(): ``²``, ``١٢``
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ConfigError(setting, addr, fix)
    if host.startswith("["):
        if not host.endswith("]") or len(host) < 3:
            raise ConfigError(setting, addr, fix)
        host = host[1:-1]
    elif ":" in host:
        # A bare IPv6 address is ambiguous with the port separator.
        raise ConfigError(setting, addr, fix)
    return (host or None), port


def reactor_probe(send_channel: trio.MemorySendChannel[HealthProbe]) -> Probe:
    """Build the ``/healthz`` probe that asks the reactor to prove it is turning.

    Each call sends one ``HealthProbe(reply=trio.Event())`` into
    ``send_channel`` (the reactor's event channel) and waits until the reactor
    sets ``reply``. The reactor needs only ``event.reply.set()`` on receipt.
    The server bounds the whole call (the send included: a full channel means
    a stuck reactor) by its probe timeout.
    """

    async def probe() -> bool:
        reply = trio.Event()
        await send_channel.send(HealthProbe(reply=reply))
        await reply.wait()
        return True

    return probe


@dataclass(frozen=True, slots=True)
class _Response:
    status: HTTPStatus
    body: str
    content_type: str = "text/plain; charset=utf-8"
    allow: str | None = None
    www_authenticate: str | None = None
    page: bool = False
    """The HTML page: a content security policy that allows its own inline script and nothing else."""

    def encode(self, *, head_only: bool) -> bytes:
        # backslashreplace: a lone surrogate (possible in a URI decoded from JSON) must not fail the response.
        body = self.body.encode("utf-8", "backslashreplace")
        lines = [
            f"HTTP/1.1 {self.status.value} {self.status.phrase}",
            f"Content-Type: {self.content_type}",
            f"Content-Length: {len(body)}",
            "Cache-Control: no-store",
            "Connection: close",
        ]
        if self.allow is not None:
            lines.append(f"Allow: {self.allow}")
        if self.www_authenticate is not None:
            lines.append(f"WWW-Authenticate: {self.www_authenticate}")
        if self.page:
            lines += [
                "Content-Security-Policy: default-src 'none'; script-src 'unsafe-inline'; "
                "style-src 'unsafe-inline'; connect-src 'self'; img-src data:; frame-ancestors 'none'",
                "X-Content-Type-Options: nosniff",
                "Referrer-Policy: no-referrer",
            ]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")
        return head if head_only else head + body


class _BadRequest(Exception):
    """The request head cannot be parsed; answered with ``status`` and the connection closed."""

    def __init__(self, status: HTTPStatus, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class _ProbeRun:
    """One probe of the reactor in flight: its outcome once ``done`` is set."""

    def __init__(self) -> None:
        self.done = trio.Event()
        self.outcome: bool | BaseException = trio.TooSlowError()


class _SharedProbe:
    """One liveness probe at a time, shared by every concurrent ``/healthz`` request.

    The probe runs in the server's own nursery, not in a request's task, so a
    request that gives up (its client went away, its connection was evicted)
    never strands the others. Each request waits for the outcome of the probe
    in flight, or starts one; it stops waiting at its own deadline. A reactor
    that does not answer therefore sees at most one probe per ``timeout``.
    """

    def __init__(self, probe: Probe, timeout: float, nursery: trio.Nursery) -> None:
        self._probe = probe
        self._timeout = timeout
        self._nursery = nursery
        self._current: _ProbeRun | None = None

    async def _run(self, run: _ProbeRun) -> None:
        with trio.move_on_after(self._timeout):
            try:
                run.outcome = bool(await self._probe())
            except Exception as exc:
                run.outcome = exc
        self._current = None
        run.done.set()

    async def check(self) -> bool | BaseException:
        """Wait (at most the probe timeout) for the probe in flight, starting one if none is.

        Returns:
            True/False from the probe, the exception it raised, or
            :class:`trio.TooSlowError` when no answer came in time.
        """
        run = self._current
        if run is None:
            run = self._current = _ProbeRun()
            self._nursery.start_soon(self._run, run)
        with trio.move_on_after(self._timeout):
            await run.done.wait()
        return run.outcome


@dataclass(frozen=True, slots=True)
class _Endpoints:
    probe: _SharedProbe | None
    ready: Ready | None
    snapshot: Snapshot | None
    probe_timeout: float
    status: Status | None = None
    access: StatusAccess | None = None

    def paths(self) -> list[str]:
        out = ["/", "/status"] if self.status is not None else []
        if self.probe is not None:
            out.append("/healthz")
        if self.ready is not None:
            out.append("/readyz")
        if self.snapshot is not None:
            out.append("/metrics")
        return out

    async def answer(self, path: str, headers: dict[str, str] | None = None) -> _Response:
        if path in ("/", "/status") and self.status is not None and self.access is not None:
            refused = self.access.refusal(headers or {})
            if refused is not None:
                return refused
            if path == "/":
                return _Response(
                    HTTPStatus.OK, STATUS_PAGE, content_type="text/html; charset=utf-8", page=True
                )
            return self._status(self.status)
        if path == "/healthz" and self.probe is not None:
            return await self._healthz(self.probe)
        if path == "/readyz" and self.ready is not None:
            return self._readyz(self.ready)
        if path == "/metrics" and self.snapshot is not None:
            return self._metrics(self.snapshot)
        return _Response(
            HTTPStatus.NOT_FOUND, f"not found: {redact(path)!r}; this port serves {', '.join(self.paths())}\n"
        )

    async def _healthz(self, probe: _SharedProbe) -> _Response:
        outcome = await probe.check()
        if isinstance(outcome, trio.TooSlowError):
            return _Response(
                HTTPStatus.SERVICE_UNAVAILABLE,
                f"unhealthy: the reactor did not answer within {self.probe_timeout:g} s\n",
            )
        if isinstance(outcome, trio.BrokenResourceError | trio.ClosedResourceError):
            return _Response(HTTPStatus.SERVICE_UNAVAILABLE, "unhealthy: the reactor's channel is closed\n")
        if isinstance(outcome, BaseException):
            return _Response(
                HTTPStatus.SERVICE_UNAVAILABLE, f"unhealthy: the probe failed: {redact(repr(outcome))}\n"
            )
        if not outcome:
            return _Response(HTTPStatus.SERVICE_UNAVAILABLE, "unhealthy: the probe reported failure\n")
        return _Response(HTTPStatus.OK, "ok\n")

    @staticmethod
    def _readyz(ready: Ready) -> _Response:
        try:
            is_ready, reason = ready()
        except Exception as exc:
            return _Response(
                HTTPStatus.SERVICE_UNAVAILABLE,
                f"not ready: the readiness check failed: {redact(repr(exc))}\n",
            )
        reason = redact(reason)
        if is_ready:
            return _Response(HTTPStatus.OK, f"ready{': ' + reason if reason else ''}\n")
        return _Response(HTTPStatus.SERVICE_UNAVAILABLE, f"not ready: {reason or 'no reason given'}\n")

    @staticmethod
    def _status(status: Status) -> _Response:
        try:
            body = orjson.dumps(status()).decode()
        except Exception as exc:
            return _Response(HTTPStatus.INTERNAL_SERVER_ERROR, f"status unavailable: {redact(repr(exc))}\n")
        return _Response(HTTPStatus.OK, body, content_type="application/json")

    @staticmethod
    def _metrics(snapshot: Snapshot) -> _Response:
        try:
            text = render_with_process(snapshot())
        except Exception as exc:
            return _Response(HTTPStatus.INTERNAL_SERVER_ERROR, f"metrics unavailable: {redact(repr(exc))}\n")
        return _Response(HTTPStatus.OK, text, content_type=METRICS_CONTENT_TYPE)


def _headers(raw: bytes) -> dict[str, str]:
    """The header fields of a request head (names lowercased; the last of a repeated name wins)."""
    out: dict[str, str] = {}
    for line in raw.split(b"\r\n"):
        name, sep, value = line.partition(b":")
        if sep and name and name == name.strip():
            out[name.decode("latin-1").lower()] = value.strip().decode("latin-1")
    return out


def _parse_head(head: bytes) -> tuple[str, str]:
    """Parse a request head (request line + headers, CRLF-terminated) into ``(method, path)``."""
    request_line, _, _headers = head.partition(b"\r\n")
    parts = request_line.split(b" ")
    if len(parts) != 3:
        raise _BadRequest(HTTPStatus.BAD_REQUEST, "malformed request line")
    method_b, target_b, version = parts
    if version not in (b"HTTP/1.0", b"HTTP/1.1"):
        raise _BadRequest(HTTPStatus.BAD_REQUEST, "unsupported HTTP version")
    if not method_b.isalpha() or not method_b.isupper():
        raise _BadRequest(HTTPStatus.BAD_REQUEST, "malformed method")
    if not target_b.startswith(b"/"):
        raise _BadRequest(HTTPStatus.BAD_REQUEST, "the request target must be an absolute path")
    try:
        target = target_b.decode("ascii")
    except UnicodeDecodeError:
        raise _BadRequest(HTTPStatus.BAD_REQUEST, "non-ASCII request target") from None
    return method_b.decode("ascii"), target.partition("?")[0]


async def _read_head(stream: trio.SocketStream) -> bytes | None:
    """Read up to the blank line ending the head; None if the client closed first."""
    buf = bytearray()
    while True:
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            if end + 4 > MAX_REQUEST_HEAD:
                break
            return bytes(buf[: end + 2])
        if len(buf) > MAX_REQUEST_HEAD:
            break
        chunk = await stream.receive_some(_RECV_CHUNK)
        if not chunk:
            return None
        buf += chunk
    raise _BadRequest(
        HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, f"request head exceeds {MAX_REQUEST_HEAD} bytes"
    )


async def _send(stream: trio.SocketStream, data: bytes) -> None:
    with trio.move_on_after(WRITE_TIMEOUT):
        await stream.send_all(data)


class _Connections:
    """The connections one listener holds, oldest first, and who may be evicted.

    A connection is *evictable* while it waits for its request head or while
    its answer is being written: those are the phases a hostile client
    controls. While the server computes an answer (bounded by the probe
    timeout) it is not. When a new connection arrives and ``limit`` are held,
    the oldest evictable one is cancelled (closed without an answer).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._held: dict[int, trio.CancelScope] = {}
        self._evictable: dict[int, None] = {}
        self._next = 0

    def admit(self, scope: trio.CancelScope) -> int:
        """Register a new connection (evictable at first); evict the oldest if over the limit."""
        while len(self._held) >= self.limit and self._evictable:
            oldest = next(iter(self._evictable))
            self._evictable.pop(oldest)
            self._held.pop(oldest).cancel()
        key = self._next
        self._next += 1
        self._held[key] = scope
        self._evictable[key] = None
        return key

    def protect(self, key: int) -> None:
        """The request arrived and is being answered: not evictable until :meth:`expose`."""
        self._evictable.pop(key, None)

    def expose(self, key: int) -> None:
        """The answer is being written: evictable again (the client may not be reading)."""
        if key in self._held:
            self._evictable[key] = None

    def release(self, key: int) -> None:
        self._held.pop(key, None)
        self._evictable.pop(key, None)


async def _handle(stream: trio.SocketStream, endpoints: _Endpoints, conns: _Connections) -> None:
    with trio.CancelScope() as scope:
        key = conns.admit(scope)
        try:
            await _serve_one(stream, endpoints, conns, key)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            # The client went away mid-request; nothing to answer.
            pass
        finally:
            conns.release(key)
            await trio.aclose_forcefully(stream)


async def _serve_one(stream: trio.SocketStream, endpoints: _Endpoints, conns: _Connections, key: int) -> None:
    head: bytes | None = None
    with trio.move_on_after(READ_TIMEOUT) as read_scope:
        try:
            head = await _read_head(stream)
        except _BadRequest as bad:
            await _send(stream, _Response(bad.status, bad.reason + "\n").encode(head_only=False))
            return
    if read_scope.cancelled_caught:
        await _send(
            stream,
            _Response(HTTPStatus.REQUEST_TIMEOUT, "request head not received in time\n").encode(
                head_only=False
            ),
        )
        return
    if head is None:
        return
    try:
        method, path = _parse_head(head)
    except _BadRequest as bad:
        await _send(stream, _Response(bad.status, bad.reason + "\n").encode(head_only=False))
        return
    conns.protect(key)
    if method not in ("GET", "HEAD"):
        response = _Response(
            HTTPStatus.METHOD_NOT_ALLOWED, f"method {method} not allowed\n", allow="GET, HEAD"
        )
    else:
        response = await endpoints.answer(path, _headers(head.partition(b"\r\n")[2]))
    conns.expose(key)
    await _send(stream, response.encode(head_only=method == "HEAD"))


async def _serve(
    addr: str,
    setting: str,
    make_endpoints: Callable[[trio.Nursery], _Endpoints],
    task_status: trio.TaskStatus[int],
) -> NoReturn:
    host, port = parse_addr(addr, setting=setting)
    listeners = await trio.open_tcp_listeners(port, host=host)
    conns = _Connections(connection_limit())
    bound = listeners[0].socket.getsockname()[1]

    async with trio.open_nursery() as nursery:
        endpoints = make_endpoints(nursery)

        async def handler(stream: trio.SocketStream) -> None:
            await _handle(stream, endpoints, conns)

        await nursery.start(trio.serve_listeners, handler, listeners)
        task_status.started(bound)
    raise AssertionError("unreachable: serve_listeners never returns")


async def serve_health(
    addr: str,
    *,
    probe: Probe,
    ready: Ready,
    snapshot: Snapshot | None = None,
    status: Status | None = None,
    status_token: str | None = None,
    probe_timeout: float = PROBE_TIMEOUT,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Serve ``/healthz`` and ``/readyz`` (and ``/metrics`` if ``snapshot`` is given) on ``addr``.

    Runs until cancelled. Start it with ``port = await nursery.start(serve_health, ...)``:
    ``task_status.started`` reports the bound port (useful with port 0; with
    several listeners, e.g. ``localhost`` on two families, the first one's).

    Args:
        addr: ``HOST:PORT`` (see :func:`parse_addr`); invalid → ``ConfigError`` naming ``--health-addr``.
        probe: liveness check, bounded by ``probe_timeout`` (use :func:`reactor_probe`).
        ready: readiness check; sync and non-blocking.
        snapshot: metrics source, to serve ``/metrics`` on the same port.
        status: status source, to serve ``/status`` and the page at ``/`` (see :class:`StatusAccess`).
        status_token: the bearer token ``/status`` and ``/`` need (required beyond loopback).
        probe_timeout: seconds ``/healthz`` waits for ``probe`` before answering 503.
    """
    if not (probe_timeout > 0 and math.isfinite(probe_timeout)):
        raise ConfigError("probe_timeout", probe_timeout, "use a positive number of seconds, e.g. 2")

    access = StatusAccess.for_bind(addr, status_token) if status is not None else None

    def endpoints(nursery: trio.Nursery) -> _Endpoints:
        shared = _SharedProbe(probe, probe_timeout, nursery)
        return _Endpoints(
            probe=shared,
            ready=ready,
            snapshot=snapshot,
            probe_timeout=probe_timeout,
            status=status,
            access=access,
        )

    await _serve(addr, "--health-addr", endpoints, task_status)


async def serve_metrics(
    addr: str,
    *,
    snapshot: Snapshot,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Serve only ``/metrics`` on ``addr`` (the ``--metrics-addr`` listener); runs until cancelled.

    ``task_status.started`` reports the bound port. An invalid ``addr`` raises
    ``ConfigError`` naming ``--metrics-addr``.
    """

    def endpoints(_nursery: trio.Nursery) -> _Endpoints:
        return _Endpoints(probe=None, ready=None, snapshot=snapshot, probe_timeout=PROBE_TIMEOUT)

    await _serve(addr, "--metrics-addr", endpoints, task_status)
