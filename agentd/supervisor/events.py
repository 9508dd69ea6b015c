"""The typed events every task sends into the reactor's one memory channel.

Producers (MCP connection tasks, child watchers, the signal handler, the
health endpoint) never touch supervisor state: they build one of these and
``send`` it. The reactor is the single consumer and the only place that acts.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Literal

from agentd.triggers.router import ChangeKind


class ServerState(enum.Enum):
    """Lifecycle of one upstream MCP server connection."""

    STARTING = "starting"
    """First connection attempt in progress."""
    CONNECTED = "connected"
    """Handshake done; tools and resources usable."""
    RESTARTING = "restarting"
    """The connection dropped; waiting out a backoff before the next attempt."""
    FAILED = "failed"
    """Gave up after the restart limit; a required server ends the process (exit 6)."""
    STOPPED = "stopped"
    """Closed on purpose (drain or shutdown)."""


@dataclass(frozen=True, slots=True)
class ResourceChanged:
    """A server says ``uri`` changed (or may have: ``kind == "synthetic"``).

    ``startup`` marks the one synthetic event that follows a declared
    subscription's first establishment (rfcs/0130): the owning route may
    switch it off (``reread_on_start = false``).
    """

    server: str
    uri: str
    kind: ChangeKind = "updated"
    etag: str | None = None
    startup: bool = False


@dataclass(frozen=True, slots=True)
class CatalogChanged:
    """A server's resource catalog changed (``notifications/resources/list_changed``)."""

    server: str
    uris: frozenset[str] = frozenset()
    """The concrete URIs the server lists now."""


@dataclass(frozen=True, slots=True)
class ServerStateChanged:
    """An upstream server moved to ``state``."""

    server: str
    state: ServerState
    required: bool = False
    attempt: int = 0
    error: str | None = None


@dataclass(frozen=True, slots=True)
class SubscriptionStateChanged:
    """A subscription to ``uri`` on ``server`` was established, lost, or failed."""

    server: str
    uri: str
    state: Literal["established", "lost", "resubscribing", "failed"]
    attempt: int = 0
    error: str | None = None


@dataclass(frozen=True, slots=True)
class SignalReceived:
    """SIGTERM or SIGINT arrived (``signum``); the first drains, the second stops."""

    signum: int


@dataclass(slots=True)
class ChildMessage:
    """Something a child agent told the supervisor over its self-MCP channel."""

    agent: str
    kind: Literal["usage", "turn_end", "ready", "self_tool"]
    payload: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ChildExited:
    """A child process ended (detected at once from its pidfd / channel EOF)."""

    agent: str
    pid: int
    returncode: int | None


@dataclass(frozen=True, slots=True)
class HealthProbe:
    """The health endpoint asks the reactor to prove it is turning; the reactor sets ``reply``."""

    reply: Any  # a trio.Event; typed loosely so this module never imports trio


WatchNoticeKind = Literal["notice", "restore"]
"""A watch's debounced notice, or the one restore notice per session after a restart."""


@dataclass(frozen=True, slots=True)
class WatchNotice:
    """A watch has a notice for the session that owns it (one agent turn).

    Attributes:
        session: The owning session (the reactor starts it warm if it is gone).
        watch: The watch's name (empty for a restore notice, which lists several).
        uri: The watched URI (empty for a restore notice).
        text: The message the agent receives (a ``<watch-event>`` block and the instruction).
        kind: ``notice`` or ``restore``.
    """

    session: str
    watch: str
    uri: str
    text: str
    kind: WatchNoticeKind = "notice"


ReactorEvent = (
    ResourceChanged
    | CatalogChanged
    | ServerStateChanged
    | SubscriptionStateChanged
    | SignalReceived
    | ChildMessage
    | ChildExited
    | HealthProbe
    | WatchNotice
)
