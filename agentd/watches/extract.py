"""Turn resource reads into watch events (pure, synchronous).

A watched resource is read after every ``notifications/resources/updated``.
What the read means depends on its *shape* (seed ADR 0005, "Read shape"):

* **event-log** (mime type ``application/vnd.agentd.events+json``, or the
  upstream ``application/vnd.asyncai.events+json``): the body is
  ``{"events": [{"seq": int, "type": str, ...}, ...]}``, a bounded ring kept by
  the server. :class:`EventLogExtractor` delivers the events whose ``seq`` is
  above the last one it delivered, and a ``GAP`` event when the ring moved on
  past events it never saw.
* **state** (anything else): the body is the current state.
  :class:`StateExtractor` diffs it against the previous read: JSON lists by item
  key, JSON objects by top-level key, anything else as one whole value
  (``CHANGED``).

Every event is a plain ``dict`` — the value the ``on_event`` filter sees as
``event``:

====================  =======================================================
``watch``, ``uri``    the watch's name and URI
``type``              event-log: the server's ``type``; state: ``ADDED`` /
                      ``DELETED`` / ``MODIFIED`` / ``CHANGED``; ``GAP``
``old``               previous value for ``MODIFIED`` / ``DELETED`` /
                      ``CHANGED``; ``None`` otherwise
``changed``           ``MODIFIED`` with an old value: :func:`changed_paths`;
                      ``None`` otherwise
other keys            event-log: the server's fields (``seq``, ``object``,
                      ``message``...); state: ``key`` and ``new``
====================  =======================================================

A ``MODIFIED`` whose ``changed`` is empty (only ignored bookkeeping fields
moved) is dropped here, before any filter sees it.

Both extractors keep a *baseline* that :meth:`baseline` serializes to JSON, so
``--watch-state`` can persist it and :func:`extractor_from_baseline` can resume
after a restart: an event-log resumes after the last ``seq`` (``GAP`` if the
ring moved on meanwhile), a state resource diffs against the persisted state.

A read that breaks the server contract raises :class:`MalformedReadError`; the
extractor's baseline is unchanged, so the caller reports it (an ``ERROR``
notice) and the next good read carries on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal, TypeAlias

import orjson

from agentd.core.errors import MalformedReadError as MalformedReadError  # re-exported
from agentd.core.jsonvalue import (
    JSONArray,
    JSONObject,
    JSONValue,
    as_object,
    get_array,
    get_int,
    get_str,
    loads,
)

Shape: TypeAlias = Literal["event-log", "state"]
"""How a watched resource's reads are interpreted."""

GapReason: TypeAlias = Literal["ring", "hole", "overflow", "reset"]
"""Why a ``GAP`` event was emitted.

* ``ring``: the server's ring dropped events this watch never saw.
* ``hole``: the read's own sequence skips numbers (the server's log jumped).
* ``overflow``: more events arrived in one read than ``events_per_update``;
  the oldest were skipped (event-log) or the rest dropped (state).
* ``reset``: the server's ``seq`` went backwards (it restarted); everything in
  the read is delivered as new.
"""

Event: TypeAlias = JSONObject
"""One watch event, exactly as the filter sees it (see the module docstring)."""

#: Mime types that mark an event-log resource (the first is agentd's own; the
#: second is the name the upstream design used, accepted so its servers work).
EVENT_LOG_MIME_TYPES: Final = frozenset(
    {"application/vnd.agentd.events+json", "application/vnd.asyncai.events+json"}
)

#: ``changed`` paths go at most this deep; a difference further down is
#: reported at its depth-3 ancestor, which keeps notices short.
MAX_CHANGED_DEPTH: Final = 3

#: Bookkeeping fields that change on every write and say nothing about the
#: object; a ``MODIFIED`` that touched only these is a no-op.
IGNORED_PATHS: Final = frozenset(
    {"metadata.resourceVersion", "metadata.generation", "metadata.managedFields"}
)

#: The ``changed`` entry for "the whole value differs" (the values are not both
#: objects, e.g. a scalar under a state object's key).
WHOLE_VALUE: Final = "."

#: Item-key fields, tried in this order (seed ADR 0005: list diffs).
KEY_FIELDS: Final = (("metadata", "uid"), ("uid",), ("id",), ("metadata", "name"), ("name",))

DEFAULT_EVENTS_PER_UPDATE: Final = 100

#: How much of a malformed body is quoted in the error (enough to recognize it).
_QUOTE_CHARS: Final = 80

_MISSING: Final = object()


def _checked_events_per_update(events_per_update: int) -> int:
    if events_per_update < 2:
        raise ValueError(f"events_per_update must be >= 2, got {events_per_update!r}")
    return events_per_update


def _json_list(paths: list[str]) -> JSONArray:
    """``changed`` paths as the JSON array an event carries."""
    out: JSONArray = [*paths]
    return out


# --------------------------------------------------------------------- shapes


def shape_of(mime_type: str | None) -> Shape:
    """The shape of a resource read from its ``mimeType`` (parameters ignored)."""
    if mime_type is None:
        return "state"
    base = mime_type.split(";", 1)[0].strip().lower()
    return "event-log" if base in EVENT_LOG_MIME_TYPES else "state"


# ------------------------------------------------------------- changed paths


def changed_paths(old: object, new: object) -> list[str]:
    """Sorted dotted paths where ``old`` and ``new`` differ.

    Objects are compared key by key, at most :data:`MAX_CHANGED_DEPTH` levels
    deep; lists and scalars are compared whole. Paths in :data:`IGNORED_PATHS`
    (relative to the root) are skipped. If the two values differ and are not
    both objects, the result is ``["."]`` (:data:`WHOLE_VALUE`). Equal values
    give ``[]``.
    """
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        _walk(old, new, "", 1, out)
        return sorted(out)
    return [] if _same(old, new) else [WHOLE_VALUE]


def _walk(
    old: Mapping[str, object], new: Mapping[str, object], prefix: str, level: int, out: list[str]
) -> None:
    for k in {**old, **new}:
        path = f"{prefix}{k}"
        if path in IGNORED_PATHS:
            continue
        a = old.get(k, _MISSING)
        b = new.get(k, _MISSING)
        if _same(a, b):
            continue
        if level < MAX_CHANGED_DEPTH and isinstance(a, dict) and isinstance(b, dict):
            _walk(a, b, path + ".", level + 1, out)
        else:
            out.append(path)


def _same(a: object, b: object) -> bool:
    # JSON says 1, 1.0 and true are different values; Python's == does not.
    if type(a) is not type(b):
        return False
    return bool(a == b)


# ---------------------------------------------------------------- item keys


def _get_path(obj: Mapping[str, object], path: tuple[str, ...]) -> object:
    cur: object = obj
    for part in path:
        if not isinstance(cur, dict) or part not in cur:
            return _MISSING
        cur = cur[part]
    return cur


def identity_key(item: object) -> str | None:
    """The item's identity: the first present of ``metadata.uid``, ``uid``, ``id``,
    ``metadata.name``, ``name`` (as text), or ``None`` if it has none."""
    if not isinstance(item, dict):
        return None
    for path in KEY_FIELDS:
        value = _get_path(item, path)
        if value is not _MISSING and value is not None and not isinstance(value, dict | list):
            return value if isinstance(value, str) else compact_json(value)
    return None


def item_key(item: object) -> str:
    """The list-diff key of ``item``: :func:`identity_key`, else the whole item as JSON."""
    key = identity_key(item)
    return key if key is not None else compact_json(item)


def compact_json(value: object) -> str:
    """``value`` as compact JSON with sorted keys (unknown types via ``str``)."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=str).decode()


# ----------------------------------------------------------------- event-log


def _decode(body: str | bytes, uri: str) -> str:
    if isinstance(body, str):
        return body
    try:
        return bytes(body).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedReadError(
            f"watch read of {uri!r}: the body is not UTF-8 text ({exc}); "
            "watched resources must return JSON text"
        ) from exc


def _quote(text: str) -> str:
    return repr(text[:_QUOTE_CHARS] + ("…" if len(text) > _QUOTE_CHARS else ""))


def parse_event_log(body: str | bytes, *, uri: str = "") -> list[JSONObject]:
    """Parse and check an event-log body; return its events sorted by ``seq``.

    Raises:
        MalformedReadError: the body is not JSON, not an object with an
            ``events`` list, or an event is not an object with an integer
            ``seq`` and a string ``type``.
    """
    return [ev for _seq, ev in _sequenced_events(body, uri)]


def _sequenced_events(body: str | bytes, uri: str) -> list[tuple[int, JSONObject]]:
    """:func:`parse_event_log`'s events, each with its checked ``seq``."""
    text = _decode(body, uri)
    fix = 'an event-log read must be JSON like {"events": [{"seq": 1, "type": "ADDED", ...}]}'
    try:
        doc = loads(text)
    except orjson.JSONDecodeError as exc:
        raise MalformedReadError(
            f"watch read of {uri!r}: the body {_quote(text)} is not JSON ({exc}); {fix}"
        ) from exc
    obj = as_object(doc)
    listed = get_array(obj, "events") if obj is not None else None
    if listed is None:
        raise MalformedReadError(f"watch read of {uri!r}: no 'events' list in {_quote(text)}; {fix}")
    events: dict[int, JSONObject] = {}
    for i, item in enumerate(listed):
        ev = as_object(item)
        if ev is None:
            raise MalformedReadError(
                f"watch read of {uri!r}: events[{i}] is {_quote(repr(item))}, not an object; {fix}"
            )
        seq = get_int(ev, "seq")
        if seq is None:
            raise MalformedReadError(
                f"watch read of {uri!r}: events[{i}] has seq {ev.get('seq')!r}; "
                f"every event needs an integer 'seq'; {fix}"
            )
        if get_str(ev, "type") is None:
            raise MalformedReadError(
                f"watch read of {uri!r}: events[{i}] (seq {seq}) has type {ev.get('type')!r}; "
                f"every event needs a string 'type'; {fix}"
            )
        events.setdefault(seq, ev)  # a repeated seq is the same event: first wins
    return [(s, events[s]) for s in sorted(events)]


def gap_event(
    *,
    watch: str,
    uri: str,
    reason: GapReason,
    first_seq: int | None,
    last_seq: int | None,
    missed: int | None,
) -> Event:
    """A ``GAP`` event: events between ``first_seq`` and ``last_seq`` were not delivered."""
    span = f"seq {first_seq}..{last_seq}" if first_seq is not None else "changes"
    count = f"{missed} " if missed is not None else ""
    message = {
        "ring": f"missed {count}events ({span}): the server's ring moved on before they were read",
        "hole": f"missed {count}events ({span}): the server's log has no events with these numbers",
        "overflow": f"skipped {count}events ({span}): more than this watch processes per update",
        "reset": "the server's event sequence restarted; events before the restart may be missing",
    }[reason]
    return {
        "watch": watch,
        "uri": uri,
        "type": "GAP",
        "reason": reason,
        "first_seq": first_seq,
        "last_seq": last_seq,
        "missed": missed,
        "message": message,
        "old": None,
        "changed": None,
    }


class EventLogExtractor:
    """Deliver event-log events above the last seen ``seq``.

    Every ``seq`` from the last one seen up to the newest one read is accounted
    for exactly once: delivered, dropped as a no-op ``MODIFIED``, or inside
    one ``GAP`` (``ring`` before the oldest event read, ``hole`` between two
    events read, ``overflow`` beyond ``events_per_update``).

    Args:
        last_seq: Resume after this ``seq`` (from a persisted baseline).
            ``None`` with ``primed=False`` (the default): the first read is the
            baseline and delivers nothing; an empty first read counts as
            ``last_seq = 0`` (sequences start at 1), so events evicted from
            the ring before the next read are reported as a ``GAP``.
        primed: Whether a baseline exists. ``last_seq=None, primed=True`` means
            the baseline read was empty: the next read delivers everything.
        watch, uri: Copied into every event.
        events_per_update: At most this many events per read, a ``GAP``
            summary included; the oldest surplus events are skipped.
    """

    shape: Final[Shape] = "event-log"

    def __init__(
        self,
        last_seq: int | None = None,
        *,
        primed: bool | None = None,
        watch: str = "",
        uri: str = "",
        events_per_update: int = DEFAULT_EVENTS_PER_UPDATE,
    ) -> None:
        self.last_seq = last_seq
        self.primed = last_seq is not None if primed is None else primed
        self.watch = watch
        self.uri = uri
        self.events_per_update = _checked_events_per_update(events_per_update)

    def baseline(self) -> JSONObject | None:
        """JSON-able baseline for ``--watch-state``; ``None`` before the first read."""
        if not self.primed:
            return None
        return {"shape": "event-log", "last_seq": self.last_seq}

    def feed(self, body: str | bytes) -> list[Event]:
        """Take one read; return the new events in ``seq`` order (``GAP`` first).

        Raises:
            MalformedReadError: the read broke the contract; nothing changed.
        """
        raw = _sequenced_events(body, self.uri)
        if not self.primed:
            self.primed = True
            # An empty log has emitted nothing yet: its sequence starts at 1,
            # so a later read whose oldest event is above 1 missed events and
            # must say so (GAP) rather than lose them silently.
            self.last_seq = raw[-1][0] if raw else 0
            return []
        out: list[Event] = []
        last = self.last_seq
        first: int | None  # the first seq this read must account for
        if last is None:
            new, first = raw, None
        elif raw and raw[-1][0] < last:
            out.append(self._gap("reset", None, None, None))
            new, first = raw, None
        else:
            new, first = [(seq, ev) for seq, ev in raw if seq > last], last + 1
            if raw and raw[0][0] > last + 1:
                first_missed, last_missed = last + 1, raw[0][0] - 1
                out.append(self._gap("ring", first_missed, last_missed, last_missed - first_missed + 1))
                first = raw[0][0]
        # What the read holds above ``first``, in seq order: events, and holes between them.
        items: list[tuple[int, int, JSONObject | None]] = []
        for seq, ev in new:
            if first is not None and seq > first:
                items.append((first, seq - 1, None))
            items.append((seq, seq, ev))
            first = seq + 1
        budget = self.events_per_update - len(out)
        if len(items) > budget:
            keep = budget - 1  # one slot for the overflow GAP
            skipped, items = items[: len(items) - keep], items[len(items) - keep :] if keep else []
            lo, hi = skipped[0][0], skipped[-1][1]
            out.append(self._gap("overflow", lo, hi, hi - lo + 1))
        if raw:
            # Non-reset reads never end below ``last``; after a reset the new
            # sequence is the one to follow.
            self.last_seq = raw[-1][0]
        for lo, hi, item in items:
            if item is None:
                out.append(self._gap("hole", lo, hi, hi - lo + 1))
                continue
            event = self._event(item)
            if event is not None:
                out.append(event)
        return out

    def _gap(self, reason: GapReason, first: int | None, last: int | None, missed: int | None) -> Event:
        return gap_event(
            watch=self.watch, uri=self.uri, reason=reason, first_seq=first, last_seq=last, missed=missed
        )

    def _event(self, ev: JSONObject) -> Event | None:
        event: Event = dict(ev)
        event["watch"] = self.watch
        event["uri"] = self.uri
        old = ev.get("old")
        event["old"] = old
        event["changed"] = None
        if ev["type"] == "MODIFIED" and old is not None and "object" in ev:
            changed = changed_paths(old, ev["object"])
            if not changed:
                return None  # no-op update (only bookkeeping fields moved)
            event["changed"] = _json_list(changed)
        return event


# --------------------------------------------------------------------- state

_StateKind: TypeAlias = Literal["json", "text"]


def parse_state(body: str | bytes, *, uri: str = "") -> tuple[_StateKind, JSONValue]:
    """``("json", value)`` if the body is JSON, else ``("text", body)``."""
    text = _decode(body, uri)
    try:
        return "json", loads(text)
    except orjson.JSONDecodeError:
        return "text", text


def _state_from_baseline(previous: Mapping[str, JSONValue]) -> tuple[_StateKind, JSONValue]:
    kind = previous.get("kind")
    if (kind != "json" and kind != "text") or "value" not in previous:
        raise ValueError(
            f"state baseline {dict(previous)!r} is not valid: "
            'expected {"shape": "state", "kind": "json"|"text", "value": ...}'
        )
    value = previous["value"]
    if kind == "text" and not isinstance(value, str):
        raise ValueError(f"state baseline has kind 'text' but value {value!r}")
    return ("json" if kind == "json" else "text"), value


class StateExtractor:
    """Diff each read of a state resource against the previous one.

    Args:
        previous: The persisted state baseline (:meth:`baseline` output), or
            ``None``: the first read is then the baseline and delivers nothing.
        watch, uri: Copied into every event.
        events_per_update: At most this many events per read; the surplus is
            dropped and summarized by one ``GAP`` (reason ``overflow``).
    """

    shape: Final[Shape] = "state"

    def __init__(
        self,
        previous: Mapping[str, JSONValue] | None = None,
        *,
        watch: str = "",
        uri: str = "",
        events_per_update: int = DEFAULT_EVENTS_PER_UPDATE,
    ) -> None:
        self.watch = watch
        self.uri = uri
        self.events_per_update = _checked_events_per_update(events_per_update)
        self._state = None if previous is None else _state_from_baseline(previous)

    def baseline(self) -> JSONObject | None:
        """JSON-able baseline for ``--watch-state``; ``None`` before the first read."""
        if self._state is None:
            return None
        return {"shape": "state", "kind": self._state[0], "value": self._state[1]}

    def feed(self, body: str | bytes) -> list[Event]:
        """Take one read; return the differences from the previous one."""
        current = parse_state(body, uri=self.uri)
        previous, self._state = self._state, current
        if previous is None:
            return []
        events = self._diff(previous, current)
        if len(events) > self.events_per_update:
            extra = len(events) - (self.events_per_update - 1)
            events = events[: self.events_per_update - 1]
            events.append(
                gap_event(
                    watch=self.watch,
                    uri=self.uri,
                    reason="overflow",
                    first_seq=None,
                    last_seq=None,
                    missed=extra,
                )
            )
        return events

    def _diff(
        self, previous: tuple[_StateKind, JSONValue], current: tuple[_StateKind, JSONValue]
    ) -> list[Event]:
        (pk, old), (ck, new) = previous, current
        if pk == ck == "json" and isinstance(old, list) and isinstance(new, list):
            return self._diff_keyed(_index(old), _index(new))
        if pk == ck == "json" and isinstance(old, dict) and isinstance(new, dict):
            return self._diff_keyed(old, new)
        if pk == ck and _same(old, new):
            return []
        return [self._event("CHANGED", None, old, new, None)]

    def _diff_keyed(self, old: Mapping[str, JSONValue], new: Mapping[str, JSONValue]) -> list[Event]:
        out: list[Event] = []
        for key, value in new.items():
            if key not in old:
                out.append(self._event("ADDED", key, None, value, None))
            elif not _same(old[key], value):
                changed = changed_paths(old[key], value)
                if changed:
                    out.append(self._event("MODIFIED", key, old[key], value, _json_list(changed)))
        for key, value in old.items():
            if key not in new:
                out.append(self._event("DELETED", key, value, None, None))
        return out

    def _event(
        self, type_: str, key: str | None, old: JSONValue, new: JSONValue, changed: JSONArray | None
    ) -> Event:
        return {
            "watch": self.watch,
            "uri": self.uri,
            "type": type_,
            "key": key,
            "old": old,
            "new": new,
            "changed": changed,
        }


def _index(items: JSONArray) -> JSONObject:
    """Items by key; a repeated key gets ``#2``, ``#3``... so no item is lost."""
    out: JSONObject = {}
    for item in items:
        key = base = item_key(item)
        n = 1
        while key in out:
            n += 1
            key = f"{base}#{n}"
        out[key] = item
    return out


# ----------------------------------------------------------------- factories

Extractor: TypeAlias = EventLogExtractor | StateExtractor


def extractor_from_baseline(
    baseline: Mapping[str, JSONValue] | None,
    *,
    shape: Shape,
    watch: str = "",
    uri: str = "",
    events_per_update: int = DEFAULT_EVENTS_PER_UPDATE,
) -> Extractor:
    """The extractor for ``shape``, resuming from a persisted ``baseline`` if it fits.

    A baseline of another shape (the server changed the resource's mime type)
    or ``None`` gives a fresh extractor whose first read is the baseline.

    Raises:
        ValueError: the baseline has the right shape but is malformed.
    """
    fits = baseline is not None and baseline.get("shape") == shape
    if shape == "event-log":
        if not fits:
            return EventLogExtractor(watch=watch, uri=uri, events_per_update=events_per_update)
        assert baseline is not None
        last = baseline.get("last_seq")
        if last is not None and (not isinstance(last, int) or isinstance(last, bool)):
            raise ValueError(f"event-log baseline has last_seq {last!r}; expected an integer or null")
        return EventLogExtractor(last, primed=True, watch=watch, uri=uri, events_per_update=events_per_update)
    return StateExtractor(
        baseline if fits else None, watch=watch, uri=uri, events_per_update=events_per_update
    )
