"""HTTP transports for upstream MCP servers (Streamable HTTP, legacy HTTP+SSE), with loss detection.

Wraps the SDK's ``streamable_http_client`` (or, for ``transport = "sse"``,
its legacy ``sse_client``) with an ``httpx2`` client that carries the
configured headers and authentication (a bearer token, or the OAuth client
credentials provider of :mod:`agentd.upstream.auth`) and watches every
exchange, so agentd learns that the server went away even when the SDK would
retry quietly:

* a connection-level failure (refused, reset, unreachable) on any request;
* HTTP 404 for a request that carried an ``Mcp-Session-Id`` (the server
  restarted and forgot the session: the client must start a new one);
* on the legacy transport, the end of the server's event stream (the
  session lives on that one GET: when it ends, the session is gone).

Either sets :attr:`HttpTransport.lost`; the connection owner then reconnects.
A full connection pool (``httpx2.PoolTimeout``) is the client's own limit, not
the server's failure: that request fails, the connection stays.

Long-lived streams (a ``subscriptions/listen`` request, whose response is the
stream, and the server-push GET) go through their own small pool, so they
never hold the connections calls need (rfcs/0260).
The read timeout is disabled because listen streams and the server-push GET
stream legitimately stay quiet for hours; every request agentd makes is
bounded by its own ``request_timeout`` instead.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import httpx2
from mcp.client.sse import sse_client
from mcp.client.streamable_http import MCP_SESSION_ID, streamable_http_client
from mcp.shared.inbound import MCP_METHOD_HEADER

from agentd.core.redact import redact
from agentd.upstream.transport import Transport

__all__ = ["CONNECT_TIMEOUT", "STREAM_CONNECTIONS", "HttpTransport"]

CONNECT_TIMEOUT = 10.0
"""Seconds for TCP connect, request write and pool acquisition: a reachable server
on a healthy network answers in milliseconds; ten seconds tolerates a slow proxy."""

STREAM_CONNECTIONS = 4
"""Connections the streams' pool may hold: one listen stream per server, two while it
is being replaced (rfcs/0260), the handshake era's push GET, and one to spare."""


def _long_lived(request: httpx2.Request) -> bool:
    """A request whose response is a stream that stays open (listen, or the server-push GET)."""
    return request.method == "GET" or request.headers.get(MCP_METHOD_HEADER) == "subscriptions/listen"


class _Watch(httpx2.AsyncBaseTransport):
    """An httpx2 transport that reports server loss to ``owner``; streams and calls use separate pools."""

    def __init__(
        self, owner: HttpTransport, calls: httpx2.AsyncBaseTransport, streams: httpx2.AsyncBaseTransport
    ) -> None:
        self._owner = owner
        self._calls = calls
        self._streams = streams

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        inner = self._streams if _long_lived(request) else self._calls
        try:
            response = await inner.handle_async_request(request)
        except httpx2.PoolTimeout:
            raise  # agentd's own pool is full: this request fails, the server is fine
        except httpx2.TransportError as exc:
            self._owner.mark_lost(
                f"server {self._owner.server!r} is unreachable at {redact(self._owner.url)}: {exc!r}"
            )
            raise
        self._owner.saw(request, response.status_code)
        if response.status_code == 404 and MCP_SESSION_ID in request.headers:
            self._owner.mark_lost(
                f"server {self._owner.server!r} no longer knows session "
                f"{request.headers[MCP_SESSION_ID]!r} (HTTP 404): it restarted"
            )
        if (
            self._owner.sse
            and request.method == "GET"
            and response.status_code == 200
            and "text/event-stream" in response.headers.get("content-type", "")
            and isinstance(response.stream, httpx2.AsyncByteStream)  # always, from an async transport
        ):
            return httpx2.Response(
                response.status_code,
                headers=response.headers,
                stream=_EventStream(self._owner, response.stream),
                request=request,
                extensions=response.extensions,
            )
        return response

    async def aclose(self) -> None:
        try:
            await self._calls.aclose()
        finally:
            await self._streams.aclose()


class _EventStream(httpx2.AsyncByteStream):
    """The legacy transport's event stream: its end (or failure) means the session is gone."""

    def __init__(self, owner: HttpTransport, inner: httpx2.AsyncByteStream) -> None:
        self._owner = owner
        self._inner = inner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._inner:
                yield chunk
        except httpx2.TransportError as exc:
            self._owner.mark_lost(f"server {self._owner.server!r} event stream failed: {exc!r}")
            raise
        self._owner.mark_lost(f"server {self._owner.server!r} closed its event stream")

    async def aclose(self) -> None:
        await self._inner.aclose()


class HttpTransport(Transport):
    """An MCP ``Transport`` over Streamable HTTP, or over legacy HTTP+SSE when ``sse``.

    Args:
        server: the server's configured name (for messages).
        url: the MCP endpoint (for ``sse``: the event-stream endpoint, e.g. ``…/sse``).
        headers: sent with every request (e.g. ``Authorization``).
        auth: authentication applied to every request (an OAuth provider).
        sse: speak the legacy HTTP+SSE transport (the 2024-11-05 era).
    """

    def __init__(
        self,
        server: str,
        url: str,
        headers: Mapping[str, str] | None = None,
        *,
        auth: httpx2.Auth | None = None,
        sse: bool = False,
    ) -> None:
        super().__init__(server)
        self.url = url
        self.headers = dict(headers or {})
        self.auth = auth
        self.sse = sse
        self._endpoint = httpx2.URL(url)
        self.accepted = False
        """Whether a POST was answered with a 2xx (the server speaks this transport)."""
        self.refused_status: int | None = None
        """The status of the last POST refused with a 4xx other than 401."""

    @property
    def rejected(self) -> bool:
        """No POST was accepted and one was refused with a 4xx other than 401.

        Over Streamable HTTP this is the specification's sign that the URL
        serves the older HTTP+SSE transport (rfcs/0286). A 401 is left out:
        it asks for credentials, whatever the transport.
        """
        return not self.accepted and self.refused_status is not None

    def saw(self, request: httpx2.Request, status: int) -> None:
        """Record one HTTP response (see :attr:`reached`, :attr:`rejected`).

        Only the server's own answers count: a response from another origin
        (an OAuth authorization server) says nothing about the MCP server,
        and only a POST to the endpoint itself can say which transport it speaks.
        """
        url = request.url
        if (url.scheme, url.host, url.port) != (
            self._endpoint.scheme,
            self._endpoint.host,
            self._endpoint.port,
        ):
            return
        self.reached = True
        # A redirect to the same path with a trailing slash (Starlette's mounts) is the same endpoint.
        if request.method != "POST" or url.path.rstrip("/") != self._endpoint.path.rstrip("/"):
            return
        if 200 <= status < 300:
            self.accepted = True
        elif 400 <= status < 500 and status != 401:
            self.refused_status = status

    def _client(self, *_args: object, **_kwargs: object) -> httpx2.AsyncClient:
        # The SDK's factory arguments (its 300 s read timeout) are not used: see the module docstring.
        return httpx2.AsyncClient(
            headers=self.headers,
            auth=self.auth,
            timeout=httpx2.Timeout(CONNECT_TIMEOUT, read=None),
            transport=_Watch(
                self,
                httpx2.AsyncHTTPTransport(),
                httpx2.AsyncHTTPTransport(
                    limits=httpx2.Limits(max_connections=STREAM_CONNECTIONS, max_keepalive_connections=0)
                ),
            ),
        )

    @asynccontextmanager
    async def _run(self) -> AsyncIterator[tuple[object, object]]:
        if self.sse:
            async with sse_client(self.url, httpx_client_factory=self._client) as streams:
                yield streams
            return
        async with (
            self._client() as client,
            streamable_http_client(self.url, http_client=client) as streams,
        ):
            yield streams
