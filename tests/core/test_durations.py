"""Durations and sizes: the accepted forms, the rejections, and fuzzing."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentd.core.durations import (
    MAX_DIGITS,
    MAX_DURATION,
    ascii_int,
    ascii_number,
    format_duration,
    format_size,
    parse_duration,
    parse_size,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("250ms", 0.25),
        ("30s", 30.0),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("2d", 172800.0),
        ("1h30m", 5400.0),
        ("1m0.5s", 60.5),
        ("1.5", 1.5),
        ("0", 0.0),
        (".5s", 0.5),
        (" 10S ", 10.0),
        (3, 3.0),
        (0.25, 0.25),
    ],
)
def test_parse_duration_accepts(text: str | float, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "a duration cannot be empty; write a number of seconds"),
        ("   ", "a duration cannot be empty"),
        ("-1", "a duration cannot be negative"),
        ("-5s", "a duration cannot be negative"),
        (-0.5, "a duration cannot be negative"),
        ("nan", "not a duration; write"),
        ("inf", "not a duration"),
        (math.nan, "a duration must be finite"),
        (math.inf, "a duration must be finite"),
        ("5x", r"not a duration; write .*ms, s, m, h, d \(250ms, 30s, 5m, 1h, 1h30m\)"),
        ("1e3", "not a duration"),
        ("s", "not a duration"),
        ("1.2.3s", "not a duration"),
        ("5 m", "not a duration"),
        (True, "not a duration"),
        (None, "not a duration"),
        ("99999999999h", "a duration must be at most"),
        (MAX_DURATION * 2, "a duration must be at most"),
    ],
)
def test_parse_duration_rejects(text: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_duration(text)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (0.25, "250ms"), (1.5, "1.5s"), (30, "30s"), (90, "1m30s"), (3600, "1h"), (5400, "1h30m")],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("1024", 1024),
        (" 10MB ", 10_000_000),
        ("512KiB", 524_288),
        ("8MiB", 8 * 1024 * 1024),
        ("8mi", 8 * 1024 * 1024),
        ("1.5KB", 1500),
        ("2G", 2_000_000_000),
        ("0", 0),
        ("7b", 7),
        (4096, 4096),
    ],
)
def test_parse_size_accepts(text: str | int, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "a size cannot be empty"),
        ("-1", "a size cannot be negative"),
        (-1, "a size cannot be negative"),
        ("1.5B", "a size must be a whole number of bytes"),
        ("1.0000000000000000000000000000001KB", "a size must be a whole number of bytes"),
        ("10XB", r"not a size; write .*KiB, MiB"),
        ("MB", "not a size"),
        (True, "not a size"),
        (1.5, "not a size"),
        ("99999999999999TiB", "a size must be at most"),
    ],
)
def test_parse_size_rejects(text: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_size(text)  # type: ignore[arg-type]


def test_format_size() -> None:
    assert format_size(8 * 1024 * 1024) == "8MiB"
    assert format_size(1500) == "1500B"
    assert format_size(0) == "0B"
    assert parse_size(format_size(3 * 1024**3)) == 3 * 1024**3


@given(st.text(max_size=40))
def test_parse_duration_fuzz_text(text: str) -> None:
    try:
        value = parse_duration(text)
    except ValueError:
        return
    assert 0 <= value <= MAX_DURATION


@given(st.one_of(st.floats(), st.integers(), st.booleans(), st.none()))
def test_parse_duration_fuzz_numbers(value: object) -> None:
    try:
        out = parse_duration(value)  # type: ignore[arg-type]
    except ValueError:
        return
    assert 0 <= out <= MAX_DURATION


@given(
    st.lists(
        st.tuples(st.integers(0, 2_000), st.sampled_from(["ms", "s", "m", "h", "d", "MS", "H"])),
        min_size=1,
        max_size=4,
    )
)
def test_parse_duration_sums_parts(parts: list[tuple[int, str]]) -> None:
    text = "".join(f"{n}{u}" for n, u in parts)
    scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
    assert parse_duration(text) == pytest.approx(sum(n * scale[u.lower()] for n, u in parts))


@given(st.floats(min_value=0, max_value=MAX_DURATION, allow_nan=False))
def test_format_duration_round_trips(seconds: float) -> None:
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds, abs=0.0011, rel=1e-9)


@given(st.text(max_size=40))
def test_parse_size_fuzz_text(text: str) -> None:
    try:
        value = parse_size(text)
    except ValueError:
        return
    assert value >= 0


@given(st.integers(min_value=0, max_value=2**30), st.sampled_from(["", "B", "KB", "KiB", "MB", "MiB", "GiB"]))
def test_parse_size_units(n: int, unit: str) -> None:
    factor = {"": 1, "B": 1, "KB": 1000, "KiB": 1024, "MB": 10**6, "MiB": 2**20, "GiB": 2**30}[unit]
    assert parse_size(f"{n}{unit}") == n * factor


# Every other script's digits, superscripts, fractions and roman numerals: all "numbers" to
# str.isdigit()/isnumeric() (and int() reads the decimal ones: "١٢" is 12), none a number in a setting.
_NOT_ASCII_NUMERALS = st.characters(categories=("Nd", "No", "Nl"), exclude_characters="0123456789")


@given(
    before=st.text(alphabet="0123456789.-+eE", max_size=6),
    numeral=_NOT_ASCII_NUMERALS,
    after=st.text(alphabet="0123456789.-+eE", max_size=6),
)
def test_no_numeral_but_ascii_digits_is_ever_a_number(before: str, numeral: str, after: str) -> None:
    text = before + numeral + after
    for read in (ascii_int, ascii_number, lambda t: ascii_int(t, signed=True)):
        with pytest.raises(ValueError, match="ASCII digits 0-9"):
            read(text)


@given(st.text(max_size=12))
def test_what_the_number_readers_accept_is_ascii_and_means_what_int_and_float_say(text: str) -> None:
    for read, exact in ((ascii_int, int), (ascii_number, float)):
        try:
            value = read(text)
        except ValueError:
            continue
        assert text.isascii()
        assert text.strip() == text
        assert "_" not in text
        assert value == exact(text)


@pytest.mark.parametrize(
    "text", ["²", "١٢", "１２", "1_000", " 8", "8\n", "0x10", "+8", "-8", "", "8" * (MAX_DIGITS + 1)]
)
def test_ascii_int_refuses(text: str) -> None:
    with pytest.raises(ValueError, match=r"write a whole number as ASCII digits 0-9"):
        ascii_int(text)


@pytest.mark.parametrize("text", ["inf", "nan", "١.٥", "1e999", "1,5", "", "."])
def test_ascii_number_refuses(text: str) -> None:
    with pytest.raises(ValueError, match=r"ASCII digits|too large"):
        ascii_number(text)


def test_ascii_readers_accept() -> None:
    assert (ascii_int("0"), ascii_int("65535"), ascii_int("-3", signed=True)) == (0, 65535, -3)
    assert (ascii_number("0.5"), ascii_number(".5"), ascii_number("-2"), ascii_number("1e3")) == (
        0.5,
        0.5,
        -2.0,
        1000.0,
    )
