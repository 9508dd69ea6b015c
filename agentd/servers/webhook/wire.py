"""The common webhook request read in one step, and answers written without a state machine.

A webhook sender writes its whole request at once: ``POST``, HTTP/1.1, a
``Host``, a ``Content-Length`` and the body. :func:`parse_post` reads exactly
that shape (or HTTP/1.0's) from the bytes already received, and nothing else: anything it is
not sure of (a head not yet whole, a body still arriving, chunked transfer,
``Expect``, another method, a bare LF, a folded or malformed line,
a repeated ``Content-Length`` or ``Host``) makes it return None, and the
connection is read by h11 from the first byte, with every limit of the
intake. Where it does return a request, h11 would have read the same one:
the grammar below is h11's (RFC 9112's request line, header field and
optional whitespace; field values may carry obs-text), and a differential
test holds the two readers to it (tests/servers/test_webhook_wire.py).

It exists because h11's general state machine cost a third of the server's
CPU per delivery (bench/bench_webhooks.py --throughput, rfcs/0368).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from http import HTTPStatus
from typing import Final

__all__ = ["Post", "parse_post", "render"]

_TOKEN: Final = rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]++"
_FIELD_VALUE: Final = rb"(?:[^\x00\s]++(?:[ \t]++[^\x00\s]++)*+)?+"
_HEAD: Final = re.compile(
    rb"POST ([\x21-\x7e]+) HTTP/1\.([01])\r\n((?:"
    + _TOKEN
    + rb":[ \t]*+"
    + _FIELD_VALUE
    + rb"[ \t]*+\r\n)*+)\r\n"
)
"""The request line and header fields of h11's grammar (``h11._abnf``), for POST and HTTP/1.1 or 1.0;
the first empty line ends it (no field can be empty or hold a CR or LF). Possessive quantifiers:
a head that fails to match fails in linear time (whitespace between a name and an empty value
could otherwise be split in as many ways as there are lines, tried in turn)."""
_SINGLE: Final = frozenset({"content-length", "host"})
_DEFER: Final = frozenset({"transfer-encoding", "expect"})


@dataclass(slots=True)
class Post:
    """A whole ``POST`` request, as h11 would have read it."""

    target: bytes
    headers: dict[str, str]
    """Each field's first value by its lower-cased name (latin-1), without surrounding whitespace."""
    body: bytes
    close: bool
    """The client asked to close the connection after the answer (``Connection: close``)."""
    rest: bytes
    """Bytes after the body: the start of the next request on the connection."""
    size: int
    """The head's size as the listener bounds it: the target, and each field's name and value plus 4."""


def parse_post(data: bytes, max_head: int) -> Post | None:
    """The request in ``data`` if it is a whole simple ``POST`` (see the module docstring), else None.

    ``max_head``: a longer head is left to h11 (which answers 431).
    """
    head = _HEAD.match(data, 0, max_head + 4)
    if head is None:
        return None
    headers: dict[str, str] = {}
    size = len(head[1])
    close = head[2] == b"0"  # HTTP/1.0: h11 closes after the answer whatever the request says
    for line in head[3].decode("latin-1").split("\r\n")[:-1]:
        raw_name, _, raw_value = line.partition(":")
        name = raw_name.lower()
        value = raw_value.strip(" \t")
        size += len(name) + len(value) + 4
        if name == "connection":
            lowered = value.lower()
            close = close or ("close" in lowered and "close" in (t.strip(" \t") for t in lowered.split(",")))
        elif name in _DEFER:
            return None
        if name not in headers:
            headers[name] = value
        elif name in _SINGLE:
            return None  # h11 merges equal Content-Lengths and refuses two Hosts: its call
    length = headers.get("content-length")
    if (
        length is None
        or (head[2] == b"1" and "host" not in headers)  # h11 requires a Host of HTTP/1.1
        or not (0 < len(length) <= 18 and length.isascii() and length.isdigit())
    ):
        return None
    start = head.end()
    stop = start + int(length)
    if len(data) < stop:
        return None
    return Post(head[1], headers, data[start:stop], close, data[stop:], size)


def render(status: int, body: bytes, headers: tuple[tuple[str, str], ...], *, close: bool) -> bytes:
    """An HTTP/1.1 answer with a JSON ``body`` (``close``: ``Connection: close``)."""
    head = [
        f"HTTP/1.1 {status} {_phrase(status)}",
        "content-type: application/json",
        f"content-length: {len(body)}",
    ]
    head += [f"{name}: {value}" for name, value in headers]
    if close:
        head.append("connection: close")
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


_PHRASES: Final = {status.value: status.phrase for status in HTTPStatus}


def _phrase(status: int) -> str:
    return _PHRASES.get(status, "")
