"""The JSON value accessors narrow what came off the wire and never raise on a wrong shape."""

from __future__ import annotations

import pytest

from agentd.core import jsonvalue as jv


def test_accessors_return_the_value_only_when_it_has_the_shape_asked_for() -> None:
    obj = jv.as_object(jv.loads(b'{"s": "x", "i": 3, "f": 1.5, "b": true, "o": {"k": 1}, "a": [1]}'))
    assert obj is not None
    assert jv.get_str(obj, "s") == "x"
    assert jv.get_int(obj, "i") == 3
    assert jv.get_number(obj, "f") == 1.5
    assert jv.get_number(obj, "i") == 3.0
    assert jv.get_bool(obj, "b") is True
    assert jv.get_object(obj, "o") == {"k": 1}
    assert jv.get_array(obj, "a") == [1]
    # wrong shapes and missing keys are None, not an exception
    assert jv.get_str(obj, "i") is None
    assert jv.get_int(obj, "b") is None  # a JSON true is not an integer
    assert jv.get_number(obj, "b") is None
    assert jv.get_object(obj, "a") is None
    assert jv.get_array(obj, "o") is None
    assert jv.get_str(obj, "missing") is None
    assert jv.as_object([1]) is None
    assert jv.as_array({"k": 1}) is None


def test_loads_refuses_bad_json_with_a_value_error() -> None:
    with pytest.raises(ValueError, match="line 1 column 2"):
        jv.loads(b"{not json")
