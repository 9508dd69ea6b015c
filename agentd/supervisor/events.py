"""The typed events every task sends into the reactor's one memory channel.

Producers (MCP connection tasks, child watchers, the signal handler, the
health endpoint) never touch supervisor state: they build one of these and
``send`` it. The reactor is the single consumer and the only place that acts.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from agentd.selfmcp.protocol import NextTurn, TurnEnd, UsageReport, UsageVerdict
from agentd.triggers.router import ChangeKind

T = TypeVar("T")


class Reply(Generic[T]):
    """The one answer to a request the reactor handles (a one-slot channel behind it).

    :meth:`answer` never raises: the asker may be gone (its child died while
    the request waited in the reactor's channel), and a request answered
    twice keeps its first answer. The reactor can answer freely.

    Args:
        send: the sending end of a one-slot memory channel the asker waits on.
    """

    __slots__ = ("_answered", "_send")

    def __init__(self, send: Any) -> None:
        self._send = send
        self._answered = False

    @property
    def answered(self) -> bool:
        return self._answered

    def answer(self, value: T) -> bool:
        """Deliver ``value``; False if already answered or the asker is gone."""
        if self._answered:
            return False
        self._answered = True
        try:
            self._send.send_nowait(value)
        except Exception:  # trio.WouldBlock / BrokenResourceError / ClosedResourceError: the asker is gone
            return False
        return True


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
    """A server says ``uri`` changed (or may have: ``kind == "synthetic"``)."""

    server: str
    uri: str
    kind: ChangeKind = "updated"
    etag: str | None = None


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
    """SIGTERM, SIGINT or SIGHUP arrived (``signum``); the first drains, the second stops."""

    signum: int


@dataclass(slots=True)
class ChildMessage:
    """A self-tool request of a child's model (``subscribe``, watches), relayed by the hub."""

    agent: str
    kind: Literal["self_tool"]
    payload: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class UsageReported:
    """A child reported one model call (a validated control frame); the reactor answers the verdict."""

    agent: str
    report: UsageReport
    reply: Reply[UsageVerdict]


@dataclass(frozen=True, slots=True)
class TurnEnded:
    """A child's turn reached a terminal status (a validated control frame).

    The reactor answers exit, or keeps the request (``Agent.held``) and answers
    it with the warm session's next delivery.
    """

    agent: str
    end: TurnEnd
    reply: Reply[NextTurn]


@dataclass(frozen=True, slots=True)
class ChildExited:
    """A child process ended (detected at once from its channels' EOF), or never started.

    Attributes:
        agent: the agent id.
        pid: its process id (-1 when it never started).
        returncode: its exit status when known (negative: killed by that signal).
        reason: why the supervisor ended it, when it did (a broken protocol
            rule, a failed spawn); None for a child that exited on its own.
        spawned: False when the process never started (the spawn failed):
            whatever it was started for is queued again.
    """

    agent: str
    pid: int
    returncode: int | None
    reason: str | None = None
    spawned: bool = True


ZygoteState = Literal["ready", "degraded"]
"""The agent zygote forks children (``ready``), or is being replaced while
children start as fresh interpreters (``degraded``)."""


@dataclass(frozen=True, slots=True)
class ZygoteStateChanged:
    """The zygote became unusable (stopped, dead, failing forks) or ready again; readiness shows it."""

    state: ZygoteState
    reason: str | None = None


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
    | UsageReported
    | TurnEnded
    | ChildExited
    | ZygoteStateChanged
    | HealthProbe
    | WatchNotice
)
