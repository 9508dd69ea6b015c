"""The control frames' model fields: cached tokens and cost in usage reports, settings and endpoints at spawn."""

from __future__ import annotations

import math

import orjson
import pytest

from agentd.core.errors import ProtocolError
from agentd.selfmcp.protocol import (
    MAX_CALL_COST_USD,
    ProviderFrame,
    SpawnPayload,
    UsageReport,
    encode,
    parse_child_frame,
    parse_supervisor_frame,
)


def _usage(**fields: object) -> bytes:
    return orjson.dumps({"type": "usage", "id": 1, "input_tokens": 100, "output_tokens": 5, **fields})


def test_usage_carries_cached_tokens_and_cost() -> None:
    frame = parse_child_frame(_usage(cached_input_tokens=60, cache_creation_input_tokens=40, cost_usd=0.0012))
    assert isinstance(frame, UsageReport)
    assert (frame.cached_input_tokens, frame.cache_creation_input_tokens, frame.cost_usd) == (60, 40, 0.0012)
    unknown = parse_child_frame(_usage())
    assert isinstance(unknown, UsageReport)
    assert unknown.cost_usd is None


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"cached_input_tokens": 80, "cache_creation_input_tokens": 40}, "exceed input_tokens"),
        ({"cost_usd": -0.01}, "cost_usd"),
        ({"cost_usd": MAX_CALL_COST_USD * 2}, "cost_usd"),
        ({"cost_usd": "0.1"}, "cost_usd"),
        ({"cached_input_tokens": -1}, "cached_input_tokens"),
    ],
)
def test_a_usage_report_out_of_bounds_is_a_protocol_error(fields: dict[str, object], problem: str) -> None:
    with pytest.raises(ProtocolError, match=problem):
        parse_child_frame(_usage(**fields))


@pytest.mark.parametrize("literal", [b"NaN", b"Infinity", b"1e400"])
def test_a_non_finite_cost_is_refused(literal: bytes) -> None:
    line = b'{"type": "usage", "id": 1, "input_tokens": 1, "output_tokens": 1, "cost_usd": ' + literal + b"}"
    with pytest.raises(ProtocolError):
        parse_child_frame(line)


def test_spawn_payload_round_trips_settings_and_endpoints() -> None:
    payload = SpawnPayload(
        agent="a1",
        model="local:qwen",
        instruction="hi",
        model_settings={"temperature": 0.2, "stop": ["END"], "extra": {"seed": 1}},
        providers={
            "local": ProviderFrame(name="local", base_url="http://127.0.0.1:8000/v1", headers={"X": "y"})
        },
    )
    back = parse_supervisor_frame(encode(payload))
    assert back == payload


def test_a_child_clamps_what_a_provider_reports() -> None:
    from agentd.agent.child import _cost

    assert [_cost(v) for v in (0.5, -1.0, math.inf, True, None, MAX_CALL_COST_USD + 1)] == [
        0.5,
        None,
        None,
        None,
        None,
        None,
    ]
