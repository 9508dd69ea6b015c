"""Who may talk to a bundled server over HTTP: Host, Origin and bearer-token checks.

The SDK checks ``Host``/``Origin`` only when the bind address is literally
``127.0.0.1``, ``localhost`` or ``::1``; any other bind (a loopback alias such
as ``127.0.0.2``, a LAN address) served every ``Host``, which is what a DNS
rebinding attack needs. :class:`HostOriginGuard` wraps the whole ASGI app and
checks every request, whatever the bind address:

* ``Host`` must name an allowed host: the bind address itself, the loopback
  names when the bind is loopback, and every ``--allow-host``;
* ``Origin``, when present (browsers send it), must be ``http(s)://`` one of
  those hosts;
* with a token (required for a non-loopback bind), ``Authorization: Bearer
  TOKEN`` must match (constant-time compare).

Refusals: 421 (Host), 403 (Origin), 401 (token), each with a one-line reason.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

from agentd.core.hosts import host_of, is_loopback, is_wildcard

__all__ = [
    "LOOPBACK_NAMES",
    "MIN_TOKEN_LENGTH",
    "HostOriginGuard",
    "HttpPolicy",
    "host_of",
    "is_loopback",
    "is_wildcard",
]

LOOPBACK_NAMES: Final = frozenset({"localhost", "127.0.0.1", "::1"})
MIN_TOKEN_LENGTH: Final = 16
"""Shortest bearer token accepted: anything shorter is guessable."""

# The ASGI interface's own types (as starlette spells them): its messages are dicts of mixed values.
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class HttpPolicy:
    """The hosts a server answers for, and its bearer token (if any)."""

    allowed_hosts: frozenset[str]
    token: str | None = None

    @classmethod
    def for_bind(
        cls, bind_host: str, extra_hosts: Iterable[str] = (), token: str | None = None
    ) -> HttpPolicy:
        hosts = {host_of(h) for h in extra_hosts}
        if not is_wildcard(bind_host):
            hosts.add(host_of(bind_host))
        if is_loopback(bind_host) or is_wildcard(bind_host):
            hosts |= LOOPBACK_NAMES
        return cls(frozenset(hosts), token)


class HostOriginGuard:
    """ASGI middleware enforcing an :class:`HttpPolicy` on every HTTP request."""

    def __init__(self, app: App, policy: HttpPolicy) -> None:
        self.app = app
        self.policy = policy
        self._token = policy.token.encode() if policy.token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        headers: dict[bytes, bytes] = {}
        for key, value in scope.get("headers") or []:
            headers.setdefault(bytes(key).lower(), bytes(value))
        problem = self._check(headers)
        if problem is not None:
            status, reason, extra = problem
            body = (reason + "\n").encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": status,
                    "headers": [
                        (b"content-type", b"text/plain; charset=utf-8"),
                        (b"content-length", str(len(body)).encode()),
                        *extra,
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)

    def _check(self, headers: dict[bytes, bytes]) -> tuple[int, str, list[tuple[bytes, bytes]]] | None:
        allowed = self.policy.allowed_hosts
        host = headers.get(b"host", b"").decode("latin-1")
        if not host or host_of(host) not in allowed:
            return (
                421,
                f"Invalid Host header {host!r}: this server answers for {', '.join(sorted(allowed))}",
                [],
            )
        origin = headers.get(b"origin")
        if origin is not None:
            text = origin.decode("latin-1")
            parts = urlsplit(text)
            if parts.scheme not in ("http", "https") or (parts.hostname or "") not in allowed:
                return 403, f"Invalid Origin header {text!r}", []
        if self._token is not None:
            auth = headers.get(b"authorization", b"")
            scheme, _, given = auth.partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(given.strip(), self._token):
                return 401, "missing or wrong bearer token", [(b"www-authenticate", b'Bearer realm="agentd"')]
        return None
