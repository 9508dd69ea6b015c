"""The pieces every HTTP provider shares: token counts, usage blocks, the reported model, tool-call shapes."""

from __future__ import annotations

import pytest

from agentd.core.jsonvalue import JSONObject, JSONValue
from agentd.models import ToolCall, Usage
from agentd.models import anthropic as anth
from agentd.models import openai as oai
from agentd.models import responses as resp
from agentd.models._wire import estimated_usage, messages_usage, openai_usage, response_model, token_count
from agentd.models.base import MAX_TOOL_ARGUMENT_CHARS
from agentd.models.factory import ProviderConfig


@pytest.mark.parametrize(
    ("value", "count"),
    [(3, 3), (0, 0), (-1, None), (True, None), (False, None), (2.0, None), ("4", None), (None, None)],
)
def test_token_count_takes_only_non_negative_integers(value: object, count: int | None) -> None:
    assert token_count({"n": value}, "n") == count
    assert token_count({}, "n") is None


def test_messages_usage_adds_the_cache_counts_and_drops_hostile_figures() -> None:
    body: JSONObject = {
        "usage": {
            "input_tokens": 10,
            "output_tokens": 4,
            "cache_read_input_tokens": 100,
            "cache_creation_input_tokens": 7,
        }
    }
    assert messages_usage(body) == Usage(117, 4, 100, 7)
    hostile: JSONObject = {
        "usage": {"input_tokens": -5, "output_tokens": "many", "cache_read_input_tokens": True}
    }
    assert messages_usage(hostile) == Usage(0, 0, 0, 0)
    assert messages_usage({"usage": [1, 2]}) == Usage(0, 0)
    assert messages_usage({}) == Usage(0, 0)


@pytest.mark.parametrize(
    "usage",
    [
        None,
        "lots",
        {"prompt_tokens": True, "completion_tokens": 3},
        {"prompt_tokens": -1},
        {"completion_tokens": 3},
    ],
)
def test_openai_usage_estimates_when_the_usage_block_is_unusable(usage: JSONValue) -> None:
    body: JSONObject = {} if usage is None else {"usage": usage}
    call = ToolCall.from_raw("c1", "memo__get", '{"key": "k"}')
    got = openai_usage(
        body,
        "prompt_tokens",
        "completion_tokens",
        "prompt_tokens_details",
        estimated_input=42,
        text="four",
        calls=[call],
    )
    assert got == estimated_usage(42, "four", [call])
    assert got.input_tokens == 42
    assert got.output_tokens > 1


def test_responses_usage_with_a_hostile_input_count_is_estimated_like_chat_completions() -> None:
    body: JSONObject = {
        "output": [{"type": "message", "content": [{"type": "output_text", "text": "hi"}]}],
        "usage": {"input_tokens": True, "output_tokens": 5},
    }
    assert resp.parse_response(body, estimated_input=9).usage == Usage(9, 1)


def test_response_model_is_a_bounded_string_or_none() -> None:
    assert response_model({"model": "gpt-4o-2024-08-06"}) == "gpt-4o-2024-08-06"
    assert response_model({"model": "x" * 1000}) == "x" * 200
    assert response_model({"model": ""}) is None
    assert response_model({"model": 7}) is None
    assert response_model({}) is None


def test_arguments_sent_as_an_object_are_kept_with_their_json_text() -> None:
    call = ToolCall.from_object("c", "t", {"b": [1, 2], "a": "x"})
    assert (call.arguments, call.raw_arguments, call.error) == (
        {"b": [1, 2], "a": "x"},
        '{"b":[1,2],"a":"x"}',
        None,
    )
    huge = ToolCall.from_object("c", "t", {"v": "x" * MAX_TOOL_ARGUMENT_CHARS})
    assert huge.arguments is None
    assert "over the limit" in (huge.error or "")
    assert len(huge.raw_arguments) < 1000


def test_openai_and_anthropic_read_object_arguments_alike() -> None:
    chat = oai.parse_response(
        {
            "choices": [
                {"message": {"tool_calls": [{"id": "c", "function": {"name": "t", "arguments": {"k": 1}}}]}}
            ]
        }
    )
    messages = anth.parse_response(
        {"content": [{"type": "tool_use", "id": "c", "name": "t", "input": {"k": 1}}]}
    )
    assert chat.tool_calls == messages.tool_calls == [ToolCall.from_object("c", "t", {"k": 1})]


def test_a_rejected_call_carries_its_error_and_no_arguments() -> None:
    call = ToolCall.rejected("c", "t", "[1]", "not an object")
    assert (call.arguments, call.raw_arguments, call.error) == (None, "[1]", "not an object")


def test_provider_payload_round_trips_and_refuses_a_wrong_shape() -> None:
    config = ProviderConfig("local", "http://h/v1", "responses", "K", {"x": "y"}, "openai")
    assert ProviderConfig.from_payload(config.to_payload()) == config
    with pytest.raises(ValueError, match="not a provider table"):
        ProviderConfig.from_payload({**config.to_payload(), "api": "soap"})
    with pytest.raises(ValueError, match="not a provider table"):
        ProviderConfig.from_payload({**config.to_payload(), "headers": ["x"]})
