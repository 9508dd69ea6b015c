"""agentd.core.safetext: any string made valid to encode, and safe to show on a terminal."""

from __future__ import annotations

import functools
import io
import json
import re

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentd.core.safetext import (
    REPLACEMENT,
    TooDeep,
    escape_controls,
    escape_json_controls,
    json_bytes,
    valid_json,
    valid_text,
)
from agentd.observe.telemetry import Telemetry

#: Any code point, lone surrogates and terminal controls included (hypothesis leaves surrogates out by default).
any_char = (
    st.characters(exclude_categories=())
    | st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF, exclude_categories=())
    | st.characters(max_codepoint=0x9F, exclude_categories=())
)
any_text = st.lists(any_char, max_size=40).map("".join)

#: What a terminal acts on, or what changes how a line reads.
UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


def test_a_lone_surrogate_becomes_the_replacement_character_and_a_pair_its_character() -> None:
    assert valid_text("a\ud800b") == f"a{REPLACEMENT}b"
    assert valid_text("\udfff\ud800") == REPLACEMENT * 2
    assert valid_text("\ud83d\ude00") == "😀"  # a pair held as two code points is what the model meant
    text = "plain, été, 😀, \x00\x1b"
    assert valid_text(text) is text  # nothing to do: the same object


@given(any_text)
def test_valid_text_always_encodes_and_changes_only_surrogates(text: str) -> None:
    out = valid_text(text)
    out.encode("utf-8")
    if not any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        assert out is text


def test_valid_json_cleans_keys_and_strings_drops_non_finite_floats_and_keeps_big_integers() -> None:
    value = {"k\ud800": ["\udfff", 2**80, float("nan"), float("inf"), (1, "\ud800")], "n": None}
    assert valid_json(value) == {
        f"k{REPLACEMENT}": [REPLACEMENT, 2**80, None, None, [1, REPLACEMENT]],
        "n": None,
    }


def test_valid_json_refuses_nesting_past_the_limit_at_any_depth() -> None:
    assert valid_json({"a": [[]]}, max_depth=3) == {"a": [[]]}
    with pytest.raises(TooDeep):
        valid_json({"a": [[]]}, max_depth=2)
    deep = functools.reduce(lambda v, _: [v], range(100_000), 0)  # no recursion: any depth is checked
    with pytest.raises(TooDeep):
        valid_json(deep, max_depth=64)


def test_json_bytes_writes_what_orjson_refuses() -> None:
    assert json.loads(json_bytes({"a": "\ud800", "b": 2**70})) == {"a": REPLACEMENT, "b": 2**70}
    deep = functools.reduce(lambda v, _: [v], range(400), 0)  # past orjson's 255 levels
    assert json_bytes(deep).count(b"[") == 400
    assert json_bytes({"b": 1, "a": 2}, sort_keys=True) == b'{"a":2,"b":1}'
    with pytest.raises(TooDeep):
        json_bytes(functools.reduce(lambda v, _: [v], range(100_000), 0))


@given(
    st.recursive(any_text | st.integers() | st.none(), lambda i: st.lists(i) | st.dictionaries(any_text, i))
)
def test_json_bytes_always_writes_valid_json(value: object) -> None:
    assert json.loads(json_bytes(value)) == valid_json(value)


def test_escape_controls_shows_what_a_terminal_would_act_on() -> None:
    hostile = "\x1b]52;c;aGk=\x07\x1b[2K\r\x1b[32mINFO\u009b31m\u202e\n\t\x00\ud800"
    assert escape_controls(hostile) == (
        "\\x1b]52;c;aGk=\\x07\\x1b[2K\\r\\x1b[32mINFO\\u009b31m\\u202e\\n\\t\\x00\\ud800"
    )
    text = "tool=memo__get é 😀 ‘quoted’"
    assert escape_controls(text) is text


@given(any_text)
def test_escaped_text_holds_nothing_a_terminal_acts_on(text: str) -> None:
    shown = escape_controls(text)
    assert UNSAFE.search(shown) is None
    shown.encode("utf-8")


@given(any_text)
def test_escaped_json_is_the_same_value_and_holds_no_raw_controls(text: str) -> None:
    line = json_bytes({"v": text})
    escaped = escape_json_controls(line)
    assert orjson.loads(escaped) == orjson.loads(line)
    assert UNSAFE.search(escaped.decode()) is None


@pytest.mark.parametrize("line_format", ["json", "text", "human"])
def test_telemetry_writes_any_field_and_its_lines_hold_no_control(line_format: str) -> None:
    out = io.StringIO()
    telemetry = Telemetry(stream=out, line_format=line_format)  # type: ignore[arg-type]
    telemetry.emit("tool.refused", agent="a1", tool="\x1b]52;c;aGk\x07\ud800\u009b", reason="x\ry\nINFO")
    text = out.getvalue()
    assert text.count("\n") == 1
    assert UNSAFE.search(text.rstrip("\n")) is None
    assert ("\\u001b]52" if line_format == "json" else "\\x1b]52") in text


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


nested_values = st.recursive(
    st.none() | st.integers() | st.sampled_from(["[[{", "}]", "x", "\\"]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["a", "[{", "}"]), inner, max_size=3)
    ),
    max_leaves=40,
)


@given(nested_values, st.integers(1, 12), st.booleans())
def test_the_depth_limit_holds_on_the_fast_path_and_on_the_copy(
    value: object, limit: int, dirty: bool
) -> None:
    # A lone surrogate forces the copy; without one orjson's output is measured instead.
    value = [value, "\ud800"] if dirty else [value]
    if _depth(value) <= limit:
        assert valid_json(value, max_depth=limit) == valid_json(value)
    else:
        with pytest.raises(TooDeep):
            valid_json(value, max_depth=limit)
