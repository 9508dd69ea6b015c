"""The typed events and requests every task sends into the reactor's one memory channel.

Producers (MCP connection tasks, child watchers, the signal handler, the
health endpoint, the hub, the watch manager) never touch supervisor state:
they build one of these and ``send`` it. The reactor is the single consumer
and the only place that acts.

This module sits low in agentd's layers: ``upstream``, ``watches``,
``health``, ``metrics`` and ``supervisor`` all import it, and it imports no
part of them (the layer contracts in ``pyproject.toml`` hold it there). It
never imports trio: a :class:`Reply` wraps any object with ``send_nowait``.

Requests and their typed answers (each request carries a :class:`Reply`)::

    child (control channel, via its reader task)
      UsageReported     -> UsageVerdict
      TurnEnded         -> NextTurn
    hub (a child's self-tool call)
      SelfSubscribe     -> Acknowledged | Refused
      SelfUnsubscribe   -> Unsubscribed
      WatchSession      -> SessionOf
    hub, for the watch manager (a start-up restore adds routes directly, before the loop runs)
      WatchRouteAdd     -> RouteAdded | Refused
      WatchRouteRemove  -> Acknowledged
    hub (a child's agent tools and its reads of agent:// resources; rfcs/0370)
      AgentStart        -> AgentRecords | Refused
      AgentLookup       -> AgentRecords | Refused  (read, wait, cancel, list)
    hub (a fact, no answer)
      ToolChangedState  (a child's tool call that is not read-only succeeded)
    health endpoint / watchdog
      HealthProbe       -> (the probe's event is set)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final, Generic, Literal, Protocol, TypeAlias, TypeVar

from agentd.selfmcp.protocol import NextTurn, TurnEnd, UsageReport, UsageVerdict
from agentd.triggers.router import ChangeKind

#: The URI scheme of agentd's own resources: ``agent://ID``, one per agent another started (rfcs/0370).
AGENT_SCHEME: Final = "agent://"

#: The server name agentd's own resources are routed and logged under.
OWN_SERVER: Final = "agentd"

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)


class ReplySender(Protocol[T_contra]):
    """The sending end of a one-slot channel (``trio.MemorySendChannel`` is one)."""

    def send_nowait(self, value: T_contra, /) -> None: ...


class ProbeEvent(Protocol):
    """What a health probe waits on (``trio.Event`` is one)."""

    def set(self) -> None: ...


class Reply(Generic[T]):
    """The one answer to a request the reactor handles (a one-slot channel behind it).

    :meth:`answer` never raises: the asker may be gone (its child died while
    the request waited in the reactor's channel), and a request answered
    twice keeps its first answer. The reactor can answer freely.

    Args:
        send: the sending end of a one-slot memory channel the asker waits on.
    """

    __slots__ = ("_answered", "_send")

    def __init__(self, send: ReplySender[T]) -> None:
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
    """A server says ``uri`` changed (or may have: ``kind == "synthetic"``; or it appeared
    under a declared glob: ``kind == "list_changed"``, rfcs/0350).

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
    """The subscriptions to ``uris`` on ``server`` were established, lost, or failed.

    One event per establishment or loss, for every URI it concerns: a
    server's URIs share one listen stream (rfcs/0260), so they change state
    together.
    """

    server: str
    uris: frozenset[str]
    state: Literal["established", "lost", "resubscribing", "failed"]
    attempt: int = 0
    error: str | None = None


@dataclass(frozen=True, slots=True)
class SignalReceived:
    """SIGTERM, SIGINT or SIGHUP arrived (``signum``); the first drains, the second stops."""

    signum: int


# -- self-tool requests (hub -> reactor) and their answers ------------------------------


@dataclass(frozen=True, slots=True)
class Refused:
    """A request the reactor refused; ``error`` is the text the model reads."""

    error: str


@dataclass(frozen=True, slots=True)
class Acknowledged:
    """The request is done and the answer has nothing to add (as MCP's ``EmptyResult``).

    ``SelfSubscribe``: the session's exact route is made (or was there).
    ``WatchRouteRemove``: the watch's route is gone (the watch manager then
    asks the subscriptions component what to release).
    """


@dataclass(frozen=True, slots=True)
class Unsubscribed:
    """``unsubscribe`` done.

    Attributes:
        existed: the agent had subscribed to the URI.
        needed: the subscriptions component keeps the upstream subscription
            (a declared subscription, another route or a watch needs it): the
            hub must not release it.
    """

    existed: bool
    needed: bool


@dataclass(frozen=True, slots=True)
class SessionOf:
    """The session a calling agent's watches belong to."""

    session: str


@dataclass(frozen=True, slots=True)
class RouteAdded:
    """The watch's route is in the router (its id)."""

    route_id: str


@dataclass(frozen=True, slots=True)
class SelfSubscribe:
    """A child's model called ``subscribe(uri)``: an exact continue route to its session."""

    agent: str
    uri: str
    server: str
    reply: Reply[Acknowledged | Refused]


@dataclass(frozen=True, slots=True)
class SelfUnsubscribe:
    """``unsubscribe(uri)`` (or the hub undoing a subscribe whose upstream subscription failed)."""

    agent: str
    uri: str
    server: str | None
    reply: Reply[Unsubscribed]


@dataclass(frozen=True, slots=True)
class WatchSession:
    """Which session the calling agent's watches belong to; ``register`` makes the agent that session."""

    agent: str
    register: bool
    reply: Reply[SessionOf | Refused]


@dataclass(frozen=True, slots=True)
class WatchRouteAdd:
    """Add the exact front route of watch ``name`` of ``session`` for ``uri``."""

    agent: str
    session: str
    name: str
    uri: str
    reply: Reply[RouteAdded | Refused]


@dataclass(frozen=True, slots=True)
class WatchRouteRemove:
    """Remove the route of watch ``name`` of ``session`` (idempotent)."""

    agent: str
    session: str
    name: str
    reply: Reply[Acknowledged]


@dataclass(frozen=True, slots=True)
class ToolChangedState:
    """A tool call of ``agent`` that may change state succeeded (the hub saw it; rfcs/0280).

    Sent by the hub, not the child, before the call's result goes back: the
    child's turn end always comes after it, and a model cannot forge it. A
    tool counts as read-only only when it says so (``readOnlyHint: true``);
    the loop's idle rule reads this fact (a shift that changed nothing is idle).
    """

    agent: str
    tool: str
    """The name the model called (``server__tool`` or a self-tool)."""


# -- the agent tools (rfcs/0370) ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StartSpec:
    """What a model's ``agent_start`` asks for, already checked for shape by the hub.

    Everything here came from the model: the reactor checks it against what the
    caller holds (its depth, tools, limits, the caps) before anything starts.

    Attributes:
        instruction: the child's task (its first user message).
        type: a defined agent (``[agents.NAME]``, ``--agents``, ``.claude/agents``), if named.
        scope: the tool names (as models see them) the child is offered: the
            hub narrowed them to a subset of the caller's.
        model: the model spec, if the call named one (one the operator named).
        system: the child's system prompt (its definition's), None: the caller's.
        max_steps: model calls the child may make, if limited.
        max_tokens: tokens the child may spend, if limited.
        max_usd: US dollars the child may spend, if limited.
        deadline_s: seconds the child may run, if limited.
        notify: subscribe the caller to the child's completion.
        asked: the limits the model set itself (refused above what the caller has
            left); the others came from the definition (cut to what is left).
    """

    instruction: str
    type: str | None
    scope: frozenset[str]
    model: str | None
    system: str | None
    max_steps: int | None = None
    max_tokens: int | None = None
    max_usd: float | None = None
    deadline_s: float | None = None
    notify: bool = True
    asked: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class AgentRecords:
    """The records of the agents a request named, as the model reads them (JSON objects), in its order.

    ``running``: the ids among them that had not ended when the reactor answered.
    """

    records: tuple[dict[str, object], ...]
    running: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class AgentStart:
    """A child's model called ``agent_start``: start a child of ``agent`` (its record, or why not)."""

    agent: str
    spec: StartSpec
    reply: Reply[AgentRecords | Refused]


AgentLookupKind = Literal["read", "wait", "cancel", "list", "subscribe"]
"""What an :class:`AgentLookup` does: read records, register a wake-up, cancel, list the caller's
children, or subscribe the caller's session to their completion."""


@dataclass(frozen=True, slots=True)
class AgentLookup:
    """``read_resource(agent://ID)``, ``agent_wait``, ``agent_cancel``, ``agent_list`` or ``subscribe(agent://ID)``.

    Only the caller's own children may be named. ``wake`` (``wait``): set when
    one of the named children that is still running ends (the hub then asks again).
    """

    agent: str
    kind: AgentLookupKind
    ids: tuple[str, ...]
    reply: Reply[AgentRecords | Refused]
    wake: ProbeEvent | None = None


SelfToolRequest: TypeAlias = (
    SelfSubscribe
    | SelfUnsubscribe
    | WatchSession
    | WatchRouteAdd
    | WatchRouteRemove
    | AgentStart
    | AgentLookup
)
"""Every request the hub makes of the reactor on behalf of a child's self-tool call."""


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

    reply: ProbeEvent


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


@dataclass(frozen=True, slots=True)
class RouteNotice:
    """A notice from a declared route's watch stage (rfcs/0078): the route's disposition applies.

    Attributes:
        route: The staged route's id.
        uri: The URI whose change the notice reports.
        server: The server of ``uri`` (for the ``{server}`` template placeholder).
        text: The message the agent receives.
        session: Continue routes: the route's session (set by the reactor); empty otherwise.
    """

    route: str
    uri: str
    server: str | None
    text: str
    session: str = ""
    kind: WatchNoticeKind = "notice"

    @property
    def watch(self) -> str:
        """The name telemetry gives the notice's source (the route id)."""
        return self.route


Notice: TypeAlias = WatchNotice | RouteNotice
"""A notice one agent turn carries: a watch's, or a staged declared route's."""


ReactorEvent: TypeAlias = (
    ResourceChanged
    | CatalogChanged
    | ServerStateChanged
    | SubscriptionStateChanged
    | SignalReceived
    | SelfSubscribe
    | SelfUnsubscribe
    | WatchSession
    | WatchRouteAdd
    | WatchRouteRemove
    | AgentStart
    | AgentLookup
    | UsageReported
    | TurnEnded
    | ToolChangedState
    | ChildExited
    | ZygoteStateChanged
    | HealthProbe
    | WatchNotice
    | RouteNotice
)
"""Everything the reactor's channel carries: a closed union (the reactor matches it exhaustively)."""
