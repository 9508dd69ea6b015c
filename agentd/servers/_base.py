"""Shared machinery of agentd's bundled MCP servers (``agentd serve NAME``).

Size: over 600 lines because it is the one base every bundled server
shares (both protocol eras, change sources, transports, start-up failures);
HTTP guarding, stdio, safe files and the SDK adapter (``_sdk.py``) are their
own modules.

Every bundled server (memo, inbox, files, kube, webhook) is a :class:`WatchableServer`:
an ``MCPServer`` from the ``mcp`` SDK, run under trio, that serves
2026-07-28 clients (``subscriptions/listen``) and handshake-era clients
(``resources/subscribe`` + ``notifications/resources/updated``) alike. One
:meth:`WatchableServer.notify_changed` call reaches both kinds of subscriber.

Plug-in contract (how ``agentd serve NAME`` finds a server)
------------------------------------------------------------
:data:`SERVERS` maps NAME to a module path, imported lazily. The module
exposes::

    SUMMARY: str                                   one line for the server list
    HELP: str                                      ``--help``'s epilog: resources, tools, use with agentd
    def add_arguments(parser: argparse.ArgumentParser) -> None
        # add the server's own flags; --http and --allow-remote are already there
    def build(args: argparse.Namespace) -> WatchableServer
        # validate flags and construct; raise ConfigError (exit 2) for bad
        # input, ServerStartError (its exit_code) when the server must not run.
        # No protocol I/O here; long-lived change sources are registered with
        # server.add_source(...) and started by WatchableServer.run.

:func:`main` parses ``argv`` (everything after ``serve``), builds, then
``trio.run(server.run, transport)``. Unknown NAME prints the list of servers
and returns 2. stdio is the default transport (``_stdio.py``: cancellable
reads, batched writes); ``--http HOST:PORT`` serves Streamable HTTP at
``http://HOST:PORT/mcp`` (hypercorn on trio). Every HTTP request's ``Host``
and ``Origin`` are checked whatever the bind address (``_httpguard.py``); a
non-loopback HOST needs ``--allow-remote`` and a bearer token
(``--token-file PATH`` or ``$AGENTD_SERVE_TOKEN``).

Building a server
-----------------
::

    server = WatchableServer("memo", instructions="...")
    @server.mcp.tool(...)                    # tools: the SDK's decorator
    @server.mcp.resource(uri, mime_type=STATE_MIME,
                         description=describe("What it is.", name="notes", uri=uri))
    server.add_source(run_inotify)           # async def run_inotify() -> None
    server.add_cleanup(release_lock)         # sync, run once at exit (LIFO)
    gate = SourceGate("the notes file watcher")
    gate.running() / gate.failed(msg)        # from the source task
    await gate.wait_ready()                  # first line of a watched read
    await server.notify_changed(uri)         # after every change
    server.on_client_ready(push_backlog)     # async def push_backlog(client: LegacyClient)
    await server.send_custom(client, method, [params, ...])   # one handshake-era client
    server.fail(ServerStartError(...))       # stop serving; main() exits with its code
    write_atomic(path, data)                 # temp + fsync + rename + dir fsync (_safefs)

Resource shapes: *state* (``STATE_MIME``, any JSON) or *event-log*
(``EVENTS_MIME``, body ``{"events": [{"seq", "type", ...}]}`` from an
:class:`EventRing`). Errors a read or tool call should report to the client:
raise ``ResourceError`` / ``ToolError`` (re-exported here) with a message that
says what to do; the SDK turns them into MCP errors and the server keeps
running. No ``ttlMs`` on watched resources (they are never given cache hints).
"""

from __future__ import annotations

import argparse
import contextlib
import enum
import importlib
import logging
import os
import signal
import sys
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final, Literal

import anyio
import orjson
import trio
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus, ResourcesListChanged, ResourceUpdated
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp.shared.uri_template import UriTemplate
from mcp_types import (
    INVALID_PARAMS,
    EmptyResult,
    ReadResourceRequestParams,
    SubscribeRequestParams,
    UnsubscribeRequestParams,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from agentd import __version__
from agentd.core.durations import ascii_int
from agentd.core.errors import AgentdError, ConfigError
from agentd.core.exitcodes import ExitCode
from agentd.core.heap import start_collector
from agentd.core.jsonvalue import JSONObject
from agentd.servers import _sdk
from agentd.servers._httpguard import MIN_TOKEN_LENGTH, HostOriginGuard, HttpPolicy, is_loopback, is_wildcard
from agentd.servers._safefs import write_atomic
from agentd.servers._stdio import StdioTransport

__all__ = [
    "EVENTS_MIME",
    "RING_CAPACITY",
    "SERVERS",
    "SOURCE_START_TIMEOUT",
    "STATE_MIME",
    "ConfigError",
    "EventRing",
    "LegacyClient",
    "ResourceError",
    "ServerStartError",
    "SourceGate",
    "SourceState",
    "ToolError",
    "Transport",
    "WatchableServer",
    "describe",
    "example_line",
    "main",
    "parse_http",
    "read_token",
    "whole_number",
    "write_atomic",
]

log = logging.getLogger("agentd.servers")

STATE_MIME: Final = "application/json"
EVENTS_MIME: Final = "application/vnd.agentd.events+json"
#: Events an event-log resource keeps; older ones fall off (readers see a GAP).
RING_CAPACITY: Final = 256
#: How long the first read of a watched URI waits for its change source to
#: start. Local sources (inotify) start in milliseconds; a kube list can take
#: seconds on a busy API server, and a client's own request timeout is ~60 s.
SOURCE_START_TIMEOUT: Final = 30.0

#: NAME -> module implementing the plug-in contract above.
SERVERS: Final[Mapping[str, str]] = {
    "memo": "agentd.servers.memo",
    "inbox": "agentd.servers.inbox",
    "files": "agentd.servers.files",
    "kube": "agentd.servers.kube",
    "webhook": "agentd.servers.webhook",
}

TOKEN_ENV: Final = "AGENTD_SERVE_TOKEN"
"""Environment variable holding the bearer token of an HTTP server (or use ``--token-file``)."""


class ServerStartError(AgentdError):
    """The server must not run (e.g. another process already drains this inbox).

    The message says why and what to do; :func:`main` prints it and exits with
    ``exit_code``.
    """

    exit_code = ExitCode.CRASHED


# --------------------------------------------------------------------------- descriptions


def example_line(*, name: str, uri: str, on_event: str | None = None) -> str:
    """The ``Example:`` line every watched resource description ends with."""
    tail = f", on_event={on_event!r}" if on_event is not None else ", on_event=None"
    return f"Example: watch_start(name={name!r}, uri={uri!r}{tail})"


def describe(text: str, *, name: str, uri: str, on_event: str | None = None) -> str:
    """A resource description: ``text`` then the ``Example:`` line on its own line."""
    return f"{text.rstrip()}\n{example_line(name=name, uri=uri, on_event=on_event)}"


# --------------------------------------------------------------------------- event log


class EventRing:
    """A bounded log of events with increasing ``seq`` (the event-log shape).

    Pure and synchronous. ``seq`` starts at 1 and never repeats within the
    ring's life; when more than ``capacity`` events were appended the oldest
    fall off, which readers detect as a gap (first ``seq`` > last seen + 1).
    """

    def __init__(self, capacity: int = RING_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"EventRing capacity must be at least 1, got {capacity!r}")
        self._events: deque[dict[str, object]] = deque(maxlen=capacity)
        self._seq = 0

    @property
    def last_seq(self) -> int:
        """``seq`` of the newest event, 0 when nothing was ever appended."""
        return self._seq

    def __len__(self) -> int:
        return len(self._events)

    def append(self, type_: str, fields: Mapping[str, object] | None = None) -> dict[str, object]:
        """Append one event and return it. ``fields`` may not set ``seq`` or ``type``."""
        if fields and ("seq" in fields or "type" in fields):
            raise ValueError("event fields may not override 'seq' or 'type'; rename the field")
        self._seq += 1
        event: dict[str, object] = {"seq": self._seq, "type": type_}
        if fields:
            event.update(fields)
        self._events.append(event)
        return event

    def append_drafts(self, drafts: Iterable[Mapping[str, object]]) -> int:
        """Append a watcher's drafts (events with ``type`` and without ``seq``), in order; returns how many."""
        count = 0
        for draft in drafts:
            fields = dict(draft)
            self.append(str(fields.pop("type")), fields)
            count += 1
        return count

    def error(self, message: str) -> dict[str, object]:
        """Record a source failure in-band: ``{"seq", "type": "ERROR", "message"}``."""
        return self.append("ERROR", {"message": message})

    def events(self, after: int = 0) -> list[dict[str, object]]:
        """Events with ``seq > after``, oldest first."""
        if after <= 0:
            return list(self._events)
        # seqs are consecutive and the newest is ``last_seq``: the wanted ones are the newest few.
        wanted = min(max(self._seq - after, 0), len(self._events))
        return list(self._events)[len(self._events) - wanted :]

    def body(self) -> str:
        """The resource body: ``{"events": [...]}`` as JSON text."""
        return orjson.dumps({"events": list(self._events)}).decode()


# --------------------------------------------------------------------------- source readiness


class SourceState(enum.Enum):
    """Lifecycle of a change source (inotify watcher, child stream, ...)."""

    STARTING = "starting"
    """Not running yet: reads wait."""
    RUNNING = "running"
    """Delivering changes: reads proceed."""
    FAILED = "failed"
    """Could not start, or stopped: reads fail with the recorded message."""


class SourceGate:
    """Lets the first read of a watched URI wait for its change source.

    The source task calls :meth:`running` once it is set up (or
    :meth:`failed` with a message that says what to do); readers
    ``await gate.wait_ready()``. A signal, never a poll.
    """

    def __init__(self, what: str) -> None:
        self.what = what
        self.state = SourceState.STARTING
        self.message: str | None = None
        self._settled = trio.Event()

    def running(self) -> None:
        """STARTING/FAILED -> RUNNING (a source may recover after a failure)."""
        self.state = SourceState.RUNNING
        self.message = None
        self._settled.set()

    def failed(self, message: str) -> None:
        """-> FAILED with a message that reads will raise."""
        self.state = SourceState.FAILED
        self.message = message
        self._settled.set()

    async def wait_ready(self, *, within: float = SOURCE_START_TIMEOUT) -> None:
        """Return once the source runs.

        Raises:
            ResourceError: it failed (its message), or did not start ``within`` seconds.
        """
        with trio.move_on_after(within):
            await self._settled.wait()
        if self.state is SourceState.RUNNING:
            return
        if self.state is SourceState.FAILED:
            raise ResourceError(self.message or f"{self.what} failed")
        raise ResourceError(f"{self.what} did not start within {within:g} s; check the server's stderr")


# --------------------------------------------------------------------------- transport


@dataclass(frozen=True, slots=True)
class Transport:
    """Where the server speaks MCP."""

    kind: Literal["stdio", "http"] = "stdio"
    host: str = "127.0.0.1"
    port: int = 0
    path: str = "/mcp"
    allow_hosts: tuple[str, ...] = ()
    """Extra names the HTTP server answers for (``--allow-host``)."""
    token: str | None = None
    """Bearer token every HTTP request must carry (required for a non-loopback bind)."""

    def policy(self) -> HttpPolicy:
        return HttpPolicy.for_bind(self.host, self.allow_hosts, self.token)


def whole_number(text: str) -> int:
    """The argparse ``type`` of a server's count flags (``--max-watchers N``): ASCII digits only.

    ``int`` would take ``١٢`` for 12; argparse names the flag and exits 2 with this message.
    """
    try:
        return ascii_int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number: {exc}") from None


def read_token(token_file: str | None, env: Mapping[str, str]) -> str | None:
    """The bearer token from ``--token-file`` (first line) or ``$AGENTD_SERVE_TOKEN``; None when neither.

    Raises:
        ConfigError: the file cannot be read, or the token is shorter than 16 characters.
    """
    if token_file:
        try:
            with open(token_file, encoding="utf-8") as f:
                token, source = f.readline().strip(), "--token-file"
        except OSError as exc:
            raise ConfigError("--token-file", token_file, f"it cannot be read ({exc.strerror})") from exc
    elif env.get(TOKEN_ENV):
        token, source = env[TOKEN_ENV].strip(), TOKEN_ENV
    else:
        return None
    if len(token) < MIN_TOKEN_LENGTH:
        raise ConfigError(
            source,
            "(hidden)",  # never echo a credential, even a bad one
            f"it is {len(token)} characters long: use a bearer token of at least {MIN_TOKEN_LENGTH} random "
            "characters (e.g. from `openssl rand -hex 32`)",
        )
    return token


def parse_http(
    value: str,
    *,
    allow_remote: bool,
    allow_hosts: Sequence[str] = (),
    token: str | None = None,
) -> Transport:
    """Parse ``--http HOST:PORT`` (``[v6]:PORT`` for IPv6; ``:PORT`` means 127.0.0.1; port 0 = any free port,
    printed on stderr as ``listening on URL``).

    Raises:
        ConfigError: malformed; a non-loopback host without ``--allow-remote``
            or without a bearer token; a wildcard host without ``--allow-host``.
    """
    host, sep, port_text = value.rpartition(":")
    try:
        port = ascii_int(port_text) if sep else -1  # never isdigit()/int(): ``²``, ``١٢``
    except ValueError:
        port = -1
    if not 0 <= port < 65536:
        raise ConfigError(
            "--http",
            value,
            "give HOST:PORT with a port in 0-65535 in ASCII digits (0 picks a free one), e.g. 127.0.0.1:8765",
        )
    host = host.strip("[]") or "127.0.0.1"
    if not is_loopback(host):
        if not allow_remote:
            raise ConfigError(
                "--http",
                value,
                "bind a loopback address (127.0.0.1, ::1, localhost), or pass --allow-remote with a bearer "
                f"token ({TOKEN_ENV}, or a file named with --token-file) to expose it deliberately",
            )
        if token is None:
            raise ConfigError(
                "--allow-remote",
                value,
                f"a non-loopback bind needs a bearer token (set {TOKEN_ENV}, or name a file holding it with "
                "--token-file); clients send it in their Authorization header",
            )
        if is_wildcard(host) and not allow_hosts:
            raise ConfigError(
                "--http",
                value,
                "a wildcard bind answers on every interface: name the host clients use with "
                "--allow-host NAME (repeatable), so requests for other names are refused",
            )
    return Transport("http", host, port, allow_hosts=tuple(allow_hosts), token=token)


# --------------------------------------------------------------------------- the server


class _ChannelNotification(BaseModel):
    """A notification with an arbitrary method (the SDK serialises any model with method/params)."""

    method: str
    params: dict[str, object] | None = None


def _declares(session: object, capability: str) -> bool:
    caps = getattr(session, "client_capabilities", None)
    if caps is None:
        return False
    for table in (getattr(caps, "experimental", None), getattr(caps, "extensions", None)):
        if isinstance(table, Mapping) and capability in table:
            return True
    return False


_LIST_CHANGED_LINE: Final = b'{"jsonrpc":"2.0","method":"notifications/resources/list_changed"}\n'
_SEND_ERRORS = (anyio.BrokenResourceError, anyio.ClosedResourceError, trio.BrokenResourceError, OSError)


@dataclass(eq=False)
class LegacyClient:
    """One handshake-era client connection (the only kind that can receive unsolicited notifications)."""

    key: object
    session: Any
    """The SDK's ``ServerSession``, kept untyped: its ``send_notification`` is typed to the SDK's
    own notification union, and this is how agentd's custom channel notifications go out."""
    state: dict[str, object] = field(default_factory=dict)
    """Per-connection scratch space for the server built on top (e.g. what was pushed to it)."""

    def declares(self, capability: str) -> bool:
        """Whether the client listed ``capability`` under ``experimental`` (or ``extensions``)."""
        return _declares(self.session, capability)

    @property
    def client_name(self) -> str | None:
        params = getattr(self.session, "client_params", None)
        info = getattr(params, "client_info", None)
        name = getattr(info, "name", None)
        return name if isinstance(name, str) else None


class WatchableServer:
    """An ``MCPServer`` that serves both subscription eras and runs change sources.

    Attributes:
        mcp: the SDK server; register tools and resources on it.
        bus: the 2026-07-28 subscription bus behind ``subscriptions/listen``.
    """

    def __init__(
        self,
        name: str,
        *,
        instructions: str,
        experimental: Mapping[str, JSONObject] | None = None,
        resources_list_changed: bool = False,
    ) -> None:
        self.name = name
        self.resources_list_changed = resources_list_changed
        """Advertise ``resources.listChanged`` to handshake-era clients (:meth:`notify_list_changed`)."""
        self.bus = InMemorySubscriptionBus()
        self.mcp: MCPServer = MCPServer(
            f"agentd-{name}",
            instructions=instructions,
            version=__version__,
            subscriptions=self.bus,
            log_level="WARNING",
        )
        self.experimental = dict(experimental) if experimental else None
        self._sources: list[Callable[[], Awaitable[None]]] = []
        self._cleanups: list[Callable[[], None]] = []
        self._ready_hooks: list[Callable[[LegacyClient], Awaitable[None]]] = []
        # uri -> connection key -> a session of that connection (handshake era)
        self._legacy_subs: dict[str, dict[object, ServerSession]] = {}
        # every handshake-era connection seen, for custom notifications
        self._legacy: dict[object, LegacyClient] = {}
        self._stdio: StdioTransport | None = None
        self._nursery: trio.Nursery | None = None
        self.failure: ServerStartError | None = None
        """Set by :meth:`fail`: why the server stopped; :func:`main` exits with its code."""
        _sdk.set_request_handler(self.mcp, "resources/subscribe", SubscribeRequestParams, self._on_subscribe)
        _sdk.set_request_handler(
            self.mcp, "resources/unsubscribe", UnsubscribeRequestParams, self._on_unsubscribe
        )
        original_read = _sdk.request_handler(self.mcp, "resources/read")
        assert original_read is not None
        self._original_read = original_read
        _sdk.set_request_handler(self.mcp, "resources/read", ReadResourceRequestParams, self._on_read)
        self.mcp.middleware.append(self._track_session)

    # ---------------------------------------------------------------- change sources

    def add_source(self, run: Callable[[], Awaitable[None]]) -> None:
        """Run ``run()`` for the server's life, started before the transport.

        A source reports readiness through a :class:`SourceGate`; if it
        raises, the error is logged, the server stays up and the gate should
        already carry the failure (catch and ``gate.failed(...)`` inside).
        """
        self._sources.append(run)

    def add_cleanup(self, fn: Callable[[], None]) -> None:
        """Run ``fn()`` once when the server stops (after the transport and sources end), LIFO."""
        self._cleanups.append(fn)

    def on_client_ready(self, hook: Callable[[LegacyClient], Awaitable[None]]) -> None:
        """Run ``await hook(client)`` (in its own task) once a handshake-era client finished initializing."""
        self._ready_hooks.append(hook)

    def close(self) -> None:
        """Run the registered cleanups (idempotent); :func:`main` calls it on every exit path."""
        while self._cleanups:
            fn = self._cleanups.pop()
            try:
                fn()
            except Exception:  # one failed cleanup must not skip the others
                log.exception("cleanup %r of %s failed", fn, self.name)

    def fail(self, error: ServerStartError) -> None:
        """Stop serving because of ``error`` (e.g. the inbox lock was lost); :func:`main` exits with its code."""
        log.error("%s", error)
        self.failure = error
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    # ---------------------------------------------------------------- notifications

    async def notify_changed(self, uri: str) -> None:
        """Tell every subscriber of ``uri`` (both eras) that it changed."""
        subs = self._legacy_subs.get(uri)
        for key, session in list(subs.items()) if subs else ():
            try:
                if self._stdio is not None:  # one client on stdio: the line goes straight into the pipe
                    await self._stdio.send_raw(
                        orjson.dumps(
                            {
                                "jsonrpc": "2.0",
                                "method": "notifications/resources/updated",
                                "params": {"uri": uri},
                            }
                        )
                        + b"\n"
                    )
                else:
                    await session.send_resource_updated(uri)
            except _SEND_ERRORS:
                self._forget(key)
        await self.bus.publish(ResourceUpdated(uri=uri))

    async def notify_list_changed(self) -> None:
        """Tell every client (both eras) that the resource list changed (``resources/list_changed``)."""
        for client in self.legacy_clients():
            try:
                if self._stdio is not None:
                    await self._stdio.send_raw(_LIST_CHANGED_LINE)
                else:
                    await client.session.send_resource_list_changed()
            except _SEND_ERRORS:
                self._forget(client.key)
        await self.bus.publish(ResourcesListChanged())

    def legacy_clients(self) -> list[LegacyClient]:
        """Every handshake-era client connected now."""
        return list(self._legacy.values())

    def is_subscribed(self, client: LegacyClient, uri: str) -> bool:
        """Whether ``client`` subscribed to ``uri`` with ``resources/subscribe``."""
        return client.key in self._legacy_subs.get(uri, {})

    async def send_custom(
        self, client: LegacyClient, method: str, params: Sequence[Mapping[str, object]]
    ) -> bool:
        """Send one ``method`` notification per ``params`` to ``client``, in order.

        Over stdio the lines go straight into the transport's write queue
        (serialised once, no model round trip). Returns False when the client
        is gone (it is forgotten).
        """
        if not params:
            return True
        try:
            if self._stdio is not None:
                await self._stdio.send_raw(
                    b"".join(
                        orjson.dumps({"jsonrpc": "2.0", "method": method, "params": p}) + b"\n"
                        for p in params
                    )
                )
            else:
                for p in params:
                    await client.session.send_notification(
                        _ChannelNotification(method=method, params=dict(p))
                    )
        except _SEND_ERRORS:
            self._forget(client.key)
            return False
        return True

    async def notify_custom(
        self, method: str, params: Mapping[str, object], *, capability: str | None
    ) -> int:
        """Send a custom notification to every handshake-era client that declared ``capability``
        (every one when None). Returns how many clients it was sent to."""
        sent = 0
        for client in self.legacy_clients():
            if capability is not None and not client.declares(capability):
                continue
            if await self.send_custom(client, method, [params]):
                sent += 1
        return sent

    async def wait_written(self) -> None:
        """Over stdio: return once everything queued so far is in the pipe (no-op over HTTP)."""
        if self._stdio is not None:
            await self._stdio.wait_written()

    def legacy_subscriber_count(self, uri: str) -> int:
        return len(self._legacy_subs.get(uri, ()))

    def _forget(self, key: object) -> None:
        self._legacy.pop(key, None)
        for subs in self._legacy_subs.values():
            subs.pop(key, None)

    # ---------------------------------------------------------------- handlers

    async def _track_session(self, ctx: ServerRequestContext, call_next: CallNext) -> HandlerResult:
        result = await call_next(ctx)
        if ctx.method == "notifications/initialized" or (
            ctx.request_id is not None and ctx.method != "initialize"
        ):
            session = ctx.session
            key = _sdk.connection_of(session)
            if (
                key not in self._legacy
                and getattr(session, "client_params", None) is not None
                and session.protocol_version not in MODERN_PROTOCOL_VERSIONS
            ):
                client = LegacyClient(key, session)
                self._legacy[key] = client
                stack = getattr(key, "exit_stack", None)
                if stack is not None:
                    stack.callback(self._forget, key)
                if self._nursery is not None:
                    for hook in self._ready_hooks:
                        self._nursery.start_soon(self._run_hook, hook, client)
        return result

    async def _run_hook(self, hook: Callable[[LegacyClient], Awaitable[None]], client: LegacyClient) -> None:
        try:
            await hook(client)
        except Exception:  # a hook's failure must not take the connection down
            log.exception("client-ready hook %r of %s failed", hook, self.name)

    async def _on_subscribe(self, ctx: ServerRequestContext, params: SubscribeRequestParams) -> EmptyResult:
        uri = str(params.uri)
        await self._check_known(uri)
        key = _sdk.connection_of(ctx.session)
        self._legacy_subs.setdefault(uri, {})[key] = ctx.session
        return EmptyResult()

    async def _on_unsubscribe(
        self, ctx: ServerRequestContext, params: UnsubscribeRequestParams
    ) -> EmptyResult:
        subs = self._legacy_subs.get(str(params.uri))
        if subs is not None:
            subs.pop(_sdk.connection_of(ctx.session), None)
        return EmptyResult()

    async def _known_uris(self) -> tuple[list[str], list[str]]:
        fixed = [str(r.uri) for r in await self.mcp.list_resources()]
        templates = [t.uri_template for t in await self.mcp.list_resource_templates()]
        return fixed, templates

    async def _unknown_message(self, uri: str) -> str:
        fixed, templates = await self._known_uris()
        offered = ", ".join([*fixed, *templates]) or "(none)"
        return f"unknown resource {uri!r}: this server serves {offered}; call resources/list for descriptions"

    async def _check_known(self, uri: str) -> None:
        fixed, templates = await self._known_uris()
        if uri in fixed:
            return
        for t in templates:
            if UriTemplate.parse(t).match(uri) is not None:
                return
        raise MCPError(code=INVALID_PARAMS, message=await self._unknown_message(uri), data={"uri": uri})

    async def _on_read(self, ctx: ServerRequestContext, params: ReadResourceRequestParams) -> HandlerResult:
        try:
            return await self._original_read(ctx, params)
        except MCPError as exc:
            if exc.error.code == INVALID_PARAMS and str(exc.error.message).startswith("Unknown resource"):
                uri = str(params.uri)
                raise MCPError(
                    code=INVALID_PARAMS, message=await self._unknown_message(uri), data={"uri": uri}
                ) from exc
            raise

    # ---------------------------------------------------------------- running

    async def run(self, transport: Transport = Transport()) -> None:
        """Serve until stdin closes (stdio), SIGTERM/SIGINT, or :meth:`fail`; then stop the sources."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._watch_signals, nursery.cancel_scope)
            for source in self._sources:
                nursery.start_soon(self._run_source, source)
            if transport.kind == "stdio":
                await self._serve_stdio()
            else:
                await self._serve_http(transport)
            nursery.cancel_scope.cancel()

    async def _run_source(self, source: Callable[[], Awaitable[None]]) -> None:
        try:
            await source()
        except Exception:  # a source's failure must not take the protocol down
            log.exception("change source %r of %s stopped", getattr(source, "__name__", source), self.name)

    @staticmethod
    async def _watch_signals(scope: trio.CancelScope) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                scope.cancel()
                return

    async def _serve_stdio(self) -> None:
        self._stdio = StdioTransport()
        await self._stdio.serve(
            _sdk.lowlevel(self.mcp),
            _sdk.initialization_options(
                self.mcp, self.experimental, resources_changed=self.resources_list_changed
            ),
        )

    async def _serve_http(self, transport: Transport) -> None:
        from hypercorn.config import Config
        from hypercorn.trio import serve

        if self.experimental or self.resources_list_changed:
            # The HTTP session manager builds its own init options; advertise ours.
            _sdk.advertise(self.mcp, self.experimental, resources_changed=self.resources_list_changed)
        # Our guard checks Host, Origin and the token for every bind address;
        # the SDK's own check (only for three literal hosts) is switched off.
        app = self.mcp.streamable_http_app(
            host=transport.host,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        guarded = HostOriginGuard(app, transport.policy())
        config = Config()
        host = f"[{transport.host}]" if ":" in transport.host else transport.host
        config.bind = [f"{host}:{transport.port}"]
        config.accesslog = None
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(partial(serve, guarded, config, mode="asgi"))  # type: ignore[arg-type]
            # Printed once the socket is bound, so a launcher can wait for this line; a stderr that
            # cannot be written (a full disk, a reader gone) must not stop the server.
            with contextlib.suppress(OSError, ValueError):
                for bind in binds:
                    print(
                        f"agentd serve {self.name}: listening on {bind}{transport.path}",
                        file=sys.stderr,
                        flush=True,
                    )


# --------------------------------------------------------------------------- CLI entry


def _server_list() -> str:
    return ", ".join(SERVERS)


_SERVE_USAGE = "usage: agentd serve NAME [--http HOST:PORT] [options]"

_SERVE_EPILOG = """\
Each server speaks MCP on stdin/stdout (what an MCP client starts), or Streamable
HTTP with --http HOST:PORT (at http://HOST:PORT/mcp). agentd serve NAME --help
lists a server's resources, tools and options, and how to use it with agentd:
  agentd --mcp-stdio 'memo=agentd serve memo' ...
or in any client's mcpServers JSON: {"command": "agentd", "args": ["serve", "memo"]}."""


def serve_help() -> str:
    """``agentd serve --help``: the usage, every bundled server with its summary, and how to use them."""
    lines = [_SERVE_USAGE, "", "servers:"]
    for name, module_path in SERVERS.items():
        try:
            summary = str(getattr(importlib.import_module(module_path), "SUMMARY", ""))
        except ModuleNotFoundError as exc:
            if exc.name != module_path:
                raise
            summary = "(not included in this build)"
        lines.append(f"  {name:<8}{summary}")
    return "\n".join([*lines, "", _SERVE_EPILOG])


def main(argv: list[str]) -> int:
    """``agentd serve NAME [options]``: build and run one bundled server.

    Returns the process exit code: 0 after a clean stop, 2 for usage errors
    (unknown NAME, bad flags), a :class:`ServerStartError`'s code when the
    server refuses to run.
    """
    if not argv or argv[0] in ("-h", "--help"):
        if argv:
            print(serve_help())
            return int(ExitCode.OK)
        print(
            f"agentd serve: which server? choose one of: {_server_list()} (agentd serve --help describes them)",
            file=sys.stderr,
        )
        return int(ExitCode.CONFIG)
    name, rest = argv[0], argv[1:]
    module_path = SERVERS.get(name)
    if module_path is None:
        import difflib

        close = difflib.get_close_matches(name, list(SERVERS), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        print(
            f"agentd serve: unknown server {name!r}; {hint}choose one of: {_server_list()} "
            "(agentd serve --help describes them)",
            file=sys.stderr,
        )
        return int(ExitCode.CONFIG)
    try:
        module = importlib.import_module(module_path)
    except ModuleNotFoundError as exc:
        if exc.name != module_path:
            raise
        print(f"agentd serve: server {name!r} is not included in this build", file=sys.stderr)
        return int(ExitCode.CONFIG)
    parser = argparse.ArgumentParser(
        prog=f"agentd serve {name}",
        description=getattr(module, "SUMMARY", None),
        epilog=getattr(module, "HELP", None),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--http", metavar="HOST:PORT", help="serve Streamable HTTP instead of stdio")
    parser.add_argument(
        "--allow-remote",
        action="store_true",
        help=f"allow --http on a non-loopback address (needs a bearer token: --token-file or ${TOKEN_ENV})",
    )
    parser.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name clients use to reach --http (checked against Host/Origin); repeatable",
    )
    parser.add_argument(
        "--token-file",
        metavar="PATH",
        help=f"file whose first line is the bearer token HTTP clients must send (or set ${TOKEN_ENV})",
    )
    module.add_arguments(parser)
    try:
        args = parser.parse_args(rest)
    except SystemExit as exc:  # argparse already printed the message
        return int(exc.code) if isinstance(exc.code, int) else int(ExitCode.CONFIG)
    # A plain handler, before the MCP SDK's server (built below) would install a rich one on the root
    # logger (its configure_logging defers to a handler already there): rich exits the process
    # (SystemExit) when stderr is a pipe whose reader left, and wraps lines at 80 columns. A plain
    # handler drops a line it cannot write: a server never stops because its log cannot be written.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(name)s: %(message)s", force=True)
    try:
        transport = (
            parse_http(
                args.http,
                allow_remote=args.allow_remote,
                allow_hosts=args.allow_host,
                token=read_token(args.token_file, os.environ),
            )
            if args.http
            else Transport()
        )
        server: WatchableServer = module.build(args)
    except ConfigError as exc:
        print(f"agentd serve {name}: {exc}", file=sys.stderr)
        return int(ExitCode.CONFIG)
    except ServerStartError as exc:
        print(f"agentd serve {name}: {exc}", file=sys.stderr)
        return int(exc.exit_code)
    start_collector()  # start-up objects frozen; the agentd command paused the collector (rfcs/0367)
    try:
        trio.run(server.run, transport)
    finally:
        server.close()
    if server.failure is not None:
        print(f"agentd serve {name}: {server.failure}", file=sys.stderr)
        return int(server.failure.exit_code)
    return int(ExitCode.OK)


def iter_servers() -> Iterable[tuple[str, str]]:
    """(NAME, module path) pairs, for help text."""
    return SERVERS.items()
