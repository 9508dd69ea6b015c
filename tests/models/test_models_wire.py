"""Pure request/response conversion for both HTTP providers, including odd compatible servers."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentd.core.errors import ModelError
from agentd.models import Message, ModelSettings, Prompt, ToolCall, ToolSpec, Usage
from agentd.models import anthropic as anth
from agentd.models import openai as oai
from agentd.models import responses as resp
from tests.support.strategies import json_values

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
            r"tool_calls\[0\]\.function\.name is missing or not a string",
        ),
    ],
)
def test_openai_unusable_bodies(body: dict[str, Any], message: str) -> None:
    with pytest.raises(ModelError, match=message):
        oai.parse_response(body)


def test_openai_request_omits_empty_system_and_maps_invalid_calls() -> None:
    bad = ToolCall.from_raw("c1", "t", "{oops")
    body = oai.build_request(
        "m", Prompt(messages=[Message.user("u"), Message.assistant("thinking", [bad])], system="")
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
        Prompt(messages=[Message.user("a"), Message.assistant(""), Message.user("b"), Message.user("c")]),
        ModelSettings(prompt_cache="off", max_output_tokens=10),
    )
    assert body["messages"] == [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": [{"type": "text", "text": "NO_REPLY"}]},
        {"role": "user", "content": [{"type": "text", "text": "b"}, {"type": "text", "text": "c"}]},
    ]
    assert body["max_tokens"] == 10


def test_anthropic_invalid_call_is_sent_with_empty_input() -> None:
    bad = ToolCall(id="t1", name="x", arguments=None, raw_arguments="[1]", error="not an object")
    body = anth.build_request("m", Prompt(messages=[Message.assistant("", [bad])]))
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

_json = json_values(ints=3, text=5, keys=6, leaves=10)
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


# --- settings on each wire --------------------------------------------------------------

TOOL = ToolSpec(name="memo__get", description="d", input_schema={"type": "object"})
EVERY_OPENAI = ModelSettings(
    temperature=0.1,
    top_p=0.8,
    max_output_tokens=64,
    stop=("END",),
    reasoning_effort="minimal",
    parallel_tool_calls=False,
    tool_choice="memo__get",
    extra={"seed": 9, "temperature": 0.2},
)


def test_chat_completions_carries_every_setting_as_documented() -> None:
    body = oai.build_request("m", Prompt(messages=[Message.user("x")], tools=[TOOL]), EVERY_OPENAI)
    assert {k: v for k, v in body.items() if k not in ("model", "messages", "tools")} == {
        "max_completion_tokens": 64,
        "temperature": 0.2,  # extra is merged last: it wins
        "top_p": 0.8,
        "stop": ["END"],
        "reasoning_effort": "minimal",
        "parallel_tool_calls": False,
        "tool_choice": {"type": "function", "function": {"name": "memo__get"}},
        "seed": 9,
    }


def test_chat_completions_sends_tool_settings_only_with_tools() -> None:
    body = oai.build_request("m", Prompt(messages=[Message.user("x")]), EVERY_OPENAI)
    assert "parallel_tool_calls" not in body
    assert "tool_choice" not in body
    assert oai.tool_choice_field("required") == "required"


def test_openai_usage_cached_tokens_are_clamped_into_the_input() -> None:
    assert oai.usage_from(
        {"prompt_tokens": 100, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 64}},
        "prompt_tokens",
        "completion_tokens",
        "prompt_tokens_details",
    ) == Usage(100, 5, 64, 0)
    hostile = {"prompt_tokens": 10, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 99}}
    assert oai.usage_from(hostile, "prompt_tokens", "completion_tokens", "prompt_tokens_details") == Usage(
        10, 1, 10, 0
    )


@pytest.mark.parametrize(
    ("choice", "parallel", "field"),
    [
        (None, None, None),
        (None, True, None),
        (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
        ("auto", None, {"type": "auto"}),
        ("none", False, {"type": "none"}),
        ("required", None, {"type": "any"}),
        ("memo__get", False, {"type": "tool", "name": "memo__get", "disable_parallel_tool_use": True}),
    ],
)
def test_anthropic_tool_choice(choice: str | None, parallel: bool | None, field: Any) -> None:
    assert anth.tool_choice_field(choice, parallel) == field


def test_anthropic_carries_every_setting_as_documented() -> None:
    settings = ModelSettings(
        top_p=0.97,
        max_output_tokens=9000,
        stop=("END",),
        thinking_budget=4096,
        tool_choice="auto",
        prompt_cache="off",
        extra={"metadata": {"user_id": "u1"}},
    )
    body = anth.build_request("m", Prompt(messages=[Message.user("x")], system="s", tools=[TOOL]), settings)
    assert body == {
        "model": "m",
        "max_tokens": 9000,
        "messages": [{"role": "user", "content": "x"}],
        "system": "s",
        "tools": [{"name": "memo__get", "description": "d", "input_schema": {"type": "object"}}],
        "top_p": 0.97,
        "stop_sequences": ["END"],
        "thinking": {"type": "enabled", "budget_tokens": 4096},
        "tool_choice": {"type": "auto"},
        "metadata": {"user_id": "u1"},
    }


@pytest.mark.parametrize(
    ("model", "thinking", "limit"),
    [
        ("claude-sonnet-4-5", None, 16384),
        ("claude-3-5-haiku-latest", None, 8192),
        ("anthropic.claude-3-5-sonnet-20241022-v2:0", None, 8192),
        ("claude-3-haiku@20240307", None, 4096),
        ("claude-opus-4-1", 20000, 24096),
    ],
)
def test_anthropic_default_output_limit(model: str, thinking: int | None, limit: int) -> None:
    assert anth.default_max_output_tokens(model, thinking) == limit
    body = anth.build_request(
        model, Prompt(messages=[Message.user("x")]), ModelSettings(thinking_budget=thinking)
    )
    assert body["max_tokens"] == limit


def test_anthropic_cache_breakpoints_follow_the_conversation() -> None:
    """At most four: tools, system, the previous request's end and this request's end."""
    msgs = [
        Message.user("task"),
        Message.assistant("", [ToolCall(id="t1", name="memo__get", arguments={}, raw_arguments="{}")]),
        Message.tool_result("t1", "r1"),
        Message.assistant("", [ToolCall(id="t2", name="memo__get", arguments={}, raw_arguments="{}")]),
        Message.tool_result("t2", "r2"),
    ]
    body = anth.build_request("m", Prompt(messages=msgs, system="sys", tools=[TOOL]), ModelSettings())
    marked = [
        (i, b["type"])
        for i, m in enumerate(body["messages"])
        for b in (m["content"] if isinstance(m["content"], list) else [])
        if "cache_control" in b
    ]
    assert marked == [(2, "tool_result"), (4, "tool_result")]
    assert "cache_control" in body["tools"][-1]
    assert "cache_control" in body["system"][0]
    # The request before this one ended at messages[2]: the same blocks, the same breakpoint.
    earlier = anth.build_request("m", Prompt(messages=msgs[:3], system="sys", tools=[TOOL]), ModelSettings())
    assert earlier["messages"][2] == body["messages"][2]


def test_anthropic_cache_usage_makes_the_whole_input() -> None:
    reply = anth.parse_response(
        {
            "content": [{"type": "text", "text": "hi"}],
            "stop_reason": "end_turn",
            "usage": {
                "input_tokens": 10,
                "output_tokens": 3,
                "cache_read_input_tokens": 1000,
                "cache_creation_input_tokens": 200,
            },
        }
    )
    assert reply.usage == Usage(1210, 3, 1000, 200)


def test_anthropic_thinking_comes_back_only_to_its_own_wire() -> None:
    reply = anth.parse_response(
        {
            "content": [
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "tool_use", "id": "t1", "name": "memo__get", "input": {}},
            ],
            "stop_reason": "tool_use",
        }
    )
    msgs = [Message.user("x"), reply.as_message(), Message.tool_result("t1", "ok")]
    body = anth.build_request("m", Prompt(messages=msgs, tools=[TOOL]), ModelSettings(prompt_cache="off"))
    assert body["messages"][1]["content"][0] == {"type": "redacted_thinking", "data": "opaque"}
    chat = oai.build_request("m", Prompt(messages=msgs, tools=[TOOL]))
    assert "redacted_thinking" not in str(chat)


# --- Responses API ------------------------------------------------------------------------


def test_responses_request_items_and_settings() -> None:
    call = ToolCall(id="call_1", name="memo__get", arguments={"k": 1}, raw_arguments='{"k": 1}')
    bad = ToolCall(id="call_2", name="memo__get", arguments=None, raw_arguments="{x", error="bad json")
    msgs = [
        Message.user("go"),
        Message.assistant("checking", [call, bad]),
        Message.tool_result("call_1", "one"),
        Message.tool_result("call_2", "bad json", is_error=True),
    ]
    body = resp.build_request(
        "m",
        Prompt(messages=msgs, system="sys", tools=[TOOL]),
        ModelSettings(max_output_tokens=9, tool_choice="required", parallel_tool_calls=True, top_p=0.5),
    )
    assert body["input"] == [
        {"role": "user", "content": "go"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "checking"}]},
        {"type": "function_call", "call_id": "call_1", "name": "memo__get", "arguments": '{"k": 1}'},
        {"type": "function_call", "call_id": "call_2", "name": "memo__get", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "one"},
        {"type": "function_call_output", "call_id": "call_2", "output": "ERROR: bad json"},
    ]
    assert (body["instructions"], body["store"], body["max_output_tokens"], body["top_p"]) == (
        "sys",
        False,
        9,
        0.5,
    )
    assert (body["tool_choice"], body["parallel_tool_calls"]) == ("required", True)
    assert body["tools"] == [
        {
            "type": "function",
            "name": "memo__get",
            "description": "d",
            "parameters": {"type": "object"},
            "strict": False,
        }
    ]
    assert "include" not in body
    assert "reasoning" not in body
    forced = resp.build_request(
        "m", Prompt(messages=msgs, tools=[TOOL]), ModelSettings(tool_choice="memo__get")
    )
    assert forced["tool_choice"] == {"type": "function", "name": "memo__get"}


def test_responses_reply_mapping() -> None:
    body = {
        "status": "completed",
        "output": [
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [],
                "encrypted_content": "E",
                "status": "completed",
            },
            {
                "type": "message",
                "id": "msg_1",
                "content": [{"type": "output_text", "text": "a"}, {"type": "output_text", "text": "b"}],
            },
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "c1",
                "name": "memo__get",
                "arguments": '{"k": 2}',
            },
            {"type": "web_search_call", "id": "ws_1"},
        ],
        "usage": {"input_tokens": 50, "output_tokens": 7, "input_tokens_details": {"cached_tokens": 32}},
    }
    reply = resp.parse_response(body)
    assert (reply.text, reply.stop) == ("ab", "tool_use")
    assert [(c.id, c.arguments) for c in reply.tool_calls] == [("c1", {"k": 2})]
    assert reply.usage == Usage(50, 7, 32, 0)
    assert reply.provider_data == {
        "api": "responses",
        "reasoning": [{"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "E"}],
        "call_item_ids": {"c1": "fc_1"},
        "message_id": "msg_1",
    }
    again = resp.build_request("m", Prompt(messages=[Message.user("go"), reply.as_message()]))
    assert [i.get("type") for i in again["input"]] == [None, "reasoning", "message", "function_call"]
    assert again["input"][2]["id"] == "msg_1"
    assert again["input"][3]["id"] == "fc_1"


@pytest.mark.parametrize(
    ("body", "stop", "refusal"),
    [
        (
            {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}, "output": []},
            "max_tokens",
            None,
        ),
        (
            {"status": "incomplete", "incomplete_details": {"reason": "content_filter"}, "output": []},
            "refusal",
            oai.CONTENT_FILTER_REFUSAL,
        ),
        (
            {"output": [{"type": "message", "content": [{"type": "refusal", "refusal": "no"}]}]},
            "refusal",
            "no",
        ),
    ],
)
def test_responses_stops(body: dict[str, Any], stop: str, refusal: str | None) -> None:
    reply = resp.parse_response(body, estimated_input=4)
    assert (reply.stop, reply.refusal) == (stop, refusal)
    assert reply.usage.input_tokens == 4


def test_responses_malformed_bodies_name_the_field() -> None:
    with pytest.raises(
        ModelError, match=r"openai-responses returned an unexpected response: output is missing"
    ):
        resp.parse_response({"id": "x"})
    with pytest.raises(ModelError, match=r"output\[0\]\.name of a function_call item is missing"):
        resp.parse_response({"output": [{"type": "function_call", "call_id": "c"}]})
