"""Glob wildcards keep their meaning in every pattern shape (docs/testing.md)."""

from __future__ import annotations

import re

import pytest

from agentd.triggers.glob import GlobIndex, compile_glob


@pytest.mark.parametrize(
    ("pattern", "uri", "expected"),
    [
        # One wildcard (the fast path) and two or more (the backtracking matcher) agree.
        ("file:///in/?", "file:///in//", False),
        ("file:///in/?*", "file:///in//x", False),
        ("file:///in/*?", "file:///in/x/", False),
        ("file:///in/?/*", "file:///in///x", False),
        ("file:///in/??", "file:///in/a/", False),
        ("file:///in/**?", "file:///in/a/", False),
        ("file:///in/?*", "file:///in/ab", True),
        ("file:///in/*?", "file:///in/ab", True),
        ("file:///in/?/*", "file:///in/a/x", True),
        ("file:///in/**?", "file:///in/a/b", True),
        ("file:///in/a?c*", "file:///in/a/c", False),
        ("file:///in/a?c*", "file:///in/abcd", True),
        # "?" needs exactly one character: not zero, at the end or in the middle.
        ("file:///in/x?*", "file:///in/x", False),
        ("file:///in/*.?", "file:///in/a.", False),
    ],
)
def test_question_mark_is_one_character_other_than_slash(pattern: str, uri: str, expected: bool) -> None:
    assert compile_glob(pattern).match(uri) is expected


# -- several wildcards, "**/" among them: the backtracking matcher against the syntax's meaning ----------


def _meaning(pattern: str) -> re.Pattern[str]:
    """The module docstring's syntax as a regular expression (patterns without escapes)."""
    pattern = re.sub(r"\*{3,}", "**", pattern)  # "***" is "**"
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i) and (i == 0 or pattern[i - 1] == "/"):
            out.append("(?:.*/)?")  # a whole "**" segment: zero or more whole segments
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


PATTERNS = [
    "f:///**/docs/*.md",
    "f:///a/**/b/**/c",
    "f:///a/**/**/b",
    "f:///**/x?",
    "f:///*/**/z",
    "f:///**/*",
    "f:///**/a*b/**",
    "f:///a**b*c",
    "f:///*a*",
    "f:///*/*/*.md",
    "f:///***/x?",
    "f:///a***b*c",
    "f:///**/**/z",
    "f:///a?**/b",
    "f:///a/?*?**/z",
    "f:///a/b*/**/c",
    "f:///a/?**/b",
    "f:///a?/**/**/b",
    "**/**/z",
    "f:///*a*a*b",
    "f:///a/**/a/b*",
]
URIS = [
    "f:///docs/r.md",
    "f:///x/docs/r.md",
    "f:///x/y/docs/r.md",
    "f:///x/docs/s/r.md",
    "f:///xdocs/r.md",
    "f:///docs/r.mdx",
    "f:///a/b/c",
    "f:///a/c",
    "f:///a/b/b/c",
    "f:///a/x/b/y/c",
    "f:///a/x/b/y/c/d",
    "f:///a/b",
    "f:///a/x/y/b",
    "f:///a/xb",
    "f:///xy",
    "f:///q/xy",
    "f:///q/x/y",
    "f:///q/x",
    "f:///z",
    "f:///q/z",
    "f:///q/r/z",
    "f:///ab/c",
    "f:///q/ab/",
    "f:///q/axxb/r/s",
    "f:///q/a/b",
    "f:///abc",
    "f:///a/b/c/bc",
    "f:///xax",
    "f:///x/ax",
    "f:///p/q/r.md",
    "f:///p/q/r/s.md",
    "f:///",
    "f:///a/x/b",
    "f:///ax/b",
    "f:///aaaaaaaa",
    "f:///aaaab",
    "f:///aaa/b",
    "f:///a//x1",
    "f:///a/a/b",
    "f:///a/q/a/bz",
]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_patterns_with_several_wildcards_match_as_the_syntax_says(pattern: str) -> None:
    glob, meaning = compile_glob(pattern), _meaning(pattern)
    assert [u for u in URIS if glob.match(u)] == [u for u in URIS if meaning.fullmatch(u)]


# -- the index: removing a route leaves every other route findable -------------------------------------


def _index(*patterns: str) -> GlobIndex[str]:
    index: GlobIndex[str] = GlobIndex()
    for n, p in enumerate(patterns):
        index.add(compile_glob(p), (n, 0), p)
    return index


def test_removing_a_route_keeps_another_whose_prefix_has_the_same_length() -> None:
    index = _index("a://x/*", "b://y/*", "c://z/*")  # three buckets, keys of one length
    assert index.remove("a://x/*")
    assert index.first("b://y/1") == "b://y/*"
    assert index.remove("b://y/*")
    assert index.first("c://z/1") == "c://z/*"
    assert index.first("a://x/1") is None
    index.add(compile_glob("d://w/*"), (9, 0), "d://w/*")
    assert index.first("d://w/1") == "d://w/*"
    assert index.first("c://z/1") == "c://z/*"
    pair = _index("a://x/*", "b://y/*")
    assert pair.remove("a://x/*")
    assert pair.first("b://y/1") == "b://y/*"


def test_an_index_emptied_and_filled_again_finds_its_routes() -> None:
    index = _index("a://x/deep/*", "b://*")
    assert index.remove("a://x/deep/*")
    assert index.remove("b://*")
    assert len(index) == 0
    assert index.first("b://1") is None
    index.add(compile_glob("c://x/*"), (0, 0), "c://x/*")
    assert index.first("c://x/1") == "c://x/*"


def test_a_uri_starting_with_a_slash_finds_routes_keyed_at_its_start_and_before_it() -> None:
    assert _index("/*.json").first("/a.json") == "/*.json"
    assert _index("/in/*", "**").first("/x") == "**"
    assert _index("/in/deep/*", "/**.json").first("/x/a.json") == "/**.json"


def test_a_uri_too_short_for_both_the_prefix_and_the_suffix_does_not_match() -> None:
    # "f://aba" starts with "f://ab" and ends with "ba", but the two would overlap.
    assert not compile_glob("f://ab*ba").match("f://aba")
    assert compile_glob("f://ab*ba").match("f://abba")


def test_a_pattern_keeps_its_text() -> None:
    assert compile_glob("memo://a?b", exact=True).pattern == "memo://a?b"
    assert compile_glob("memo://a").pattern == "memo://a"
    assert compile_glob("memo://*").pattern == "memo://*"


def test_an_empty_pattern_is_refused_with_an_example() -> None:
    with pytest.raises(
        ValueError,
        match=r"^route match: '' is not valid: give an exact URI or a glob such as 'file:///in/\*\.json'$",
    ):
        compile_glob("")
