"""One watch's whole stage: read → events → filter → dedupe → debounce buffer.

:class:`WatchStage` strings the building blocks together for the supervisor.
It does no I/O of its own and arms no timers: the caller feeds it each read
body with the current (trio) time, arms one timer at :meth:`WatchStage.deadline`
and calls :meth:`WatchStage.flush` when it fires.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal

from agentd.core.jsonvalue import JSONObject, JSONValue
from agentd.watches.extract import Event, Extractor, MalformedReadError, Shape, extractor_from_baseline
from agentd.watches.limits import WatchLimits
from agentd.watches.notices import (
    LineDeduper,
    Notice,
    NoticeBuffer,
    default_line,
    error_line,
    object_key,
    render_notice,
)

if TYPE_CHECKING:  # the sandbox (pydantic-monty) is imported only by a run that filters
    from agentd.watches.sandbox import FilterOutcome, WatchFilter

#: Event types a filter cannot keep out of the notice: a ``GAP`` says events
#: were missed, an in-band ``ERROR`` that the source failed. The filter still
#: sees them (and may add lines); the agent always learns of them.
MANDATORY_TYPES: Final = frozenset({"GAP", "ERROR"})


#: Router sessions of staged routes start with this; session names cannot hold ``:``.
STAGE_SESSION_PREFIX: Final = "stage:"


@dataclass(frozen=True, slots=True)
class StagedRoute:
    """A declared route whose changes go through the watch stage before its disposition.

    Attributes:
        route_id: The route's id (``name``, else ``r<index>`` as the router numbers it).
        index: Position in ``routes`` (error messages name ``routes[index]``).
        match: The route's URI or glob.
        disposition: What the stage's notices do: start a fresh agent, or a
            turn of ``session``.
        extract: ``state`` / ``event-log`` force the read shape; ``auto`` takes
            it from the read's mime type.
        on_event: The filter source, or ``None`` for default lines.
        session: Continue routes: the session notices go to.
        max_inflight: Spawn routes: agents started from notices running at once.
        template: Spawn routes: the route's own instruction template, or
            ``None`` (the main instruction); the notice follows it.
    """

    route_id: str
    index: int
    match: str
    disposition: Literal["spawn", "continue"]
    extract: Literal["auto", "state", "event-log"]
    on_event: str | None
    session: str
    max_inflight: int
    template: str | None

    @property
    def router_session(self) -> str:
        """The pseudo-session the router delivers this route's changes to."""
        return f"{STAGE_SESSION_PREFIX}{self.route_id}"


@dataclass(slots=True)
class ReadReport:
    """What one read did, for telemetry (``watch.event`` per entry of ``events``).

    Attributes:
        events: The extracted events, in order.
        outcomes: The filter outcome per event (empty without a filter).
        kept: Lines added to the notice buffer after dedupe.
        error: A read or filter problem turned into an ``ERROR`` line, if any.
    """

    events: list[Event] = field(default_factory=list)
    outcomes: list[FilterOutcome] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    error: str | None = None


def is_mandatory(event: Event) -> bool:
    """Whether the event's own line is in the notice whatever the filter does (``GAP``, ``ERROR``)."""
    return event.get("type") in MANDATORY_TYPES


class WatchStage:
    """Extraction, the optional filter, dedupe and debounce for one watch.

    Args:
        name, uri: The watch.
        shape: The resource's read shape (from the baseline read's mime type).
        limits: Watch limits (events per update, debounce, lines per notice).
        filter: The watch's :class:`WatchFilter`, or ``None`` for default lines.
        baseline: A persisted baseline to resume from, or ``None``.
    """

    def __init__(
        self,
        name: str,
        uri: str,
        *,
        shape: Shape,
        limits: WatchLimits | None = None,
        filter: WatchFilter | None = None,
        baseline: Mapping[str, JSONValue] | None = None,
    ) -> None:
        self.name = name
        self.uri = uri
        self.limits = limits or WatchLimits()
        self.filter = filter
        self.extractor: Extractor = extractor_from_baseline(
            baseline, shape=shape, watch=name, uri=uri, events_per_update=self.limits.events_per_update
        )
        self.dedupe = LineDeduper()
        self.buffer = NoticeBuffer(
            quiet=self.limits.debounce_quiet_secs,
            max_wait=self.limits.debounce_max_secs,
            max_lines=self.limits.lines_per_notice,
        )

    def baseline(self) -> JSONObject | None:
        """The extractor's baseline, for ``--watch-state``."""
        return self.extractor.baseline()

    async def process_read(self, body: str | bytes, now: float) -> ReadReport:
        """Extract the read's events, filter them, and buffer the surviving lines.

        ``GAP`` and in-band ``ERROR`` events always put their default line in
        the notice, whatever the filter does with them (it may add lines, it
        cannot drop these). A malformed read or a failing filter becomes an
        ``ERROR`` line in the notice (the watch keeps running); the report
        carries the message. These lines are pinned: a full notice leaves them
        out last.
        """
        report = ReadReport()
        try:
            report.events = self.extractor.feed(body)
        except MalformedReadError as exc:
            report.error = str(exc)
            self._add(None, [error_line(self.name, str(exc))], now, report, pinned=True)
            return report
        if self.filter is None:
            for ev in report.events:
                self._add(object_key(ev), [default_line(ev)], now, report, pinned=is_mandatory(ev))
            return report
        report.outcomes = await self.filter.run_batch(report.events)
        for ev, outcome in zip(report.events, report.outcomes, strict=True):
            mandatory = is_mandatory(ev)
            own = default_line(ev) if mandatory else None
            if own is not None:
                self._add(None, [own], now, report, pinned=True)
            if outcome.kind == "error":
                message = outcome.error or "on_event failed"
                report.error = message
                self._add(None, [line for line in outcome.lines if line != own], now, report)
                self._add(None, [error_line(self.name, message)], now, report, pinned=True)
            elif outcome.kind == "lines":
                lines = [line for line in outcome.lines if line != own]
                self._add(None if mandatory else object_key(ev), lines, now, report)
        return report

    def _add(
        self, key: str | None, lines: list[str], now: float, report: ReadReport, *, pinned: bool = False
    ) -> None:
        kept = self.dedupe.admit(key, lines)
        self.buffer.add(kept, now, pinned=pinned)
        report.kept.extend(kept)

    def deadline(self) -> float | None:
        """When the pending notice is due, or ``None``."""
        return self.buffer.deadline()

    def flush(self, now: float, *, force: bool = False) -> tuple[Notice, str] | None:
        """The due notice and its rendered text, or ``None`` if nothing is due."""
        notice = self.buffer.flush(now, force=force)
        if notice is None:
            return None
        return notice, render_notice(self.name, self.uri, notice.lines)
