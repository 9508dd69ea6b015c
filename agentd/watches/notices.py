"""From watch events to one notice turn (pure, synchronous, ``now`` passed in).

The pieces, in the order the supervisor uses them for each event that survived
the filter:

1. :func:`default_line` — the line for an event when the watch has no
   ``on_event`` filter.
2. :class:`LineDeduper` — drops an event's lines when they equal the last lines
   produced for the same object (:func:`object_key`), so a controller that
   rewrites an object without a visible change does not wake the agent.
3. :class:`NoticeBuffer` — trailing debounce: every line pushes the flush
   ``quiet`` seconds out, but never past ``max_wait`` after the burst's first
   line. :meth:`NoticeBuffer.flush` collapses repeats to ``line ×N`` and caps
   the notice at ``max_lines`` lines, ``+N more`` included, keeping ``GAP`` /
   ``ERROR`` lines and then the newest.
4. :func:`render_notice` — the text the agent receives.

:func:`is_no_reply` decides whether the agent's answer to a notice is to be
published at all.
"""

from __future__ import annotations

import html
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from agentd.core.jsonvalue import JSONValue
from agentd.watches.extract import WHOLE_VALUE, Event, compact_json, identity_key

#: ``MODIFIED`` lines name at most this many changed paths (then ``+N more``).
MAX_CHANGES_SHOWN: Final = 3

#: A changed scalar is quoted up to this many characters in a default line.
MAX_VALUE_CHARS: Final = 40

#: A default line that falls back to JSON is cut here; the agent can read the
#: resource for the full object.
MAX_DEFAULT_JSON_CHARS: Final = 300

#: The deduper remembers this many objects (least recently seen forgotten
#: first), bounding memory for watches over huge, churning collections.
MAX_DEDUPE_KEYS: Final = 10_000

#: What follows the ``<watch-event>`` block: the agent answers ``NO_REPLY``
#: unless the change is relevant.
NOTICE_INSTRUCTION: Final = (
    "This message comes from a watch you set up; it is not from a user. "
    "If the change above is relevant to your task, act on it or report it. "
    "Otherwise answer with exactly NO_REPLY and nothing else."
)

#: The token that suppresses a reply.
NO_REPLY: Final = "NO_REPLY"

_MISSING: Final = object()


# ------------------------------------------------------------ default lines


def _k8s_name(obj: object) -> str | None:
    if not isinstance(obj, dict):
        return None
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        return None
    ns = meta.get("namespace")
    return f"{ns}/{meta['name']}" if isinstance(ns, str) and ns else str(meta["name"])


def _subject(event: Event) -> JSONValue:
    for field in ("object", "new", "old"):
        value = event.get(field)
        if value is not None:
            return value
    return None


def object_key(event: Event) -> str | None:
    """The object an event is about, for per-object dedupe; ``None`` if it has none.

    State diffs use their item ``key``; event-log events the identity of their
    ``object`` (``metadata.uid``, ``uid``, ``id``, ``metadata.name``, ``name``).
    ``GAP``, ``ERROR`` and whole-value ``CHANGED`` events have no object and are
    never deduped.
    """
    key = event.get("key")
    if isinstance(key, str):
        return key
    obj = event.get("object")
    return identity_key(obj) if obj is not None else None


def _lookup(value: object, path: str) -> object:
    if path == WHOLE_VALUE:
        return value
    cur = value
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return _MISSING
        cur = cur[part]
    return cur


def _scalar(value: object) -> str | None:
    """Short text for a scalar, or ``None`` for objects and lists (shown by path only)."""
    if value is _MISSING:
        return "∅"  # absent on that side (added or removed field)
    if value is None:
        return "null"
    if isinstance(value, dict | list):
        return None
    text = value if isinstance(value, str) else compact_json(value)
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 1] + "…"


def describe_changes(old: object, new: object, changed: Sequence[str]) -> str:
    """``status.phase: Deciding→Published, spec.x`` for up to three paths (then ``+N more``).

    Scalars are shown before and after; objects and lists by path only (a
    truncated rendering of two different lists can read the same).
    """
    parts: list[str] = []
    for path in changed[:MAX_CHANGES_SHOWN]:
        a, b = _scalar(_lookup(old, path)), _scalar(_lookup(new, path))
        if a is None or b is None:
            parts.append(path)
        elif path == WHOLE_VALUE:
            parts.append(f"{a}→{b}")
        else:
            parts.append(f"{path}: {a}→{b}")
    if len(changed) > MAX_CHANGES_SHOWN:
        parts.append(f"+{len(changed) - MAX_CHANGES_SHOWN} more")
    return ", ".join(parts)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


_EVENT_BOOKKEEPING: Final = frozenset({"watch", "uri", "type", "seq", "old", "changed"})


def default_line(event: Event) -> str:
    """The notice line for an event when the watch has no filter.

    * ``GAP`` / ``ERROR``: ``TYPE: message``.
    * Kubernetes-like objects: ``TYPE namespace/name`` (``TYPE name`` when
      cluster-scoped); other state items: ``TYPE key``.
    * ``MODIFIED`` with ``changed`` adds ``(path: old→new, ...)``.
    * ``CHANGED`` (whole-value state): ``CHANGED`` and the start of the new value.
    * Anything else: ``TYPE`` and the object (or the event's own fields) as
      compact JSON, cut at :data:`MAX_DEFAULT_JSON_CHARS`.
    """
    type_ = str(event.get("type", "EVENT"))
    if type_ in ("GAP", "ERROR"):
        message = event.get("message")
        body = message if isinstance(message, str) else compact_json(event.get("message"))
        return f"{type_}: {_cut(body, MAX_DEFAULT_JSON_CHARS)}"
    if type_ == "CHANGED" and event.get("key") is None and "new" in event:
        new = event["new"]
        text = new.strip().splitlines()[0] if isinstance(new, str) and new.strip() else compact_json(new)
        return f"CHANGED {_cut(text, MAX_DEFAULT_JSON_CHARS)}"
    label = _k8s_name(_subject(event))
    key = event.get("key")
    if label is None and isinstance(key, str):
        label = key
    if label is None:
        subject = _subject(event)
        if subject is None:
            subject = {k: v for k, v in event.items() if k not in _EVENT_BOOKKEEPING}
        label = _cut(compact_json(subject), MAX_DEFAULT_JSON_CHARS)
    line = f"{type_} {label}"
    changed = event.get("changed")
    if type_ == "MODIFIED" and isinstance(changed, list) and changed:
        new = event.get("object", event.get("new"))
        paths = [path for path in changed if isinstance(path, str)]  # the extractors' changed_paths
        line += f" ({describe_changes(event.get('old'), new, paths)})"
    return line


def error_line(watch: str, message: str) -> str:
    """The notice line for a filter or read failure on ``watch``."""
    return f"ERROR in watch {watch!r}: {_cut(message, MAX_DEFAULT_JSON_CHARS)}"


# ------------------------------------------------------------------- dedupe


class LineDeduper:
    """Per-object dedupe: drop lines equal to the last lines for the same object.

    Args:
        max_keys: Objects remembered; the least recently seen is forgotten first.
    """

    def __init__(self, max_keys: int = MAX_DEDUPE_KEYS) -> None:
        self._last: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        self._max_keys = max_keys

    def admit(self, key: str | None, lines: Sequence[str]) -> list[str]:
        """The lines to keep for one event about object ``key``.

        Returns ``[]`` when ``lines`` equal the last lines admitted for ``key``;
        otherwise returns ``lines`` and remembers them. ``key=None`` (no object)
        admits everything.
        """
        if key is None or not lines:
            return list(lines)
        current = tuple(lines)
        if self._last.get(key) == current:
            self._last.move_to_end(key)
            return []
        self._last[key] = current
        self._last.move_to_end(key)
        while len(self._last) > self._max_keys:
            self._last.popitem(last=False)
        return list(lines)

    def forget(self, key: str) -> None:
        """Forget an object (e.g. its watch restarted from a fresh baseline)."""
        self._last.pop(key, None)


# ----------------------------------------------------------------- debounce


@dataclass(frozen=True, slots=True)
class Notice:
    """One flushed batch of lines, ready for :func:`render_notice`.

    Attributes:
        lines: The lines to show, at most ``max_lines`` of them including the
            ``+N more`` line: repeats collapsed to ``line ×N``, in the order
            they first arrived, ``+N more`` where the left-out lines were.
        total: Raw lines that went into this notice (before collapsing).
        first_at: When the burst's first line arrived.
        flushed_at: When the notice was flushed.
    """

    lines: tuple[str, ...]
    total: int
    first_at: float
    flushed_at: float


@dataclass(slots=True)
class _Entry:
    first: int
    """Arrival index of the line's first occurrence (its place in the notice)."""
    count: int = 1


class NoticeBuffer:
    """Trailing debounce for one watch's lines.

    Each :meth:`add` moves the deadline to ``quiet`` seconds after it, capped at
    ``max_wait`` seconds after the first line of the burst. The owner arms one
    timer at :meth:`deadline` and calls :meth:`flush` when it fires; nothing
    runs while the buffer is empty.

    A notice shows at most ``max_lines`` lines, the ``+N more`` line included.
    When more arrived, the **newest** are kept (they describe the current
    world; the left-out ones are older news) and **pinned** lines (``GAP`` and
    ``ERROR`` lines: something was missed or failed) are kept before any
    other. Memory stays bounded: at most ``max_lines`` distinct lines of each
    kind are held; older ones only count toward ``+N more``.
    """

    def __init__(self, *, quiet: float = 3.0, max_wait: float = 15.0, max_lines: int = 20) -> None:
        if quiet <= 0 or max_wait < quiet or max_lines < 1:
            raise ValueError(
                f"NoticeBuffer needs 0 < quiet <= max_wait and max_lines >= 1, "
                f"got quiet={quiet!r}, max_wait={max_wait!r}, max_lines={max_lines!r}"
            )
        self.quiet = quiet
        self.max_wait = max_wait
        self.max_lines = max_lines
        self._reset()

    def _reset(self) -> None:
        # Each ordered by last occurrence, least recent first: what is left out first.
        self._plain: OrderedDict[str, _Entry] = OrderedDict()
        self._pinned: OrderedDict[str, _Entry] = OrderedDict()
        self._arrivals = 0
        self._omitted = 0
        self._omitted_first: int | None = None
        self._total = 0
        self._first_at: float | None = None
        self._last_at = 0.0

    def __len__(self) -> int:
        """Raw lines waiting."""
        return self._total

    def add(self, lines: Iterable[str], now: float, *, pinned: bool = False) -> None:
        """Queue ``lines`` that arrived at ``now``; an empty batch changes nothing.

        ``pinned`` lines (``GAP``, ``ERROR``) are left out of a full notice
        only after every other line.
        """
        for line in lines:
            if self._first_at is None:
                self._first_at = now
            self._last_at = now
            self._total += 1
            self._arrivals += 1
            entry = self._pinned.get(line)
            if entry is not None:
                entry.count += 1
                self._pinned.move_to_end(line)
            elif line in self._plain:
                entry = self._plain.pop(line) if pinned else self._plain[line]
                entry.count += 1
                if pinned:
                    self._pinned[line] = entry  # a line once pinned stays pinned
                else:
                    self._plain.move_to_end(line)
            else:
                (self._pinned if pinned else self._plain)[line] = _Entry(first=self._arrivals)
            for held in (self._plain, self._pinned):
                while len(held) > self.max_lines:
                    self._leave_out(held.popitem(last=False)[1])

    def _leave_out(self, entry: _Entry) -> None:
        self._omitted += entry.count
        if self._omitted_first is None or entry.first < self._omitted_first:
            self._omitted_first = entry.first

    def deadline(self) -> float | None:
        """When the pending lines are due, or ``None`` if nothing is pending."""
        if self._first_at is None:
            return None
        return min(self._last_at + self.quiet, self._first_at + self.max_wait)

    def flush(self, now: float, *, force: bool = False) -> Notice | None:
        """Take the pending lines as a :class:`Notice` if due at ``now`` (or ``force``).

        Returns ``None`` (and keeps the lines) if nothing is pending or the
        deadline has not come.
        """
        due = self.deadline()
        if due is None or (now < due and not force):
            return None
        pinned, plain = list(self._pinned.items()), list(self._plain.items())
        if self._omitted or len(pinned) + len(plain) > self.max_lines:
            room = self.max_lines - 1  # one line says how many were left out
            keep_pinned = pinned[len(pinned) - min(room, len(pinned)) :]
            room -= len(keep_pinned)
            keep_plain = plain[len(plain) - room :] if room else []
            for _, entry in [
                *pinned[: len(pinned) - len(keep_pinned)],
                *plain[: len(plain) - len(keep_plain)],
            ]:
                self._leave_out(entry)
            pinned, plain = keep_pinned, keep_plain
        kept = sorted([*pinned, *plain], key=lambda item: item[1].first)
        lines = [line if entry.count == 1 else f"{line} ×{entry.count}" for line, entry in kept]
        if self._omitted:
            assert self._omitted_first is not None
            at = next((i for i, (_, e) in enumerate(kept) if e.first > self._omitted_first), len(kept))
            lines.insert(at, f"+{self._omitted} more")
        assert self._first_at is not None
        notice = Notice(lines=tuple(lines), total=self._total, first_at=self._first_at, flushed_at=now)
        self._reset()
        return notice


# ------------------------------------------------------------------- render


def _escape_body(line: str) -> str:
    # Lines come from servers and filters: escape them so none can close the
    # block early and pose as instructions outside it.
    return html.escape(line, quote=False)


def render_notice(name: str, uri: str, lines: Iterable[str]) -> str:
    """The message the agent receives for one notice.

    A ``<watch-event name="…" uri="…">`` block (attributes and lines
    XML-escaped), one line per entry, then :data:`NOTICE_INSTRUCTION`.
    """
    body = "\n".join(_escape_body(line) for line in lines)
    return (
        f'<watch-event name="{html.escape(name, quote=True)}" uri="{html.escape(uri, quote=True)}">\n'
        f"{body}\n"
        "</watch-event>\n"
        f"{NOTICE_INSTRUCTION}"
    )


def is_no_reply(text: str | None) -> bool:
    """Whether a reply publishes nothing: empty, or a line that is only ``NO_REPLY``."""
    if text is None or not text.strip():
        return True
    return any(line.strip() == NO_REPLY for line in text.splitlines())
