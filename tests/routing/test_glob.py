"""The hand-rolled URI glob matcher and its prefix index."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentd.triggers.glob import GlobIndex, compile_glob, is_glob


@pytest.mark.parametrize(
    ("pattern", "uri", "expected"),
    [
        ("file:///in/*.json", "file:///in/a.json", True),
        ("file:///in/*.json", "file:///in/.json", True),
        ("file:///in/*.json", "file:///in/a/b.json", False),  # * stays inside one segment
        ("file:///in/**.json", "file:///in/a/b.json", True),  # ** crosses segments
        ("file:///in/**", "file:///in/", True),
        ("a/**/b", "a/b", True),  # a whole ** segment may be empty
        ("a/**/b", "a/x/y/b", True),
        ("a/**/b", "ab", False),
        ("a/**/b", "a/xb", False),
        ("**/x", "x", True),
        ("**/x", "p/q/x", True),
        ("x?z", "xyz", True),
        ("x?z", "x/z", False),  # ? never matches /
        ("x?z", "xz", False),
        ("*a*b*", "xaybz", True),
        ("*a*b*", "xbya", False),
        ("a/*/c/*", "a/b/c/d", True),
        ("a/*/c/*", "a/b/x/c/d", False),
        ("mem://a", "mem://a", True),
        ("mem://a", "mem://ab", False),
        # Query strings: an escaped ? is literal; an unescaped ? is a one-char wildcard.
        ("kube-events://watch/pods\\?namespace=a", "kube-events://watch/pods?namespace=a", True),
        ("kube-events://watch/pods\\?namespace=a", "kube-events://watch/podsXnamespace=a", False),
        ("kube-events://watch/pods?namespace=*", "kube-events://watch/pods?namespace=a", True),
        ("kube-events://watch/pods\\?namespace=*", "kube-events://watch/pods?namespace=a/b", False),
        ("lit\\*star", "lit*star", True),
        ("lit\\*star", "litXstar", False),
    ],
)
def test_match(pattern: str, uri: str, expected: bool) -> None:
    assert compile_glob(pattern).match(uri) is expected


def test_exact_and_literal_prefix() -> None:
    assert compile_glob("kube-events://watch/pods\\?namespace=a").exact
    assert not is_glob("mem://a")
    assert is_glob("mem://*")
    g = compile_glob("file:///in/a*.json")
    assert (g.prefix, g.suffix) == ("file:///in/a", ".json")
    # exact=True: every character literal (self-subscribe of a URI with a query string).
    e = compile_glob("kube-events://watch/pods?namespace=a", exact=True)
    assert e.exact
    assert e.match("kube-events://watch/pods?namespace=a")
    assert not e.match("kube-events://watch/podsXnamespace=a")


def test_bad_patterns() -> None:
    with pytest.raises(ValueError, match=r"route match: '' is not valid: give an exact URI or a glob"):
        compile_glob("")
    with pytest.raises(ValueError, match=r"ends in a lone backslash: escape it"):
        compile_glob("mem://a\\")


def test_index_prefers_longest_literal_prefix_then_order() -> None:
    idx: GlobIndex[str] = GlobIndex()
    idx.add(compile_glob("file:///**"), (1, 0), "all")
    idx.add(compile_glob("file:///in/*"), (1, 1), "in-any")
    idx.add(compile_glob("file:///in/a*"), (1, 2), "in-a")
    idx.add(compile_glob("file:///in/a*"), (1, 3), "in-a-later")
    idx.add(compile_glob("file:///in/a*"), (0, 9), "in-a-front")
    assert idx.first("file:///in/abc") == "in-a-front"
    assert idx.first("file:///in/xyz") == "in-any"
    assert idx.first("file:///out/q") == "all"
    assert idx.first("http://x") is None
    assert idx.remove("in-a-front")
    assert idx.first("file:///in/abc") == "in-a"
    assert not idx.remove("nope")
    assert len(idx) == 4
    assert len(list(idx)) == 4


# ---- property: the matcher agrees with an independent regex translation ----


def _reference(pattern: str) -> re.Pattern[str]:
    out = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            out.append(re.escape(pattern[i + 1]))
            i += 2
        elif pattern.startswith("**", i):
            j = i
            while j < len(pattern) and pattern[j] == "*":
                j += 1
            prev_slash = i == 0 or pattern[i - 1] == "/"
            if prev_slash and j < len(pattern) and pattern[j] == "/":
                out.append("(?:.*/)?")
                i = j + 1
            else:
                out.append(".*")
                i = j
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(c))
            i += 1
    return re.compile("".join(out), re.DOTALL)


_alphabet = st.sampled_from(["a", "b", "/", "*", "?", "**", "/**/", "x.y", "\\?"])
_uri_alphabet = st.sampled_from(["a", "b", "/", "?", "x.y", "*"])


@given(
    st.lists(_alphabet, min_size=1, max_size=8).map("".join),
    st.lists(_uri_alphabet, max_size=10).map("".join),
)
def test_matches_reference(pattern: str, uri: str) -> None:
    assert compile_glob(pattern).match(uri) == bool(_reference(pattern).fullmatch(uri))
