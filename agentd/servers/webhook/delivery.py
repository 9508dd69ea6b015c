"""What an authenticated request means, and how a delivery is stored and shown (pure, no I/O).

:func:`interpret` runs after :mod:`~agentd.servers.webhook.verify` passed: it
reads the body (:func:`parse_body`: JSON stays JSON; GitHub's and Slack's
forms are read as their documented fields; any other body, a form to a
generic source, text, XML, is kept as UTF-8 text with its content type),
finds the delivery id, the dedupe keys and the event name for the source's
kind, keeps the headers worth keeping, and returns one of:

* :class:`Accepted`: store it (durably) and answer 200;
* :class:`Reply`: answer at once and store nothing (GitHub's ``ping``,
  Slack's ``url_verification`` challenge);
* :class:`~agentd.servers.webhook.verify.Refusal`: answer 400 and store nothing.

A stored delivery is one JSON line (:func:`encode_record`): ``v``, ``id``,
``key`` (the dedupe key), ``source``, ``kind``, ``event``, ``received`` (UTC,
ISO 8601), ``at`` (Unix seconds), ``headers``, ``body``; ``digest`` (the
replay key of a signed body: source, event and body hashed, rfcs/0374) and
``text: true`` (the body is text, not JSON) when they apply. In the event log
(``webhook://NAME/events``) a delivery is a ``DELIVERY`` event
(:func:`log_event`: ``id``, ``source``, ``event``, ``received``,
``delivery_uri``) whose ``body`` is the whole body when it is small and a
bounded digest otherwise (``truncated: true``; the whole delivery is
``webhook://NAME/event/{id}``).

Hostile bodies: a body declared JSON that is not, nesting deeper than
:data:`MAX_DEPTH` levels, text that is not UTF-8, an idempotency key longer
than :data:`MAX_KEY` are refused (400) before anything is stored, so a model
never reads them.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final
from urllib.parse import parse_qsl

import orjson

from agentd.core.jsonvalue import JSONObject, JSONValue
from agentd.servers._inboxlog import Entry, LineParser
from agentd.servers.webhook.sources import SourceSpec
from agentd.servers.webhook.verify import Refusal

__all__ = [
    "HEADER_VALUE_CAP",
    "INLINE_BODY",
    "MAX_DEPTH",
    "MAX_KEY",
    "Accepted",
    "Record",
    "Reply",
    "decode_record",
    "depth_of",
    "encode",
    "encode_record",
    "event_uri",
    "interpret",
    "log_event",
    "make_parser",
    "parse_body",
    "stored_record",
    "summarize",
    "valid_id",
]

MAX_DEPTH: Final = 64
"""Deepest JSON nesting stored: real payloads stay under 10; deeper is an attack on whoever parses it next."""
HEADER_VALUE_CAP: Final = 1024
"""Characters of one kept header value."""
INLINE_BODY: Final = 8 * 1024
"""Bytes of JSON body shown whole in the event log; a bigger body is shown as a digest."""
FORM_FIELDS: Final = 1000
"""Fields of a form body parsed (Slack's slash commands send about 12)."""
NAME_CAP: Final = 64
"""Characters of an event name (GitHub's longest is under 40)."""
MAX_KEY: Final = HEADER_VALUE_CAP
"""Characters of an idempotency key: compared whole, so a longer one is refused (400), never cut
(two keys sharing their first 1,024 characters are two deliveries). Stripe's keys are at most 255."""
_FORM: Final = "application/x-www-form-urlencoded"

_ID_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_NAME_RE: Final = re.compile(r"[A-Za-z0-9._:/-]{1,64}")

#: Headers kept with a delivery, per kind (lowercase); never credentials or signatures.
KEPT_HEADERS: Final[Mapping[str, tuple[str, ...]]] = {
    "github": (
        "x-github-event",
        "x-github-delivery",
        "x-github-hook-id",
        "x-github-hook-installation-target-type",
        "x-github-hook-installation-target-id",
    ),
    "slack": ("x-slack-request-timestamp", "x-slack-retry-num", "x-slack-retry-reason"),
    "alertmanager": (),
    "generic": (),
}
_COMMON_HEADERS: Final = ("content-type", "user-agent")


def valid_id(value: str) -> bool:
    """A delivery id that can stand in a URI as is: ``[A-Za-z0-9][A-Za-z0-9._:-]{0,127}``."""
    return bool(_ID_RE.fullmatch(value))


def event_uri(source: str, delivery_id: str) -> str:
    return f"webhook://{source}/event/{delivery_id}"


@dataclass(frozen=True, slots=True)
class Accepted:
    """An authentic, well-formed delivery: store it, then answer 200."""

    delivery_id: str
    """URI-safe (:func:`valid_id`); the store makes it unique by suffixing ``-2``, ``-3``… if needed."""
    dedupe_key: str | None
    """A repeat of this key within the source's window is the sender's retry (answered 200, not stored)."""
    event: str
    body: JSONValue
    headers: dict[str, str]
    digest: str | None = None
    """The replay key of a signed body (source, event, raw body hashed): the same signed body again,
    under any delivery id, is the same delivery (rfcs/0374). None for token-authenticated sources."""
    text: bool = False
    """``body`` is the request's text (a form, XML, plain text: its content type is a kept header)."""


@dataclass(frozen=True, slots=True)
class Reply:
    """Authentic, answered at once, not a delivery (``why``: ``ping`` or ``url_verification``)."""

    status: int
    body: JSONObject
    why: str


def _malformed(reason: str) -> Refusal:
    return Refusal(400, "malformed", reason)


def depth_of(value: object, limit: int = MAX_DEPTH) -> int:
    """Nesting depth of a JSON value (scalars 0), counting no further than ``limit + 1``. Iterative."""
    if not isinstance(value, dict | list):
        return 0
    deepest = 0
    stack: list[tuple[dict[object, object] | list[object], int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > deepest:
            deepest = depth
            if deepest > limit:
                return deepest
        for child in node.values() if isinstance(node, dict) else node:
            if isinstance(child, dict | list):
                stack.append((child, depth + 1))
    return deepest


def _json(data: bytes, what: str) -> JSONValue | Refusal:
    try:
        value: JSONValue = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        return _malformed(f"{what} is not valid JSON in UTF-8 ({str(exc)[:120]})")
    # Each level opens with a bracket: fewer brackets than the limit need no walk.
    if data.count(b"{") + data.count(b"[") > MAX_DEPTH and depth_of(value) > MAX_DEPTH:
        return _malformed(f"{what} nests deeper than {MAX_DEPTH} levels")
    return value


def _is_json(media: str) -> bool:
    return media == "application/json" or media.endswith("+json")


def parse_body(
    body: bytes, content_type: str, *, empty_ok: bool = False, forms: bool = True, text: bool = False
) -> JSONValue | Refusal:
    """The body as JSON: a JSON document, or with ``forms`` a form (``application/x-www-form-urlencoded``)
    as an object of its fields, its ``payload`` field parsed as JSON (GitHub's and Slack's form bodies).

    With ``text``, a body that is not JSON (a form when ``forms`` is off, XML, plain text, or no
    content type and not JSON) is returned as a :class:`Text`: UTF-8 text, kept as it came. A body
    whose content type says JSON must be JSON.
    """
    if not body.strip():
        return None if empty_ok else _malformed("the body is empty; send a JSON body")
    media = content_type.split(";", 1)[0].strip().lower()
    if media == _FORM and forms:
        return _form(body)
    if not text or _is_json(media):
        return _json(body, "the body")
    if not media:
        value = _json(body, "the body")
        if not isinstance(value, Refusal):
            return value  # a sender that names no type and sends JSON
    try:
        return Text(body.decode("utf-8"))
    except UnicodeDecodeError:
        return _malformed(
            f"the body ({media or 'no content type'}) is neither JSON nor UTF-8 text; send JSON or UTF-8 text"
        )


class Text(str):
    """A body kept as text (:func:`parse_body` with ``text``): stored as a JSON string, marked ``text``."""

    __slots__ = ()


def _form(body: bytes) -> JSONValue | Refusal:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return _malformed("the form body is not UTF-8")
    try:
        pairs = parse_qsl(text, keep_blank_values=True, max_num_fields=FORM_FIELDS)
    except ValueError as exc:
        return _malformed(f"the form body cannot be parsed ({exc})")
    form: dict[str, str] = {}
    for key, value in pairs:
        form.setdefault(key, value)
    if "payload" in form:
        return _json(form["payload"].encode("utf-8", "surrogatepass"), "the form's payload field")
    out: JSONObject = {**form}
    return out


def _name(value: object, fallback: str) -> str:
    """An event name as given, if it is a short token; else ``fallback``."""
    if isinstance(value, str) and _NAME_RE.fullmatch(value):
        return value
    return fallback


def replay_key(source: str, event: str, body: bytes) -> str:
    """The replay key of a signed body (:attr:`Accepted.digest`)."""
    return "body:" + _hash(source.encode(), event.encode(), body)


def _hash(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()


def kept_headers(spec: SourceSpec, headers: Mapping[str, str]) -> dict[str, str]:
    """The headers stored with a delivery (capped), never ``Authorization`` or a signature."""
    names = [*_COMMON_HEADERS, *KEPT_HEADERS[spec.kind]]
    if spec.kind == "generic":
        names.append(spec.id_header.lower())
        if spec.event_header:
            names.append(spec.event_header.lower())
    out: dict[str, str] = {}
    for name in names:
        value = headers.get(name)
        if value is not None and name not in out:
            out[name] = value[:HEADER_VALUE_CAP]
    return out


def interpret(
    spec: SourceSpec, headers: Mapping[str, str], body: bytes, *, now: float, nonce: str
) -> Accepted | Reply | Refusal:
    """What an authenticated request is (see the module docstring).

    Args:
        headers: lowercase names.
        now: Unix seconds (names alertmanager deliveries).
        nonce: random hex, the id of a generic delivery sent without an idempotency key.
    """
    content_type = headers.get("content-type", "")
    kept = kept_headers(spec, headers)
    if spec.kind == "github":
        event = headers.get("x-github-event", "").strip()
        delivery = headers.get("x-github-delivery", "").strip()
        if not _NAME_RE.fullmatch(event):
            return _malformed("X-GitHub-Event is missing or not an event name")
        if not valid_id(delivery):
            return _malformed("X-GitHub-Delivery is missing or not a delivery GUID")
        parsed = parse_body(body, content_type, text=True)
        if isinstance(parsed, Refusal):
            return parsed
        if event == "ping":
            zen = parsed.get("zen") if isinstance(parsed, dict) else None
            return Reply(
                200, {"ok": True, "ping": True, "zen": zen if isinstance(zen, str) else None}, "ping"
            )
        return _accepted(spec, delivery, delivery, event, parsed, kept, body)
    if spec.kind == "slack":
        parsed = parse_body(body, content_type)
        if isinstance(parsed, Refusal):
            return parsed
        if not isinstance(parsed, dict):
            return _malformed("a Slack body is a JSON object or a form")
        kind = parsed.get("type")
        if kind == "url_verification":
            challenge = parsed.get("challenge")
            if not isinstance(challenge, str) or len(challenge) > 512:
                return _malformed("url_verification without a usable challenge")
            return Reply(200, {"challenge": challenge}, "url_verification")
        if kind == "event_callback":
            event_id = parsed.get("event_id")
            if not isinstance(event_id, str) or not valid_id(event_id):
                return _malformed("an event_callback without a usable event_id")
            inner = parsed.get("event")
            name = _name(inner.get("type") if isinstance(inner, dict) else None, "event_callback")
            return _accepted(spec, event_id, event_id, name, parsed, kept, body)
        # Slash commands, interactivity, rate-limit notices: no event id; a trigger id when there is one.
        trigger = parsed.get("trigger_id")
        name = "slash_command" if "command" in parsed else _name(kind, "slack")
        if isinstance(trigger, str) and valid_id(trigger):
            return _accepted(spec, trigger, trigger, name, parsed, kept, body)
        digest = _hash(body)
        return _accepted(spec, f"s-{digest[:32]}", f"sha256:{digest}", name, parsed, kept, body)
    if spec.kind == "alertmanager":
        parsed = parse_body(body, content_type)
        if isinstance(parsed, Refusal):
            return parsed
        if not isinstance(parsed, dict) or not isinstance(parsed.get("alerts"), list):
            return _malformed("an Alertmanager notification is a JSON object with an 'alerts' list")
        digest = _hash(body)
        event = _name(parsed.get("status"), "notification")
        return Accepted(f"am-{int(now * 1000)}-{digest[:12]}", f"sha256:{digest}", event, parsed, kept)
    # generic: any body its sender sends; JSON stays JSON, anything else is text
    key = headers.get(spec.id_header.lower(), "").strip()
    if len(key) > MAX_KEY:
        return _malformed(
            f"{spec.id_header} is {len(key)} characters; send a key of at most {MAX_KEY} (it is compared whole)"
        )
    parsed = parse_body(body, content_type, empty_ok=True, forms=False, text=True)
    if isinstance(parsed, Refusal):
        return parsed
    event = "delivery"
    if spec.event_header:
        event = _name(headers.get(spec.event_header.lower(), "").strip(), "delivery")
    if key:
        delivery = key if valid_id(key) else f"k-{_hash(key.encode('utf-8', 'surrogateescape'))[:32]}"
        return _accepted(spec, delivery, f"key:{key}", event, parsed, kept, body)
    return _accepted(spec, f"d-{nonce}", None, event, parsed, kept, body)


def _accepted(
    spec: SourceSpec,
    delivery_id: str,
    key: str | None,
    event: str,
    parsed: JSONValue,
    kept: dict[str, str],
    body: bytes,
) -> Accepted:
    """An :class:`Accepted`, with the replay key when the body is signed (an HMAC source)."""
    digest = replay_key(spec.name, event, body) if spec.secret is not None else None
    text = isinstance(parsed, Text)
    return Accepted(delivery_id, key, event, str(parsed) if text else parsed, kept, digest, text)


# --------------------------------------------------------------------------- stored form


_second: list[tuple[int, str]] = [(-1, "")]
"""The last whole second :func:`_iso` formatted (deliveries come many a second)."""


def _iso(at: float) -> str:
    """``at`` (Unix seconds) as UTC ISO 8601 to the millisecond, e.g. ``2026-12-02T13:04:05.123Z``:
    what ``datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")`` writes (its
    microseconds rounded half to even, then cut to milliseconds), the date part formatted once a second."""
    whole = math.floor(at)
    micros = round((at - whole) * 1e6)
    if micros >= 1_000_000:
        whole, micros = whole + 1, micros - 1_000_000
    last, text = _second[0]
    if whole != last:
        text = datetime.fromtimestamp(whole, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        _second[0] = (whole, text)
    return f"{text}.{micros // 1000:03d}Z"


def encode_record(spec: SourceSpec, accepted: Accepted, delivery_id: str, *, received_at: float) -> bytes:
    """The stored line of one delivery (``\\n``-terminated; orjson escapes every newline inside)."""
    return stored_record(spec, accepted, delivery_id, received_at=received_at)[1]


def stored_record(
    spec: SourceSpec, accepted: Accepted, delivery_id: str, *, received_at: float
) -> tuple[Record, bytes]:
    """The :class:`Record` of one delivery and its stored line (:func:`encode`)."""
    received = _iso(received_at)
    headers = {**accepted.headers}
    line = _line(
        delivery_id, accepted.dedupe_key, spec.name, spec.kind, accepted.event, received, received_at,
        headers, accepted.body, accepted.digest, accepted.text,
    )  # fmt: skip
    record = Record(
        delivery_id,
        accepted.dedupe_key,
        spec.name,
        spec.kind,
        accepted.event,
        received,
        received_at,
        headers,
        accepted.body,
        len(line),
        accepted.digest,
        accepted.text,
    )
    return record, line


def encode(record: Record) -> bytes:
    """A record as its stored line."""
    return _line(
        record.id, record.key, record.source, record.kind, record.event, record.received, record.at,
        record.headers, record.body, record.digest, record.text,
    )  # fmt: skip


def _line(
    delivery_id: str,
    key: str | None,
    source: str,
    kind: str,
    event: str,
    received: str,
    at: float,
    headers: dict[str, str],
    body: JSONValue,
    digest: str | None = None,
    text: bool = False,
) -> bytes:
    doc: JSONObject = {
        "v": 1,
        "id": delivery_id,
        "key": key,
        "source": source,
        "kind": kind,
        "event": event,
        "received": received,
        "at": at,
        "headers": {**headers},
        "body": body,
    }
    if digest is not None:
        doc["digest"] = digest
    if text:
        doc["text"] = True
    return orjson.dumps(doc) + b"\n"


@dataclass(frozen=True, slots=True)
class Record:
    """One stored delivery, read back."""

    id: str
    key: str | None
    source: str
    kind: str
    event: str
    received: str
    at: float
    headers: dict[str, str]
    body: JSONValue
    size: int
    digest: str | None = None
    text: bool = False

    def whole(self) -> JSONObject:
        """``webhook://NAME/event/{id}``: the delivery as a model reads it."""
        out: JSONObject = {
            "id": self.id,
            "source": self.source,
            "kind": self.kind,
            "event": self.event,
            "received": self.received,
            "uri": event_uri(self.source, self.id),
            "headers": {**self.headers},
            "body": self.body,
        }
        if self.text:
            out["format"] = "text"
            out["content_type"] = self.headers.get("content-type")
        return out


def decode_record(line: bytes) -> Record | None:
    """A stored line read back, or None when it is damaged (not what :func:`encode_record` wrote)."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or obj.get("v") != 1:
        return None
    rid, key, source, kind, event = (obj.get(k) for k in ("id", "key", "source", "kind", "event"))
    received, at, headers = obj.get("received"), obj.get("at"), obj.get("headers")
    if not (isinstance(rid, str) and valid_id(rid) and isinstance(source, str) and isinstance(kind, str)):
        return None
    if not (isinstance(event, str) and isinstance(received, str) and isinstance(at, int | float)):
        return None
    if key is not None and not isinstance(key, str):
        return None
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        return None
    digest, text = obj.get("digest"), obj.get("text", False) is True
    if digest is not None and not isinstance(digest, str):
        return None
    body = obj.get("body")
    if text and not isinstance(body, str):
        return None
    return Record(rid, key, source, kind, event, received, float(at), headers, body, len(line), digest, text)


def _prune(value: JSONValue, depth: int, keys: int, items: int, chars: int) -> JSONValue:
    if isinstance(value, str):
        return value if len(value) <= chars else value[:chars] + "…"
    if isinstance(value, dict):
        if depth <= 0:
            return f"{{… {len(value)} keys}}"
        out: JSONObject = {}
        for n, (k, v) in enumerate(value.items()):
            if n == keys:
                out["…"] = f"{len(value) - keys} more keys"
                break
            out[k[:chars]] = _prune(v, depth - 1, keys, items, chars)
        return out
    if isinstance(value, list):
        if depth <= 0 or items == 0:
            return f"[… {len(value)} items]"
        kept: list[JSONValue] = [_prune(v, depth - 1, keys, items, chars) for v in value[:items]]
        if len(value) > items:
            kept.append(f"… {len(value) - items} more items")
        return kept
    return value


#: Ever tighter digests of a big body: (depth, keys per object, items per list, characters per string).
_DIGESTS: Final = ((4, 64, 8, 256), (3, 32, 4, 128), (2, 16, 2, 64), (1, 16, 0, 32))


def summarize(body: JSONValue, budget: int = INLINE_BODY) -> tuple[JSONValue, bool]:
    """``body`` whole when its JSON fits ``budget`` bytes, else a bounded digest; and whether it was cut."""
    if len(orjson.dumps(body)) <= budget:
        return body, False
    for shape in _DIGESTS:
        digest = _prune(body, *shape)
        if len(orjson.dumps(digest)) <= budget:
            return digest, True
    return None, True


def log_event(record: Record, *, seq: int) -> JSONObject:
    """The ``DELIVERY`` event of ``webhook://NAME/events``."""
    # The stored line holds the body's JSON: a short line has a short body (no need to measure it).
    body, cut = (record.body, False) if 0 < record.size <= INLINE_BODY else summarize(record.body)
    event: JSONObject = {
        "seq": seq,
        "type": "DELIVERY",
        "id": record.id,
        "source": record.source,
        "event": record.event,
        "received": record.received,
        "delivery_uri": event_uri(record.source, record.id),
        "body": body,
    }
    if cut:
        event["truncated"] = True
        event["size"] = record.size
    if record.text:
        event["format"] = "text"
        event["content_type"] = record.headers.get("content-type")
    return event


def make_parser(
    on_record: Callable[[int, int, Record | None], None],
    prepared: Callable[[int], Record | None] = lambda offset: None,
) -> LineParser:
    """An :class:`~agentd.servers._inboxlog.InboxLog` line parser for the store's lines.

    ``on_record(offset, end, record)`` sees every line (None: damaged), pending or not, so the
    store can index it. A damaged line becomes an ``ERROR`` event that names its bytes; it is
    never a stop (the store is the only writer: a damaged line is the disk's doing).
    ``prepared(offset)``: the record the store just wrote at ``offset``, if it has it (no re-parse).
    """

    def parse(line: bytes, *, offset: int, seq: int, agent: str, uri: str) -> Entry | None:
        end = offset + len(line)
        record = prepared(offset)
        if record is None:
            record = decode_record(line)
        on_record(offset, end, record)
        if record is None:
            message = (
                f"the stored line at bytes {offset}..{end} of {uri} cannot be read (damaged on disk); "
                "it is skipped"
            )
            event: JSONObject = {"seq": seq, "type": "ERROR", "id": f"damaged-{offset}", "message": message}
            return Entry(seq, "ERROR", offset, end, f"damaged-{offset}", False, None, event, message)
        shown = log_event(record, seq=seq)
        text = f"{record.source} {record.event} {record.id}"
        return Entry(seq, "MESSAGE", offset, end, record.id, False, None, shown, text)

    return parse
