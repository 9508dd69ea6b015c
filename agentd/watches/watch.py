"""One watch as the manager tracks it, and where it is in its lifecycle."""

from __future__ import annotations

import contextlib
import enum
from dataclasses import dataclass, field

import trio

from agentd.jsonvalue import JSONObject
from agentd.watches.extract import Shape
from agentd.watches.persist import route_spec_name
from agentd.watches.stage import StagedRoute, WatchStage
from agentd.watches.state import WatchSpec


class WatchStatus(enum.Enum):
    """Where one watch is in its lifecycle."""

    STARTING = "starting"
    """watch_start is validating, reading the baseline and subscribing."""
    RUNNING = "running"
    """Subscribed; every change is re-read and filtered."""
    FAILED = "failed"
    """The upstream gave up resubscribing; resumes if the subscription comes back."""
    RESTORE_FAILED = "restore_failed"
    """A spec from ``--watch-state`` that could not start (e.g. its server is down)."""


@dataclass(eq=False)
class Watch:
    """One watch, as the manager tracks it."""

    name: str
    uri: str
    session: str
    on_event: str | None
    status: WatchStatus = WatchStatus.STARTING
    server: str | None = None
    shape: Shape | None = None
    stage: WatchStage | None = None
    events: int = 0
    """Events extracted so far (before the filter)."""
    notices: int = 0
    """Notices handed to the reactor."""
    saved_baseline: JSONObject | None = None
    """The baseline as of the last notice (what ``--watch-state`` stores)."""
    error: str | None = None
    """Why a restore failed (RESTORE_FAILED)."""
    changed: bool = False
    """A change arrived that the task has not read yet (coalesces bursts)."""
    wake_send: trio.MemorySendChannel[None] | None = None
    wake_recv: trio.MemoryReceiveChannel[None] | None = None
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    route: StagedRoute | None = None
    """The declared route this stage serves (``name`` is then the route id, ``session`` empty)."""
    subscribed: bool = False
    """The upstream subscription is established as far as this watch reported (``watch.subscribed``
    once per establishment, ``watch.resubscribing`` once per loss)."""

    @property
    def route_id(self) -> str:
        if self.route is not None:
            return self.route.route_id
        return f"watch:{self.session}:{self.name}"

    def spec(self) -> WatchSpec:
        if self.route is not None:
            return WatchSpec(
                name=route_spec_name(self.route.route_id, self.uri),
                uri=self.uri,
                on_event=self.on_event,
                owner=None,
                baseline=self.saved_baseline,
            )
        return WatchSpec(
            name=self.name,
            uri=self.uri,
            on_event=self.on_event,
            owner=self.session,
            baseline=self.saved_baseline,
        )

    def describe(self) -> JSONObject:
        out: JSONObject = {
            "name": self.name,
            "uri": self.uri,
            "shape": self.shape,
            "events": self.events,
            "notices": self.notices,
        }
        if self.status is WatchStatus.RESTORE_FAILED:
            out["restore_failed"] = True
            out["error"] = self.error
        elif self.status is WatchStatus.FAILED:
            out["failed"] = True
        return out

    def wake(self) -> None:
        if self.wake_send is not None:
            # A wake-up already pending is enough: the task reads the current state anyway.
            with contextlib.suppress(trio.WouldBlock):
                self.wake_send.send_nowait(None)
