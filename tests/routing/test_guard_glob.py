"""Glob wildcards keep their meaning in every pattern shape (docs/testing.md)."""

from __future__ import annotations

import pytest

from agentd.triggers.glob import compile_glob


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
