"""The concatenated-JSON stream parser: whole values out of arbitrary chunking."""

from __future__ import annotations

import json

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from agentd.servers._jsonstream import JsonStreamParser, Malformed

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**53), max_value=2**53),
    # Strings full of the characters a naive scanner trips on.
    st.text(alphabet=st.sampled_from('{}[]"\\/ aé€😀\n\t'), max_size=12),
)
_json = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(alphabet='ab{"\\]', max_size=4), inner, max_size=4),
    ),
    max_leaves=12,
)
_top = st.one_of(st.lists(_json, max_size=4), st.dictionaries(st.text(max_size=4), _json, max_size=4))


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    chunks, prev = [], 0
    for p in [*points, len(data)]:
        chunks.append(data[prev:p])
        prev = p
    return chunks


def _feed_all(parser: JsonStreamParser, chunks: list[bytes]) -> list[object]:
    out: list[object] = []
    for chunk in chunks:
        out.extend(parser.feed(chunk))
    out.extend(parser.close())
    return out


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(_top, min_size=1, max_size=6),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=20),
    pretty=st.booleans(),
)
def test_any_chunking_yields_every_value_in_order(values, cuts, pretty):
    text = "".join(json.dumps(v, indent=2 if pretty else None, ensure_ascii=False) + "\n" for v in values)
    chunks = _split(text.encode(), cuts)
    assert _feed_all(JsonStreamParser(), chunks) == values


@given(values=st.lists(_top, min_size=1, max_size=4))
def test_byte_at_a_time(values):
    data = b"".join(orjson.dumps(v) for v in values)  # no separator at all, like `}{`
    parser = JsonStreamParser()
    assert _feed_all(parser, [data[i : i + 1] for i in range(len(data))]) == values
    assert parser.pending == 0


def test_several_values_in_one_read_and_one_split_across_reads():
    parser = JsonStreamParser()
    assert parser.feed(b'{"type":"ADDED"}\n{"type":"MODIFIED"}{"type":') == [
        {"type": "ADDED"},
        {"type": "MODIFIED"},
    ]
    assert parser.pending == len(b'{"type":')
    assert parser.feed(b'"DELETED"}') == [{"type": "DELETED"}]
    assert parser.pending == 0


def test_junk_between_values_is_reported_and_parsing_resumes():
    out = JsonStreamParser().feed(b'{"a":1} oops {"b":2}')
    assert out[0] == {"a": 1}
    assert isinstance(out[1], Malformed)
    assert "4 bytes of text between JSON values" in out[1].reason
    assert out[2] == {"b": 2}


def test_invalid_value_is_reported_and_the_next_one_survives():
    out = JsonStreamParser().feed(b'{"a": tru}{"b": 2}')
    assert isinstance(out[0], Malformed)
    assert "invalid JSON value" in out[0].reason
    assert out[1] == {"b": 2}


def test_mismatched_brackets_are_malformed():
    out = JsonStreamParser().feed(b'{"a": [1}]{"ok": true}')
    assert isinstance(out[0], Malformed)
    assert out[-1] == {"ok": True}


def test_stream_ending_inside_a_value_is_reported():
    parser = JsonStreamParser()
    assert parser.feed(b'{"a": {"b": ') == []
    (tail,) = parser.close()
    assert isinstance(tail, Malformed)
    assert "ended inside a JSON value" in tail.reason


def test_trailing_junk_is_reported_at_close():
    parser = JsonStreamParser()
    assert parser.feed(b'{"a":1}\nerror: boom') == [{"a": 1}]
    (tail,) = parser.close()
    assert isinstance(tail, Malformed)
    assert "between JSON values" in tail.reason


def test_runaway_value_is_discarded_at_the_cap():
    parser = JsonStreamParser(max_value_bytes=16)
    out = parser.feed(b'{"a": "' + b"x" * 32)
    assert isinstance(out[0], Malformed)
    assert "grew past 16 bytes" in out[0].reason
    assert parser.pending == 0
    assert parser.feed(b'{"b":1}') == [{"b": 1}]


def test_escaped_quote_split_at_the_backslash():
    parser = JsonStreamParser()
    assert parser.feed(b'{"a": "x\\') == []
    assert parser.feed(b'"}"}') == [{"a": 'x"}'}]
