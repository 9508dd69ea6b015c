"""The inbox's delivery logic, pure and synchronous (no I/O, no trio).

Size: one pure state machine (positions, acknowledgements, torn tails), tested apart from any I/O.

``agentd serve inbox`` (the ``servers/inbox/`` package) is the shell: it reads
bytes, persists the cursor, sends notifications; the webhook server's store
keeps its positions with it too. Everything they decide comes from :class:`InboxLog`.

Sequence numbers
----------------
Every *event* of the inbox has a ``seq``: each message (one JSON line of the
inbox file) and each in-band ``ERROR``. Numbers are dense and stable across
restarts: walking the file from the cursor ``(offset, seq)`` and interleaving
the persisted ``ERROR`` notes (each remembers the byte offset where it was
raised) gives every event the number it had before. So a reader that saw
``seq`` N never confuses a new message with an old one, and an event-log
watch infers exactly what it missed from a jump in ``seq``. When the file was
rewritten (or the directory replaced) events are renumbered from above
everything handed out before (the persisted reservation ``top``), never below.

Pending, window, gap
--------------------
An event is *pending* until a consumer acknowledges it (``ack``,
``ack_through``, ``mark_handled``). The cursor is the persisted position:
``offset``/``seq`` of the first pending event, the acknowledged seqs above it
(as ranges) and the pending ``ERROR`` notes. Nothing the server pushes moves
it: the position is what consumers acknowledged.

The log a reader sees (``inbox://AGENT``) is the *window*: the newest
``WINDOW`` pending events (urgent messages listed first). Older pending events
are the *gap*: counted and named (``gap`` in the body), still on disk, still
pending, readable by id, and they come back into the window, newest first, as
the window's events are acknowledged. Keeping the newest in view means a new
message is always visible, and the hidden ones are always exactly the seqs
just below the window, so a reader's ``seq`` arithmetic is exact.

In memory: at most ``MEM_CAP`` (twice the window) pending events; anything
older is re-read from the file when the window runs low (:meth:`needs_refill`).
Memory is constant in the size of the file.

Lines
-----
A complete line that is blank is skipped. A line that is a JSON object is a
message (``id`` from the line, else ``AGENT@OFFSET``). A line that is not a
JSON object, or a last line without its newline that does not parse yet,
stops the drain there (*deferral*); on the ``DEFER_WARN_AFTER``-th drain that
stops at the same byte an ``ERROR`` names it. Lines are never skipped, except
one longer than ``MAX_LINE_BYTES``, which is skipped with an ``ERROR`` naming
its byte range (it cannot be held in memory).
"""

from __future__ import annotations

import re
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal, Protocol, TypedDict, TypeVar

import orjson

from agentd.core.jsonvalue import JSONObject, JSONValue
from agentd.servers._intervals import IntervalSet

__all__ = [
    "DEFER_WARN_AFTER",
    "INLINE_LINE_BYTES",
    "LEDGER_CAP",
    "MAX_LINE_BYTES",
    "MEM_CAP",
    "NOTES_CAP",
    "SEQ_RESERVE",
    "TEXT_CAP",
    "WINDOW",
    "AckError",
    "Cursor",
    "Deferral",
    "Entry",
    "FeedResult",
    "InboxLog",
    "Ledger",
    "LineParser",
    "Note",
    "NoteType",
    "channel_params",
    "cursor_from_json",
    "find_newline",
    "message_id",
    "parse_line",
    "walk",
]

WINDOW: Final = 256
"""Pending events shown in ``inbox://AGENT`` (the event-log ring size of the other bundled servers)."""
MEM_CAP: Final = 2 * WINDOW
"""Pending events kept in memory: the window plus as many below it, so acknowledging
the window refills it without reading the file again."""
NOTES_CAP: Final = 32
"""Pending ``ERROR`` events kept; beyond that the oldest is acknowledged automatically."""
LEDGER_CAP: Final = 1000
"""Ids remembered per list (acked, handled, responded, senders) for the status and ``respond``."""
SEQ_RESERVE: Final = 1024
"""Sequence numbers reserved (persisted) ahead of use, so a renumbering after a crash
and a rewrite still starts above everything handed out."""
DEFER_WARN_AFTER: Final = 3
"""Drains stopped at the same unparsable line before an ``ERROR`` names it."""
INLINE_LINE_BYTES: Final = 16 * 1024
"""A line up to this size is shown whole in the log; a bigger one is summarised."""
TEXT_CAP: Final = 8 * 1024
"""Characters of ``text`` kept in a summarised log event and in a channel notification."""
MAX_LINE_BYTES: Final = 64 * 1024 * 1024
"""Longest line the server reads into memory; a longer one is skipped with an ``ERROR``."""
GAP_URGENT_IDS: Final = 10
"""Urgent messages below the window named by id in the ``gap`` summary."""
_META_VALUE_CAP: Final = 256
_META_KEYS_CAP: Final = 32
_META_KEY_RE: Final = re.compile(r"[^A-Za-z0-9_]")

Kind = Literal["MESSAGE", "ERROR"]
NoteType = Literal["ERROR", "GAP"]
"""What an in-band note says: a source problem (``ERROR``), or events that fell off unread (``GAP``)."""


class AckError(ValueError):
    """An acknowledgement that cannot be applied; the message says what to pass instead."""


# --------------------------------------------------------------------------- events


@dataclass(slots=True)
class Entry:
    """One pending event of the inbox (a message, or an in-band ERROR)."""

    seq: int
    kind: Kind
    offset: int
    """Byte offset of the message's line (ERROR: where the drain stood when it was raised)."""
    end: int
    """Byte just past the line (ERROR: equal to ``offset``)."""
    id: str
    urgent: bool
    sender: str | None
    event: JSONObject
    """The event-log event, ``seq`` and ``type`` included (text capped for big lines)."""
    text: str
    """The message text as the channel shows it (capped)."""
    truncated: bool = False


def message_id(value: object, agent: str, offset: int) -> str:
    """The line's ``id`` as a string, or ``AGENT@OFFSET`` when it has none."""
    if isinstance(value, str | int) and not isinstance(value, bool) and str(value):
        return str(value)
    return f"{agent}@{offset}"


def _capped(text: str, uri: str, msg_id: str) -> str:
    return text[:TEXT_CAP] + f"… [{len(text)} characters; read {uri}/message/{msg_id}]"


def parse_line(line: bytes, *, offset: int, seq: int, agent: str, uri: str) -> Entry | None:
    """The message on one line, or None when the line is not a JSON object.

    ``line`` is the whole line (with its newline, if any). A message's own
    ``seq``/``type`` fields are kept as ``message_seq``/``message_type``.
    """
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if type(obj) is not dict:
        return None
    raw_id = obj.get("id")
    msg_id = raw_id if type(raw_id) is str and raw_id else message_id(raw_id, agent, offset)
    urgent = obj.get("urgent") is True
    sender = obj.get("from")
    raw_text = obj.get("text", "")
    text = raw_text if type(raw_text) is str else orjson.dumps(raw_text).decode()
    size = len(line)
    truncated = len(text) > TEXT_CAP
    if size <= INLINE_LINE_BYTES:
        if "seq" in obj or "type" in obj:
            for key in ("seq", "type"):
                if key in obj:
                    obj[f"message_{key}"] = obj.pop(key)
        event: JSONObject = {"seq": seq, "type": "MESSAGE", **obj, "id": msg_id}
        if "urgent" not in obj:
            event["urgent"] = False
        channel_text = _capped(text, uri, msg_id) if truncated else text
    else:
        truncated = True
        shown = _capped(text, uri, msg_id) if len(text) > TEXT_CAP else text
        event = {
            "seq": seq,
            "type": "MESSAGE",
            "id": msg_id,
            "from": sender,
            "ts": obj.get("ts"),
            "urgent": urgent,
            "text": shown,
            "truncated": True,
            "size": size,
            "message_uri": f"{uri}/message/{msg_id}",
        }
        channel_text = shown
    return Entry(
        seq=seq,
        kind="MESSAGE",
        offset=offset,
        end=offset + size,
        id=msg_id,
        urgent=urgent,
        sender=sender if type(sender) is str else None,
        event=event,
        text=channel_text,
        truncated=truncated,
    )


class LineParser(Protocol):
    """Turns one line of the log into its event (:func:`parse_line` is the inbox's).

    Returns None when the line cannot be consumed yet (the drain stops there).
    """

    def __call__(self, line: bytes, *, offset: int, seq: int, agent: str, uri: str) -> Entry | None: ...


@dataclass(frozen=True, slots=True)
class Note:
    """A persisted in-band event: its ``seq``, where it was raised, and what it says.

    ``type`` is ``ERROR`` (a source problem) or ``GAP`` (events that fell off
    unacknowledged, named by ``fields``: count, first and last seq).
    """

    seq: int
    at: int
    message: str
    type: NoteType = "ERROR"
    fields: Mapping[str, JSONValue] | None = None

    def entry(self) -> Entry:
        note_id = f"{self.type.lower()}-{self.seq}"
        event: JSONObject = {"seq": self.seq, "type": self.type, "id": note_id}
        if self.fields:
            event.update({k: v for k, v in self.fields.items() if k not in event})
        event["message"] = self.message
        return Entry(self.seq, "ERROR", self.at, self.at, note_id, False, None, event, self.message)

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"seq": self.seq, "at": self.at, "message": self.message}
        if self.type != "ERROR":
            out["type"] = self.type
        if self.fields:
            out["fields"] = dict(self.fields)
        return out


_META_KEYS: dict[str, str] = {}  # field name -> its identifier form (a cache: names repeat)
_SKIP_META: Final = frozenset({"text", "seq", "message", "id"})


def _meta_key(key: str) -> str:
    clean = _META_KEYS.get(key)
    if clean is None:
        clean = _META_KEY_RE.sub("_", key) or "_"
        if len(_META_KEYS) < 4096:
            _META_KEYS[key] = clean
    return clean


def channel_params(entry: Entry, *, agent: str) -> dict[str, object]:
    """``notifications/claude/channel`` params for one event: ``content`` + string ``meta``."""
    meta: dict[str, str] = {"seq": str(entry.seq), "id": entry.id, "inbox": agent}
    for key, value in entry.event.items():
        if key in _SKIP_META:
            continue
        if len(meta) >= _META_KEYS_CAP:
            break
        clean = _meta_key(key)
        if clean in meta:
            continue
        if type(value) is str:
            text = value
        elif value is True:
            text = "true"
        elif value is False:
            text = "false"
        else:
            text = orjson.dumps(value).decode()
        meta[clean] = text if len(text) <= _META_VALUE_CAP else text[:_META_VALUE_CAP] + "…"
    if entry.kind == "ERROR":
        meta["type"] = "ERROR"
    return {"content": entry.text, "meta": meta}


# --------------------------------------------------------------------------- persisted state


_V = TypeVar("_V")


class CursorSnapshot(TypedDict):
    """The cursor file's content (:meth:`InboxLog.snapshot`; read back by :func:`cursor_from_json`)."""

    version: int
    offset: int
    seq: int
    acked: list[tuple[int, int]]
    notes: list[dict[str, object]]
    top: int
    check: str | None
    anchor: str | None
    ledger: dict[str, object]


class Ledger:
    """What consumers did, by message id (bounded): for the status resource and ``respond``."""

    def __init__(self, data: Mapping[str, object] | None = None) -> None:
        self.acked: OrderedDict[str, str] = OrderedDict()
        self.handled: OrderedDict[str, dict[str, object]] = OrderedDict()
        self.responded: OrderedDict[str, str] = OrderedDict()
        self.senders: OrderedDict[str, str | None] = OrderedDict()
        for name in ("acked", "handled", "responded", "senders"):
            value = (data or {}).get(name)
            if isinstance(value, Mapping):
                getattr(self, name).update({str(k): v for k, v in value.items()})

    @staticmethod
    def put(table: OrderedDict[str, _V], key: str, value: _V) -> None:
        table[key] = value
        table.move_to_end(key)
        while len(table) > LEDGER_CAP:
            table.popitem(last=False)

    def to_json(self) -> dict[str, object]:
        return {
            "acked": self.acked,
            "handled": self.handled,
            "responded": self.responded,
            "senders": self.senders,
        }


@dataclass
class Cursor:
    """The persisted consumer position (see the module docstring)."""

    offset: int = 0
    """Byte offset of the first pending event (everything before it is acknowledged)."""
    seq: int = 1
    """``seq`` of the event at ``offset``."""
    acked: IntervalSet = field(default_factory=IntervalSet)
    """Acknowledged seqs at or above ``seq`` (out of order)."""
    notes: list[Note] = field(default_factory=list)
    """Pending ERROR events at or above ``seq``, by ``seq``."""
    top: int = 0
    """Every seq ever handed out is at most this (a reservation written ahead of use)."""
    check: str | None = None
    """sha256 of the (up to) 4 KiB before ``offset``: is the acknowledged prefix unchanged?"""
    anchor: str | None = None
    """sha256 of the last non-blank line before ``offset``: where to resume after a rewrite."""


# --------------------------------------------------------------------------- walking the file


@dataclass(frozen=True, slots=True)
class Deferral:
    """A line the drain could not consume yet."""

    offset: int
    attempts: int
    reason: str
    end: int = 0
    """End of the file when it was seen: an incomplete last line that is still growing is being
    written, and does not count as another attempt."""


@dataclass
class FeedResult:
    """What one :meth:`InboxLog.feed` call consumed."""

    consumed: int = 0
    """Bytes consumed from the start of the data (whole lines only)."""
    entries: list[Entry] = field(default_factory=list)
    """New pending events, in ``seq`` order (for notifications)."""
    stop: tuple[int, str] | None = None
    """(offset, reason) of a line that cannot be consumed yet, when the data reached end of file."""
    long_line: bool = False
    """The data holds no newline and did not reach end of file: one line is longer than the data."""


Reader = Callable[[int, int], bytes]
"""``read(offset, n)``: up to ``n`` bytes of the inbox file at ``offset`` (fewer only at end of file)."""


def find_newline(read: Reader, start: int, limit: int, chunk: int = 1 << 20) -> int | None:
    """Offset of the first newline in ``[start, limit)``, reading in chunks; None when there is none."""
    pos = start
    while pos < limit:
        data = read(pos, min(chunk, limit - pos))
        if not data:
            return None
        i = data.find(b"\n")
        if i >= 0:
            return pos + i
        pos += len(data)
    return None


def walk(
    read: Reader,
    *,
    start: int,
    seq: int,
    stop_offset: int,
    notes: Iterable[Note],
    agent: str,
    uri: str,
    chunk: int = 1 << 20,
    parse: LineParser = parse_line,
) -> Iterator[Entry]:
    """Every event in the already-consumed region ``[start, stop_offset)``, with its ``seq``.

    Interleaves the ERROR ``notes`` where they were raised, exactly as the
    drain numbered them. A line that no longer parses (the file changed under
    the walk) ends it; a line over ``MAX_LINE_BYTES`` is stepped over (its
    ERROR note, raised at its offset, took its place in the numbering).
    """
    ahead = deque(n for n in sorted(notes, key=lambda n: n.seq) if n.seq >= seq)
    buf = b""
    base = start  # buf holds the bytes [base, base + len(buf))
    pos = start
    while pos < stop_offset:
        i = pos - base
        nl = buf.find(b"\n", i)
        if nl >= 0:
            line, end = buf[i : nl + 1], base + nl + 1
        else:
            have = base + len(buf)
            if have < stop_offset and have - pos < chunk:
                more = read(have, min(chunk, stop_offset - have))
                if not more:
                    break
                buf, base = buf[i:] + more, pos
                continue
            if have < stop_offset:
                # a line longer than a chunk: find its end, then read it in one go
                found = find_newline(read, have, stop_offset, chunk)
                end = stop_offset if found is None else found + 1
            else:
                end = stop_offset
            too_long = end - pos > MAX_LINE_BYTES  # stepped over: its ERROR note holds its place
            line = b"" if too_long else (buf[i:] if end <= have else read(pos, end - pos))
            buf, base = b"", end
        while ahead and ahead[0].at <= pos:
            note = ahead.popleft()
            yield note.entry()
            seq = max(seq, note.seq + 1)
        if line.strip():
            entry = parse(line, offset=pos, seq=seq, agent=agent, uri=uri)
            if entry is None:
                return  # changed under us: the caller's prefix check handles it
            yield entry
            seq += 1
        pos = end
    for note in ahead:
        if note.at <= stop_offset:
            yield note.entry()


# --------------------------------------------------------------------------- the log


class InboxLog:
    """Sequence numbers, pending events, window and acknowledgements of one inbox.

    Args:
        agent: the inbox owner (for synthesised ids).
        uri: ``inbox://AGENT`` (named in messages and summaries).
        cursor: the persisted position to resume from (a fresh one by default).
        ledger: what consumers did, by id (kept in the cursor file).
        window, mem_cap: see :data:`WINDOW`, :data:`MEM_CAP`.
        parse: turns a line into its event (:func:`parse_line`: an inbox message).
        item_uri: where one event is read by id (``{id}`` is replaced), named in the gap summary.
        noun: what an event is called in the gap summary ("message", "delivery").
    """

    def __init__(
        self,
        agent: str,
        uri: str,
        cursor: Cursor | None = None,
        ledger: Ledger | None = None,
        *,
        window: int = WINDOW,
        mem_cap: int | None = None,
        parse: LineParser = parse_line,
        item_uri: str | None = None,
        noun: str = "message",
    ) -> None:
        if window < 1:
            raise ValueError(f"window must be at least 1, got {window!r}")
        self.agent = agent
        self.uri = uri
        self._parse = parse
        self.item_uri = item_uri if item_uri is not None else f"{uri}/message/{{id}}"
        self.noun = noun
        self.window_size = window
        self.mem_cap = max(window, mem_cap if mem_cap is not None else 2 * window)
        self.cursor = cursor or Cursor()
        self.ledger = ledger or Ledger()
        self.head = self.cursor.offset
        """Byte just past the last consumed line."""
        self.next_seq = self.cursor.seq
        """``seq`` the next event gets."""
        self.deferral: Deferral | None = None
        self.version = 0
        """Bumped by every change the cursor file must record."""
        self.mem: dict[int, Entry] = {}
        self._order: deque[int] = deque()  # seqs of ``mem``, ascending; may hold stale (acknowledged) ones
        self._ahead: deque[Note] = deque(n for n in self.cursor.notes if n.seq >= self.cursor.seq)
        self._stopped: tuple[int, str] | None = None
        self._stopped_end = 0

    # ------------------------------------------------------------------ queries

    def pending_count(self) -> int:
        cur = self.cursor
        return (self.next_seq - cur.seq) - cur.acked.count_in(cur.seq, self.next_seq)

    def hidden_count(self) -> int:
        """Pending events not in memory (all older than everything in memory)."""
        return max(0, self.pending_count() - len(self.mem))

    def is_pending(self, seq: int) -> bool:
        return self.cursor.seq <= seq < self.next_seq and seq not in self.cursor.acked

    def lowest_in_mem(self) -> int | None:
        while self._order and self._order[0] not in self.mem:
            self._order.popleft()
        return self._order[0] if self._order else None

    def oldest(self, n: int) -> list[Entry]:
        """The oldest ``n`` pending events held in memory, by ``seq``."""
        self.lowest_in_mem()  # drops the acknowledged ones from the front
        out: list[Entry] = []
        for s in self._order:
            entry = self.mem.get(s)
            if entry is not None:
                out.append(entry)
                if len(out) == n:
                    break
        return out

    def window(self) -> list[Entry]:
        """The newest ``window`` pending events, urgent messages first, then by ``seq``."""
        shown: list[Entry] = []
        for s in reversed(self._order):
            entry = self.mem.get(s)
            if entry is not None:
                shown.append(entry)
                if len(shown) == self.window_size:
                    break
        shown.reverse()
        return [e for e in shown if e.urgent] + [e for e in shown if not e.urgent]

    def gap(self, shown: list[Entry] | None = None) -> JSONObject | None:
        """What the window does not show (the pending events just below it), or None."""
        shown = self.window() if shown is None else shown
        missing = self.pending_count() - len(shown)
        if missing <= 0:
            return None
        floor = min(e.seq for e in shown) if shown else self.next_seq
        first = self.cursor.acked.first_missing(self.cursor.seq)
        last = self.cursor.acked.last_missing(floor)
        # Urgent ones just below the window (those held in memory): named, so they are not missed.
        urgent = [
            e.id
            for s in reversed(self._order)
            if s < floor and (e := self.mem.get(s)) is not None and e.urgent
        ]
        message = (
            f"{missing} older pending {self.noun}(s) (seq {first}..{last}) are not shown; they stay on "
            "disk and come back here as you acknowledge the ones shown (ack / ack_through); "
            f"each is readable by id at {self.item_uri}"
        )
        gap: JSONObject = {"count": missing, "first_seq": first, "last_seq": last, "message": message}
        if urgent:
            gap["urgent_ids"] = [*urgent[:GAP_URGENT_IDS]]
            gap["message"] = message + (
                f"; urgent among them: {', '.join(repr(i) for i in urgent[:GAP_URGENT_IDS])}"
            )
        return gap

    def body(self) -> bytes:
        """The ``inbox://AGENT`` resource body: ``{"events": [...], "pending": N, "gap"?: {...}}``."""
        shown = self.window()
        doc: JSONObject = {"events": [e.event for e in shown], "pending": self.pending_count()}
        gap = self.gap(shown)
        if gap is not None:
            doc["gap"] = gap
        return orjson.dumps(doc)

    def pending_by_id(self, msg_id: str) -> list[Entry]:
        """Pending events in memory with this id, by ``seq``."""
        return sorted((e for e in self.mem.values() if e.id == msg_id), key=lambda e: e.seq)

    def needs_refill(self) -> bool:
        """The window is short and older pending events wait on disk: walk the file and :meth:`refill`."""
        return len(self.mem) < self.window_size and self.hidden_count() > 0

    # ------------------------------------------------------------------ reading the file

    def feed(self, data: bytes, *, at_eof: bool) -> FeedResult:
        """Consume the whole lines of ``data`` (the file's bytes starting at :attr:`head`).

        Stops at the first line that is not a JSON object (``stop``), or at an
        incomplete last line (``stop``, when ``at_eof``: ``data`` reaches the
        current end of the file). A last line without its newline that is a
        complete JSON object is consumed.
        """
        out = FeedResult()
        pos = 0
        n = len(data)
        self._stopped = None
        while pos < n:
            nl = data.find(b"\n", pos)
            if nl < 0:
                if not at_eof:
                    out.long_line = pos == 0
                    break
                line = data[pos:]
                if not line.strip():
                    break  # trailing whitespace: wait for more
                if len(line) > 64 * INLINE_LINE_BYTES or not self._take(out, line, self.head + pos):
                    out.stop = (self.head + pos, "an incomplete last line")
                    break
                pos = n
                break
            end = nl + 1
            line = data[pos:end]
            if end - pos > MAX_LINE_BYTES:
                skipped = self._skip(self.head + pos, self.head + end)
                if skipped is not None:
                    out.entries.append(skipped)
            elif line.strip() and not self._take(out, line, self.head + pos):
                out.stop = (self.head + pos, "a line that is not a JSON object")
                break
            pos = end
        out.consumed = pos
        self._stopped_end = self.head + n
        self.head += pos
        self._stopped = out.stop
        return out

    def skip_long_line(self, end: int) -> Entry | None:
        """The line from :attr:`head` to ``end`` is over ``MAX_LINE_BYTES``: step over it with an ERROR.

        Returns the ERROR raised (None when a restart walk met the one raised before).
        """
        entry = self._skip(self.head, end)
        self.head = end
        return entry

    def _skip(self, start: int, end: int) -> Entry | None:
        earlier = self._adopt_ahead(start)
        if any(e.offset == start for e in earlier):
            return None
        note = Note(
            self.next_seq,
            start,
            (
                f"the line at bytes {start}..{end} of the inbox is {end - start} bytes, over the "
                f"{MAX_LINE_BYTES // (1024 * 1024)} MiB limit; it was skipped (split it into smaller messages)"
            ),
        )
        return self._add_note(note)

    def finish_drain(self) -> list[Entry]:
        """End of one drain (one wake-up): count a deferral and raise its ERROR on the Nth time.

        Returns the ERROR events that became pending (including notes a
        restart walk reached).
        """
        raised = self._adopt_ahead(None)
        stop = self._stopped
        if stop is None:
            self.deferral = None
        else:
            offset, reason = stop
            prev = self.deferral
            same = prev is not None and prev.offset == offset
            if (
                same
                and reason == "an incomplete last line"
                and prev is not None
                and prev.end != self._stopped_end
            ):
                same = False  # still growing: a writer is in the middle of it
            attempts = prev.attempts + 1 if same and prev is not None else 1
            self.deferral = Deferral(offset, attempts, reason, self._stopped_end)
            if attempts == DEFER_WARN_AFTER:
                raised.append(
                    self._raise_note(
                        f"byte {offset} of the inbox is {reason} after {attempts} attempts; delivery waits "
                        "there: finish or fix that line (each line must be one JSON object)"
                    )
                )
        self._advance()
        return raised

    def _adopt_ahead(self, upto: int | None) -> list[Entry]:
        """Notes a restart walk reaches (raised at or before byte ``upto``; all when None)."""
        out = []
        while self._ahead and (upto is None or self._ahead[0].at <= upto):
            note = self._ahead.popleft()
            self.next_seq = max(self.next_seq, note.seq + 1)
            if self.is_pending(note.seq):
                out.append(self._adopt(note.entry()))
        return out

    def _take(self, out: FeedResult, line: bytes, offset: int) -> bool:
        """Consume the line at ``offset`` (a pending event joins ``out.entries``); False: not a JSON object."""
        parsed = self._message(line, offset)
        if isinstance(parsed, Entry):
            out.entries.append(parsed)
        return parsed is not None

    def _message(self, line: bytes, offset: int) -> Entry | object | None:
        """The pending entry for a line; ``_ACKED`` if its seq was acknowledged; None if not an object."""
        if self._ahead:
            self._adopt_ahead(offset)
        entry = self._parse(line, offset=offset, seq=self.next_seq, agent=self.agent, uri=self.uri)
        if entry is None:
            return None
        self.next_seq += 1
        if not self.is_pending(entry.seq):
            return _ACKED
        return self._adopt(entry)

    def _adopt(self, entry: Entry) -> Entry:
        self.mem[entry.seq] = entry
        self._order.append(entry.seq)
        while len(self.mem) > self.mem_cap:
            self.mem.pop(self._order.popleft(), None)
        if self.next_seq > self.cursor.top:
            self.cursor.top = self.next_seq + SEQ_RESERVE
            self.version += 1
        return entry

    def touch(self) -> None:
        """Something the cursor file records changed outside this class (the ledger)."""
        self.version += 1

    def error(self, message: str) -> Entry:
        """Raise an in-band ERROR now (at :attr:`head`); persist the cursor before showing it."""
        return self._raise_note(message)

    def gap_note(self, message: str, fields: Mapping[str, JSONValue]) -> Entry:
        """Raise an in-band GAP now (events fell off unacknowledged; ``fields`` name them).

        Persist the cursor before showing it, as for :meth:`error`.
        """
        return self._add_note(Note(self.next_seq, self.head, message, "GAP", dict(fields)))

    def _raise_note(self, message: str) -> Entry:
        return self._add_note(Note(self.next_seq, self.head, message))

    def _add_note(self, note: Note) -> Entry:
        self.next_seq += 1
        self.cursor.notes.append(note)
        live = [n for n in self.cursor.notes if self.is_pending(n.seq)]
        for old in live[: max(0, len(live) - NOTES_CAP)]:
            self._ack_one(old.seq)
        entry = self._adopt(note.entry())
        self.version += 1
        return entry

    # ------------------------------------------------------------------ acknowledgements

    def ack_seqs(self, seqs: Iterable[int]) -> list[int]:
        """Acknowledge exactly these events; returns the seqs newly acknowledged (others were already).

        Raises:
            AckError: a seq was never handed out; nothing is acknowledged.
        """
        wanted = sorted(set(seqs))
        bad = [s for s in wanted if s >= self.next_seq or s < 1]
        if bad:
            raise AckError(
                f"seq {bad[0]} is not an event of {self.uri} (the newest is {self.next_seq - 1}); "
                f"acknowledge seqs you read from {self.uri}"
            )
        done = [s for s in wanted if self.is_pending(s)]
        for s in done:
            self._ack_one(s)
        if done:
            self._ack_notes_below(done[-1])
            self._advance()
        return done

    def ack_through(self, seq: int) -> int:
        """Acknowledge every pending event up to ``seq`` (shown or not); returns how many."""
        seq = min(seq, self.next_seq - 1)
        if seq < self.cursor.seq:
            return 0
        before = self.pending_count()
        for s in [s for s in self.mem if s <= seq]:
            self._ack_one(s)
        self.cursor.acked.add_range(self.cursor.seq, seq + 1)
        self.version += 1
        self._advance()
        return before - self.pending_count()

    def resolve_id(self, msg_id: str, seq: int | None = None) -> list[Entry]:
        """The pending events in memory that ``ack(id)`` (or ``ack(id, seq)``) means.

        Raises:
            AckError: the id names several pending messages and no ``seq`` chose one.
        """
        return choose_by_id(self.pending_by_id(msg_id), msg_id, seq)

    def _ack_one(self, s: int) -> None:
        entry = self.mem.pop(s, None)
        self.cursor.acked.add(s)
        self.version += 1
        if entry is not None and entry.kind == "MESSAGE":
            Ledger.put(self.ledger.senders, entry.id, entry.sender)

    def _ack_notes_below(self, seq: int) -> None:
        # An ERROR counts as read once the consumer acknowledged something after it.
        for note in self.cursor.notes:
            if note.seq < seq and self.is_pending(note.seq):
                self._ack_one(note.seq)

    def _advance(self) -> None:
        """Move the cursor to the first pending event when that is known without reading the file."""
        if self.hidden_count() != 0:
            return
        low = self.lowest_in_mem()
        if low is None:
            self._move(self.head, self.next_seq)
        else:
            self._move(self.mem[low].offset, low)

    def _move(self, offset: int, seq: int) -> None:
        cur = self.cursor
        if seq < cur.seq or offset < cur.offset or (seq, offset) == (cur.seq, cur.offset):
            return
        cur.offset, cur.seq = offset, seq
        cur.acked.trim_below(seq)
        # Acknowledged notes above the position stay: their seqs are part of the numbering a restart replays.
        cur.notes = [n for n in cur.notes if n.seq >= seq]
        cur.check = cur.anchor = None
        self.version += 1

    # ------------------------------------------------------------------ refill from disk

    def refill_request(self) -> tuple[int, int, int, int | None]:
        """(start offset, start seq, stop offset, seq below which to take) for :func:`walk`."""
        low = self.lowest_in_mem()
        stop = self.mem[low].offset if low is not None else self.head
        return self.cursor.offset, self.cursor.seq, stop, low

    def refill(self, walked: Iterable[Entry], *, below: int | None) -> list[Entry]:
        """Take the newest pending events of a walk, below ``below`` (the lowest seq in memory).

        Also moves the cursor to the first pending event the walk met. Returns
        the events added (ascending): readers have not seen them in the window.
        """
        want = self.mem_cap - len(self.mem)
        keep: deque[Entry] = deque(maxlen=want) if want > 0 else deque(maxlen=0)
        first: Entry | None = None
        for entry in walked:
            if below is not None and entry.seq >= below:
                break
            if entry.seq in self.mem or not self.is_pending(entry.seq):
                continue
            if first is None:
                first = entry
            keep.append(entry)
        if first is not None:
            self._move(first.offset, first.seq)
        added = list(keep)
        for entry in reversed(added):
            self.mem[entry.seq] = entry
            self._order.appendleft(entry.seq)
        self._advance()
        return added

    # ------------------------------------------------------------------ rewrites

    def restart_at(self, offset: int, message: str) -> Entry:
        """The file no longer matches what was consumed: resume at ``offset`` with fresh numbers.

        Everything after ``offset`` becomes pending again (duplicates with the
        same ids, never a loss), numbered from above every seq handed out
        before. Returns the ERROR that says so.
        """
        base = max(self.cursor.top, self.next_seq) + 1
        self.mem.clear()
        self._order.clear()
        self._ahead.clear()
        self.deferral = None
        self._stopped = None
        self.cursor = Cursor(offset=offset, seq=base, top=base + SEQ_RESERVE)
        self.head = offset
        self.next_seq = base
        self.version += 1
        return self._raise_note(message)

    def snapshot(self) -> CursorSnapshot:
        """The cursor file's content (``check``/``anchor`` are filled in by the writer, who reads the file)."""
        cur = self.cursor
        return {
            "version": 1,
            "offset": cur.offset,
            "seq": cur.seq,
            "acked": cur.acked.ranges(),
            "notes": [n.to_json() for n in cur.notes],
            "top": cur.top,
            "check": cur.check,
            "anchor": cur.anchor,
            "ledger": self.ledger.to_json(),
        }


def choose_by_id(found: list[Entry], msg_id: str, seq: int | None) -> list[Entry]:
    """The pending messages with ``msg_id`` an ack/handle means: the one at ``seq``, else all (one, or none).

    Raises:
        AckError: several pending messages have the id and no ``seq`` chose one.
    """
    if seq is not None:
        return [e for e in found if e.seq == seq]
    if len(found) > 1:
        listed = ", ".join(f"seq {e.seq}: {e.text[:40]!r}" for e in found[:5])
        raise AckError(
            f"id {msg_id!r} names {len(found)} pending messages ({listed}); "
            "pass seq to choose one, or seqs=[...] to acknowledge several"
        )
    return found


_ACKED: Final = object()  # feed: the line's seq was acknowledged (a restart walk): consumed, not pending


def cursor_from_json(doc: Mapping[str, object]) -> tuple[Cursor, Ledger]:
    """Parse the cursor file (see :meth:`InboxLog.snapshot`).

    Raises:
        ValueError: a field has the wrong shape (the message names it).
    """

    def need_int(name: str, value: object, minimum: int) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
        return value

    offset = need_int("offset", doc.get("offset", 0), 0)
    seq = need_int("seq", doc.get("seq", 1), 1)
    acked = IntervalSet()
    for pair in _list_field(doc, "acked"):
        if not (isinstance(pair, list | tuple) and len(pair) == 2):
            raise ValueError(f"acked must be a list of [start, end] pairs, got {pair!r}")
        acked.add_range(need_int("acked start", pair[0], 0), need_int("acked end", pair[1], 0))
    notes = []
    for raw in _list_field(doc, "notes"):
        if not isinstance(raw, Mapping):
            raise ValueError(f"notes must be objects, got {raw!r}")
        seq_n = need_int("note seq", raw.get("seq"), 1)
        note_type = raw.get("type", "ERROR")
        if note_type not in ("ERROR", "GAP"):
            raise ValueError(f"note type must be 'ERROR' or 'GAP', got {note_type!r:.40}")
        fields = raw.get("fields")
        if fields is not None and not isinstance(fields, dict):
            raise ValueError(f"note fields must be an object, got {fields!r:.80}")
        notes.append(
            Note(
                seq_n,
                need_int("note at", raw.get("at"), 0),
                str(raw.get("message", "")),
                "GAP" if note_type == "GAP" else "ERROR",
                fields,
            )
        )
    top = need_int("top", doc.get("top", 0), 0)
    check = doc.get("check")
    anchor = doc.get("anchor")
    cursor = Cursor(
        offset=offset,
        seq=seq,
        acked=acked,
        notes=sorted(notes, key=lambda n: n.seq),
        top=max(top, seq),
        check=check if isinstance(check, str) else None,
        anchor=anchor if isinstance(anchor, str) else None,
    )
    raw_ledger = doc.get("ledger")
    ledger = Ledger(raw_ledger if isinstance(raw_ledger, Mapping) else None)
    return cursor, ledger


def _list_field(doc: Mapping[str, object], name: str) -> list[object]:
    """``doc[name]`` as a list (absent or empty: ``[]``); anything else is a ``ValueError`` naming it."""
    value = doc.get(name) or []
    if not isinstance(value, list):
        raise ValueError(f"{name} must be a list, got {value!r:.80}")
    return value
