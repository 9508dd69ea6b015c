"""One supervised connection per upstream MCP server.

Over 700 lines, one idea: one connection's lifecycle (both eras, fallbacks, reconnect) and the calls on it.

Transports (``stdio.py``, ``http.py``), the catalogs (``catalog.py``), the
subscriptions (``subscriptions.py``, one listen stream per connection,
rfcs/0260), backoff, naming and resolution live in their own modules.

:class:`Upstream` owns the connection to one configured server (stdio or
Streamable HTTP) for the life of the supervisor: it connects, keeps the tool
and resource catalogs current, serves calls from every agent, keeps resource
subscriptions alive across drops, and reports what happens as typed reactor
events (:mod:`agentd.events`).

Lifecycle (``ServerState``)::

    STARTING --connected--> CONNECTED --drop--> RESTARTING --backoff, connected--> CONNECTED
        |                                           |
        +--first attempt failed--> RESTARTING       +--5 failed attempts in a row--> FAILED
    any --cancelled--> STOPPED

Errors raised to callers (all :class:`agentd.core.errors.UpstreamError`):
``ServerUnavailable`` (not connected, or the connection died mid-call),
``CapabilityMissing`` (no ``resources.subscribe``), plain ``UpstreamError``
(timeout, refusal, oversized body). Every message names the server.
"""

from __future__ import annotations

import base64
import contextlib
import math
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, TypeVar

import anyio
import httpx2
import mcp_types as types
import trio
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from agentd import __version__
from agentd.core.errors import CapabilityMissing, ServerUnavailable, UpstreamError
from agentd.core.limits import DEFAULT_MAX_READ_BYTES, DEFAULT_STARTUP_TIMEOUT, DEFAULT_TOOL_TIMEOUT
from agentd.core.prelaunch import EarlyProcess
from agentd.events import (
    ReactorEvent,
    ResourceChanged,
    ServerState,
    ServerStateChanged,
)
from agentd.observe.counters import RunCounters
from agentd.observe.telemetry import Telemetry
from agentd.upstream.backoff import (
    MAX_CONSECUTIVE_FAILURES,
    RECONNECT_BACKOFF,
    RESUBSCRIBE_BACKOFF,
    STABLE_SUBSCRIPTION,
    delay_before_attempt,
)
from agentd.upstream.catalog import Catalogs, ListFailed, listen_flags
from agentd.upstream.describe import describe as _describe
from agentd.upstream.describe import unwrap
from agentd.upstream.handshake import client_mode, complete_handshake, offering
from agentd.upstream.http import HttpTransport
from agentd.upstream.negotiate import (
    Era,
    Negotiator,
    Probe,
    Try,
    TryFailure,
    TryTransport,
    era_of,
    probe_outcome,
)
from agentd.upstream.resolve import Catalog
from agentd.upstream.stdio import MAX_LINE_BYTES, PROBE_SILENCE, StdioTransport
from agentd.upstream.subscriptions import ReadHold, Subscriber

__all__ = [
    "INIT_TIMEOUT",
    "MAX_READ_BYTES",
    "REQUEST_TIMEOUT",
    "Negotiated",
    "ServerSpecLike",
    "Upstream",
    "connect_all",
]

REQUEST_TIMEOUT = DEFAULT_TOOL_TIMEOUT
"""Seconds one request (tool call, read, list, subscribe) may take. Measured round
trips are under a millisecond; 30 s covers slow tools without letting a hung
(e.g. SIGSTOPped) server block an agent turn for long."""

INIT_TIMEOUT = DEFAULT_STARTUP_TIMEOUT
"""Seconds for spawn + handshake + first catalog fetch. A Python server connects in
~0.45 s here; ``npx``-launched servers can take several seconds on a cold cache."""

MAX_READ_BYTES = DEFAULT_MAX_READ_BYTES
"""Largest resource body (decoded bytes) handed to an agent unless told otherwise: the
``--max-read-bytes`` default (one definition, in :mod:`agentd.config`)."""

STDERR_SETTLE = 0.5
"""Seconds to wait for a dead server's stderr to reach EOF before quoting its tail."""

_T = TypeVar("_T")


class ServerSpecLike(Protocol):
    """What :class:`Upstream` needs from a configured server (``agentd.config.ServerSpec``)."""

    @property
    def name(self) -> str: ...
    @property
    def command(self) -> str | None: ...
    @property
    def args(self) -> list[str]: ...
    @property
    def env(self) -> dict[str, str]: ...
    @property
    def cwd(self) -> str | None: ...
    @property
    def url(self) -> str | None: ...
    @property
    def headers(self) -> dict[str, str]: ...
    @property
    def required(self) -> bool: ...
    @property
    def transport(self) -> str | None: ...
    @property
    def timeout(self) -> float | None: ...
    @property
    def startup_timeout(self) -> float: ...
    @property
    def protocol(self) -> str: ...


@dataclass
class _Up:
    connected: bool = False
    """Whether the try got past the handshake and catalog fetch."""
    handshake_done: bool = False
    """Whether the try got past the handshake (the era is settled)."""
    step: str = ""
    """After the handshake, the request the try is waiting for (named when it fails or times out)."""


class _ConnectFailed(Exception):
    """One connection attempt failed; the message says why (stderr tail included)."""


class _TryFailed(Exception):
    """One try of an attempt failed; ``facts`` say whether another era or transport may do.

    ``head`` says why in one line; ``detail`` is what follows it (a stdio
    server's stderr tail), kept last in any message built from it.
    """

    def __init__(self, head: str, facts: TryFailure, detail: str = "") -> None:
        super().__init__(head + detail)
        self.head = head
        self.detail = detail
        self.facts = facts


@dataclass(frozen=True, slots=True)
class Negotiated:
    """How the current (or last) connection was made (``upstream.connected``, ``check --connect``)."""

    transport: TryTransport
    """The transport actually used: ``stdio``, ``http`` (Streamable HTTP) or ``sse``."""
    protocol_version: str
    """The negotiated MCP version."""
    era: Era
    """``modern`` (2026-07-28, ``server/discover``) or ``handshake`` (``initialize``)."""
    probe: Probe
    """What became of the ``server/discover`` probe (see :data:`agentd.upstream.negotiate.Probe`)."""


@dataclass(eq=False)
class _Conn:
    """One live connection (one process, or one HTTP session)."""

    client: Client
    transport: StdioTransport | HttpTransport
    modern: bool
    nursery: trio.Nursery
    refresh_send: trio.MemorySendChannel[str]

    @property
    def lost(self) -> trio.Event:
        return self.transport.lost

    @property
    def lost_reason(self) -> str | None:
        return self.transport.lost_reason


STABLE_CONNECTION = 10.0
"""Seconds a connection must stay up to count as a success. A drop sooner than
this counts as a failed attempt (the backoff keeps growing), so a server that
crashes right after each handshake is declared failed after the usual 5
attempts instead of being restarted forever."""


class Upstream:
    """The supervisor's one connection to one upstream MCP server.

    Args:
        spec: the configured server (see :class:`ServerSpecLike`); ``command``
            selects stdio, ``url`` Streamable HTTP.
        events: where state changes, resource changes and catalog changes are posted.
        telemetry: NDJSON telemetry.
        request_timeout: bound on every request but tool calls, seconds.
        tool_timeout: bound on one tool call, seconds (None: the spec's ``timeout``,
            else ``request_timeout``).
        init_timeout: bound on spawn + handshake + first catalog fetch, seconds (None:
            the spec's ``startup_timeout``).
        auth: authentication for an HTTP server's requests (see :mod:`agentd.upstream.auth`).
        max_read_bytes: largest resource body :meth:`read_resource` returns.
        backoff: seconds before reconnect attempt 1, 2, ... (tests pass short ones).
        resubscribe_backoff: seconds before re-opening a lost subscription, attempt 1, 2, ...
        resubscribe_attempts: failed re-opens in a row before a subscription is given up
            (``[watches] resubscribe_attempts``; 0: give up at the first loss).
        stable_subscription: seconds a stream that delivered nothing must stay open
            to count as healthy (see :class:`agentd.upstream.backoff.ResubscribePolicy`).
        max_line_bytes: cap on one stdout message from a stdio server.
        early: a stdio server's process started before agentd's imports
            (:mod:`agentd.core.prelaunch`); its first connection adopts it.
        counters: the run's counter set (updates of URIs nobody subscribed to count as unrouted).
    """

    def __init__(
        self,
        spec: ServerSpecLike,
        events: trio.MemorySendChannel[ReactorEvent],
        telemetry: Telemetry,
        *,
        request_timeout: float = REQUEST_TIMEOUT,
        tool_timeout: float | None = None,
        init_timeout: float | None = None,
        auth: httpx2.Auth | None = None,
        max_read_bytes: int = MAX_READ_BYTES,
        backoff: Sequence[float] = RECONNECT_BACKOFF,
        resubscribe_backoff: Sequence[float] = RESUBSCRIBE_BACKOFF,
        resubscribe_attempts: int = MAX_CONSECUTIVE_FAILURES,
        stable_subscription: float = STABLE_SUBSCRIPTION,
        max_line_bytes: int = MAX_LINE_BYTES,
        early: EarlyProcess | None = None,
        counters: RunCounters | None = None,
    ) -> None:
        if (spec.command is None) == (spec.url is None):
            raise ValueError(
                f"server {spec.name!r}: give exactly one of command (stdio) or url (Streamable HTTP)"
            )
        self.spec = spec
        self.name = spec.name
        self._early = early
        self._events = events
        self._telemetry = telemetry
        self._counters = counters if counters is not None else RunCounters()
        self.request_timeout = request_timeout
        self.tool_timeout = (
            tool_timeout if tool_timeout is not None else getattr(spec, "timeout", None) or request_timeout
        )
        self.init_timeout = (
            init_timeout if init_timeout is not None else getattr(spec, "startup_timeout", INIT_TIMEOUT)
        )
        self._auth = auth
        self.max_read_bytes = max_read_bytes
        self._backoff = tuple(backoff)
        self._subscriber = Subscriber(
            spec.name,
            self._post,
            telemetry,
            self._counters,
            request_timeout=request_timeout,
            resubscribe_backoff=tuple(resubscribe_backoff),
            resubscribe_attempts=resubscribe_attempts,
            stable_subscription=stable_subscription,
        )
        """The server's subscriptions: one listen stream (or session) for all of them (rfcs/0260)."""
        self._max_line_bytes = max(max_line_bytes, 2 * max_read_bytes)
        self._negotiator = Negotiator(
            protocol=spec.protocol, transport="stdio" if spec.command is not None else spec.transport
        )
        """The server's era and transport: pinned, or learned once and kept (rfcs/0285, rfcs/0286)."""
        self.negotiated: Negotiated | None = None
        """How the current (or last) connection was made: transport, version, era, probe."""
        self.state = ServerState.STARTING
        """Where the connection is in its lifecycle (see the module docstring)."""
        self.protocol_version: str | None = None
        """Negotiated protocol version of the current (or last) connection."""
        self.capabilities: types.ServerCapabilities | None = None
        """Capabilities of the current (or last) connection."""
        self.last_error: str | None = None
        """Why the last attempt failed or the last connection dropped."""
        self._catalogs = Catalogs(spec.name, telemetry, self._post, request_timeout=request_timeout)
        """The server's tools, resources and templates (refreshed on connect and on list_changed)."""
        self._conn: _Conn | None = None

    # ------------------------------------------------------------------ views

    @property
    def subscriptions(self) -> AbstractSet[str]:
        """URIs currently remembered as subscribed (a live view; re-established after every reconnect)."""
        return self._subscriber.wanted

    @property
    def tools(self) -> list[types.Tool]:
        """The server's tools, refreshed on connect and on ``tools/list_changed``."""
        return self._catalogs.tools

    @property
    def resources(self) -> list[types.Resource]:
        """Concrete resources, refreshed on connect and on ``resources/list_changed``."""
        return self._catalogs.resources

    @property
    def templates(self) -> list[types.ResourceTemplate]:
        """Resource templates, refreshed with :attr:`resources`."""
        return self._catalogs.templates

    @property
    def tools_version(self) -> int:
        """Bumped every time :attr:`tools` is replaced (see :meth:`wait_tools_changed`)."""
        return self._catalogs.tools_version

    @property
    def skipped_tools(self) -> tuple[str, ...]:
        """Listed tools agentd cannot call (task-only), kept out of :attr:`tools` (rfcs/0296)."""
        return self._catalogs.skipped_tools

    def catalog(self) -> Catalog:
        """The routing view of this server (for :func:`agentd.upstream.resolve_server_for_uri`)."""
        return self._catalogs.routing(self._can_subscribe())

    async def wait_tools_changed(self, seen_version: int) -> int:
        """Wait until :attr:`tools_version` differs from ``seen_version``; return the new version."""
        return await self._catalogs.wait_tools_changed(seen_version)

    @property
    def server_pid(self) -> int | None:
        """Process id of the live stdio server (``None`` for HTTP or when not connected)."""
        conn = self._conn
        if conn is None or not isinstance(conn.transport, StdioTransport):
            return None
        return conn.transport.pid

    def _can_subscribe(self) -> bool:
        caps = self.capabilities
        return bool(caps is not None and caps.resources is not None and caps.resources.subscribe)

    # ------------------------------------------------------------------ run

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Connect and keep the connection alive until cancelled or given up.

        Calls ``task_status.started()`` once the first attempt settled
        (connected, or failed). Each try of the attempt is bounded by
        ``init_timeout``; only a try that failed before it ran out (an exit,
        a closed stream, a refused POST) is followed by another, at most
        :data:`~agentd.upstream.negotiate.MAX_TRIES` in all (rfcs/0285).
        Returns after posting ``FAILED`` when :data:`MAX_CONSECUTIVE_FAILURES`
        attempts in a row failed. Cancellation closes the connection (bounded,
        shielded teardown) and leaves the state ``STOPPED``.
        """
        started = False
        failures = 0
        retry = 0
        try:
            while True:
                try:
                    began = trio.current_time()
                    await self._connect_and_serve(task_status if not started else None, retry)
                    started = True
                    if trio.current_time() - began >= STABLE_CONNECTION:
                        failures = 0
                        retry = 0
                    else:
                        # Connected, then dropped at once: a server crashing
                        # right after its handshake must back off and end up
                        # FAILED (exit 6 when required), not restart forever.
                        failures += 1
                        self._telemetry.emit(
                            "upstream.unstable",
                            server=self.name,
                            attempt=failures,
                            error=self.last_error,
                            note=f"the connection dropped within {STABLE_CONNECTION:g}s of connecting: counted as a failed attempt",
                        )
                except _ConnectFailed as exc:
                    self.last_error = str(exc)
                    failures += 1
                    self._telemetry.emit(
                        "upstream.connect_failed", server=self.name, attempt=failures, error=str(exc)
                    )
                    if not started:
                        started = True
                        task_status.started()
                if failures >= MAX_CONSECUTIVE_FAILURES:
                    self.state = ServerState.FAILED  # RESTARTING/STARTING -> FAILED
                    self._telemetry.emit(
                        "upstream.failed", server=self.name, attempts=failures, error=self.last_error
                    )
                    await self._subscriber.server_failed(failures)
                    await self._post(
                        ServerStateChanged(
                            self.name,
                            ServerState.FAILED,
                            required=self.spec.required,
                            attempt=failures,
                            error=self.last_error,
                        )
                    )
                    return
                retry += 1
                self.state = ServerState.RESTARTING  # CONNECTED/STARTING -> RESTARTING
                await self._post(
                    ServerStateChanged(
                        self.name,
                        ServerState.RESTARTING,
                        required=self.spec.required,
                        attempt=retry,
                        error=self.last_error,
                    )
                )
                await trio.sleep(delay_before_attempt(retry, self._backoff))
        finally:
            if self.state is not ServerState.FAILED:
                self.state = ServerState.STOPPED  # any -> STOPPED
                self._post_nowait(
                    ServerStateChanged(self.name, ServerState.STOPPED, required=self.spec.required)
                )

    def _make_transport(self, tried: Try) -> StdioTransport | HttpTransport:
        spec = self.spec
        if spec.command is not None:
            early, self._early = self._early, None  # the first connection only
            return StdioTransport(
                self.name,
                spec.command,
                spec.args,
                env=spec.env,
                cwd=spec.cwd,
                telemetry=self._telemetry,
                max_line_bytes=self._max_line_bytes,
                early=early if early is not None and early.matches(spec.command, spec.args) else None,
                # Only a probe is judged by silence: a known 2026-era server may take its time.
                probe_silence=PROBE_SILENCE if tried.handshake == "probe" else None,
            )
        assert spec.url is not None
        return HttpTransport(self.name, spec.url, spec.headers, auth=self._auth, sse=tried.transport == "sse")

    async def _connect_and_serve(self, task_status: trio.TaskStatus[None] | None, retry: int) -> None:
        """One connection attempt, then serve until it drops. Raises _ConnectFailed if it never came up.

        The attempt is one try, or a few when the first says the era or the
        transport is another one (:mod:`agentd.upstream.negotiate`): those
        follow at once, within the attempt, so a server that exits on the
        ``server/discover`` probe costs one restart, not a backoff round.
        """
        tried = self._negotiator.first()
        earlier: list[str] = []
        probed = False
        ignored = False
        while True:
            try:
                await self._try(tried, task_status, retry, after_failed_probe=probed, ignored=ignored)
                return
            except _TryFailed as failed:
                following = self._negotiator.next_after(tried, failed.facts)
                if following is None:
                    message = failed.head
                    if earlier:
                        message += "; earlier tries: " + "; ".join(earlier)
                    raise _ConnectFailed(message + failed.detail) from None
                self._telemetry.emit(
                    "upstream.fallback",
                    server=self.name,
                    tried=tried.describe(),
                    next=following.describe(),
                    error=failed.head + failed.detail,
                )
                earlier.append(f"{tried.describe()}: {failed.head}")
                probed = probed or tried.handshake == "probe"
                ignored = ignored or failed.facts.silent
                tried = following

    def _why_no_fallback(self, tried: Try, facts: TryFailure) -> str:
        """Why a try that broke on the handshake is not followed by another era (and the fix)."""
        if (
            tried.handshake == "probe"
            or facts.handshake_done
            or facts.timed_out
            or facts.rejected
            or not facts.reached
        ):
            return ""
        protocol = self._negotiator.protocol
        if protocol != "auto":
            return (
                f"; its protocol is pinned to {protocol!r} ({tried.describe()}), so no other "
                "handshake was tried: set protocol to 'auto' to let agentd negotiate"
            )
        return (
            f"; this server's era was learned at its first connection ({tried.describe()}) "
            "and is kept until agentd restarts"
        )

    async def _try(
        self,
        tried: Try,
        task_status: trio.TaskStatus[None] | None,
        retry: int,
        *,
        after_failed_probe: bool,
        ignored: bool,
    ) -> None:
        """One try: connect with ``tried`` (bounded), serve until it drops. Raises _TryFailed if it never came up."""
        transport = self._make_transport(tried)
        wire: contextlib.AbstractAsyncContextManager[tuple[object, object]] = transport
        if tried.handshake == "initialize" and tried.version is not None:
            wire = offering(transport, tried.version)
        client = Client(
            wire,  # type: ignore[arg-type]
            mode=client_mode(tried),
            cache=None,  # watched resources must never be served from a cache
            message_handler=self._on_message,
            read_timeout_seconds=self.request_timeout,
            client_info=types.Implementation(name="agentd", version=__version__),
        )
        up = _Up()
        t0 = trio.current_time()
        try:
            # Entered and left around the client's own task groups, so its deadline can be lifted later.
            with trio.CancelScope(deadline=t0 + self.init_timeout) as init_scope:
                async with client:
                    await self._serve(
                        client,
                        transport,
                        tried,
                        task_status,
                        retry,
                        init_scope,
                        up,
                        t0,
                        (after_failed_probe, ignored),
                    )
            if init_scope.cancelled_caught and not up.connected:
                waiting = f" waiting for its answer to {up.step}" if up.step else ""
                await self._raise_failed(
                    transport,
                    tried,
                    f"did not finish connecting within {self.init_timeout:g}s (init_timeout){waiting}",
                    up,
                    timed_out=True,
                )
        except _TryFailed:
            raise
        except Exception as exc:
            if not up.connected:
                inner = unwrap(exc)
                if isinstance(transport, StdioTransport) and transport.ignored_probe is not None:
                    why = transport.ignored_probe
                elif isinstance(inner, ListFailed):
                    why = inner.clause
                elif up.step:
                    why = f"failed {up.step}: {_describe(exc)}"
                else:
                    why = _describe(exc)
                await self._raise_failed(transport, tried, why, up)
            self.last_error = transport.lost_reason or _describe(exc)
        except BaseExceptionGroup as group:
            # Cancelled while a request failed (the run ends as a try breaks): the SDK's task
            # groups raise both together. The cancellation wins; the error is moot and must
            # not outlive the cancel scope that is unwinding (it would end agentd with exit 1).
            cancelled = group.subgroup(trio.Cancelled)
            if cancelled is None:
                raise
            raise cancelled from None
        finally:
            self._conn = None
            self._subscriber.detach()
        if up.connected:
            self.last_error = transport.lost_reason or self.last_error
            self._telemetry.emit("upstream.lost", server=self.name, reason=self.last_error)

    async def _raise_failed(
        self,
        transport: StdioTransport | HttpTransport,
        tried: Try,
        why: str,
        up: _Up,
        *,
        timed_out: bool = False,
    ) -> None:
        facts = TryFailure(
            reached=transport.reached,
            handshake_done=up.handshake_done,
            timed_out=timed_out,
            rejected=isinstance(transport, HttpTransport) and not transport.sse and transport.rejected,
            silent=isinstance(transport, StdioTransport) and transport.ignored_probe is not None,
        )
        message = f"server {self.name!r} {why}"
        if transport.lost_reason is not None and transport.lost_reason not in message:
            message += f" ({transport.lost_reason})"
        if isinstance(transport, HttpTransport) and transport.rejected:
            message += f" (HTTP {transport.refused_status} to every POST)"
        message += self._why_no_fallback(tried, facts)
        detail = ""
        if isinstance(transport, StdioTransport):
            await transport.wait_stderr_closed(STDERR_SETTLE)
            tail = transport.stderr_tail()
            detail = f"; its stderr ends with:\n{tail}" if tail else "; it wrote nothing to stderr"
        raise _TryFailed(message, facts, detail)

    async def _serve(
        self,
        client: Client,
        transport: StdioTransport | HttpTransport,
        tried: Try,
        task_status: trio.TaskStatus[None] | None,
        retry: int,
        init_scope: trio.CancelScope,
        up: _Up,
        t0: float,
        failed_probe: tuple[bool, bool],
    ) -> None:
        """Finish the connection (handshake, listeners, then catalogs), then serve until the transport is lost.

        ``failed_probe``: whether an earlier try of the attempt probed and failed, and whether
        its server ignored the probe (for :func:`~agentd.upstream.negotiate.probe_outcome`).
        """
        await complete_handshake(client, tried)
        up.handshake_done = True
        self._negotiator.learned(tried, client.protocol_version)
        era = era_of(client.protocol_version)
        self.negotiated = Negotiated(
            transport=tried.transport,
            protocol_version=client.protocol_version,
            era=era,
            probe=probe_outcome(tried, era, after_failed_probe=failed_probe[0], ignored=failed_probe[1]),
        )
        self.protocol_version = client.protocol_version
        self.capabilities = client.server_capabilities
        modern = client.protocol_version in MODERN_PROTOCOL_VERSIONS
        refresh_send, refresh_recv = trio.open_memory_channel[str](16)
        self._catalogs.new_connection()
        async with trio.open_nursery() as nursery:
            conn = _Conn(client, transport, modern, nursery, refresh_send)
            # Listen before fetching, so a change between the fetch and the ack is not missed
            # (2026-07-28: list_changed arrives only on a listen stream; the one stream
            # carries it and, once connected, every subscribed URI).
            up.step = "subscriptions/listen" if modern else ""
            await nursery.start(
                self._subscriber.serve,
                conn,
                listen_flags(client),
                partial(self._request_refresh, conn),
            )
            up.step = "tools/list"
            await self._catalogs.refresh_tools(client)
            up.step = "resources/list"
            await self._catalogs.refresh_resources(client)
            init_scope.deadline = math.inf
            up.connected = True
            self._conn = conn
            self.state = ServerState.CONNECTED  # STARTING/RESTARTING -> CONNECTED
            self.last_error = None
            negotiated = self.negotiated
            self._telemetry.emit(
                "upstream.connected",
                server=self.name,
                transport=negotiated.transport,
                protocol_version=negotiated.protocol_version,
                era=negotiated.era,
                probe=negotiated.probe,
                protocol=self._negotiator.protocol,
                process=transport.started if isinstance(transport, StdioTransport) else None,
                ms=round((trio.current_time() - t0) * 1000, 1),
            )
            if self._negotiator.counteroffered(negotiated.protocol_version):
                self._telemetry.emit(
                    "upstream.protocol_counteroffer",
                    server=self.name,
                    protocol=self._negotiator.protocol,
                    protocol_version=negotiated.protocol_version,
                    fix=f"the server does not speak {self._negotiator.protocol}; set its protocol to "
                    f"{negotiated.protocol_version!r} or 'auto'",
                )
            await self._post(
                ServerStateChanged(
                    self.name, ServerState.CONNECTED, required=self.spec.required, attempt=retry
                )
            )
            if task_status is not None:
                task_status.started()
            nursery.start_soon(self._catalogs.refresher, conn.client, refresh_recv)
            self._subscriber.connected()
            await transport.lost.wait()
            self._conn = None
            nursery.cancel_scope.cancel()
        await self._subscriber.disconnected(transport.lost_reason)

    def _request_refresh(self, conn: _Conn, kind: str) -> None:
        # WouldBlock: refreshes are already queued; the last one sees this change too.
        with contextlib.suppress(trio.WouldBlock):
            conn.refresh_send.send_nowait(kind)

    async def _on_message(self, message: object) -> None:
        """SDK message handler: handshake-era notifications (2026-07-28 ones come via listen)."""
        if isinstance(message, Exception):
            self._telemetry.emit("upstream.transport_error", server=self.name, error=_describe(message))
            return
        conn = self._conn
        if conn is None or conn.modern:
            return
        if isinstance(message, types.ResourceUpdatedNotification):
            self._subscriber.on_updated(str(message.params.uri))
        elif isinstance(message, types.ResourceListChangedNotification):
            self._request_refresh(conn, "resources")
        elif isinstance(message, types.ToolListChangedNotification):
            self._request_refresh(conn, "tools")

    # ------------------------------------------------------------------ subscriptions

    async def subscribe(self, uri: str) -> None:
        """Subscribe to changes of ``uri``; every change is posted as ``ResourceChanged``.

        Idempotent. Returns once the subscription is live (the listen stream
        carrying it acknowledged, or ``resources/subscribe`` answered). While
        the server is reconnecting the URI is remembered and subscribed on
        reconnect. The subscription survives reconnects and stream ends; each
        re-establishment is followed by a ``ResourceChanged(kind="synthetic")``.

        Raises:
            CapabilityMissing: the server does not advertise ``resources.subscribe``.
            ServerUnavailable: the server never connected.
            UpstreamError: the server refused or did not answer in time.
        """
        failed = await self.subscribe_many([uri])
        if uri in failed:
            raise UpstreamError(f"server {self.name!r} could not subscribe to {uri!r}: {failed[uri]}")

    async def subscribe_many(self, uris: Collection[str]) -> dict[str, str]:
        """Subscribe every URI of ``uris`` at once (one establishment); returns URI -> why, for the failures.

        As :meth:`subscribe`, for many URIs (a declared glob): a failure is
        returned as a clause ("the server refused it: ..."), not
        raised, and the failed URIs are not remembered.

        Raises:
            CapabilityMissing: the server does not advertise ``resources.subscribe``.
            ServerUnavailable: the server never connected.
        """
        if not uris:
            return {}
        self._gate_subscribe(min(uris), "subscribe to", more=len(uris) - 1)
        return await self._subscriber.subscribe(uris)

    def hold_reads(self, uris: Collection[str]) -> ReadHold:
        """Reads of ``uris`` wait until the returned hold is released (a subscribe on its way; rfcs/0350)."""
        return self._subscriber.hold_reads(uris)

    async def unsubscribe(self, uri: str) -> None:
        """Stop watching ``uri`` (idempotent; the server stops carrying it at the next establishment).

        Raises:
            CapabilityMissing: the server does not advertise ``resources.subscribe``.
        """
        self._gate_subscribe(uri, "unsubscribe from")
        self._subscriber.unsubscribe(uri)

    def _gate_subscribe(self, uri: str, verb: str, *, more: int = 0) -> None:
        what = f"{uri!r}" + (f" and {more} more URIs" if more else "")
        if self.capabilities is None:
            raise ServerUnavailable(
                f"server {self.name!r} has not connected yet ({self.state.value}); cannot {verb} {what}"
            )
        if not self._can_subscribe():
            raise CapabilityMissing(
                f"server {self.name!r} cannot {verb} {what}: it does not advertise the "
                "resources.subscribe capability; watch this resource with a timer route instead"
            )

    # ------------------------------------------------------------------ backpressure

    @property
    def updates_paused(self) -> bool:
        """Whether :meth:`pause_updates` is in force."""
        return self._subscriber.paused

    def pause_updates(self) -> None:
        """Stop posting this server's changes (a ``block`` route is full; rfcs/0131).

        The listen stream (or, handshake era, the connection) keeps being
        read: the changes read meanwhile are kept, one entry per URI, so
        memory stays bounded by the subscribed set and the stream never
        backs up; nothing is posted while paused. Tool calls and reads are
        unaffected. Idempotent; synchronous.
        """
        self._subscriber.pause()

    def resume_updates(self) -> list[str]:
        """Post this server's changes again, the ones kept while paused first.

        Returns the URIs kept while no connection was up to post them: the
        caller posts one synthetic "possibly changed" for each
        (:meth:`post_possibly_changed`). Idempotent; synchronous.
        """
        return self._subscriber.resume()

    async def post_possibly_changed(self, uris: Iterable[str]) -> None:
        """Post one synthetic change per URI still subscribed (after a pause, rfcs/0131)."""
        for uri in uris:
            if uri in self._subscriber.wanted:
                await self._post(ResourceChanged(self.name, uri, "synthetic"))

    # ------------------------------------------------------------------ calls

    def _require(self, what: str) -> _Conn:
        conn = self._conn
        if conn is None or conn.lost.is_set():
            detail = f": {self.last_error}" if self.last_error else ""
            raise ServerUnavailable(f"server {self.name!r} is {self.state.value}; cannot {what}{detail}")
        return conn

    async def _bounded(
        self,
        what: str,
        conn: _Conn,
        op: Callable[[Client], Awaitable[_T]],
        *,
        timeout: float | None = None,
        setting: str = "request_timeout",
    ) -> _T:
        bound = self.request_timeout if timeout is None else timeout
        try:
            with trio.fail_after(bound):
                return await op(conn.client)
        except (trio.TooSlowError, TimeoutError):
            raise UpstreamError(
                f"server {self.name!r} did not answer {what} within {bound:g}s "
                f"({setting}); it may be hung or overloaded"
            ) from None
        except MCPError as exc:
            if exc.code == types.CONNECTION_CLOSED or conn.lost.is_set():
                raise ServerUnavailable(
                    f"server {self.name!r} lost its connection during {what}: {conn.lost_reason or exc}"
                ) from exc
            raise UpstreamError(f"server {self.name!r} failed {what}: {exc}") from exc
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, RuntimeError) as exc:
            raise ServerUnavailable(
                f"server {self.name!r} lost its connection during {what}: {conn.lost_reason or _describe(exc)}"
            ) from exc
        except UpstreamError:
            raise
        except Exception as exc:
            raise UpstreamError(f"server {self.name!r} failed {what}: {_describe(exc)}") from exc

    async def call_tool(self, name: str, arguments: dict[str, object]) -> types.CallToolResult:
        """Call tool ``name`` (its upstream name, not namespaced); a tool error comes back as ``is_error``."""
        what = f"tools/call {name!r}"
        conn = self._require(what)
        # The SDK's own per-request read timeout would cut a long call at request_timeout.
        return await self._bounded(
            what,
            conn,
            lambda c: c.call_tool(name, arguments, read_timeout_seconds=self.tool_timeout),
            timeout=self.tool_timeout,
            setting="tool_timeout, or the server's timeout",
        )

    async def read_resource(self, uri: str) -> types.ReadResourceResult:
        """Read ``uri`` (never from a cache).

        Raises:
            UpstreamError: the body is larger than ``max_read_bytes``, or the read failed.
        """
        what = f"resources/read {uri!r}"
        await self._subscriber.wait_readable(uri)
        conn = self._require(what)
        result = await self._bounded(what, conn, lambda c: c.read_resource(uri))
        size = body_size(result.contents)
        if size > self.max_read_bytes:
            raise UpstreamError(
                f"resource {uri!r} on server {self.name!r} is {size} bytes, above the cap of "
                f"{self.max_read_bytes} bytes; raise the cap with --max-read-bytes, or read a narrower resource"
            )
        return result

    async def list_resources(self) -> list[types.Resource]:
        """Fetch the concrete resources (and update :attr:`resources`); empty if the server has no such list."""
        conn = self._require("resources/list")
        got = await self._bounded(
            "resources/list",
            conn,
            lambda c: self._catalogs.fetch("resources/list", c.list_resources, lambda p: p.resources),
        )
        if got is not None:
            self._catalogs.resources = got
        return list(self.resources)

    async def list_resource_templates(self) -> list[types.ResourceTemplate]:
        """Fetch the resource templates (and update :attr:`templates`).

        Optional (rfcs/0378): a server without them, or one that does not answer
        in time, leaves :attr:`templates` as last known (empty at first).
        """
        conn = self._require("resources/templates/list")
        got = await self._bounded(
            "resources/templates/list",
            conn,
            lambda c: self._catalogs.fetch(
                "resources/templates/list", c.list_resource_templates, lambda p: p.resource_templates
            ),
        )
        if got is not None:
            self._catalogs.templates = got
        return list(self.templates)

    # ------------------------------------------------------------------ events

    async def _post(self, event: ReactorEvent) -> None:
        # Broken/closed: the reactor is gone (shutdown); nobody is left to tell.
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await self._events.send(event)

    def _post_nowait(self, event: ReactorEvent) -> None:
        with contextlib.suppress(trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
            self._events.send_nowait(event)


def body_size(contents: Iterable[types.TextResourceContents | types.BlobResourceContents]) -> int:
    """Decoded size in bytes of a resource body (text as UTF-8, blobs base64-decoded)."""
    total = 0
    for item in contents:
        if isinstance(item, types.TextResourceContents):
            total += len(item.text.encode())
        else:
            try:
                total += len(base64.b64decode(item.blob, validate=False))
            except ValueError:
                total += len(item.blob)
    return total


async def connect_all(
    specs: Iterable[ServerSpecLike],
    events: trio.MemorySendChannel[ReactorEvent],
    telemetry: Telemetry,
    nursery: trio.Nursery,
    **options: Any,
) -> dict[str, Upstream]:
    """Start one :class:`Upstream` per spec in ``nursery``, concurrently.

    Returns when every first attempt settled (connected or failed), in
    configuration order. ``options`` are passed to :class:`Upstream`.
    """
    upstreams = {spec.name: Upstream(spec, events, telemetry, **options) for spec in specs}
    async with trio.open_nursery() as starters:
        for upstream in upstreams.values():
            starters.start_soon(nursery.start, upstream.run)
    return upstreams
