"""The webhook intake: HTTP/1.1 on its own address, bounded in connections, time and size.

Routes::

    POST /hooks/NAME   a delivery for source NAME: verified, stored durably, then 200
    GET  /healthz      200 while every source's log can be written, else 503 naming the sources
                       and why (a failed write, a failed sync), never a path (for probes)

Anything else is 404 (no such path) or 405 (a hook path with another method).

The HTTP handling is h11 (the state machine hypercorn itself uses) on trio
sockets, so every limit is enforced here, by this code:

* at most ``max_connections`` connections are held at once. No client can
  take them all: a connection whose request is still *arriving* (its head or
  its body not yet whole: the part of a connection its client controls) is
  cut, without an answer, to make room. When every connection is held, the
  oldest arriving one is cut for a new one; and one client (a peer address)
  may hold at most a quarter of them arriving (:attr:`Limits.per_client`):
  past that, its own oldest arriving one is cut. A new connection is refused
  with 503 only when every held one has its request in (being stored or
  answered). rfcs/0373 has the reasons;
* a request (its headers and its whole body) must arrive within
  ``request_timeout`` of the moment the connection was ready for it
  (accepted, or the previous response sent). A slowloris is cut there
  whatever its pace, and an idle keep-alive connection is closed;
* headers are capped at :data:`MAX_HEADER_BYTES` (431);
* the body is capped (``--max-body``, or the source's ``max_body``): a larger
  ``Content-Length`` is answered 413 before a byte of the body is read, and a
  chunked body is counted as it streams and refused the moment it passes the
  cap; never more than the cap is held;
* an unauthenticated request is refused (401) as soon as its headers allow:
  a missing signature header or a wrong bearer token means the body is never
  read;
* a number in a header (``Content-Length``, Slack's timestamp) is ASCII
  digits or the request is refused with 400; no request, whatever its bytes,
  is left unanswered by an error in this code (a property test sends header
  values over the whole latin-1 range, tests/servers/test_webhook_hostile.py).

A delivery is answered 200 only once it is durable
(:meth:`~agentd.servers.webhook.store.DeliveryStore.append`); a sender that
hears anything else (or nothing, because the server died) retries, and the
retry is recognised by its delivery id. Errors go back as a one-line JSON
``{"error": ...}`` with ``Connection: close``; none names a local path (the
log names it). ``/healthz`` answers 503 while a source's log cannot be
written (a failed write, e.g. a full disk, until a write succeeds again).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import os
import socket
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Final

import h11
import orjson
import trio

from agentd.core.jsonvalue import JSONObject
from agentd.observe.timeline import mark
from agentd.servers.webhook import wire
from agentd.servers.webhook.delivery import Accepted, Reply, interpret
from agentd.servers.webhook.sources import SourceSpec
from agentd.servers.webhook.store import DeliveryStore, Duplicate, Staged, Stored, StoreUnavailable
from agentd.servers.webhook.verify import Refusal, RefusalCode, check_body, check_headers

__all__ = [
    "DEFAULT_MAX_BODY",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_REQUEST_TIMEOUT",
    "MAX_HEADER_BYTES",
    "Limits",
    "Listener",
    "bind",
]

log = logging.getLogger("agentd.servers.webhook")

DEFAULT_MAX_BODY: Final = 1024 * 1024
"""GitHub caps its payloads at 25 MB but real ones are tens of KB; Slack's and Alertmanager's are smaller."""
DEFAULT_MAX_CONNECTIONS: Final = 64
"""Senders open one connection per delivery and close it; 64 at once is far above a busy repository's rate."""
PER_CLIENT_SHARE: Final = 4
"""One client (a peer address) may hold at most 1/4 of ``max_connections`` with requests still
arriving: another client's arriving requests keep the other 3/4, which no flood from one address
can cut. Behind a proxy every sender is the proxy's address; its requests arrive in milliseconds,
so only a quarter of the slots being slow at once would cut one."""
DEFAULT_REQUEST_TIMEOUT: Final = 10.0
"""Seconds for one request to arrive whole: GitHub gives up on a delivery after 10 s itself, and a
1 MiB body needs under a second on any link a webhook sender uses."""
MAX_HEADER_BYTES: Final = 32 * 1024
"""Request line plus headers: GitHub's and Slack's are under 2 KiB; nginx's default buffer is 8 KiB x 4."""
SEND_TIMEOUT: Final = 5.0
"""Seconds to write a response: a client that does not read it is dropped (the delivery is durable)."""
MAX_REQUESTS_PER_CONNECTION: Final = 100
"""Requests on one kept-alive connection before it is closed (bounds a connection's life)."""
RECEIVE_CHUNK: Final = 64 * 1024
LOG_EVERY: Final = 60.0
"""Seconds between two logged refusals of the same kind for the same source (scanners would flood stderr)."""
RETRY_AFTER: Final = "5"
ACCEPT_RETRY: Final = 0.1
"""Seconds before accepting again after the system ran out of descriptors or memory (trio's own pause)."""
_ACCEPT_CAPACITY_ERRNOS: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
_IGNORABLE_ACCEPT_NAMES: Final = (
    "EPERM ECONNABORTED EPROTO ENETDOWN ENOPROTOOPT EHOSTDOWN ENONET EHOSTUNREACH EOPNOTSUPP "
    "ENETUNREACH ENOSR ESOCKTNOSUPPORT EPROTONOSUPPORT ETIMEDOUT ECONNRESET"
)
_ACCEPT_IGNORABLE_ERRNOS: Final = frozenset(
    getattr(errno, name) for name in _IGNORABLE_ACCEPT_NAMES.split() if hasattr(errno, name)
)
"""A connection that failed between the client's connect and the accept (trio's list): skipped."""
DEFER_ACCEPT: Final = 1
"""Seconds Linux holds a connected socket that sent nothing before handing it over (TCP_DEFER_ACCEPT;
the kernel rounds it to its SYN-ACK retransmission steps)."""
ACCEPT_BATCH: Final = 64
"""Connections accepted in a row before other tasks run (each is handled on the spot or given a task)."""


@dataclass(frozen=True, slots=True)
class Limits:
    """The intake's bounds (see the module docstring)."""

    max_body: int = DEFAULT_MAX_BODY
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    max_header_bytes: int = MAX_HEADER_BYTES

    @property
    def per_client(self) -> int:
        """Connections one client may hold with requests still arriving (:data:`PER_CLIENT_SHARE`)."""
        return max(1, self.max_connections // PER_CLIENT_SHARE)


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (bound before the server runs, so a busy port fails at start).

    Raises:
        OSError: the address cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family, backlog=128)
    if hasattr(socket, "TCP_DEFER_ACCEPT"):
        # Linux hands over a connection once its first bytes are in (or after DEFER_ACCEPT seconds):
        # a sender's request is then usually whole when it is accepted (handled at once, never cut
        # to make room), and a client that connects and sends nothing holds no slot meanwhile.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT, DEFER_ACCEPT)
    sock.setblocking(False)
    return sock


@dataclass(frozen=True, slots=True)
class _Response:
    status: int
    body: JSONObject
    headers: tuple[tuple[str, str], ...] = ()
    close: bool = False


def _error(status: int, reason: str, *headers: tuple[str, str]) -> _Response:
    return _Response(status, {"error": reason}, headers, close=True)


@dataclass(slots=True)
class _Target:
    """A POST for a source whose headers passed: what its body is checked against."""

    spec: SourceSpec
    store: DeliveryStore
    headers: dict[str, str]
    cap: int


@dataclass(slots=True, eq=False)
class _Arrival:
    """A connection read by a task, while its request is still arriving (head or body): cut first."""

    peer: str
    scope: trio.CancelScope
    """Cancelled to cut the connection (its task closes it)."""
    evicted: bool = False
    """Cut to make room: its slot was given back when it was cut."""


class _Arrivals:
    """The connections whose request is still arriving, oldest first, overall and by client."""

    def __init__(self) -> None:
        self._all: dict[_Arrival, None] = {}
        self._by_peer: dict[str, dict[_Arrival, None]] = {}

    def __len__(self) -> int:
        return len(self._all)

    def __contains__(self, arrival: _Arrival) -> bool:
        return arrival in self._all

    def add(self, arrival: _Arrival) -> None:
        """``arrival``'s request starts arriving now (the newest)."""
        self.discard(arrival)
        self._all[arrival] = None
        self._by_peer.setdefault(arrival.peer, {})[arrival] = None

    def discard(self, arrival: _Arrival) -> None:
        """``arrival``'s request is whole, or it is gone (no-op if it was not arriving)."""
        if arrival not in self._all:
            return
        del self._all[arrival]
        mine = self._by_peer[arrival.peer]
        del mine[arrival]
        if not mine:
            del self._by_peer[arrival.peer]

    def count(self, peer: str) -> int:
        return len(self._by_peer.get(peer, ()))

    def oldest(self, peer: str | None = None) -> _Arrival | None:
        """The connection arriving the longest (of ``peer``, if given), or None."""
        pool = self._all if peer is None else self._by_peer.get(peer, {})
        return next(iter(pool), None)


@dataclass(slots=True)
class _Waiting:
    """A connection whose delivery is written and is answered when it is durable."""

    sock: socket.socket
    post: wire.Post
    staged: Staged


class Listener:
    """Serves ``/hooks/NAME`` for the given sources on an already bound socket.

    A request that has arrived whole when its connection is accepted (a webhook
    sender writes its request at once) is handled on the spot: read, verified,
    written, and answered when the group commit has made it durable, with no
    task of its own. Anything else (a request still arriving, a ``100-continue``,
    a kept-alive connection's next request, an answer the socket cannot take at
    once) continues in a task per connection, under the time bounds above.

    Args:
        sock: from :func:`bind`.
        sources: source name -> (spec, its store).
        limits: the bounds.
        clock: the wall clock (Unix seconds): Slack's replay window, received times.
        step_hook: fault tests stop the process at ``"answered"`` (a stored delivery's 200 was sent).
    """

    def __init__(
        self,
        sock: socket.socket,
        sources: Mapping[str, tuple[SourceSpec, DeliveryStore]],
        limits: Limits = Limits(),
        *,
        clock: Callable[[], float] = time.time,
        step_hook: Callable[[str], None] | None = None,
    ) -> None:
        self._sock = sock
        self.sources = dict(sources)
        self.limits = limits
        self._clock = clock
        self.active = 0
        """Connections open now (being read, waiting for their delivery to be durable, or answered)."""
        self.overloaded = 0
        """Connections turned away with 503 because ``max_connections`` were busy."""
        self.unrouted = 0
        """Requests for no source (404) or with the wrong method (405)."""
        self.timeouts = 0
        """Requests cut off at ``request_timeout`` (slow or idle clients)."""
        self.evicted = 0
        """Connections cut while their request was still arriving, to make room (see the module docstring)."""
        self.whole_on_arrival = 0
        """Connections whose first request had arrived whole (a simple POST) and was handled at once."""
        self.streamed = 0
        """Connections read by a task of their own: the request still arriving, not a simple POST, or
        the next request of a kept-alive connection."""
        self._logged: dict[tuple[str, str], float] = {}
        self._hook = step_hook
        self._waiting: dict[str, list[_Waiting]] = {name: [] for name in self.sources}
        self._arrivals = _Arrivals()
        self._nursery: trio.Nursery | None = None

    @property
    def address(self) -> str:
        """``http://HOST:PORT`` of the bound socket."""
        host, port = self._sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}"

    async def run(self) -> None:
        """Accept connections for the server's life (a server source)."""
        names = ",".join(self.sources)
        paths = f"/hooks/{names}" if len(self.sources) == 1 else f"/hooks/{{{names}}}"
        hooks = [
            (store, partial(self._answer_durable, name)) for name, (_spec, store) in self.sources.items()
        ]
        for store, hook in hooks:
            store.round_hooks.append(hook)
        # Printed once accepting, so a launcher (or a person) knows where to point senders. A stderr
        # that cannot be written (a full disk, a reader gone) must not stop the intake.
        with contextlib.suppress(OSError, ValueError):
            print(
                f"agentd serve webhook: receiving webhooks on {self.address}{paths}",
                file=sys.stderr,
                flush=True,
            )
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await self._accept_forever()
        finally:
            self._nursery = None
            for store, hook in hooks:
                store.round_hooks.remove(hook)
            for waiting in self._waiting.values():
                for w in waiting:
                    self._close(w.sock)  # not answered: the sender retries
                waiting.clear()
            trio.lowlevel.notify_closing(self._sock)
            self._sock.close()

    async def _accept_forever(self) -> None:
        while True:
            await trio.lowlevel.wait_readable(self._sock)
            for _ in range(ACCEPT_BATCH):
                try:
                    sock, _peer = self._sock.accept()
                except BlockingIOError:
                    break
                except OSError as exc:
                    if exc.errno in _ACCEPT_IGNORABLE_ERRNOS:
                        continue  # that connection was gone before it was accepted
                    if exc.errno not in _ACCEPT_CAPACITY_ERRNOS:
                        raise
                    log.error("accept failed (%s); retrying in %g s", os.strerror(exc.errno), ACCEPT_RETRY)
                    await trio.sleep(ACCEPT_RETRY)
                    break
                self.take(sock)

    # ---------------------------------------------------------------- connections

    def take(self, sock: socket.socket) -> None:
        """Take a new connection: handled on the spot or given a task; when every slot is held, the
        oldest connection still arriving is cut to make room, and with none, this one gets 503."""
        sock.setblocking(False)
        if self.active >= self.limits.max_connections and (oldest := self._arrivals.oldest()) is not None:
            self._evict(oldest)
        if self.active >= self.limits.max_connections:
            self.overloaded += 1
            self._log_refusal(
                "*", "overloaded", f"{self.limits.max_connections} connections busy (--max-connections)"
            )
            with contextlib.suppress(OSError):  # a fresh socket takes a short answer at once
                sock.send(
                    _raw_response(503, "too many connections; retry later", ("retry-after", RETRY_AFTER))
                )
            sock.close()
            return
        self.active += 1
        try:
            self._first_request(sock)
        except Exception:  # one connection's failure must never stop the intake
            log.exception("webhook connection failed")
            self._close(sock)

    def _close(self, sock: socket.socket) -> None:
        """Close a connection this code holds (not one a task holds) and count it gone."""
        sock.close()
        self.active -= 1

    def _evict(self, arrival: _Arrival) -> None:
        """Cut a connection whose request is still arriving (its task closes it); its slot is free now."""
        self._arrivals.discard(arrival)
        arrival.evicted = True
        arrival.scope.cancel()
        self.active -= 1
        self.evicted += 1
        self._log_refusal(
            "*",
            "evicted",
            "cut connections whose requests were still arriving, to make room "
            f"(--max-connections {self.limits.max_connections}, {self.limits.per_client} a client)",
        )

    def _arriving(self, arrival: _Arrival) -> None:
        """``arrival``'s request starts arriving (no-op if it is): past its client's share, that
        client's oldest is cut."""
        if arrival.evicted or arrival in self._arrivals:
            return  # cut already (its task runs on to its first checkpoint), or arriving already
        while self._arrivals.count(arrival.peer) >= self.limits.per_client:
            oldest = self._arrivals.oldest(arrival.peer)
            assert oldest is not None
            self._evict(oldest)
        self._arrivals.add(arrival)

    def _first_request(self, sock: socket.socket) -> None:
        """The connection's first request, handled here if it is a whole simple POST (:mod:`.wire`);
        else the connection goes to a task, which reads it with h11 from its first byte."""
        try:
            data = sock.recv(RECEIVE_CHUNK)
        except BlockingIOError:
            data = b""
        except OSError:
            self._close(sock)
            return
        post = wire.parse_post(data, self.limits.max_header_bytes) if data else None
        if post is None:
            self._spawn(sock, data, arriving=True)
            return
        self.whole_on_arrival += 1
        if post.size > self.limits.max_header_bytes:
            self._answer(sock, post, self._head_too_large())
            return
        target = self._head("POST", post.target, post.headers)
        if isinstance(target, _Response):
            self._answer(sock, post, target)
            return
        decided = self._judge(target, post.body)
        if isinstance(decided, _Response):
            self._answer(sock, post, decided)
            return
        spec, store = target.spec, target.store
        try:
            staged = store.stage(decided)
        except StoreUnavailable as exc:
            self._answer(sock, post, self._unavailable(spec, exc))
            return
        if staged is None:
            # The log is being rolled to a new segment: the task waits its turn (and verifies again).
            self.whole_on_arrival -= 1
            self._spawn(sock, data)
            return
        if staged.item.durable:  # a retry of a delivery that is on disk
            self._answer(sock, post, self._settled(spec, store, staged))
            return
        self._waiting[spec.name].append(_Waiting(sock, post, staged))

    def _answer_durable(self, name: str) -> None:
        """A round of ``name``'s group commit ended: answer the connections whose delivery it made
        durable (or all of them with 503 if the log broke)."""
        waiting = self._waiting[name]
        if not waiting:
            return
        spec, store = self.sources[name]
        still: list[_Waiting] = []
        for w in waiting:
            if not w.staged.item.durable and store.broken is None:
                still.append(w)
                continue
            try:
                self._answer(w.sock, w.post, self._settled(spec, store, w.staged))
            except Exception:  # called from the store's commit loop: nothing may escape into it
                log.exception("webhook connection failed")
                self._close(w.sock)
        self._waiting[name] = still

    def _answer(self, sock: socket.socket, post: wire.Post, response: _Response) -> None:
        """Answer a request read by :func:`.wire.parse_post` on a connection this code holds; then
        close it, or give it to a task (to read the next request, or to finish sending)."""
        close = response.close or post.close
        data = wire.render(
            response.status, orjson.dumps(response.body) + b"\n", response.headers, close=close
        )
        try:
            sent = sock.send(data)
        except BlockingIOError:
            sent = 0
        except OSError:
            self._close(sock)  # the client went away
            return
        if sent < len(data):
            # The rest is sent by a task, which then reads on if the connection stays open.
            self._spawn(
                sock, b"" if close else post.rest, served=1, unsent=(data[sent:], response, not close)
            )
        elif close:
            self._answered(response)
            self._close(sock)
        else:
            self._answered(response)
            self._spawn(sock, post.rest, served=1)

    def _answered(self, response: _Response) -> None:
        mark("webhook.answered")
        if self._hook is not None and response.status == 200 and "duplicate" in response.body:
            self._hook("answered")

    def _spawn(
        self,
        sock: socket.socket,
        data: bytes,
        *,
        served: int = 0,
        unsent: tuple[bytes, _Response, bool] | None = None,
        arriving: bool = False,
    ) -> None:
        """Continue the connection in a task of its own: h11 reads from ``data`` (received already) on;
        ``unsent``: first finish sending this answer (the rest of its bytes), then read on only if
        its flag says the connection stays open. ``arriving``: its request is not whole yet, so it
        may be cut to make room from now on (else from when its task reads the next request)."""
        assert self._nursery is not None
        if unsent is None or unsent[2]:
            self.streamed += 1
        arrival = _Arrival(_peer(sock), trio.CancelScope())
        if arriving:
            self._arriving(arrival)
        self._nursery.start_soon(self._connection, sock, data, served, unsent, arrival)

    async def _connection(
        self,
        sock: socket.socket,
        data: bytes,
        served: int,
        unsent: tuple[bytes, _Response, bool] | None,
        arrival: _Arrival,
    ) -> None:
        """Serve one connection and close it (whatever happens: a handler's error never escapes)."""
        try:
            stream = trio.SocketStream(trio.socket.from_stdlib_socket(sock))
        except Exception:
            log.exception("webhook connection failed")
            sock.close()
            self._release(arrival)
            return
        try:
            with arrival.scope:  # cancelled when the connection is cut to make room (_evict)
                if unsent is not None:
                    rest, response, keep_alive = unsent
                    with trio.move_on_after(SEND_TIMEOUT) as scope:
                        await stream.send_all(rest)
                    if scope.cancelled_caught:
                        return
                    self._answered(response)
                    if not keep_alive:
                        return
                conn = h11.Connection(h11.SERVER, max_incomplete_event_size=self.limits.max_header_bytes)
                if data:
                    conn.receive_data(data)  # (b"" would tell h11 the client closed)
                await self._serve(stream, conn, served, arrival)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the client went away; nothing was acknowledged to it
        except Exception:  # one connection's failure must never stop the intake
            log.exception("webhook connection failed")
        finally:
            # Closed at once, without a checkpoint: what aclose_forcefully does, minus a cancel
            # scope and a raised Cancelled per connection.
            stream.socket.close()
            self._release(arrival)

    def _release(self, arrival: _Arrival) -> None:
        """A task's connection is closed: its slot is free (unless it was freed when it was cut)."""
        self._arrivals.discard(arrival)
        if not arrival.evicted:
            self.active -= 1

    async def _serve(
        self, stream: trio.SocketStream, conn: h11.Connection, served: int, arrival: _Arrival
    ) -> None:
        for _ in range(served, MAX_REQUESTS_PER_CONNECTION):
            response: _Response | None = None
            self._arriving(arrival)  # the next request: arriving until it is whole
            with trio.move_on_after(self.limits.request_timeout) as scope:
                try:
                    request = await _next_event(stream, conn)
                    if not isinstance(request, h11.Request):
                        return  # closed before a request (ConnectionClosed)
                    response = await self._request(stream, conn, request, scope, arrival)
                except h11.RemoteProtocolError as exc:
                    response = self._protocol_error(exc)
            self._arrivals.discard(arrival)
            if scope.cancelled_caught:
                if conn.their_state is h11.IDLE and not conn.trailing_data[0]:
                    return  # an idle kept-alive connection: close quietly
                self.timeouts += 1
                self._log_refusal(
                    "*", "timeout", f"a request did not arrive within {self.limits.request_timeout:g} s"
                )
                response = _error(408, f"the request did not arrive within {self.limits.request_timeout:g} s")
            if response is None:
                return
            if not await self._send(stream, conn, response) or not _keeps_alive(conn, response):
                return
            conn.start_next_cycle()

    def _protocol_error(self, exc: h11.RemoteProtocolError) -> _Response:
        status = exc.error_status_hint
        reason = (
            f"request headers over {self.limits.max_header_bytes} bytes"
            if status == 431
            else f"malformed HTTP request ({exc})"
        )
        return _error(status, reason)

    async def _request(
        self,
        stream: trio.SocketStream,
        conn: h11.Connection,
        request: h11.Request,
        deadline: trio.CancelScope,
        arrival: _Arrival,
    ) -> _Response | None:
        """Read the body (within ``deadline``), then verify, store and answer (no deadline, and never
        cut to make room: a sender cut off while its delivery is being made durable would only retry it)."""
        size = len(request.target) + sum(len(k) + len(v) + 4 for k, v in request.headers)
        if size > self.limits.max_header_bytes:
            # h11 bounds what it buffers of an incomplete head; a complete one read in one go is checked here.
            return self._head_too_large()
        headers: dict[str, str] = {}
        for raw_name, raw_value in request.headers:
            headers.setdefault(raw_name.decode("latin-1"), raw_value.decode("latin-1"))
        target = self._head(request.method.decode("ascii", "replace"), request.target, headers)
        if isinstance(target, _Response):
            return target
        if conn.they_are_waiting_for_100_continue:
            await stream.send_all(conn.send(h11.InformationalResponse(status_code=100, headers=[])))
        body = bytearray()
        while True:
            event = await _next_event(stream, conn)
            if isinstance(event, h11.Data):
                body += event.data
                if len(body) > target.cap:
                    return self._refuse(target.spec, target.store, _too_large(target.cap))
            elif isinstance(event, h11.EndOfMessage):
                deadline.deadline = math.inf  # the request is in: the bound was on its arrival
                self._arrivals.discard(arrival)
                break
            else:
                return None  # the client closed mid-body: nothing to answer, nothing stored
        decided = self._judge(target, bytes(body))
        if isinstance(decided, _Response):
            return decided
        return await self._store(target.spec, target.store, decided)

    def _head_too_large(self) -> _Response:
        """431 for a head over ``max_header_bytes``, counted as :attr:`.wire.Post.size` counts it."""
        return _error(431, f"request headers over {self.limits.max_header_bytes} bytes")

    def _head(self, method: str, raw_target: bytes, headers: dict[str, str]) -> _Response | _Target:
        """Route a request by its head (``headers``: each field's first value by its lower-cased
        name): an answer already (404, 405, 401, 413, /healthz), or the source whose checks its body
        goes through."""
        path = raw_target.split(b"?", 1)[0].decode("latin-1")
        if path == "/healthz":
            if method not in ("GET", "HEAD"):
                return _error(405, "use GET /healthz", ("allow", "GET, HEAD"))
            trouble = {name: store.writable() for name, (_spec, store) in self.sources.items()}
            if any(trouble.values()):
                return _Response(503, {"ok": False, "unwritable": {k: v for k, v in trouble.items() if v}})
            return _Response(200, {"ok": True})
        name = path[len("/hooks/") :] if path.startswith("/hooks/") else None
        route = self.sources.get(name) if name is not None else None
        if route is None:
            self.unrouted += 1
            known = ", ".join(f"/hooks/{n}" for n in self.sources)
            return _error(404, f"no webhook source at {path[:200]!r}; this server receives at {known}")
        spec, store = route
        if method != "POST":
            self.unrouted += 1
            return _error(405, f"{path} takes POST", ("allow", "POST"))
        refusal = check_headers(spec, headers)
        if refusal is not None:
            return self._refuse(spec, store, refusal)
        cap = spec.max_body if spec.max_body is not None else self.limits.max_body
        length = headers.get("content-length")
        if length is not None:
            # h11 and wire.parse_post read only ASCII digits here; never isdigit()/int() (``²``).
            if not (0 < len(length) <= 18 and length.isascii() and length.isdigit()):
                return self._refuse(
                    spec, store, Refusal(400, "malformed", "Content-Length must be a number in ASCII digits")
                )
            if int(length) > cap:
                return self._refuse(spec, store, _too_large(cap))
        return _Target(spec, store, headers, cap)

    def _judge(self, target: _Target, body: bytes) -> _Response | Accepted:
        """Check a whole body: an answer (a refusal, a ping's reply), or the delivery to store."""
        spec, store, headers = target.spec, target.store, target.headers
        if len(body) > target.cap:
            return self._refuse(spec, store, _too_large(target.cap))
        refusal = check_body(spec, headers, body, now=self._clock())
        if refusal is not None:
            return self._refuse(spec, store, refusal)
        outcome = interpret(spec, headers, body, now=self._clock(), nonce=os.urandom(16).hex())
        if isinstance(outcome, Refusal):
            return self._refuse(spec, store, outcome)
        if isinstance(outcome, Reply):
            store.counters.answered += 1
            return _Response(outcome.status, outcome.body)
        return outcome

    async def _store(self, spec: SourceSpec, store: DeliveryStore, accepted: Accepted) -> _Response:
        try:
            result = await store.append(accepted)
        except StoreUnavailable as exc:
            return self._unavailable(spec, exc)
        return _stored(result)

    def _settled(self, spec: SourceSpec, store: DeliveryStore, staged: Staged) -> _Response:
        try:
            return _stored(store.settle(staged))
        except StoreUnavailable as exc:
            return self._unavailable(spec, exc)

    def _unavailable(self, spec: SourceSpec, exc: StoreUnavailable) -> _Response:
        self._log_refusal(spec.name, "unavailable", str(exc))  # the log names the file; the sender never
        return _error(
            503, f"the delivery could not be stored ({exc.public}); retry later", ("retry-after", RETRY_AFTER)
        )

    def _refuse(self, spec: SourceSpec, store: DeliveryStore, refusal: Refusal) -> _Response:
        code: RefusalCode = refusal.code
        store.counters.refused[code] = store.counters.refused.get(code, 0) + 1
        self._log_refusal(spec.name, code, refusal.reason)
        extra: tuple[tuple[str, str], ...] = ()
        if refusal.status == 401 and (spec.token is not None or spec.password is not None):
            scheme = "Bearer" if spec.token is not None else "Basic"
            extra = (("www-authenticate", f'{scheme} realm="agentd-webhook"'),)
        return _error(refusal.status, refusal.reason, *extra)

    def _log_refusal(self, source: str, code: str, reason: str) -> None:
        now = time.monotonic()
        key = (source, code)
        last = self._logged.get(key)
        if last is not None and now - last < LOG_EVERY:
            return
        if len(self._logged) > 1024:
            self._logged.clear()
        self._logged[key] = now
        log.warning("refused a request for source %r (%s): %s", source, code, reason)

    async def _send(self, stream: trio.SocketStream, conn: h11.Connection, response: _Response) -> bool:
        """Send ``response``; False if the client did not take it within SEND_TIMEOUT."""
        data = _render(conn, response)
        with trio.move_on_after(SEND_TIMEOUT) as scope:
            await stream.send_all(data)
        if scope.cancelled_caught:
            return False
        self._answered(response)
        return True


def _stored(result: Stored | Duplicate) -> _Response:
    body: JSONObject = {"ok": True, "id": result.id, "duplicate": isinstance(result, Duplicate)}
    if isinstance(result, Duplicate) and result.replay:
        body["replay"] = True  # the same signed body as delivery ``id``, under another delivery id
    return _Response(200, body)


def _render(conn: h11.Connection, response: _Response) -> bytes:
    """``response`` as bytes on the wire (h11 moves the connection's state on)."""
    body = orjson.dumps(response.body) + b"\n"
    headers = [("content-type", "application/json"), ("content-length", str(len(body))), *response.headers]
    if response.close:
        headers.append(("connection", "close"))
    try:
        data = conn.send(h11.Response(status_code=response.status, headers=headers))
        assert data is not None
        data += conn.send(h11.Data(data=body)) or b""
        data += conn.send(h11.EndOfMessage()) or b""
    except h11.LocalProtocolError:
        # h11 cannot answer in this state (e.g. the request line never parsed): write it raw; the
        # connection is closed after (h11's state is not DONE).
        data = _raw_response(response.status, str(response.body.get("error", "")))
    return data


def _keeps_alive(conn: h11.Connection, response: _Response) -> bool:
    """Whether the connection reads another request after ``response`` was sent."""
    return not response.close and conn.our_state is h11.DONE and conn.their_state is h11.DONE


def _too_large(cap: int) -> Refusal:
    return Refusal(413, "too_large", f"the body is over this endpoint's limit of {cap} bytes")


async def _next_event(stream: trio.SocketStream, conn: h11.Connection) -> object:
    """The next h11 event, reading from ``stream`` as needed (EOF becomes ``ConnectionClosed``)."""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await stream.receive_some(RECEIVE_CHUNK))
            continue
        return event


def _peer(sock: socket.socket) -> str:
    """The client's address (a connection already gone: ``"?"``, one client for all such)."""
    try:
        return str(sock.getpeername()[0])
    except OSError:
        return "?"


def _raw_response(status: int, reason: str, *headers: tuple[str, str]) -> bytes:
    """An error answer written without h11's state (it cannot answer, or the connection holds no slot)."""
    return wire.render(status, orjson.dumps({"error": reason}) + b"\n", headers, close=True)
