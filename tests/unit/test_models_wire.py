"""Pure request/response conversion for both HTTP providers, including odd compatible servers."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentd.errors import ModelError
from agentd.models import Message, ModelSettings, ToolCall
from agentd.models import anthropic as anth
from agentd.models import openai as oai

# --- OpenAI -----------------------------------------------------------------------------


def _oai(message: dict[str, Any], finish: str | None = "stop", **extra: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "message": message, "finish_reason": finish}], **extra}


def test_openai_tool_call_without_id_or_with_object_arguments() -> None:
    reply = oai.parse_response(
        _oai(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"type": "function", "function": {"name": "a", "arguments": {"x": 1}}},
                    {"id": "", "type": "function", "function": {"name": "b", "arguments": None}},
                    {"id": "c3", "type": "function", "function": {"name": "c", "arguments": 7}},
                ],
            },
            # some servers report "stop" even with tool calls
            finish="stop",
        ),
        estimated_input=12,
    )
    a, b, c = reply.tool_calls
    assert (a.id, a.arguments, a.raw_arguments) == ("call_0", {"x": 1}, '{"x":1}')
    assert (b.id, b.arguments, b.error) == ("call_1", {}, None)
    assert (c.id, c.arguments) == ("c3", None)
    assert c.error is not None
    assert "int, not an object" in c.error
    assert reply.stop == "tool_use"
    # no usage block: input as estimated by the caller, output from the characters
    assert reply.usage.input_tokens == 12
    assert reply.usage.output_tokens > 0


def test_openai_odd_usage_values_fall_back_to_estimates() -> None:
    reply = oai.parse_response(
        _oai({"content": "abcd"}, usage={"prompt_tokens": 5, "completion_tokens": "x"}), estimated_input=9
    )
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (5, 0)
    reply = oai.parse_response(_oai({"content": "abcd"}, usage={"prompt_tokens": True}), estimated_input=9)
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (9, 1)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, r"openai returned an unexpected response: choices\[0\] is missing"),
        ({"choices": []}, r"choices\[0\] is missing"),
        ({"choices": [{"finish_reason": "stop"}]}, r"choices\[0\]\.message is missing"),
        (_oai({"content": ["x"]}), r"choices\[0\]\.message\.content is list, expected a string"),
        (_oai({"tool_calls": ["x"]}), r"message\.tool_calls\[0\]\.function is missing"),
        (_oai({"tool_calls": 5}), r"message\.tool_calls is int, expected a list"),
        (
            _oai({"tool_calls": [{"function": {"arguments": "{}"}}]}),
            r"tool_calls\[0\]\.function\.name is missing or empty",
        ),
    ],
)
def test_openai_unusable_bodies(body: dict[str, Any], message: str) -> None:
    with pytest.raises(ModelError, match=message):
        oai.parse_response(body)


def test_openai_request_omits_empty_system_and_maps_invalid_calls() -> None:
    bad = ToolCall.from_raw("c1", "t", "{oops")
    body = oai.build_request(
        "m", system="", messages=[Message.user("u"), Message.assistant("thinking", [bad])], tools=[]
    )
    assert body == {
        "model": "m",
        "messages": [
            {"role": "user", "content": "u"},
            {
                "role": "assistant",
                "content": "thinking",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}
                ],
            },
        ],
    }


# --- Anthropic --------------------------------------------------------------------------


def test_anthropic_empty_assistant_turn_and_consecutive_users_merge() -> None:
    body = anth.build_request(
        "m",
        system=None,
        messages=[Message.user("a"), Message.assistant(""), Message.user("b"), Message.user("c")],
        tools=[],
        max_tokens=10,
        settings=ModelSettings(prompt_cache="off"),
    )
    assert body["messages"] == [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": [{"type": "text", "text": "NO_REPLY"}]},
        {"role": "user", "content": [{"type": "text", "text": "b"}, {"type": "text", "text": "c"}]},
    ]
    assert body["max_tokens"] == 10


def test_anthropic_invalid_call_is_sent_with_empty_input() -> None:
    bad = ToolCall(id="t1", name="x", arguments=None, raw_arguments="[1]", error="not an object")
    body = anth.build_request("m", system=None, messages=[Message.assistant("", [bad])], tools=[])
    assert body["messages"][0]["content"] == [
        {"type": "tool_use", "id": "t1", "name": "x", "input": {}, "cache_control": {"type": "ephemeral"}}
    ]


def test_anthropic_ignores_unknown_blocks_and_missing_usage() -> None:
    reply = anth.parse_response(
        {
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "s"},
                {"type": "text", "text": "a"},
                {"type": "text", "text": "b"},
            ],
            "stop_reason": "end_turn",
        }
    )
    assert (reply.text, reply.stop, reply.usage.input_tokens, reply.usage.output_tokens) == (
        "ab",
        "end",
        0,
        0,
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"content": "hi"}, r"anthropic returned an unexpected response: content is missing or not a list"),
        ({"content": [3]}, r"content\[0\] is not an object"),
        (
            {"content": [{"type": "tool_use", "name": "x", "input": {}}]},
            r"content\[0\]\.(id|name) of a tool_use block is missing",
        ),
    ],
)
def test_anthropic_unusable_bodies(body: dict[str, Any], message: str) -> None:
    with pytest.raises(ModelError, match=message):
        anth.parse_response(body)


# --- any JSON object: a reply or ModelError, never another exception ---------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=10,
)
_oai_keys = st.sampled_from(
    [
        "choices",
        "message",
        "content",
        "tool_calls",
        "function",
        "name",
        "arguments",
        "id",
        "refusal",
        "finish_reason",
        "usage",
        "prompt_tokens",
        "completion_tokens",
    ]
)
_anth_keys = st.sampled_from(
    [
        "content",
        "type",
        "text",
        "tool_use",
        "id",
        "name",
        "input",
        "stop_reason",
        "usage",
        "input_tokens",
        "output_tokens",
    ]
)


def _shaped(keys: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    return st.recursive(
        _json | st.sampled_from(["text", "tool_use", "stop", "tool_calls", "end_turn", "refusal"]),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=4),
        max_leaves=14,
    )


def _opt(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional=fields)


_oai_call = (
    _opt(id=_json, type=_json, function=_opt(name=_json, arguments=_json | st.just("{bad")) | _json) | _json
)
_oai_body = _opt(
    choices=st.lists(
        _opt(
            message=_opt(content=_json, refusal=_json, tool_calls=st.lists(_oai_call, max_size=2) | _json)
            | _json,
            finish_reason=st.sampled_from(["stop", "tool_calls", "length", "content_filter", "x"]) | _json,
        )
        | _json,
        max_size=2,
    )
    | _json,
    usage=_opt(prompt_tokens=_json, completion_tokens=_json) | _json,
)
_anth_block = _opt(
    type=st.sampled_from(["text", "tool_use", "thinking"]) | _json,
    text=_json,
    id=_json,
    name=_json,
    input=_json,
)
_anth_body = _opt(
    content=st.lists(_anth_block | _json, max_size=3) | _json,
    stop_reason=st.sampled_from(["end_turn", "tool_use", "max_tokens", "refusal", "x"]) | _json,
    usage=_opt(input_tokens=_json, output_tokens=_json) | _json,
)


@settings(max_examples=200, deadline=None)
@given(body=st.dictionaries(_oai_keys, _shaped(_oai_keys), max_size=4) | _oai_body)
def test_openai_parse_never_crashes(body: dict[str, Any]) -> None:
    try:
        reply = oai.parse_response(body)
    except ModelError:
        return
    assert reply.stop in ("end", "tool_use", "refusal", "max_tokens")


@settings(max_examples=200, deadline=None)
@given(body=st.dictionaries(_anth_keys, _shaped(_anth_keys), max_size=4) | _anth_body)
def test_anthropic_parse_never_crashes(body: dict[str, Any]) -> None:
    try:
        reply = anth.parse_response(body)
    except ModelError:
        return
    assert reply.stop in ("end", "tool_use", "refusal", "max_tokens")


def test_tool_arguments_nested_too_deeply_are_a_tool_error_not_a_crash() -> None:
    deep = '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"
    reply = oai.parse_response(
        _oai({"tool_calls": [{"id": "c1", "function": {"name": "t", "arguments": deep}}]})
    )
    (call,) = reply.tool_calls
    assert call.arguments is None
    assert call.error is not None
    assert "nested too deeply" in call.error
    assert len(call.raw_arguments) <= 200


def test_oversized_tool_arguments_are_not_parsed_and_not_kept() -> None:
    from agentd.models.base import MAX_TOOL_ARGUMENT_CHARS

    huge = '{"x": "' + "a" * MAX_TOOL_ARGUMENT_CHARS + '"}'
    reply = oai.parse_response(
        _oai({"tool_calls": [{"id": "c1", "function": {"name": "t", "arguments": huge}}]})
    )
    (call,) = reply.tool_calls
    assert call.error is not None
    assert f"over the limit of {MAX_TOOL_ARGUMENT_CHARS}" in call.error
    assert len(call.raw_arguments) <= 200
    body = anth.parse_response(
        {
            "content": [
                {"type": "tool_use", "id": "t1", "name": "t", "input": {"x": "a" * MAX_TOOL_ARGUMENT_CHARS}}
            ]
        }
    )
    assert body.tool_calls[0].error is not None
