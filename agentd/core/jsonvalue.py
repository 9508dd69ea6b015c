"""JSON values as they cross agentd's wire boundaries, typed so they are narrowed before use.

Everything agentd reads from the outside (an MCP server's resource body or tool
result, a provider's response, a child's frame, a configuration file) is a JSON
value of unknown shape until it has been checked. ``JSONValue`` says exactly
that: mypy lets code pass it on untouched, and makes code that reads a field
narrow it first, here with the small accessors below, which return ``None``
(never raise) when the shape is not the one asked for.

Data that agentd builds and only hands on (telemetry fields, a body for
``orjson.dumps``) is typed ``JSONObject`` when it is JSON by construction, or
``Mapping[str, object]`` when any value is accepted and serialised later.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias, TypeGuard

import orjson

JSONScalar: TypeAlias = str | int | float | bool | None
JSONValue: TypeAlias = "JSONScalar | list[JSONValue] | dict[str, JSONValue]"
JSONObject: TypeAlias = dict[str, JSONValue]
JSONArray: TypeAlias = list[JSONValue]


def loads(data: bytes | bytearray | memoryview | str) -> JSONValue:
    """Parse JSON text; raises ``orjson.JSONDecodeError`` (a ``ValueError``) on bad input."""
    value: JSONValue = orjson.loads(data)
    return value


def is_object(value: object) -> TypeGuard[JSONObject]:
    """True for a JSON object (a ``dict`` whose keys are strings, as JSON parsing yields)."""
    return isinstance(value, dict)


def as_object(value: object) -> JSONObject | None:
    """The value as a JSON object, or ``None`` when it is anything else."""
    return value if is_object(value) else None


def as_array(value: object) -> JSONArray | None:
    """The value as a JSON array, or ``None`` when it is anything else."""
    return value if isinstance(value, list) else None


def get_object(obj: Mapping[str, object], key: str) -> JSONObject | None:
    """``obj[key]`` when it is a JSON object, else ``None``."""
    return as_object(obj.get(key))


def get_array(obj: Mapping[str, object], key: str) -> JSONArray | None:
    """``obj[key]`` when it is a JSON array, else ``None``."""
    return as_array(obj.get(key))


def get_str(obj: Mapping[str, object], key: str) -> str | None:
    """``obj[key]`` when it is a string, else ``None``."""
    value = obj.get(key)
    return value if isinstance(value, str) else None


def get_int(obj: Mapping[str, object], key: str) -> int | None:
    """``obj[key]`` when it is an integer (a JSON ``true`` is not one), else ``None``."""
    value = obj.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def get_number(obj: Mapping[str, object], key: str) -> float | None:
    """``obj[key]`` as a float when it is a number (not a boolean), else ``None``."""
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def get_bool(obj: Mapping[str, object], key: str) -> bool | None:
    """``obj[key]`` when it is a boolean, else ``None``."""
    value = obj.get(key)
    return value if isinstance(value, bool) else None
