"""Telemetry: NDJSON events on stderr, one object per line, and counters.

Every line has ``ts`` (RFC 3339, UTC, milliseconds) and ``event``; the other
fields are the event's own. Routed events carry the owning ``route`` id
(``None`` when no route matched). Secrets never reach a line: every field
goes through :func:`agentd.redact.redact` (credential-named keys, URL
userinfo, secret query parameters, token shapes, registered values).

Emitting is synchronous and never blocks on anything but the write to
stderr (a pipe the operator owns), so the reactor may emit freely.
"""

from __future__ import annotations

import datetime as _dt
import sys
from collections import Counter
from collections.abc import Iterable
from typing import IO, Any

import orjson

# Re-exported: the one redaction function lives in agentd.redact.
from agentd.redact import REDACTED as REDACTED
from agentd.redact import is_secret_key as is_secret_key
from agentd.redact import redact as redact

#: Events written only with ``--verbose`` (everything else is always written).
DEBUG_EVENTS: frozenset[str] = frozenset(
    {
        "route.enqueued",
        "route.coalesced",
        "watch.started",
        "watch.subscribed",
        "watch.event",
        "watch.resubscribing",
        "watch.stopped",
        "watch.restored",
        "reply.suppressed",
        "subscription.established",
    }
)


def _redacted_str(value: object) -> str:
    """orjson's fallback for values it cannot encode (exceptions, paths): their text, redacted."""
    return redact(str(value))


def _now_rfc3339() -> str:
    now = _dt.datetime.now(_dt.UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


class Telemetry:
    """Writes NDJSON events and keeps named counters.

    Args:
        stream: where lines go (stderr by default).
        verbose: also write the events in :data:`DEBUG_EVENTS`.
    """

    def __init__(self, stream: IO[str] | None = None, *, verbose: bool = False) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self.verbose = verbose
        self.counters: Counter[str] = Counter()

    def emit(self, event: str, /, **fields: Any) -> None:
        """Write one event line (debug events only when verbose)."""
        if event in DEBUG_EVENTS and not self.verbose:
            return
        record: dict[str, Any] = {"ts": _now_rfc3339(), "event": event}
        record.update(redact(fields))
        line = orjson.dumps(record, default=_redacted_str).decode()
        try:
            self._stream.write(line + "\n")
            self._stream.flush()
        except (BrokenPipeError, ValueError):
            # stderr closed under us (the reader went away): telemetry is
            # best-effort and must never take the supervisor down.
            pass

    def incr(self, name: str, n: int = 1) -> None:
        """Add ``n`` to counter ``name``."""
        self.counters[name] += n

    def snapshot(self, names: Iterable[str] | None = None) -> dict[str, int]:
        """The current counters (all, or the ``names`` given, zero when unset)."""
        if names is None:
            return dict(self.counters)
        return {n: self.counters.get(n, 0) for n in names}


class NullTelemetry(Telemetry):
    """Telemetry that writes nothing but still counts (for pure-core tests and benches)."""

    def __init__(self) -> None:
        super().__init__(stream=None, verbose=False)

    def emit(self, event: str, /, **fields: Any) -> None:
        return None
