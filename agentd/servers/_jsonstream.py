"""Incremental parser for a stream of concatenated JSON values.

``kubectl get -w -o json`` writes one pretty-printed JSON object per watch
event, back to back, with no framing: an object may be split across pipe
reads and one read may hold several objects. :class:`JsonStreamParser` turns
such a byte stream into whole values as soon as each one is complete.

The parser scans each byte once (it keeps its nesting depth and string state
between chunks, so a value split into *n* chunks costs O(total size), not
O(n × size)) and decodes a value with orjson only when its closing bracket
arrives. It is pure and synchronous: feed it bytes, get values back.

Only objects and arrays are accepted at the top level. Anything else there
(stray text, a bare number) is reported as a :class:`Malformed` item, and so
is a complete-looking value that does not decode; parsing then resumes at the
next ``{`` or ``[``, so one bad value never loses the ones after it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import orjson

from agentd.core.jsonvalue import JSONValue, loads

__all__ = ["MAX_VALUE_BYTES", "JsonStreamParser", "Malformed"]

MAX_VALUE_BYTES = 64 * 1024 * 1024
"""Largest single value the parser buffers. Kubernetes caps an object at about
1.5 MiB (etcd's request limit), so 64 MiB is far above anything legitimate and
only stops a runaway stream from growing memory without bound."""

_OPEN = frozenset(b"{[")
_WHITESPACE = b" \t\r\n"
# Regex searches skip runs of uninteresting bytes in C instead of a Python loop per byte.
_NEXT_OPEN = re.compile(rb"[{\[]")
_IN_STRING = re.compile(rb'["\\]')
_STRUCTURAL = re.compile(rb'["{}\[\]]')
_QUOTE = ord('"')
_BACKSLASH = ord("\\")
_EXCERPT = 80  # bytes of a malformed value quoted back in its reason


@dataclass(frozen=True, slots=True)
class Malformed:
    """A stretch of the stream that is not a well-formed top-level value.

    Attributes:
        reason: What was wrong, for an in-band ``ERROR`` event.
        size: How many bytes were discarded.
    """

    reason: str
    size: int


class JsonStreamParser:
    """Splits a byte stream of concatenated JSON objects/arrays into values.

    Example:
        >>> p = JsonStreamParser()
        >>> p.feed(b'{"a": 1}{"b"')
        [{'a': 1}]
        >>> p.feed(b': 2}')
        [{'b': 2}]
    """

    def __init__(self, *, max_value_bytes: int = MAX_VALUE_BYTES) -> None:
        self._buf = bytearray()
        self._scan = 0  # index in _buf of the first byte not yet scanned
        self._start = -1  # index of the current value's opening bracket, -1 between values
        self._depth = 0
        self._in_string = False
        self._escaped = False
        self._junk = 0  # bytes of stray top-level text since the last value
        self._max = max_value_bytes

    @property
    def pending(self) -> int:
        """Bytes buffered for a value that is not complete yet."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[JSONValue | Malformed]:
        """Consume ``data`` and return every value it completed, in order.

        Args:
            data: The next chunk of the stream, split anywhere (even inside a
                multi-byte UTF-8 character: structural bytes are ASCII and
                never occur inside one).

        Returns:
            Decoded values and :class:`Malformed` markers, in stream order.
        """
        out: list[JSONValue | Malformed] = []
        buf = self._buf
        buf += data
        i = self._scan
        n = len(buf)
        while i < n:
            if self._start < 0:
                # Between values: find the next opener; anything else but whitespace is junk.
                m = _NEXT_OPEN.search(buf, i)
                stop = m.start() if m else n
                self._junk += len(bytes(buf[i:stop]).translate(None, _WHITESPACE))
                if m is None:
                    i = n
                    break
                if self._junk:
                    out.append(self._junk_marker())
                self._start = stop
                self._depth = 1
                i = stop + 1
                continue
            if self._in_string:
                if self._escaped:
                    # The byte after a backslash is never structural.
                    self._escaped = False
                    i += 1
                    continue
                m = _IN_STRING.search(buf, i)
                if m is None:
                    i = n
                    break
                i = m.end()
                if buf[m.start()] == _BACKSLASH:
                    self._escaped = True
                else:
                    self._in_string = False
                continue
            m = _STRUCTURAL.search(buf, i)
            if m is None:
                i = n
                break
            c = buf[m.start()]
            i = m.end()
            if c == _QUOTE:
                self._in_string = True
            elif c in _OPEN:
                self._depth += 1
            else:
                self._depth -= 1
                if self._depth == 0:
                    out.append(self._decode(bytes(buf[self._start : i])))
                    self._start = -1
        # Drop everything that is fully consumed so the buffer only holds the open value.
        keep_from = self._start if self._start >= 0 else n
        if keep_from:
            del buf[:keep_from]
            if self._start >= 0:
                self._start = 0
        self._scan = len(buf)
        if self._start >= 0 and len(buf) > self._max:
            out.append(
                Malformed(
                    f"a JSON value grew past {self._max} bytes without closing; discarded it",
                    len(buf),
                )
            )
            self._reset_value()
        return out

    def close(self) -> list[Malformed]:
        """End of stream: report a value cut off mid-way (or trailing junk), if any."""
        out: list[Malformed] = []
        if self._start >= 0:
            excerpt = bytes(self._buf[:_EXCERPT]).decode("utf-8", "replace")
            out.append(
                Malformed(
                    f"the stream ended inside a JSON value ({len(self._buf)} bytes): {excerpt!r}",
                    len(self._buf),
                )
            )
        elif self._junk:
            out.append(self._junk_marker())
        self._reset_value()
        return out

    def _decode(self, raw: bytes) -> JSONValue | Malformed:
        try:
            return loads(raw)
        except orjson.JSONDecodeError as exc:
            excerpt = raw[:_EXCERPT].decode("utf-8", "replace")
            return Malformed(f"invalid JSON value ({exc}): {excerpt!r}", len(raw))

    def _junk_marker(self) -> Malformed:
        marker = Malformed(
            f"{self._junk} bytes of text between JSON values (expected an object or array)", self._junk
        )
        self._junk = 0
        return marker

    def _reset_value(self) -> None:
        self._buf.clear()
        self._scan = 0
        self._start = -1
        self._depth = 0
        self._in_string = False
        self._escaped = False
        self._junk = 0
