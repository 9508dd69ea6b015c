"""One watch as the manager tracks it, and the task that runs it.

Each watch (and each declared route's stage per URI) has its own task,
:meth:`WatchRunner.run`:

1. wait for a wake-up or the stage's debounce deadline (``trio.move_on_at``,
   armed only by an event: an idle watch makes no wakeups),
2. after a change, re-read the resource (bounded by the upstream's request
   timeout; a failed read becomes an ``ERROR`` line),
3. run :meth:`agentd.watches.stage.WatchStage.process_read` (extraction, the
   sandboxed ``on_event`` filter in a worker thread, dedupe, debounce buffer),
4. on flush post a :class:`~agentd.events.WatchNotice` (a declared route's:
   :class:`~agentd.events.RouteNotice`) into the reactor's channel, which
   turns it into one turn, and ask for ``--watch-state`` to be written.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import trio

from agentd.core.errors import AgentdError
from agentd.core.jsonvalue import JSONObject
from agentd.events import ReactorEvent, RouteNotice, WatchNotice
from agentd.observe.telemetry import Telemetry
from agentd.watches.catalog import read_text
from agentd.watches.extract import Shape
from agentd.watches.notices import error_line
from agentd.watches.persist import StateWriter, route_spec_name
from agentd.watches.stage import StagedRoute, WatchStage
from agentd.watches.state import WatchSpec

if TYPE_CHECKING:
    from agentd.upstream.connection import Upstream


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

    def fields(self) -> dict[str, str | None]:
        """The fields every ``watch.*`` telemetry event of this watch carries."""
        if self.route is not None:
            session = self.route.session if self.route.disposition == "continue" else None
            return {"watch": self.name, "uri": self.uri, "session": session, "route": self.route.route_id}
        return {"watch": self.name, "uri": self.uri, "session": self.session, "route": self.route_id}


class WatchRunner:
    """Runs watch tasks: a wake-up, a re-read, the stage, its debounce, a notice for the reactor.

    Args:
        upstreams: Server name -> connection (each watch reads its own server).
        events: The reactor's channel (notices are posted there).
        telemetry: ``watch.event`` and ``watch.notice``.
        writer: ``--watch-state``, written after every notice.
    """

    def __init__(
        self,
        *,
        upstreams: Mapping[str, Upstream],
        events: trio.MemorySendChannel[ReactorEvent],
        telemetry: Telemetry,
        writer: StateWriter,
    ) -> None:
        self._upstreams = upstreams
        self._events = events
        self._telemetry = telemetry
        self._writer = writer

    async def read(self, w: Watch) -> tuple[str, str | None]:
        """Read ``w``'s resource on its server; return (body, mime type)."""
        assert w.server is not None
        return await read_text(self._upstreams[w.server], w.uri)

    async def run(self, w: Watch) -> None:
        """``w``'s task, until ``w.scope`` is cancelled."""
        assert w.wake_recv is not None
        assert w.stage is not None
        with w.scope:
            while True:
                deadline = w.stage.deadline()
                with trio.move_on_at(float("inf") if deadline is None else deadline):
                    await w.wake_recv.receive()
                if w.changed:
                    w.changed = False
                    await self._reread(w)
                await self._flush(w)

    async def _reread(self, w: Watch) -> None:
        assert w.stage is not None
        try:
            body, _ = await self.read(w)
        except AgentdError as exc:
            message = f"re-reading {w.uri!r} failed: {exc}"
            w.stage.buffer.add([error_line(w.name, message)], trio.current_time(), pinned=True)
            self._telemetry.emit("watch.event", **w.fields(), type="ERROR", outcome="error", error=message)
            return
        await self.process(w, body)

    async def process(self, w: Watch, body: str) -> None:
        """Put one read through ``w``'s stage; each event is told as ``watch.event``."""
        assert w.stage is not None
        report = await w.stage.process_read(body, trio.current_time())
        w.events += len(report.events)
        fields = w.fields()
        for i, ev in enumerate(report.events):
            outcome = report.outcomes[i].kind if report.outcomes else "lines"
            self._telemetry.emit(
                "watch.event",
                **fields,
                type=ev.get("type"),
                outcome={"lines": "kept", "dropped": "dropped"}.get(outcome, "error"),
                error=report.outcomes[i].error if report.outcomes else None,
            )
        if report.error is not None and not report.events:
            self._telemetry.emit("watch.event", **fields, type="ERROR", outcome="error", error=report.error)

    async def _flush(self, w: Watch) -> None:
        assert w.stage is not None
        due = w.stage.flush(trio.current_time())
        if due is None:
            return
        notice, text = due
        w.notices += 1
        w.saved_baseline = w.stage.baseline()
        self._telemetry.emit(
            "watch.notice",
            **w.fields(),
            lines=len(notice.lines),
            total=notice.total,
            waited_s=round(notice.flushed_at - notice.first_at, 3),
        )
        self._writer.request()
        if w.route is not None:
            await self._post(RouteNotice(route=w.route.route_id, uri=w.uri, server=w.server, text=text))
            return
        await self._post(WatchNotice(session=w.session, watch=w.name, uri=w.uri, text=text))

    async def _post(self, event: ReactorEvent) -> None:
        # Broken/closed: the reactor is gone (shutdown); nobody is left to tell.
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await self._events.send(event)
