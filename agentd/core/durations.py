"""Durations, byte sizes and plain numbers as people write them in flags, env and TOML.

``ascii_int`` and ``ascii_number`` read a number written in ASCII digits and
refuse anything else: ``str.isdigit`` is true for ``²`` and for other
scripts' digits, and ``int`` / ``float`` read ``١٢`` as 12, so neither may
judge text from outside (a flag, a variable, a file, a header).
``parse_duration`` turns ``"250ms"``, ``"30s"``, ``"5m"``, ``"1h"``, ``"1h30m"``
or plain seconds (``"1.5"``, or a number) into float seconds;
``format_duration`` is its inverse for display. ``parse_size`` turns ``"10MB"``,
``"512KiB"`` or plain bytes into an int.

Both parsers raise :class:`ValueError` (never anything else) with a message
that lists the accepted forms; :mod:`agentd.config` turns that into a
:class:`~agentd.core.errors.ConfigError` naming the setting.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation, localcontext

__all__ = [
    "DURATION_FORMS",
    "MAX_DIGITS",
    "MAX_DURATION",
    "MAX_SIZE",
    "SIZE_FORMS",
    "ascii_int",
    "ascii_number",
    "format_duration",
    "format_size",
    "parse_duration",
    "parse_size",
]

#: Longest duration accepted (about 31.7 years). Anything longer is a typo,
#: and keeping values far below float/timedelta limits keeps deadline
#: arithmetic exact everywhere downstream.
MAX_DURATION = 1e9

#: Largest size accepted (8 EiB - 1, the largest signed 64-bit value), so
#: sizes fit every API they are passed to.
MAX_SIZE = 2**63 - 1

DURATION_FORMS = "a number of seconds (1.5) or numbers with units ms, s, m, h, d (250ms, 30s, 5m, 1h, 1h30m)"
SIZE_FORMS = (
    "a number of bytes (1048576) or a number with a unit: B, KB, MB, GB, TB (powers of 1000) "
    "or KiB, MiB, GiB, TiB (powers of 1024), e.g. 10MB, 512KiB"
)

#: Most digits a number read by :func:`ascii_int` or :func:`ascii_number` may have: no setting
#: needs more than a 64-bit value's 19, and ``int`` refuses past 4,300 with a message about itself.
MAX_DIGITS = 64

_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
# ``[0-9]``, never ``\d``: in a str pattern ``\d`` matches every script's digits.
_UNSIGNED = re.compile(r"[0-9]+")
_SIGNED = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(rf"[+-]?{_NUMBER}(?:[eE][+-]?[0-9]+)?")
_PLAIN = re.compile(rf"{_NUMBER}")
_DURATION_PART = re.compile(rf"({_NUMBER})(ms|s|m|h|d)")
_DURATION_WHOLE = re.compile(rf"(?:{_NUMBER}(?:ms|s|m|h|d))+")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}

_SIZE = re.compile(rf"({_NUMBER})([a-z]*)")
_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "ki": 1024,
    "kib": 1024,
    "mi": 1024**2,
    "mib": 1024**2,
    "gi": 1024**3,
    "gib": 1024**3,
    "ti": 1024**4,
    "tib": 1024**4,
}


def ascii_int(text: str, *, signed: bool = False) -> int:
    """``text`` as an int, when it is a whole number written in ASCII digits ``0-9``.

    A ``+`` or ``-`` first only when ``signed``; no white space, no ``_``, at
    most :data:`MAX_DIGITS` digits. Callers strip what they allow around it.

    Raises:
        ValueError: anything else (``²``, ``١٢``, ``1_000``, `` 8``, ``0x10``); the message
            says how the number is written, for the caller to put after the setting's name.
    """
    pattern = _SIGNED if signed else _UNSIGNED
    if not isinstance(text, str) or len(text.lstrip("+-")) > MAX_DIGITS or not pattern.fullmatch(text):
        sign = "an optional - and " if signed else ""
        raise ValueError(f"write a whole number as {sign}ASCII digits 0-9, e.g. 8")
    return int(text)


def ascii_number(text: str) -> float:
    """``text`` as a finite float, when it is a decimal number written in ASCII (``0.5``, ``-2``, ``1e3``).

    No ``inf``, ``nan``, white space or ``_``; at most :data:`MAX_DIGITS` characters.

    Raises:
        ValueError: anything else; the message says how the number is written.
    """
    if not isinstance(text, str) or len(text) > MAX_DIGITS or not _DECIMAL.fullmatch(text):
        raise ValueError("write a number as ASCII digits 0-9 with an optional - and decimal point, e.g. 0.5")
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"{text!r} is too large; write a smaller number")
    return value


def _check_seconds(value: float) -> float:
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"a duration must be finite; write {DURATION_FORMS}")
    if value < 0:
        raise ValueError(f"a duration cannot be negative; write {DURATION_FORMS}")
    if value > MAX_DURATION:
        raise ValueError(f"a duration must be at most {MAX_DURATION:.0f}s (about 31 years)")
    return float(value)


def parse_duration(text: str | float | int) -> float:
    """Parse a duration into seconds.

    Args:
        text: ``"250ms"``, ``"30s"``, ``"5m"``, ``"1h"``, ``"2d"``, a sum of
            those (``"1h30m"``), plain seconds (``"1.5"``), or an int/float
            of seconds (as TOML gives them). Units are case-insensitive;
            surrounding whitespace is ignored.

    Returns:
        Non-negative, finite seconds, at most :data:`MAX_DURATION`.

    Raises:
        ValueError: empty, negative, NaN/infinite, too long, a bool, or an
            unknown unit; the message lists the accepted forms.
    """
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        raise ValueError(f"not a duration; write {DURATION_FORMS}")
    if isinstance(text, int | float):
        return _check_seconds(float(text))
    s = text.strip().lower()
    if not s:
        raise ValueError(f"a duration cannot be empty; write {DURATION_FORMS}")
    if s.startswith("-"):
        raise ValueError(f"a duration cannot be negative; write {DURATION_FORMS}")
    if _PLAIN.fullmatch(s):
        return _check_seconds(float(s))
    if not _DURATION_WHOLE.fullmatch(s):
        raise ValueError(f"not a duration; write {DURATION_FORMS}")
    # Milliseconds divide rather than multiply by 0.001 so "700ms" is exactly 0.7.
    total = sum(
        float(num) / 1000 if unit == "ms" else float(num) * _UNIT_SECONDS[unit]
        for num, unit in _DURATION_PART.findall(s)
    )
    return _check_seconds(total)


def _trim(number: float) -> str:
    """Shortest fixed-point text for ``number`` at millisecond precision."""
    out = f"{number:.3f}".rstrip("0").rstrip(".")
    return out or "0"


def format_duration(seconds: float) -> str:
    """Render seconds the way :func:`parse_duration` reads them back.

    ``0.25 -> "250ms"``, ``30 -> "30s"``, ``90 -> "1m30s"``, ``5400 -> "1h30m"``,
    ``1.5 -> "1.5s"``. Precision is one millisecond. Negative, NaN and
    infinite inputs raise :class:`ValueError`.
    """
    value = _check_seconds(float(seconds))
    if value == 0:
        return "0s"
    if value < 1:
        return f"{_trim(value * 1000)}ms"
    hours = int(value // 3600)
    minutes = int((value - hours * 3600) // 60)
    rest = value - hours * 3600 - minutes * 60
    parts = []
    if hours:
        parts.append(f"{hours}h")
    if minutes:
        parts.append(f"{minutes}m")
    if _trim(rest) != "0" or not parts:
        parts.append(f"{_trim(rest)}s")
    return "".join(parts)


def parse_size(text: str | int) -> int:
    """Parse a byte size.

    Args:
        text: plain bytes (``"1048576"`` or an int), or a number with a
            unit: ``B``; ``KB``/``MB``/``GB``/``TB`` (powers of 1000, also
            written ``K``/``M``/``G``/``T``); ``KiB``/``MiB``/``GiB``/``TiB``
            (powers of 1024, also ``Ki``/``Mi``/``Gi``/``Ti``).
            Case-insensitive; fractions allowed when the result is a whole
            number of bytes (``"1.5KB"`` is 1500).

    Returns:
        A non-negative number of bytes, at most :data:`MAX_SIZE`.

    Raises:
        ValueError: empty, negative, fractional bytes, too large, a bool, or
            an unknown unit; the message lists the accepted forms.
    """
    if isinstance(text, bool) or not isinstance(text, str | int):
        raise ValueError(f"not a size; write {SIZE_FORMS}")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"a size cannot be negative; write {SIZE_FORMS}")
        if text > MAX_SIZE:
            raise ValueError(f"a size must be at most {MAX_SIZE} bytes")
        return text
    s = text.strip().lower()
    if not s:
        raise ValueError(f"a size cannot be empty; write {SIZE_FORMS}")
    if s.startswith("-"):
        raise ValueError(f"a size cannot be negative; write {SIZE_FORMS}")
    m = _SIZE.fullmatch(s)
    if m is None or m.group(2) not in _SIZE_UNITS:
        raise ValueError(f"not a size; write {SIZE_FORMS}")
    try:
        # Enough precision that no digit of the input is rounded away, so a
        # fractional byte count is always seen as fractional.
        with localcontext() as ctx:
            ctx.prec = len(m.group(1)) + 20
            exact = Decimal(m.group(1)) * _SIZE_UNITS[m.group(2)]
    except InvalidOperation:  # pragma: no cover - the regex admits only decimal literals
        raise ValueError(f"not a size; write {SIZE_FORMS}") from None
    if exact != exact.to_integral_value():
        raise ValueError(f"a size must be a whole number of bytes; write {SIZE_FORMS}")
    if exact > MAX_SIZE:
        raise ValueError(f"a size must be at most {MAX_SIZE} bytes")
    return int(exact)


def format_size(size: int) -> str:
    """Render bytes compactly and exactly: ``8388608 -> "8MiB"``, ``1500 -> "1500B"``."""
    for unit, factor in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size and size % factor == 0:
            return f"{size // factor}{unit}"
    return f"{size}B"
