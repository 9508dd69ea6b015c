"""Hypothesis strategies shared by the fuzz tests."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st


def json_values(
    *, ints: int, text: int, keys: int, leaves: int, floats: bool = False
) -> st.SearchStrategy[Any]:
    """Any JSON value: null, booleans, integers in ``±ints``, (finite floats,) texts up to ``text``
    characters, and lists and objects of them (keys up to ``keys`` characters), ``leaves`` scalars at most."""
    scalars = st.none() | st.booleans() | st.integers(-ints, ints) | st.text(max_size=text)
    if floats:
        scalars |= st.floats(allow_nan=False)
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=keys), inner, max_size=3)
        ),
        max_leaves=leaves,
    )
