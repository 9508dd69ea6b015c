"""Which transport and handshake a connection try uses, and what a server taught agentd (pure).

A server is reached in one of two protocol eras: the 2026-07-28 one
(``server/discover``, then stateless requests) or the handshake era
(``initialize``, 2024-11-05 to 2025-11-25). Over a URL it speaks Streamable
HTTP or the older HTTP+SSE transport. Neither is always known in advance, so
one connection *attempt* may take several *tries* (rfcs/0285, rfcs/0286)::

    probe ──the probe failed in any way──> initialize        (same transport)
    http  ──every POST refused with a 4xx──> sse              (same handshake)

* ``probe``: ``server/discover``; the SDK itself falls back to
  ``initialize`` on the same connection when the server answers it with a
  JSON-RPC error. When the probe fails any other way (the stream closes, the
  process exits, the reply does not validate, or a stdio server reads it and
  says nothing: rfcs/0378), the next try connects again and sends
  ``initialize``.
* A try that timed out, or never reached the server (a refused TCP
  connection, a command that cannot start), is not a verdict on era or
  transport: the attempt fails and the usual backoff follows.

What a try that got through the handshake found (era, transport) is kept
for the life of the :class:`Negotiator` (the process): a reconnect goes
straight to it, with no probe and no detection. A pinned ``protocol`` or
``transport`` setting is never re-negotiated.

Nothing here does I/O or awaits: the connection (``connection.py``) asks,
performs the try and reports back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

__all__ = [
    "MAX_TRIES",
    "Era",
    "Handshake",
    "Negotiator",
    "Probe",
    "Try",
    "TryFailure",
    "TryTransport",
    "era_of",
    "probe_outcome",
]

Handshake = Literal["probe", "discover", "initialize"]
"""How a try opens the session.

``probe``: ``server/discover``, falling back to ``initialize`` on an error
reply (the SDK's ``auto`` mode). ``discover``: ``server/discover`` at a
known 2026-era version, no fallback. ``initialize``: the handshake, offering
:attr:`Try.version` (``None``: the SDK's newest handshake version)."""

TryTransport = Literal["stdio", "http", "sse"]
"""The transport a try uses."""

Era = Literal["modern", "handshake"]
"""The protocol era a connection is in: 2026-07-28 (``modern``) or ``initialize``-based."""

Probe = Literal["answered", "refused", "failed", "ignored", "skipped"]
"""What became of the ``server/discover`` probe on a connection that got through.

``answered``: a 2026-era server answered it. ``refused``: the server answered
with an error (or advertised only handshake versions) and the SDK fell back
to ``initialize`` on the same connection. ``failed``: it broke the connection
(closed the stream, exited, an invalid reply) and agentd connected again with
``initialize``. ``ignored``: a stdio server read it and said nothing
(:data:`agentd.upstream.stdio.PROBE_SILENCE`), and agentd connected again with
``initialize`` (rfcs/0378). ``skipped``: the era was pinned or already known."""

MAX_TRIES = 3
"""The most tries one attempt can take: each fallback moves one step (http -> sse,
probe -> initialize) and never back."""


@dataclass(frozen=True, slots=True)
class Try:
    """One way to connect: a transport and a handshake."""

    transport: TryTransport
    handshake: Handshake
    version: str | None = None
    """``discover``: the 2026-era version to speak; ``initialize``: the version
    offered (``None``: the SDK's newest); ``probe``: unused."""

    def describe(self) -> str:
        """``"sse, initialize offering 2024-11-05"`` (for messages)."""
        how = {"probe": "server/discover probe", "discover": "server/discover", "initialize": "initialize"}
        text = f"{self.transport}, {how[self.handshake]}"
        if self.handshake == "discover" and self.version is not None:
            text += f" at {self.version}"
        elif self.handshake == "initialize" and self.version is not None:
            text += f" offering {self.version}"
        return text


@dataclass(frozen=True, slots=True)
class TryFailure:
    """What the connection saw of a try that did not get through."""

    reached: bool
    """The server answered at all: its process started, or an HTTP response came back."""
    handshake_done: bool = False
    """The era was settled; the try failed later (e.g. fetching the catalog)."""
    timed_out: bool = False
    """The try's ``startup_timeout`` ran out."""
    rejected: bool = False
    """Streamable HTTP only: no POST was accepted and at least one was refused with a
    4xx other than 401 (the transport-detection signal of the MCP specification)."""
    silent: bool = False
    """stdio only: the server read the ``server/discover`` probe and said nothing while it
    lived (rfcs/0378); the try failed at once rather than wait out the SDK's probe timeout."""


class Negotiator:
    """One server's era and transport: what to try next, and what was learned.

    Args:
        protocol: the server's ``protocol`` setting (``auto`` or a version).
        transport: the server's transport: ``stdio`` for a command; for a url
            its ``transport`` setting (``http``, ``sse``, or ``auto``/``None``: detect).

    Raises:
        ValueError: ``protocol`` is not ``auto`` or a known MCP version.
    """

    def __init__(self, *, protocol: str, transport: str | None) -> None:
        if protocol != "auto" and protocol not in (*MODERN_PROTOCOL_VERSIONS, *HANDSHAKE_PROTOCOL_VERSIONS):
            known = ", ".join(("auto", *MODERN_PROTOCOL_VERSIONS, *HANDSHAKE_PROTOCOL_VERSIONS))
            raise ValueError(f"protocol {protocol!r} is not one of {known}")
        self.protocol = protocol
        self.detecting = transport in (None, "auto")
        """Whether the transport is still to be found (a url with no ``transport``)."""
        self._transport: TryTransport | None = None if transport in (None, "auto") else _transport(transport)
        self._known: tuple[Handshake, str | None] | None = None
        """The handshake (and version) every try uses, once learned (``auto``) or as pinned."""
        if protocol in MODERN_PROTOCOL_VERSIONS:
            self._known = ("discover", protocol)
        elif protocol != "auto":
            self._known = ("initialize", protocol)

    @property
    def transport(self) -> TryTransport | None:
        """The transport, once pinned or learned (``None``: not yet detected)."""
        return self._transport

    @property
    def era(self) -> Era | None:
        """The era, once pinned or learned (``None``: not yet known)."""
        if self._known is None:
            return None
        return "modern" if self._known[0] == "discover" else "handshake"

    def first(self) -> Try:
        """The first try of an attempt: what is known, else Streamable HTTP and the probe."""
        transport = self._transport or "http"
        if self._known is None:
            return Try(transport, "probe")
        return Try(transport, *self._known)

    def next_after(self, tried: Try, failure: TryFailure) -> Try | None:
        """The try to make at once after ``tried`` failed, or ``None``: the attempt failed."""
        if failure.timed_out or not failure.reached:
            return None
        if failure.rejected and tried.transport == "http" and self.detecting:
            # The spec's rule for clients: a 4xx to the POST means HTTP+SSE.
            return Try("sse", tried.handshake, tried.version)
        if tried.handshake == "probe" and not failure.handshake_done:
            return Try(tried.transport, "initialize")
        return None

    def learned(self, tried: Try, protocol_version: str) -> None:
        """``tried`` got through the handshake at ``protocol_version``: keep what it found."""
        if self.detecting and tried.transport != "stdio":
            self._transport = tried.transport
        if self.protocol == "auto" and self._known is None:
            if protocol_version in MODERN_PROTOCOL_VERSIONS:
                self._known = ("discover", protocol_version)
            else:
                self._known = ("initialize", None)

    def counteroffered(self, protocol_version: str) -> bool:
        """Whether the server answered a pinned handshake version with another one."""
        return self.protocol in HANDSHAKE_PROTOCOL_VERSIONS and protocol_version != self.protocol


def probe_outcome(tried: Try, era: Era, *, after_failed_probe: bool, ignored: bool = False) -> Probe:
    """What became of the probe on a connection that got through with ``tried``.

    ``ignored``: the failed probe's server read it and said nothing (rather than broke the connection).
    """
    if tried.handshake == "probe":
        return "answered" if era == "modern" else "refused"
    if after_failed_probe:
        return "ignored" if ignored else "failed"
    return "skipped"


def era_of(protocol_version: str) -> Era:
    """The era a negotiated version belongs to."""
    return "modern" if protocol_version in MODERN_PROTOCOL_VERSIONS else "handshake"


_TRANSPORTS: dict[str, TryTransport] = {"stdio": "stdio", "http": "http", "sse": "sse"}


def _transport(value: str) -> TryTransport:
    try:
        return _TRANSPORTS[value]
    except KeyError:
        raise ValueError(f"transport {value!r} is not one of stdio, http, sse, auto") from None
