"""What the reactor is given, and its lifecycle: the process phase, the I/O hooks,
the seams to the session journals, the watch manager and the declared
subscriptions, and the reactor's channel.

Kept apart from :mod:`agentd.supervisor.loop.reactor` so the reactor's parts
(``runstatus``, ``spawner``, ``notices``, ``selftools``, ``usage``,
``turns``, ``delivery``, ``drain``) can name them without importing the
reactor itself.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

import trio

from agentd.core.exitcodes import TerminalStatus
from agentd.events import (
    ReactorEvent,
    SubscriptionStateChanged,
)
from agentd.supervisor.loop.agents import Agent
from agentd.supervisor.routing.subscriptions import DeclaredRefresh
from agentd.triggers.timer import CronSource, IntervalSource

#: Capacity of the reactor's channel. Producers block when it is full, which
#: is the backpressure a notification storm needs; the reactor drains it at
#: memory-channel speed (~5 µs per event).
EVENT_BUFFER = 4096


class Phase(enum.Enum):
    """The process lifecycle."""

    RUNNING = "running"
    """Normal operation: triggers armed, agents start."""
    DRAINING = "draining"
    """A signal arrived: no new work; running turns finish; idle sessions exit."""
    STOPPED = "stopped"
    """The exit predicate fired; the reactor returned its code."""


@dataclass
class Hooks:
    """I/O the reactor asks for without awaiting it (each runs in a task)."""

    spawn: Callable[[Agent], None]
    """Start the agent's child process (through the tree's chokepoint)."""
    kill_all: Callable[[], None]
    """Kill every agent (drain timed out / second signal)."""
    unsubscribe: Callable[[str, str], None]
    """Drop the upstream subscription to (server, uri)."""
    publish: Callable[[Agent, TerminalStatus, str, bool], None]
    """Publish a turn's result on stdout (not called for NO_REPLY turns)."""
    pause: Callable[[str, bool], None] = lambda server, paused: None
    """Stop (True) or resume (False) reading ``server``'s update streams (``block`` overflow, rfcs/0131)."""
    readiness: Callable[[bool, str], None] = lambda ready, reason: None
    """The ``/readyz`` answer, at start and on every flip (the service manager hears it, rfcs/0162)."""
    draining: Callable[[], None] = lambda: None
    """The first signal started the drain (the service manager hears it, rfcs/0162)."""
    kill: Callable[[str], None] = lambda agent: None
    """Run the kill ladder on one agent's process (a started agent cancelled or past its deadline)."""


class SessionResume(Protocol):
    """What the reactor asks the session journals (:mod:`agentd.state.sessions`); sync, never blocks."""

    def resumable(self, session: str) -> tuple[tuple[str, str | None], ...] | None:
        """A journaled session's self-subscriptions ``(uri, server)``, or None: start it fresh."""
        ...

    def reserved(self, name: str) -> bool:
        """``name`` is a journaled session: no new agent may take it as its id."""
        ...

    def end(self, session: str) -> None:
        """The session is over (its agent exited while agentd runs on): forget its journal."""
        ...


class WatchHooks(Protocol):
    """What the reactor tells the watch manager (sync; the manager never blocks the reactor)."""

    def on_changed(self, route_id: str, uris: list[str]) -> None:
        """A watch route is due: re-read these URIs."""
        ...

    def on_subscription_state(self, ev: SubscriptionStateChanged) -> None:
        """A subscription changed state (``watch.*`` telemetry, failure notices)."""
        ...

    def on_owner_exited(self, session: str) -> None:
        """The session's agent is gone: stop its watches (routes already removed)."""
        ...

    def on_route_subscribed(self, route_id: str, server: str, uri: str) -> None:
        """A URI of staged route ``route_id`` is subscribed: take the stage's baseline read now."""
        ...

    def on_route_changed(self, route_id: str, changes: list[tuple[str, str | None]]) -> None:
        """Staged route ``route_id`` is due: re-read these ``(uri, server)`` through its stages."""
        ...


class Declared(Protocol):
    """What performs the declared subscriptions (:class:`agentd.supervisor.routing.declared.DeclaredSubscriptions`).

    What they are (the pairs, what resolves to nothing) the reactor reads from
    the pure :class:`~agentd.supervisor.routing.subscriptions.Subscriptions` it is given.
    """

    def refresh(self, reason: Literal["start", "connected", "catalog"]) -> DeclaredRefresh:
        """Re-resolve and (re)subscribe; returns the pairs no longer declared and those to route now."""
        ...


class NoDeclared:
    """No declared subscriptions."""

    def refresh(self, reason: Literal["start", "connected", "catalog"]) -> DeclaredRefresh:
        return DeclaredRefresh([], [])


Clock = IntervalSource | CronSource
"""A clock source for timer routes and schedule fires."""


def open_channel() -> tuple[trio.MemorySendChannel[ReactorEvent], trio.MemoryReceiveChannel[ReactorEvent]]:
    """The reactor's channel (create it first: the upstreams, hub and tree send into it)."""
    return trio.open_memory_channel[ReactorEvent](EVENT_BUFFER)
