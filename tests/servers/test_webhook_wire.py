"""The webhook intake's fast request reader (:func:`agentd.servers.webhook.wire.parse_post`) held to h11.

``parse_post`` may decline anything (None: h11 reads the connection from its first byte), but
whatever it does read, h11 must read the same way: method ``POST``, target, headers (the first
value of each name), body, whether the connection closes after the answer, and the bytes left for
the next request. This file holds:

* a corpus of hand-written requests: the senders' usual shapes (GitHub, Slack, Alertmanager),
  HTTP/1.0, ``Connection`` values, a pipelined second request, each read and compared with
  h11; and the shapes it must decline (incomplete, chunked, ``Expect``, other methods and
  versions, bare LF, folded or malformed lines, repeated ``Content-Length`` or ``Host``, odd
  digits, a head over the limit);
* two property tests: requests from a mostly valid, mutated grammar, and valid requests with
  bytes flipped, inserted or deleted; whenever ``parse_post`` reads one, h11 must agree;
* hostile heads (long values, many lines, never ended): ``parse_post`` must decline them
  without its regular expression backtracking for ever (not timed: a hang would meet the
  suite's timeout). The last three (whitespace-only values, then a failure) took exponential
  time before the pattern's quantifiers were made possessive.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable
from dataclasses import dataclass

import h11
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentd.servers.webhook.listener import MAX_HEADER_BYTES
from agentd.servers.webhook.wire import Post, parse_post, render

MAX_HEAD = MAX_HEADER_BYTES
"""The listener's limit, and the one h11 is given in the comparison."""


def h11_reading(data: bytes, max_head: int = MAX_HEAD) -> Post:
    """How h11 reads ``data`` as one request and answers it with an empty 200, as a :class:`Post`
    (``size``: the listener's count of the head h11 read).

    Raises:
        AssertionError: h11 read something other than one whole POST (it wants more bytes).
        h11.RemoteProtocolError: h11 refused the bytes.
    """
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=max_head)
    conn.receive_data(data)
    request = conn.next_event()
    assert isinstance(request, h11.Request), f"h11 read {request!r}, not a request"
    assert request.method == b"POST"
    body = bytearray()
    while True:
        event = conn.next_event()
        if isinstance(event, h11.EndOfMessage):
            break
        assert isinstance(event, h11.Data), f"h11 read {event!r} in the body"
        body += event.data
    rest = bytes(conn.trailing_data[0])
    headers: dict[str, str] = {}
    for name, value in request.headers:
        headers.setdefault(name.decode("latin-1"), value.decode("latin-1"))
    conn.send(h11.Response(status_code=200, headers=[("content-length", "0")]))
    conn.send(h11.EndOfMessage())
    close = conn.our_state is h11.MUST_CLOSE
    if not close:
        conn.start_next_cycle()  # the next request starts from the bytes h11 kept
        assert bytes(conn.trailing_data[0]) == rest
    size = len(request.target) + sum(len(k) + len(v) + 4 for k, v in request.headers)
    return Post(request.target, headers, bytes(body), close, rest, size)


def read_both(data: bytes, max_head: int = MAX_HEAD) -> Post | None:
    """``parse_post``'s answer, checked against h11's reading whenever it is a request."""
    post = parse_post(data, max_head)
    if post is not None:
        assert h11_reading(data, max_head) == post, data
    return post


def head(*lines: str) -> bytes:
    """The lines (latin-1), each ended by CRLF, and the empty line that ends a head."""
    return "".join(line + "\r\n" for line in lines).encode("latin-1") + b"\r\n"


def post_request(
    body: bytes,
    fields: Iterable[tuple[str, str]] = (),
    *,
    target: str = "/hooks/github",
    version: str = "1.1",
    host: str | None = "hooks.example.com:8443",
) -> bytes:
    """A well-formed POST of ``body``: request line, ``Host``, ``fields``, a true ``Content-Length``."""
    lines = [f"POST {target} HTTP/{version}"]
    if host is not None:
        lines.append(f"Host: {host}")
    lines += [f"{name}: {value}" for name, value in fields]
    lines.append(f"Content-Length: {len(body)}")
    return head(*lines) + body


# ------------------------------------------------------------------------------ the corpus

# The senders' shapes (their usual fields, in their order); the signatures are real but unchecked here.
GITHUB_BODY = json.dumps(
    {
        "action": "labeled",
        "issue": {"number": 1347, "title": "Crash when the config file is empty", "state": "open"},
        "label": {"name": "agent"},
        "repository": {"full_name": "octo-org/hello-world"},
        "sender": {"login": "octocat"},
    }
).encode()
SLACK_BODY = json.dumps(
    {
        "token": "XXYYZZ",
        "team_id": "T0001",
        "event": {"type": "message", "channel": "C2147483705", "text": "deploy is stuck, can someone look?"},
        "type": "event_callback",
        "event_id": "Ev0PV52K21",
        "event_time": 1800000000,
    }
).encode()
ALERTMANAGER_BODY = json.dumps(
    {
        "version": "4",
        "status": "firing",
        "receiver": "agentd",
        "groupLabels": {"alertname": "HighErrorRate"},
        "alerts": [{"status": "firing", "labels": {"alertname": "HighErrorRate", "severity": "page"}}],
    }
).encode()
DELIVERY = "72d3162e-cc78-11e3-81ab-4c9367dc0958"


def hmac_hex(body: bytes, prefix: bytes = b"") -> str:
    return hmac.new(b"It's a Secret to Everybody", prefix + body, hashlib.sha256).hexdigest()


GITHUB_FIELDS = [
    ("Accept", "*/*"),
    ("Content-Type", "application/json"),
    ("User-Agent", "GitHub-Hookshot/044aadd"),
    ("X-GitHub-Delivery", DELIVERY),
    ("X-GitHub-Event", "issues"),
    ("X-GitHub-Hook-ID", "292430182"),
    ("X-GitHub-Hook-Installation-Target-ID", "79929171"),
    ("X-GitHub-Hook-Installation-Target-Type", "repository"),
    ("X-Hub-Signature-256", "sha256=" + hmac_hex(GITHUB_BODY)),
]
SLACK_FIELDS = [
    ("User-Agent", "Slackbot 1.0 (+https://api.slack.com/robots)"),
    ("Accept-Encoding", "gzip,deflate"),
    ("Accept", "application/json,*/*"),
    ("X-Slack-Signature", "v0=" + hmac_hex(SLACK_BODY, b"v0:1800000000:")),
    ("X-Slack-Request-Timestamp", "1800000000"),
    ("Content-Type", "application/json"),
]
ALERTMANAGER_FIELDS = [
    ("User-Agent", "Alertmanager/0.27.0"),
    ("Content-Type", "application/json"),
    ("Authorization", "Bearer am-token-0123456789abcdef"),
]
SMALL = b'{"ok":true}'


@dataclass(frozen=True, slots=True)
class Expected:
    """What a read request must hold (``fields``: some of its headers, by lower-case name)."""

    body: bytes
    close: bool = False
    rest: bytes = b""
    target: bytes = b"/hooks/github"
    fields: tuple[tuple[str, str], ...] = ()


READ = [
    pytest.param(
        post_request(GITHUB_BODY, GITHUB_FIELDS),
        Expected(GITHUB_BODY, fields=(("x-github-delivery", DELIVERY), ("x-github-event", "issues"))),
        id="github",
    ),
    pytest.param(
        post_request(SLACK_BODY, SLACK_FIELDS, target="/hooks/slack"),
        Expected(SLACK_BODY, target=b"/hooks/slack", fields=(("x-slack-request-timestamp", "1800000000"),)),
        id="slack",
    ),
    pytest.param(
        post_request(ALERTMANAGER_BODY, ALERTMANAGER_FIELDS, target="/hooks/alerts"),
        Expected(
            ALERTMANAGER_BODY,
            target=b"/hooks/alerts",
            fields=(("authorization", "Bearer am-token-0123456789abcdef"),),
        ),
        id="alertmanager",
    ),
    pytest.param(
        post_request(SMALL, version="1.0"),
        Expected(SMALL, close=True, fields=(("host", "hooks.example.com:8443"),)),
        id="http-1.0-with-host",
    ),
    pytest.param(
        post_request(SMALL, version="1.0", host=None), Expected(SMALL, close=True), id="http-1.0-no-host"
    ),
    pytest.param(
        post_request(SMALL, [("Connection", "keep-alive")], version="1.0"),
        Expected(SMALL, close=True),
        id="http-1.0-keep-alive-still-closes",
    ),
    pytest.param(
        post_request(SMALL, [("Connection", "close")]), Expected(SMALL, close=True), id="connection-close"
    ),
    pytest.param(
        post_request(SMALL, [("Connection", "keep-alive, Close")]),
        Expected(SMALL, close=True),
        id="connection-keep-alive-Close",
    ),
    pytest.param(
        post_request(SMALL, [("Connection", "keep-alive"), ("connection", " ,CLOSE\t,")]),
        Expected(SMALL, close=True),
        id="close-in-a-second-connection-field",
    ),
    pytest.param(
        post_request(SMALL, [("Connection", "keep-alive")]), Expected(SMALL), id="connection-keep-alive"
    ),
    pytest.param(
        post_request(SMALL, [("Connection", "closed, x-close, close-me")]),
        Expected(SMALL),
        id="connection-tokens-that-are-not-close",
    ),
    pytest.param(
        post_request(SMALL) + post_request(b"second"),
        Expected(SMALL, rest=post_request(b"second")),
        id="pipelined-second-request",
    ),
    pytest.param(
        post_request(SMALL) + b"POST /hooks/git",
        Expected(SMALL, rest=b"POST /hooks/git"),
        id="start-of-a-second-request",
    ),
    pytest.param(
        post_request(SMALL, version="1.0") + b"GET / HTTP/1.0\r\n\r\n",
        Expected(SMALL, close=True, rest=b"GET / HTTP/1.0\r\n\r\n"),
        id="http-1.0-with-bytes-after",
    ),
    pytest.param(post_request(b""), Expected(b""), id="empty-body"),
    pytest.param(
        head("POST /hooks/github HTTP/1.1", "Host: h", "Content-Length: 0007") + b"1234567tail",
        Expected(b"1234567", rest=b"tail"),
        id="content-length-leading-zeros",
    ),
    pytest.param(
        head("POST * HTTP/1.1", "HOST: h", "content-LENGTH:\t2\t ") + b"{}",
        Expected(b"{}", target=b"*", fields=(("content-length", "2"), ("host", "h"))),
        id="odd-case-and-tab-whitespace",
    ),
    pytest.param(
        head(
            "POST /hooks/github?x=%20&y=[1] HTTP/1.1",
            "Host: h",
            "X-Empty:",
            "X-Spaces:   \t ",
            "X-Obs-Text: caf\xe9 \xff\x80 a",
            "X-Controls: a\x01b\x7fc",
            "!#$%&'*+-.^_`|~0aZ:ok",
            "X-Twice: first",
            "x-twice: second",
            "Content-Length: 2",
        )
        + b"{}",
        Expected(
            b"{}",
            target=b"/hooks/github?x=%20&y=[1]",
            fields=(
                ("x-empty", ""),
                ("x-spaces", ""),
                ("x-obs-text", "caf\xe9 \xff\x80 a"),
                ("x-controls", "a\x01b\x7fc"),
                ("!#$%&'*+-.^_`|~0az", "ok"),
                ("x-twice", "first"),
            ),
        ),
        id="lenient-values-and-token-names",
    ),
    pytest.param(
        post_request(SMALL, [("Connection", "Upgrade"), ("Upgrade", "websocket")]),
        Expected(SMALL),
        id="upgrade-asked-and-not-granted",
    ),
]


@pytest.mark.parametrize(("data", "expected"), READ)
def test_a_whole_simple_post_is_read_as_h11_reads_it(data: bytes, expected: Expected) -> None:
    post = read_both(data)
    assert post is not None
    assert (post.target, post.body, post.close, post.rest) == (
        expected.target,
        expected.body,
        expected.close,
        expected.rest,
    )
    for name, value in expected.fields:
        assert post.headers[name] == value


WHOLE = post_request(SMALL, [("Content-Type", "application/json")])
CUT_IN_HEAD = [
    WHOLE[:n] for n in (1, 4, 5, 17, 18, 30, WHOLE.index(b"\r\n\r\n") + 2, WHOLE.index(b"\r\n\r\n") + 3)
]

DECLINED = [
    *(pytest.param(cut, MAX_HEAD, id=f"head-incomplete-{len(cut)}") for cut in CUT_IN_HEAD),
    pytest.param(b"", MAX_HEAD, id="nothing"),
    pytest.param(WHOLE[:-1], MAX_HEAD, id="body-one-byte-short"),
    pytest.param(WHOLE[: -len(SMALL)], MAX_HEAD, id="body-not-started"),
    pytest.param(
        head("POST /hooks/github HTTP/1.1", "Host: h", "Transfer-Encoding: chunked")
        + b"2\r\n{}\r\n0\r\n\r\n",
        MAX_HEAD,
        id="chunked",
    ),
    pytest.param(
        head("POST /hooks/github HTTP/1.1", "Host: h", "Content-Length: 2", "Transfer-Encoding: chunked")
        + b"2\r\n{}\r\n0\r\n\r\n",
        MAX_HEAD,
        id="chunked-and-content-length",
    ),
    pytest.param(post_request(SMALL, [("Expect", "100-continue")]), MAX_HEAD, id="expect-100-continue"),
    pytest.param(head("GET /healthz HTTP/1.1", "Host: h"), MAX_HEAD, id="get"),
    pytest.param(post_request(SMALL).replace(b"POST", b"PUT", 1), MAX_HEAD, id="put"),
    pytest.param(post_request(SMALL).replace(b"POST", b"post", 1), MAX_HEAD, id="lowercase-method"),
    pytest.param(post_request(SMALL, version="2.0"), MAX_HEAD, id="http-2.0"),
    pytest.param(post_request(SMALL, version="1.2"), MAX_HEAD, id="http-1.2"),
    pytest.param(post_request(SMALL).replace(b"HTTP/1.1", b"http/1.1", 1), MAX_HEAD, id="lowercase-version"),
    pytest.param(post_request(SMALL).replace(b"\r\n", b"\n"), MAX_HEAD, id="bare-lf-everywhere"),
    pytest.param(post_request(SMALL).replace(b"\r\n", b"\n", 1), MAX_HEAD, id="bare-lf-after-request-line"),
    pytest.param(post_request(SMALL, [("X-Folded", "first\r\n second")]), MAX_HEAD, id="obs-fold-with-space"),
    pytest.param(post_request(SMALL, [("X-Folded", "first\r\n\tsecond")]), MAX_HEAD, id="obs-fold-with-tab"),
    pytest.param(
        head("POST /hooks/github HTTP/1.1", "Host : h", "Content-Length: 2") + b"{}",
        MAX_HEAD,
        id="space-before-colon",
    ),
    pytest.param(post_request(SMALL, [("X-Bad", "a\x00b")]), MAX_HEAD, id="nul-in-value"),
    pytest.param(post_request(SMALL, [("X-Bad", "a\rb")]), MAX_HEAD, id="cr-in-value"),
    pytest.param(post_request(SMALL, [("X-Bad", "a\x0bb")]), MAX_HEAD, id="vertical-tab-in-value"),
    pytest.param(post_request(SMALL, [("X-Bad\x80", "a")]), MAX_HEAD, id="obs-text-in-name"),
    pytest.param(
        head("POST /hooks/github HTTP/1.1", "Host: h", "Content-Length: 2", "Content-Length: 2") + b"{}",
        MAX_HEAD,
        id="content-length-twice-equal",
    ),
    pytest.param(
        head("POST /hooks/github HTTP/1.1", "Host: h", "Content-Length: 2", "content-length: 3") + b"{}x",
        MAX_HEAD,
        id="content-length-twice-different",
    ),
    pytest.param(
        head("POST /hooks/github HTTP/1.1", "Host: h", "Content-Length: 2, 2") + b"{}",
        MAX_HEAD,
        id="content-length-list",
    ),
    pytest.param(
        head("POST /hooks/github HTTP/1.1", "Host: a", "Host: b", "Content-Length: 2") + b"{}",
        MAX_HEAD,
        id="host-twice",
    ),
    pytest.param(
        head("POST /hooks/github HTTP/1.1", "Content-Length: 2") + b"{}", MAX_HEAD, id="http-1.1-no-host"
    ),
    pytest.param(head("POST /hooks/github HTTP/1.1", "Host: h") + b"{}", MAX_HEAD, id="no-content-length"),
    *(
        pytest.param(
            head("POST /hooks/github HTTP/1.1", "Host: h", "Content-Length: " + length) + b"{}xxxxxxxx",
            MAX_HEAD,
            id=f"content-length-{label}",
        )
        for label, length in [
            ("plus", "+2"),
            ("minus", "-2"),
            ("space-inside", "1 0"),
            ("underscore", "1_0"),
            ("hex", "0x2"),
            ("superscript-two", "\xb2"),
            ("empty", ""),
            ("nineteen-digits", "1" * 19),
        ]
    ),
    pytest.param(b"\r\n" + post_request(SMALL), MAX_HEAD, id="leading-crlf"),
    pytest.param(b" " + post_request(SMALL), MAX_HEAD, id="leading-space"),
    pytest.param(
        post_request(SMALL, [("X-Padding", "p" * 200)]),
        100,
        id="head-longer-than-max-head",
    ),
    pytest.param(
        post_request(SMALL, [("X-Padding", "p" * MAX_HEAD)]),
        MAX_HEAD,
        id="head-longer-than-the-listener-limit",
    ),
]


@pytest.mark.parametrize(("data", "max_head"), DECLINED)
def test_anything_but_a_whole_simple_post_is_left_to_h11(data: bytes, max_head: int) -> None:
    assert parse_post(data, max_head) is None


def test_a_head_of_max_head_bytes_before_its_closing_crlfs_is_read_and_one_byte_more_is_not() -> None:
    base = post_request(SMALL, [("X-Padding", "")])
    head_length = base.index(b"\r\n\r\n")  # the head without its last CRLF and the empty line
    max_head = head_length + 10
    fits = post_request(SMALL, [("X-Padding", "p" * 10)])
    assert read_both(fits, max_head) is not None
    too_long = post_request(SMALL, [("X-Padding", "p" * 11)])
    assert parse_post(too_long, max_head) is None
    assert h11_reading(too_long, max_head).body == SMALL  # h11, given it whole, still reads it


# ------------------------------------------------------------------------------ properties

TOKEN = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
VCHAR = "".join(map(chr, range(0x21, 0x7F)))
OBS_TEXT = "".join(map(chr, range(0x80, 0x100)))
ASPECTS = ("prefix", "method", "target", "version", "name", "separator", "value", "line-end", "deferred")
"""The parts of a request the grammar may make odd (at most two at once)."""
NAMES = ["Content-Type", "User-Agent", "X-GitHub-Event", "Upgrade", "Connection", "X-Twice", "x-twice"]
ODD_NAME_CHARS = TOKEN + " \t():;\x00\x7f\x80\xff\r\n"
ODD_VALUE_CHARS = VCHAR + " \t\r\n\x00\x0b\x0c\x01\x7f\x85\xa0"
CONNECTION_VALUES = [
    b"close",
    b"Close",
    b"keep-alive",
    b"keep-alive, close",
    b"keep-alive,close ",
    b" , close",
    b"closed",
    b"close-ish",
    b"upgrade",
    b"",
    b"clo se",
]
WEIRD_LENGTHS = [b"+3", b"-1", b"0x3", b"3,3", b"3, 3", b"\xb2", b"", b"00003", b"3 3", b"9" * 19]
LINE_ENDS = [b"\n", b"\r", b"\r\n ", b"\r\n\t", b"\n\r", b"\r\r\n"]
METHODS = [b"GET", b"PUT", b"post", b"POST ", b"PATCH", b"P\x00ST"]
VERSIONS = [b"HTTP/1.2", b"HTTP/2.0", b"http/1.1", b"HTTP/1.1 ", b"HTTP/11", b"HTTP/1.01", b"HTTP/0.9"]
TARGETS = [b"/hooks/github", b"/", b"*", b"/hooks/a?b=c&d=%20", b"http://h/x"]
MAX_HEADS = [MAX_HEAD] * 4 + [48, 80, 128]


def latin1(alphabet: str, *, min_size: int = 0, max_size: int) -> st.SearchStrategy[bytes]:
    """Strings of ``alphabet``'s characters, as latin-1 bytes."""
    return st.text(alphabet, min_size=min_size, max_size=max_size).map(lambda text: text.encode("latin-1"))


# The grammar's strategies, built once (building them in each draw costs more than the test).
ODD_ASPECTS = st.sets(st.sampled_from(ASPECTS), max_size=2)
# Four fields keep a case small enough to shrink quickly.
FIELDS = st.lists(
    st.tuples(
        st.one_of(st.sampled_from([name.encode() for name in NAMES]), latin1(TOKEN, min_size=1, max_size=8)),
        st.one_of(latin1(VCHAR + OBS_TEXT + " \t", max_size=6), st.sampled_from([b"", b" ", b"\t "])),
    ),
    max_size=4,
)
ODD_NAME = latin1(ODD_NAME_CHARS, max_size=8)
ODD_VALUE = latin1(ODD_VALUE_CHARS, max_size=6)
DEFERRED = st.sampled_from([(b"Transfer-Encoding", b"chunked"), (b"Expect", b"100-continue")])
HOSTS = st.sampled_from([1, 1, 1, 1, 0, 2])
LENGTHS = st.sampled_from(["exact"] * 8 + ["more", "less", "other", "weird", "none", "twice", "clash"])
BODIES = st.binary(max_size=24)
SMALL_NUMBERS = st.integers(0, 40)
WEIRD_LENGTH = st.sampled_from(WEIRD_LENGTHS)
CONNECTION = st.one_of(st.none(), st.sampled_from(CONNECTION_VALUES))
ANY_INDEX = st.integers(0, 1 << 16)
"""Taken modulo a length: one strategy for every list."""
SHUFFLES = st.randoms(use_true_random=False)
USUAL_SEPARATORS = st.sampled_from([b":", b": ", b":\t"])
ODD_SEPARATORS = st.sampled_from([b" :", b"", b"::", b":\r\n ", b":\x00"])
TRAILING_WHITESPACE = st.sampled_from([b"", b"", b" ", b"\t "])
ODD_LINE_ENDS = st.sampled_from(LINE_ENDS)
AFTER = st.one_of(st.just(b""), st.binary(max_size=12), st.just(post_request(b"next")))
HEAD_LIMITS = st.sampled_from(MAX_HEADS)
PARTS = {
    "prefix": (st.just(b""), st.sampled_from([b"\r\n", b"\n", b" "])),
    "method": (st.just(b"POST"), st.sampled_from(METHODS)),
    "target": (st.sampled_from(TARGETS), latin1(VCHAR + " \x7f\x80", max_size=6)),
    "version": (st.sampled_from([b"HTTP/1.1", b"HTTP/1.1", b"HTTP/1.0"]), st.sampled_from(VERSIONS)),
}
"""For each part of the request line: the usual and the odd strategy."""


def content_lengths(size: int, kind: str, other: int, weird: bytes) -> list[tuple[bytes, bytes]]:
    """The ``Content-Length`` fields of a request whose body has ``size`` bytes (``kind``: of :data:`LENGTHS`)."""
    exact = str(size).encode()
    return {
        "exact": [(b"Content-Length", exact)],
        "more": [(b"Content-Length", str(size + 1).encode())],
        "less": [(b"Content-Length", str(max(size - 1, 0)).encode())],
        "other": [(b"Content-Length", str(other).encode())],
        "weird": [(b"Content-Length", weird)],
        "none": [],
        "twice": [(b"Content-Length", exact), (b"content-length", exact)],
        "clash": [(b"Content-Length", exact), (b"Content-Length", exact + b"0")],
    }[kind]


@st.composite
def grammar_requests(draw: st.DrawFn) -> tuple[bytes, int]:
    """A valid request with up to two of its parts made odd (:data:`ASPECTS`), a ``Host`` present,
    missing or doubled, a ``Content-Length`` true, false, malformed, missing or doubled, any
    ``Connection``, any bytes after it; and the head limit to read it with."""
    odd = draw(ODD_ASPECTS)
    body = draw(BODIES)
    fields = draw(FIELDS)
    if fields and "name" in odd:
        fields[0] = (draw(ODD_NAME), fields[0][1])
    if fields and "value" in odd:
        fields[0] = (fields[0][0], draw(ODD_VALUE))
    if "deferred" in odd:
        fields.append(draw(DEFERRED))
    fields += [(b"Host", b"hooks.example.com")] * draw(HOSTS)
    fields += content_lengths(len(body), draw(LENGTHS), draw(SMALL_NUMBERS), draw(WEIRD_LENGTH))
    connection = draw(CONNECTION)
    if connection is not None:
        fields.append((b"Connection", connection))
    draw(SHUFFLES).shuffle(fields)
    odd_line = draw(ANY_INDEX) % (len(fields) + 2) if "line-end" in odd else -1
    odd_separator = draw(ANY_INDEX) % len(fields) if fields and "separator" in odd else -1
    line = [draw(PARTS[aspect][aspect in odd]) for aspect in ("prefix", "method", "target", "version")]
    out = [line[0], b" ".join(line[1:])]
    for index, (name, value) in enumerate(fields):
        out.append(draw(ODD_LINE_ENDS) if index == odd_line else b"\r\n")
        separator = draw(ODD_SEPARATORS if index == odd_separator else USUAL_SEPARATORS)
        out += [name, separator, value, draw(TRAILING_WHITESPACE)]
    out.append(draw(ODD_LINE_ENDS) if odd_line == len(fields) else b"\r\n")
    out.append(draw(ODD_LINE_ENDS) if odd_line == len(fields) + 1 else b"\r\n")
    out += [body, draw(AFTER)]
    return b"".join(out), draw(HEAD_LIMITS)


VALID = [
    post_request(SMALL),
    post_request(SMALL, [("Connection", "close")], version="1.0", host=None),
    post_request(b"", [("Connection", "keep-alive"), ("X-Event", "push")]) + post_request(b"2"),
    post_request(GITHUB_BODY[:64], GITHUB_FIELDS[:3]),
    head("POST /h HTTP/1.1", "host:h", "content-length:3", "x:\t") + b"abc",
]
VALID_REQUESTS = st.sampled_from(VALID)
MUTATION_COUNTS = st.integers(1, 4)
MUTATIONS = st.sampled_from(["flip", "insert", "delete", "replace"])
MUTATION_BYTE = st.one_of(
    st.sampled_from(
        [b"\r", b"\n", b"\x00", b" ", b"\t", b":", b",", b"\x80", b"\xb2", b"0", b"9", b"a", b"-"]
    ),
    st.binary(min_size=1, max_size=1),
)
BITS = st.integers(0, 7)


@st.composite
def mutated_requests(draw: st.DrawFn) -> tuple[bytes, int]:
    """A valid request with a few bytes flipped, inserted, deleted or replaced."""
    data = bytearray(draw(VALID_REQUESTS))
    for _ in range(draw(MUTATION_COUNTS)):
        at = draw(ANY_INDEX) % (len(data) + 1)
        kind = draw(MUTATIONS)
        byte = draw(MUTATION_BYTE)
        if kind == "insert":
            data[at:at] = byte
        elif at == len(data):
            continue
        elif kind == "flip":
            data[at] ^= 1 << draw(BITS)
        elif kind == "delete":
            del data[at]
        else:
            data[at : at + 1] = byte
    return bytes(data), draw(HEAD_LIMITS)


@settings(max_examples=300, deadline=None)
@given(grammar_requests())
def test_a_request_from_the_mutated_grammar_is_read_as_h11_reads_it_or_left_to_h11(
    case: tuple[bytes, int],
) -> None:
    read_both(*case)


@settings(max_examples=300, deadline=None)
@given(mutated_requests())
def test_a_valid_request_with_bytes_changed_is_read_as_h11_reads_it_or_left_to_h11(
    case: tuple[bytes, int],
) -> None:
    read_both(*case)


# ------------------------------------------------------------------------------ hostile heads

START = b"POST /hooks/github HTTP/1.1\r\nHost: h\r\n"
HOSTILE = [
    pytest.param(START + b"X: " + b"a " * 16_300, id="32k-value-of-a-space-unended"),
    pytest.param(START + b"X: " + b"a " * 16_300 + b"\x00", id="32k-value-of-a-space-then-nul"),
    pytest.param(
        START + b"X: " + b"a\t" * 16_300 + b"\r\n\x00\r\n\r\n", id="32k-value-of-a-tab-then-nul-line"
    ),
    pytest.param(START + b"X: " + b"a" * 32_000 + b"\x00\r\n\r\n", id="32k-word-then-nul"),
    pytest.param(START + b"a:b\r\n" * 6_500, id="6500-short-fields-unended"),
    pytest.param(START + b"a:b\r\n" * 6_500 + b"\x00", id="6500-short-fields-then-nul"),
    pytest.param(START + b"a: b c\r\n" * 4_000 + b"a b\r\n\r\n", id="4000-fields-then-a-bad-name"),
    pytest.param(START + b"X" * 32_000, id="32k-name-without-colon"),
    pytest.param(b"POST /" + b"a" * 32_000, id="32k-target-unended"),
    pytest.param(START + b"X:\r\n" * 8_000 + b"\x00", id="8000-empty-values-without-whitespace-then-nul"),
    pytest.param(
        START + b"X: \r\n" * 64 + b"\x00\r\n\r\n",
        id="64-fields-of-one-space-then-nul",
    ),
    pytest.param(
        START + b"X:  \r\n" * 40,
        id="40-fields-of-two-spaces-unended",
    ),
    pytest.param(
        START + b"X:" + b" " * 32_000 + b"\x00",
        id="32k-spaces-then-nul",
    ),
]


@pytest.mark.parametrize("data", HOSTILE)
def test_a_hostile_head_is_declined_without_runaway_backtracking(data: bytes) -> None:
    assert parse_post(data, MAX_HEAD) is None


# ------------------------------------------------------------------------------ edges and answers


def test_a_value_keeps_obs_text_whitespace_at_its_edges_as_h11_does() -> None:
    """Only spaces and tabs are optional whitespace: NBSP (0xA0) and NEL (0x85) are obs-text, part
    of the value, and ``Connection: close`` followed by one is not ``close``."""
    data = post_request(
        b"{}", [("X-Trail", "value\xa0"), ("X-Lead", "\x85value"), ("Connection", "close\xa0")]
    )
    post = read_both(data)
    assert post is not None
    assert (post.headers["x-trail"], post.headers["x-lead"]) == ("value\xa0", "\x85value")
    assert post.close is False


@pytest.mark.parametrize(("digits", "read"), [("0" * 17 + "2", True), ("0" * 18 + "2", False)])
def test_a_content_length_of_up_to_18_digits_is_read(digits: str, read: bool) -> None:
    data = head("POST / HTTP/1.1", "Host: h", f"Content-Length: {digits}") + b"{}"
    post = read_both(data)
    assert (post is not None) is read
    if post is not None:
        assert post.body == b"{}"


def test_the_head_size_is_counted_as_the_listener_bounds_it() -> None:
    post = read_both(head("POST /abc HTTP/1.1", "Host: h", "a:b", "Content-Length:  0 "))
    assert post is not None
    assert post.size == len("/abc") + (4 + 1 + 4) + (1 + 1 + 4) + (14 + 1 + 4)


def h11_answer(data: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """An answer as an HTTP client reads it (h11): status, headers, body."""
    client = h11.Connection(h11.CLIENT)
    client.send(h11.Request(method="POST", target="/", headers=[("host", "h"), ("content-length", "0")]))
    client.send(h11.EndOfMessage())
    client.receive_data(data)
    response = client.next_event()
    assert isinstance(response, h11.Response)
    body = b""
    while not isinstance(event := client.next_event(), h11.EndOfMessage):
        assert isinstance(event, h11.Data)
        body += event.data
    return response.status_code, list(response.headers), body


@pytest.mark.parametrize("close", [False, True])
def test_an_answer_is_what_an_http_client_reads(close: bool) -> None:
    data = render(401, b'{"error":"no"}\n', (("www-authenticate", 'Bearer realm="x"'),), close=close)
    assert data.startswith(b"HTTP/1.1 401 Unauthorized\r\n")
    status, headers, body = h11_answer(data)
    expected = [
        (b"content-type", b"application/json"),
        (b"content-length", b"15"),
        (b"www-authenticate", b'Bearer realm="x"'),
    ]
    assert (status, headers, body) == (
        401,
        expected + [(b"connection", b"close")] * close,
        b'{"error":"no"}\n',
    )


@pytest.mark.parametrize(
    ("status", "line"),
    [
        (200, b"HTTP/1.1 200 OK\r\n"),
        (431, b"HTTP/1.1 431 Request Header Fields Too Large\r\n"),
        (599, b"HTTP/1.1 599 \r\n"),
    ],
)
def test_an_answer_names_its_status(status: int, line: bytes) -> None:
    assert render(status, b"{}", (), close=False).startswith(line)
