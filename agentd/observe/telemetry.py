"""Telemetry: one line per event on stderr (NDJSON, or lines for a person), and counters.

Every JSON line has ``ts`` (RFC 3339, UTC, milliseconds), ``level`` (``debug``,
``info``, ``warning``, ``error``), ``severity`` (the level as Cloud Logging
reads it) and ``event``; the other fields are the event's own. Every event,
its level and its fields are declared in :mod:`agentd.observe.vocabulary` (the
reference, ``docs/telemetry.md``, is generated from it); an undeclared event
or field is written anyway and reported once with a ``telemetry.undeclared``
line. Events below the log level (``--log-level``, default ``info``) are not
written. For a person, the same records are rendered by :mod:`agentd.observe.humanlog`:
``human`` (``auto`` on a terminal) shows progress, warnings and errors;
``text`` (``--log-format text``) every event as ``HH:MM:SS.mmm LEVEL event key=value …``.
Routed events carry the owning ``route`` id (``None`` when no route matched).
A failed run's last line is its error and the fix (:meth:`Telemetry.fail`,
:mod:`agentd.observe.errorline`): written at :meth:`Telemetry.close`, after everything else.
Secrets never reach a line: every field goes through
:func:`agentd.core.redact.redact` (credential-named keys, URL userinfo, secret
query parameters, token shapes, registered values).

Emitting never blocks and never fails: in agentd a line goes into a bounded
buffer that a writer thread empties onto stderr (:class:`agentd.observe.output.LineWriter`);
when stderr is full, closed or not read, lines are dropped and counted
(:attr:`Telemetry.dropped`, ``agentd_telemetry_dropped_total``, and
``telemetry_dropped`` in ``supervisor.exit``). Warnings that a source can
repeat without bound (:data:`RATE_LIMITED`: an MCP server printing garbage,
a confused server's stray responses, a child's events) pass ten per source
per ten seconds; the rest of each window is folded into one
``telemetry.suppressed`` line with the count. Counters are never folded.
"""

from __future__ import annotations

import datetime as _dt
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import IO, Literal

# Re-exported: the one redaction function lives in agentd.core.redact.
from agentd.core.redact import REDACTED as REDACTED
from agentd.core.redact import is_secret_key as is_secret_key
from agentd.core.redact import redact as redact
from agentd.core.safetext import escape_json_controls, json_bytes
from agentd.observe.errorline import Failure
from agentd.observe.histograms import HistogramName, Histograms
from agentd.observe.humanlog import DEFAULT_WIDTH, INTERIM_READ_CHARS, HumanView, text_line
from agentd.observe.output import DEFAULT_TELEMETRY_BUFFER, LineWriter, RateLimiter, Suppressed
from agentd.observe.vocabulary import EVENTS, LEVEL_RANK, SEVERITY, Level

LineFormat = Literal["json", "text", "human"]
"""How a line is written: NDJSON; every event as a short text line; progress for a person (rfcs/0320)."""

#: Events written only at ``--log-level debug`` (``--verbose``): their declared level is debug.
DEBUG_EVENTS: frozenset[str] = frozenset(n for n, s in EVENTS.items() if s.level == "debug")
_FIELDS: dict[str, frozenset[str]] = {n: frozenset(s.fields) for n, s in EVENTS.items()}
#: The steps a person sees in the human format (a model's reply, a tool call); never on stderr otherwise.
HUMAN_STEPS = frozenset({"assistant", "tool_call"})

#: Lines a source can repeat without bound, and the fields that name the source.
RATE_LIMITED: dict[str, tuple[str, ...]] = {
    "upstream.stdout_garbage": ("server",),
    "upstream.unknown_response": ("server",),
    "upstream.unsubscribed_update": ("server",),
    "upstream.oversized": ("server",),
    "upstream.oversized_skipped": ("server",),
    "upstream.transport_error": ("server",),
    "model.retry": ("agent",),
    "tool.refused": ("agent",),
    # A declared glob over 10,000 URIs with the start-up re-read off would write 10,000 lines.
    "resource.reread_skipped": ("route",),
    "tool.content_omitted": ("agent",),
    # Said once per cap hit already (rfcs/0265); a model that frees and refills a slot in a loop is folded here.
    "limit.reached": ("limit",),
    "self.subscribe_failed": ("server",),
    "log": ("logger",),
    "child.stderr": ("source",),
}
#: Lines per source per window that pass; the rest are counted in one summary line.
RATE_BURST = 10
#: The rate limit's window, in seconds.
RATE_WINDOW_S = 10.0


def _redacted_str(value: object) -> str:
    """The JSON encoder's fallback for values it cannot encode (exceptions, paths): their text, redacted."""
    return redact(str(value))


def _now_rfc3339() -> str:
    now = _dt.datetime.now(_dt.UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


class Telemetry:
    """Writes NDJSON events and keeps named counters.

    Args:
        stream: write lines synchronously to this text stream (tests; stderr
            when neither it nor ``fd`` is given).
        verbose: also write the events in :data:`DEBUG_EVENTS` (the same as ``level="debug"``).
        level: the least level written (default ``info``, or ``debug`` when ``verbose``).
        line_format: ``json`` (NDJSON), ``text`` (every event, readable) or ``human`` (progress).
        view: the human format's renderer (a plain one, no colours, when None).
        fd: write to this descriptor through a bounded, threaded
            :class:`~agentd.observe.output.LineWriter` (agentd's stderr: 2), with rate limits.
        buffer_bytes: the writer's bound.
        fd_closed: the descriptor was closed at start: every line is dropped (and counted).
    """

    def __init__(
        self,
        stream: IO[str] | None = None,
        *,
        verbose: bool = False,
        fd: int | None = None,
        buffer_bytes: int = DEFAULT_TELEMETRY_BUFFER,
        fd_closed: bool = False,
        level: Level | None = None,
        line_format: LineFormat = "json",
        view: HumanView | None = None,
    ) -> None:
        self._limiter = RateLimiter(burst=RATE_BURST, window=RATE_WINDOW_S)
        self._lock = threading.Lock()
        self._writer = (
            LineWriter(
                fd,
                max_bytes=buffer_bytes,
                closed=fd_closed,
                on_tick=self.flush_suppressed,
                name="agentd-telemetry",
            )
            if fd is not None
            else None
        )
        self._stream = stream if stream is not None or fd is not None else sys.stderr
        self.level: Level = level if level is not None else ("debug" if verbose else "info")
        self._min_rank = LEVEL_RANK[self.level]
        self.line_format: LineFormat = line_format
        self._view = view or HumanView(colour=False, width=lambda: DEFAULT_WIDTH, verbose=self.verbose)
        self._failure: Failure | None = None
        self._undeclared: set[tuple[str, frozenset[str]]] = set()
        self.counters: Counter[str] = Counter()
        self.histograms = Histograms()
        """Latency observations (``/metrics`` renders them)."""
        self._taps: list[Callable[[str, dict[str, object]], object]] = []

    @property
    def verbose(self) -> bool:
        """Debug events are written."""
        return self._min_rank == 0

    def enabled(self, level: Level) -> bool:
        """Whether lines of ``level`` are written (a caller can skip building costly fields)."""
        return LEVEL_RANK[level] >= self._min_rank

    @property
    def dropped(self) -> int:
        """Lines dropped because stderr was full, closed or not read (0 without a writer)."""
        return self._writer.dropped if self._writer is not None else 0

    def emit(self, event: str, /, **fields: object) -> None:
        """Write one event line at its declared level. Never blocks, never raises.

        A ``level`` keyword (one of the levels) overrides the declared level
        (Python logging records keep their logger's level).
        """
        level = fields.pop("level", None)
        for tap in self._taps:
            tap(event, fields)
        spec = EVENTS.get(event)
        if not isinstance(level, str) or level not in LEVEL_RANK:
            level = spec.level_for(fields) if spec is not None else "warning"
        self._check_declared(event, fields)
        if LEVEL_RANK[level] < self._min_rank:
            return
        record: dict[str, object] = {
            "ts": _now_rfc3339(),
            "level": level,
            "severity": SEVERITY[level],
            "event": event,
        }
        record.update(redact(fields))
        if self._writer is None:
            self._write(self._encode(record))
            return
        key_fields = RATE_LIMITED.get(event)
        if key_fields is None:
            self._write(self._encode(record))
            return
        key = (event, *(str(fields.get(k)) for k in key_fields))
        now = time.monotonic()
        with self._lock:
            summaries = self._limiter.due(now)
            admitted = self._limiter.admit(key, now)
            wake = self._limiter.next_due()
        self._write_summaries(summaries)
        if admitted:
            self._write(self._encode(record))
        if wake is not None:
            self._writer.wake_at(wake)

    def _check_declared(self, event: str, fields: Mapping[str, object]) -> None:
        """Report, once per event and set of fields, what :mod:`agentd.observe.vocabulary` does not declare."""
        declared = _FIELDS.get(event)
        extra = frozenset(fields) if declared is None else fields.keys() - declared
        if declared is not None and not extra:
            return
        key = (event, frozenset(extra))
        with self._lock:
            if key in self._undeclared:
                return
            self._undeclared.add(key)
        self.counters["undeclared_events"] += 1
        record = {
            "ts": _now_rfc3339(),
            "level": "error",
            "severity": "ERROR",
            "event": "telemetry.undeclared",
            "of": event,
            "fields": sorted(extra) if declared is not None else None,
        }
        self._write(self._encode(record))

    def flush_suppressed(self, *, all_: bool = False) -> None:
        """Write the summaries of rate-limit windows that ended (every pending one with ``all_``)."""
        with self._lock:
            summaries = self._limiter.due(time.monotonic(), all_=all_)
            wake = self._limiter.next_due()
        self._write_summaries(summaries)
        if wake is not None and self._writer is not None:
            self._writer.wake_at(wake)

    def _write_summaries(self, summaries: list[Suppressed]) -> None:
        for s in summaries:
            event, *values = s.key if isinstance(s.key, tuple) else (s.key,)
            # At the level of the lines it folds (a warning for an undeclared one).
            spec = EVENTS.get(event)
            level = spec.level if spec is not None else "warning"
            record: dict[str, object] = {
                "ts": _now_rfc3339(),
                "level": level,
                "severity": SEVERITY[level],
                "event": "telemetry.suppressed",
                "of": event,
            }
            record.update(redact(dict(zip(RATE_LIMITED.get(event, ()), values, strict=False))))
            record.update(count=s.count, window_s=s.window_s)
            self._write(self._encode(record))

    def _write(self, line: bytes) -> None:
        if not line:
            return  # the human format shows nothing of this event
        if self._writer is not None:
            self._writer.put(line)
            return
        try:
            assert self._stream is not None
            self._stream.write(line.decode())
            self._stream.flush()
        except (OSError, ValueError):
            # stderr closed or full under us: telemetry is best-effort and
            # must never take the supervisor down.
            pass

    def _encode(self, record: Mapping[str, object]) -> bytes:
        if self.line_format == "json":
            return _encode(record)
        try:
            text = self._view.render(record) if self.line_format == "human" else text_line(record)
        except Exception:  # a line for a person must never break the supervisor
            text = text_line(record)
        return text.encode(errors="replace")

    def fail(self, failure: Failure) -> None:
        """The run failed: :meth:`close` ends the stream with its one final line (the last call wins).

        NDJSON: a ``run.failed`` object whose ``message`` is the plain line;
        text and human: the plain line ``agentd: error: WHAT — fix: HOW``.
        Written whatever the level, whole (rfcs/0321).
        """
        self._failure = failure

    def _failure_line(self, failure: Failure) -> bytes:
        if self.line_format != "json":
            return failure.line.encode(errors="replace") + b"\n"
        record: dict[str, object] = {
            "ts": _now_rfc3339(),
            "level": "error",
            "severity": SEVERITY["error"],
            "event": "run.failed",
            "exit_code": failure.exit_code,
            "kind": failure.kind,
            "error": redact(failure.error),
            "fix": redact(failure.fix),
            "message": failure.line,
        }
        return _encode(record)

    def close(self, timeout: float) -> bool:
        """Write pending summaries, then a failed run's final line; flush, waiting at most ``timeout`` s.

        Returns True if all was written.
        """
        self.flush_suppressed(all_=True)
        if self._failure is not None:
            self._write(self._failure_line(self._failure))
        if self._writer is None:
            return True
        return self._writer.close(timeout)

    def incr(self, name: str, n: int = 1) -> None:
        """Add ``n`` to counter ``name``."""
        self.counters[name] += n

    def add_tap(self, tap: Callable[[str, dict[str, object]], object]) -> None:
        """Also hand every event, and every step (:meth:`step`), to ``tap`` (stream-json, traces).

        A tap sees the fields unredacted, at every level; it must not block or raise.
        """
        self._taps.append(tap)

    def step(self, kind: str, /, **fields: object) -> None:
        """A step of an agent with its content (a tool call's arguments, an assistant's text).

        Steps go to the taps (``--output stream-json``, traces) and, in the
        human format only, to the person at the terminal (:data:`HUMAN_STEPS`,
        rfcs/0320); never into NDJSON or text logs: content stays out of the logs.
        """
        for tap in self._taps:
            tap("step." + kind, fields)
        if self.line_format == "human" and kind in HUMAN_STEPS and self._min_rank <= LEVEL_RANK["info"]:
            text = fields.get("text")
            if isinstance(text, str) and len(text) > INTERIM_READ_CHARS:
                fields = {**fields, "text": text[: INTERIM_READ_CHARS + 1]}  # the view reads no more
            record: dict[str, object] = {"ts": _now_rfc3339(), "level": "info", "event": "step." + kind}
            record.update(redact(fields))
            self._write(self._encode(record))

    def observe(self, histogram: HistogramName, seconds: float, **labels: str | None) -> None:
        """Record one latency observation of ``seconds`` in ``histogram`` (see :mod:`agentd.observe.histograms`)."""
        self.histograms.observe(histogram, seconds, labels)

    def snapshot(self, names: Iterable[str] | None = None) -> dict[str, int]:
        """The current counters (all, or the ``names`` given, zero when unset)."""
        if names is None:
            return dict(self.counters)
        return {n: self.counters.get(n, 0) for n in names}


def _encode(record: Mapping[str, object]) -> bytes:
    """One NDJSON line, whatever the fields hold (rfcs/0270).

    Text that is not valid Unicode is written with U+FFFD; C1 and other
    controls a terminal would act on are written as ``\\u`` escapes (JSON
    escapes C0 itself), so the stream is safe to read on a terminal. A value
    that cannot be written at all (nested past every encoder's depth) is
    written as its type's name.
    """
    try:
        line = json_bytes(record, default=_redacted_str)
    except (TypeError, ValueError):  # TooDeep is a ValueError; a default that failed
        line = json_bytes({k: v if isinstance(v, str) else _unwritable(v) for k, v in record.items()})
    return escape_json_controls(line) + b"\n"


def _unwritable(value: object) -> str:
    try:
        return redact(repr(value))
    except RecursionError:
        return f"<{type(value).__name__} nested too deeply to show>"


class NullTelemetry(Telemetry):
    """Telemetry that writes nothing but still counts (for pure-core tests and benches)."""

    def __init__(self) -> None:
        super().__init__(stream=None, verbose=False)

    def emit(self, event: str, /, **fields: object) -> None:
        return None
