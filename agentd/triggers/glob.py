"""URI glob patterns and the prefix index the router matches them through.

Pattern syntax (RFC 0010):

* ``*`` matches any run of characters inside one path segment (never ``/``);
* ``**`` matches any run of characters, ``/`` included; written as a whole
  segment (``a/**/b``) it also matches zero segments (``a/b``);
* ``?`` matches exactly one character other than ``/``;
* ``\\`` escapes the next character, so ``pods\\?ns=a`` matches a literal ``?``.

A pattern with no unescaped wildcard is *exact*: it matches only the identical
URI. The router never asks every glob whether it matches: :class:`GlobIndex`
buckets globs by the part of their literal prefix that ends at a ``/`` and only
tries the buckets whose key is a prefix of the URI, most specific first. The
matcher is hand-rolled (no ``fnmatch``, no regular expressions).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final, Generic, TypeVar

_STAR: Final = "*"
_DSTAR: Final = "**"
_QMARK: Final = "?"
_DSTAR_SEG: Final = "**/"
"""A whole ``**`` segment: zero or more complete segments, i.e. ``""`` or any text ending in ``/``."""

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Glob:
    """A compiled URI pattern.

    Attributes:
        pattern: the source text, as written.
        tokens: literal strings and wildcard markers (``*``, ``**``, ``?``,
            ``**/``); ``is_wild`` tells them apart, so an escaped ``\\*`` is
            a literal token even though its text is ``*``.
        is_wild: booleans parallel to ``tokens`` (True for a wildcard marker).
        prefix: the literal text before the first wildcard.
        suffix: the literal text after the last wildcard.
    """

    pattern: str
    tokens: tuple[str, ...]
    is_wild: tuple[bool, ...]
    prefix: str
    suffix: str
    single: str | None = None
    """The wildcard, when the pattern is ``prefix <one wildcard> suffix`` (fast path)."""

    @property
    def exact(self) -> bool:
        """True when the pattern has no wildcard and matches one URI only."""
        return not any(self.is_wild)

    @property
    def literal(self) -> str:
        """The literal URI an exact pattern matches (escapes removed)."""
        return "".join(self.tokens)

    def match(self, uri: str) -> bool:
        """Whether ``uri`` matches the whole pattern."""
        if not any(self.is_wild):
            return uri == self.prefix
        prefix, suffix = self.prefix, self.suffix
        if len(uri) < len(prefix) + len(suffix) or not uri.startswith(prefix) or not uri.endswith(suffix):
            return False
        # Fast paths for the common one-wildcard shapes (``dir/*.json``, ``dir/**``).
        single = self.single
        if single is not None:
            middle = uri[len(prefix) : len(uri) - len(suffix)]
            if single == _STAR:
                return "/" not in middle
            if single == _DSTAR:
                return True
            if single == _QMARK:
                return len(middle) == 1 and middle != "/"
            return not middle or middle[-1] == "/"  # _DSTAR_SEG
        return _match_tokens(self.tokens, self.is_wild, 0, uri, 0, set())


def _match_tokens(
    tokens: tuple[str, ...], is_wild: tuple[bool, ...], ti: int, s: str, si: int, failed: set[tuple[int, int]]
) -> bool:
    """Backtracking matcher with a memo of failed (token, position) pairs (linear in practice)."""
    while ti < len(tokens):
        tok = tokens[ti]
        if not is_wild[ti]:
            if not s.startswith(tok, si):
                return False
            si += len(tok)
            ti += 1
            continue
        if tok == _QMARK:
            if si >= len(s) or s[si] == "/":
                return False
            si += 1
            ti += 1
            continue
        key = (ti, si)
        if key in failed:
            return False
        if tok == _DSTAR_SEG:
            # Zero segments, or everything up to and including some later "/".
            if _match_tokens(tokens, is_wild, ti + 1, s, si, failed):
                return True
            end = s.find("/", si)
            while end != -1:
                if _match_tokens(tokens, is_wild, ti + 1, s, end + 1, failed):
                    return True
                end = s.find("/", end + 1)
            failed.add(key)
            return False
        # "*" may not cross "/"; "**" may.
        limit = len(s)
        if tok == _STAR:
            slash = s.find("/", si)
            limit = len(s) if slash == -1 else slash
        if ti + 1 == len(tokens):
            if limit == len(s):
                return True
            failed.add(key)
            return False
        for end in range(si, limit + 1):
            if _match_tokens(tokens, is_wild, ti + 1, s, end, failed):
                return True
        failed.add(key)
        return False
    return si == len(s)


def compile_glob(pattern: str, *, exact: bool = False) -> Glob:
    """Compile ``pattern`` (see the module docstring for the syntax).

    Args:
        pattern: the route's ``match`` text.
        exact: treat every character literally (self-subscribe routes: an
            agent subscribes to a concrete URI, query string and all).

    Raises:
        ValueError: the pattern is empty or ends in a lone backslash.
    """
    if not pattern:
        raise ValueError(
            "route match: '' is not valid: give an exact URI or a glob such as 'file:///in/*.json'"
        )
    if exact:
        return Glob(pattern, (pattern,), (False,), pattern, pattern)
    tokens: list[str] = []
    wild: list[bool] = []
    lit: list[str] = []

    def flush() -> None:
        if lit:
            tokens.append("".join(lit))
            wild.append(False)
            lit.clear()

    i = 0
    n = len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            if i + 1 >= n:
                raise ValueError(
                    f"route match: {pattern!r} ends in a lone backslash: escape it as '\\\\' or remove it"
                )
            lit.append(pattern[i + 1])
            i += 2
        elif c == "*":
            if i + 1 < n and pattern[i + 1] == "*":
                j = i + 2
                while j < n and pattern[j] == "*":
                    j += 1  # "***" is the same as "**".
                after_slash = (lit[-1] == "/") if lit else (not tokens or tokens[-1].endswith("/"))
                if after_slash and j < n and pattern[j] == "/":
                    flush()
                    tokens.append(_DSTAR_SEG)
                    wild.append(True)
                    i = j + 1
                    continue
                flush()
                tokens.append(_DSTAR)
                wild.append(True)
                i = j
            else:
                flush()
                tokens.append(_STAR)
                wild.append(True)
                i += 1
        elif c == "?":
            flush()
            tokens.append(_QMARK)
            wild.append(True)
            i += 1
        else:
            lit.append(c)
            i += 1
    flush()
    if not any(wild):
        literal = "".join(tokens)
        return Glob(pattern, (literal,), (False,), literal, literal)
    prefix = "" if wild[0] else tokens[0]
    suffix = "" if wild[-1] else tokens[-1]
    single = next(t for t, w in zip(tokens, wild, strict=True) if w) if sum(wild) == 1 else None
    return Glob(pattern, tuple(tokens), tuple(wild), prefix, suffix, single)


def is_glob(pattern: str) -> bool:
    """Whether ``pattern`` contains an unescaped wildcard."""
    return not compile_glob(pattern).exact


@dataclass(slots=True)
class _Entry(Generic[T]):
    glob: Glob
    order: tuple[int, int]
    value: T


@dataclass(slots=True)
class GlobIndex(Generic[T]):
    """Globs bucketed by the literal prefix up to and including its last ``/``.

    ``first(uri)`` returns the value of the most specific matching glob:
    longest literal prefix first, then the smallest ``order``. Cost is one
    dict probe per ``/`` in the URI that could start a bucket (bounded by the
    set of bucket key lengths), plus a match attempt per glob in the touched
    buckets whose literal prefix the URI starts with.
    """

    _buckets: dict[str, list[_Entry[T]]] = field(default_factory=dict)
    _key_lengths: dict[int, int] = field(default_factory=dict)
    """bucket key length -> number of buckets with that length."""
    _max_key: int = 0
    _count: int = 0

    def __len__(self) -> int:
        return self._count

    def add(self, glob: Glob, order: tuple[int, int], value: T) -> None:
        """Index ``glob`` with tie-break ``order`` (smaller wins among equal prefixes)."""
        key = glob.prefix[: glob.prefix.rfind("/") + 1]
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = []
            self._key_lengths[len(key)] = self._key_lengths.get(len(key), 0) + 1
            self._max_key = max(self._max_key, len(key))
        bucket.append(_Entry(glob, order, value))
        # Longest literal prefix first, then declaration order.
        bucket.sort(key=lambda e: (-len(e.glob.prefix), e.order))
        self._count += 1

    def remove(self, value: T) -> bool:
        """Remove the entry holding ``value`` (by identity); True if found."""
        for key, bucket in self._buckets.items():
            for i, e in enumerate(bucket):
                if e.value is value:
                    del bucket[i]
                    self._count -= 1
                    if not bucket:
                        del self._buckets[key]
                        left = self._key_lengths[len(key)] - 1
                        if left:
                            self._key_lengths[len(key)] = left
                        else:
                            del self._key_lengths[len(key)]
                            self._max_key = max(self._key_lengths, default=0)
                    return True
        return False

    def first(self, uri: str) -> T | None:
        """The value of the most specific glob matching ``uri``, or None."""
        if not self._count:
            return None
        buckets = self._buckets
        lengths = self._key_lengths
        pos = uri.rfind("/", 0, self._max_key)
        while True:
            klen = pos + 1
            if klen in lengths:
                bucket = buckets.get(uri[:klen])
                if bucket is not None:
                    for e in bucket:
                        if e.glob.match(uri):
                            return e.value
            if pos < 0:
                return None
            pos = uri.rfind("/", 0, pos)

    def __iter__(self) -> Iterator[tuple[Glob, tuple[int, int], T]]:
        for bucket in self._buckets.values():
            for e in bucket:
                yield e.glob, e.order, e.value
