"""Text from outside agentd, made safe to encode and safe to show (rfcs/0270).

A model can emit any string: lone surrogates (a JSON ``"\\ud800"`` escape
decodes to one), control characters, NULs, arguments nested a thousand
levels deep. Two things can go wrong with such a string:

* **Encoding.** UTF-8 has no bytes for a lone surrogate, so every encoder
  agentd uses (orjson, pydantic, ``str.encode``) refuses it.
  :func:`valid_text` and :func:`valid_json` replace each lone surrogate by
  U+FFFD (a surrogate pair held as two code points is joined into its
  character, not replaced); :func:`valid_json` also refuses, with
  :class:`TooDeep`, a value nested deeper than the caller allows.
  :func:`json_bytes` writes any JSON value (orjson when it can). Control
  characters and NULs are valid Unicode: JSON carries them losslessly, so
  these functions keep them.
* **Showing.** A terminal obeys control characters: ESC and the C1 controls
  start sequences that move the cursor, erase lines, recolour text or set
  the clipboard (OSC 52). :func:`escape_controls` shows each of them, and
  the characters that reorder or break a line, as a visible escape
  (``\\x1b``, ``\\u009b``), so text chosen by a model cannot act on the
  operator's terminal or fake a log line. Every line agentd writes for a
  person goes through it (the text log format, ``agentd check``'s
  messages); :func:`escape_json_controls` does the same for JSON lines
  without changing their value.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any, Final

import orjson

#: What a lone surrogate becomes (the Unicode replacement character).
REPLACEMENT: Final = "\ufffd"

_SURROGATE = re.compile("[\ud800-\udfff]")

#: Characters a terminal acts on or that change how a line reads: C0 controls,
#: DEL, C1 controls, the bidirectional overrides and isolates (they reorder
#: what follows them), the line and paragraph separators, and lone surrogates
#: (no character to show).
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


class TooDeep(ValueError):
    """A JSON value is nested deeper than allowed (``max_depth`` containers)."""


def valid_text(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD; ``text`` itself when it has none.

    A high and a low surrogate next to each other are joined into the
    character they encode (what the model meant), never replaced.
    """
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def valid_json(value: object, *, max_depth: int | None = None) -> object:
    """A decoded JSON value that every JSON encoder agentd uses accepts.

    The value itself when orjson writes it as it is (no lone surrogate, no
    integer past 64 bits) within ``max_depth``: the common case, checked at
    orjson's speed. Otherwise a copy: strings (keys too) through
    :func:`valid_text`, a NaN or an infinity as None (JSON has neither;
    orjson and pydantic write them as ``null``, which is why a value
    returned as it is may keep one), tuples as lists, everything else as it
    is (integers of any size included: JSON allows them). The copy is made
    without recursion, so any depth a parser produced can be checked.

    Raises:
        TooDeep: ``value`` has containers nested more than ``max_depth`` deep
            (``{}`` is depth 1); None: no limit.
    """
    if not isinstance(value, dict | list | tuple):
        return _valid_scalar(value)
    limit = max_depth if max_depth is not None else -1
    if limit == 0:
        raise TooDeep(f"nested more than {max_depth} levels deep")
    try:
        written = orjson.dumps(value)
    except TypeError:  # a lone surrogate, a big integer, nesting past 255, a key that is no string
        pass
    else:
        if limit < 0 or _nests_within(written, limit):
            return value
        raise TooDeep(f"nested more than {max_depth} levels deep")
    root: dict[Any, object] | list[object] = {} if isinstance(value, dict) else []
    stack: list[tuple[Any, dict[Any, object] | list[object], int]] = [(value, root, 1)]
    while stack:
        source, copy, depth = stack.pop()
        pairs = source.items() if isinstance(source, dict) else enumerate(source)
        into = copy.__setitem__ if isinstance(copy, dict) else (lambda _k, v, add=copy.append: add(v))
        keyed = isinstance(copy, dict)
        for key, item in pairs:
            kind = type(item)
            if kind is str:  # the common case, inlined: ASCII needs nothing
                new: object = item if item.isascii() else valid_text(item)
            elif kind is dict or kind is list or kind is tuple:
                if depth == limit:
                    raise TooDeep(f"nested more than {max_depth} levels deep")
                child: dict[Any, object] | list[object] = {} if kind is dict else []
                stack.append((item, child, depth + 1))
                new = child
            else:
                new = _valid_scalar(item)
            if keyed and type(key) is str and not key.isascii():
                key = valid_text(key)
            into(key, new)
    return root


#: A JSON string in orjson's output (escapes respected).
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
#: Every byte but the four brackets.
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
#: Braces as brackets.
_ONE_KIND = bytes.maketrans(b"{}", b"[]")


def _nests_within(written: bytes, limit: int) -> bool:
    """Whether the JSON text ``written`` nests at most ``limit`` containers deep (C-speed passes)."""
    if written.count(b"[") + written.count(b"{") <= limit:
        return True
    # Objects and arrays alike: valid JSON nests them properly, so depth is the brackets' depth.
    brackets = _JSON_STRING.sub(b"", written).translate(_ONE_KIND, _NOT_BRACKETS)
    depth = 0
    while brackets:  # each pass removes the innermost level (replace does not re-scan what it made)
        depth += 1
        if depth > limit:
            return False
        brackets = brackets.replace(b"[]", b"")
    return True


def _valid_scalar(value: object) -> object:
    if isinstance(value, str):
        return valid_text(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def json_bytes(
    value: object, *, sort_keys: bool = False, default: Callable[[Any], Any] | None = None
) -> bytes:
    """``value`` as compact JSON in UTF-8, whatever strings and numbers it holds.

    orjson writes it when it can (the fast path). A value orjson refuses (a
    lone surrogate, an integer past 64 bits, nesting past its 255 levels) is
    written by the standard library after :func:`valid_json`; ``default``
    turns what is not JSON into JSON on either path.

    Raises:
        TooDeep: the value is nested too deeply for either encoder.
        TypeError: a value is not JSON and ``default`` did not make it JSON (as orjson).
    """
    try:
        return orjson.dumps(value, default=default, option=orjson.OPT_SORT_KEYS if sort_keys else 0)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        pass
    try:
        text = json.dumps(
            valid_json(value), ensure_ascii=False, separators=(",", ":"), sort_keys=sort_keys, default=default
        )
    except RecursionError:
        raise TooDeep("nested too deeply to write as JSON") from None
    return valid_text(text).encode()


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x80 else f"\\u{code:04x}"


#: The UTF-8 bytes of the characters :func:`escape_controls` escapes that a JSON
#: encoder writes as they are (it escapes C0 controls itself): C1 controls, the
#: bidirectional controls, the line and paragraph separators. In valid UTF-8
#: these byte sequences are those characters and nothing else.
_RAW_IN_JSON = re.compile(rb"\x7f|\xc2[\x80-\x9f]|\xd8\x9c|\xe2\x80[\x8e\x8f\xa8-\xae]|\xe2\x81[\xa6-\xa9]")


def _json_escape(match: re.Match[bytes]) -> bytes:
    return b"\\u%04x" % ord(match.group().decode())


def escape_json_controls(line: bytes) -> bytes:
    """A JSON text (UTF-8) with the characters a terminal would act on written as ``\\u`` escapes.

    The same JSON value, byte for byte elsewhere: C1 controls (``\\u009b``),
    bidirectional controls and line separators can only stand inside JSON
    strings, where an escape means the same character. Someone reading the
    NDJSON stream on a terminal (``kubectl logs``) sees them as text. DEL,
    which JSON writers leave raw, is escaped too.
    """
    if b"\xc2" not in line and b"\xe2" not in line and b"\xd8" not in line and b"\x7f" not in line:
        return line
    return _RAW_IN_JSON.sub(_json_escape, line)


def escape_controls(text: str) -> str:
    """``text`` as a person may see it on a terminal: every control character shown escaped.

    C0 controls (newline as ``\\n``, carriage return ``\\r``, tab ``\\t``,
    ESC as ``\\x1b``, NUL ``\\x00``), DEL, C1 controls (``\\u009b``, the
    one-byte CSI), bidirectional controls, line and paragraph separators
    and lone surrogates become visible escapes; everything else is kept.
    The result is one line that writes nothing but its own characters.
    """
    if text.isprintable():  # the common case: nothing to escape
        return text
    return _UNSAFE.sub(_escape, text)


__all__ = [
    "REPLACEMENT",
    "TooDeep",
    "escape_controls",
    "escape_json_controls",
    "json_bytes",
    "valid_json",
    "valid_text",
]
