"""Telemetry: one line per event on stderr (NDJSON or readable text), and counters.

Every JSON line has ``ts`` (RFC 3339, UTC, milliseconds), ``level`` (``debug``,
``info``, ``warning``, ``error``), ``severity`` (the level as Cloud Logging
reads it) and ``event``; the other fields are the event's own. Every event,
its level and its fields are declared in :mod:`agentd.vocabulary` (the
reference, ``docs/telemetry.md``, is generated from it); an undeclared event
or field is written anyway and reported once with a ``telemetry.undeclared``
line. Events below the log level (``--log-level``, default ``info``) are not
written. The text format (``--log-format text``, or ``auto`` on a terminal)
writes ``HH:MM:SS.mmm LEVEL event key=value …`` for a person at a terminal.
Routed events carry the owning ``route`` id (``None`` when no route matched).
Secrets never reach a line: every field goes through
:func:`agentd.redact.redact` (credential-named keys, URL userinfo, secret
query parameters, token shapes, registered values).

Emitting never blocks and never fails: in agentd a line goes into a bounded
buffer that a writer thread empties onto stderr (:class:`agentd.output.LineWriter`);
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

from agentd.histograms import HistogramName, Histograms
from agentd.output import DEFAULT_TELEMETRY_BUFFER, LineWriter, RateLimiter, Suppressed

# Re-exported: the one redaction function lives in agentd.redact.
from agentd.redact import REDACTED as REDACTED
from agentd.redact import is_secret_key as is_secret_key
from agentd.redact import redact as redact
from agentd.safetext import escape_controls, escape_json_controls, json_bytes
from agentd.vocabulary import EVENTS, LEVEL_RANK, SEVERITY, Level

LineFormat = Literal["json", "text"]
"""How a line is written: NDJSON, or short text for a person at a terminal."""

#: Events written only at ``--log-level debug`` (``--verbose``): their declared level is debug.
DEBUG_EVENTS: frozenset[str] = frozenset(n for n, s in EVENTS.items() if s.level == "debug")
_FIELDS: dict[str, frozenset[str]] = {n: frozenset(s.fields) for n, s in EVENTS.items()}
#: Longest field value the text format shows (the JSON format keeps everything).
TEXT_VALUE_CHARS = 120

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
        line_format: ``json`` (NDJSON) or ``text`` (readable lines).
        fd: write to this descriptor through a bounded, threaded
            :class:`~agentd.output.LineWriter` (agentd's stderr: 2), with rate limits.
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
        """Report, once per event and set of fields, what :mod:`agentd.vocabulary` does not declare."""
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
        return _encode(record) if self.line_format == "json" else _text_line(record)

    def close(self, timeout: float) -> bool:
        """Write pending summaries and flush, waiting at most ``timeout`` s; True if all was written."""
        self.flush_suppressed(all_=True)
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

        Steps go only to the taps (``--output stream-json``), never to stderr:
        content stays out of the logs.
        """
        for tap in self._taps:
            tap("step." + kind, fields)

    def observe(self, histogram: HistogramName, seconds: float, **labels: str | None) -> None:
        """Record one latency observation of ``seconds`` in ``histogram`` (see :mod:`agentd.histograms`)."""
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


def _text_value(value: object) -> str:
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if v not in (0, None, {}, [])}  # a person wants what moved
    if isinstance(value, str) and value and " " not in value and "=" not in value:
        text = value
    else:
        try:
            text = json_bytes(value, default=_redacted_str).decode()
        except (TypeError, ValueError):
            text = _unwritable(value)
    # Controls shown as escapes: a model's tool name or URI cannot act on the terminal or fake a line.
    text = escape_controls(text)
    return text if len(text) <= TEXT_VALUE_CHARS else text[: TEXT_VALUE_CHARS - 1] + "…"


def _text_line(record: Mapping[str, object]) -> bytes:
    """``HH:MM:SS.mmm LEVEL event key=value …``: what a person at a terminal reads.

    Fields that are None are left out; long values are cut; a traceback
    follows on its own lines. Every part goes through
    :func:`agentd.safetext.escape_controls`: the line writes nothing but its
    own characters, whatever a field holds.
    """
    ts = str(record.get("ts", ""))
    clock = ts[11:23] if len(ts) >= 23 else ts
    level = str(record.get("level", "info")).upper()
    parts = [clock, f"{level:<7}", escape_controls(str(record.get("event", "")))]
    traceback = None
    for key, value in record.items():
        if key in ("ts", "level", "severity", "event") or value is None:
            continue
        if key == "traceback" and isinstance(value, str):
            traceback = value
            continue
        parts.append(f"{escape_controls(key)}={_text_value(value)}")
    line = " ".join(parts) + "\n"
    if traceback:
        line += "".join("    " + escape_controls(t) + "\n" for t in traceback.rstrip("\n").split("\n"))
    return line.encode(errors="replace")


class NullTelemetry(Telemetry):
    """Telemetry that writes nothing but still counts (for pure-core tests and benches)."""

    def __init__(self) -> None:
        super().__init__(stream=None, verbose=False)

    def emit(self, event: str, /, **fields: object) -> None:
        return None
