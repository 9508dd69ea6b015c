"""Model output made valid where it enters agentd: the provider answer, the tool call, the reply."""

from __future__ import annotations

import functools
import json

import orjson
import pytest

from agentd.core.safetext import REPLACEMENT
from agentd.models import ModelReply, ToolCall, valid_reply
from agentd.models import anthropic as anth
from agentd.models import openai as oai
from agentd.models._http import DECODE_DEPTH, _flattened, decode_answer
from agentd.models.base import MAX_TOOL_ARGUMENT_DEPTH, MAX_TOOL_NAME_CHARS, Usage

U = REPLACEMENT


def test_an_answer_with_lone_surrogate_escapes_is_read_with_the_replacement_character() -> None:
    raw = json.dumps({"choices": [{"message": {"content": "hi \ud800", "refusal": None}}]}).encode()
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(raw)  # what made a reply "not JSON" (exit 4) before
    assert decode_answer(raw) == {"choices": [{"message": {"content": f"hi {U}", "refusal": None}}]}


def test_an_answer_with_bytes_that_are_not_utf8_is_read_with_the_replacement_character() -> None:
    assert decode_answer(b'{"a": "x\xff"}') == {"a": f"x{U}"}


def test_an_answer_nested_past_orjsons_depth_keeps_its_top_and_reads_the_deep_part_as_null() -> None:
    raw = b'{"t": "[[[", "k": ' + b"[" * 3000 + b"1" + b"]" * 3000 + b"}"
    value = decode_answer(raw)
    assert isinstance(value, dict)
    assert value["t"] == "[[["
    depth, inner = 0, value["k"]
    while isinstance(inner, list):
        depth, inner = depth + 1, inner[0]
    assert (depth, inner) == (DECODE_DEPTH - 1, None)


def test_flattening_counts_brackets_outside_strings_only() -> None:
    assert _flattened(b'[["]]]]"], [[1]]]', 2) == b'[["]]]]"], [null]]'
    assert _flattened(b"[1, 2]", 2) == b"[1, 2]"


def test_a_body_that_is_not_json_is_still_refused() -> None:
    with pytest.raises(orjson.JSONDecodeError):
        decode_answer(b"<html>")


def _openai(calls: list[tuple[str, str, object]], content: str = "") -> dict[str, object]:
    return {
        "choices": [
            {
                "message": {
                    "content": content,
                    "tool_calls": [
                        {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                        for i, n, a in calls
                    ],
                }
            }
        ]
    }


def test_arguments_with_surrogate_escapes_are_parsed_with_the_replacement_character() -> None:
    reply = valid_reply(oai.parse_response(_openai([("c", "t", '{"k": "a\\ud800", "\\udfff": 1}')])))
    (call,) = reply.tool_calls
    assert call.arguments == {"k": f"a{U}", U: 1}
    assert call.raw_arguments == '{"k": "a\\ud800", "\\udfff": 1}'  # the model's text, as it wrote it


@pytest.mark.parametrize("depth", [MAX_TOOL_ARGUMENT_DEPTH, MAX_TOOL_ARGUMENT_DEPTH + 1, 300, 900])
def test_arguments_nested_past_the_limit_are_a_tool_error(depth: int) -> None:
    # {"a": [[...]]}: the object is one level, the arrays the rest.
    text = '{"a": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"
    (call,) = valid_reply(oai.parse_response(_openai([("c", "t", text)]))).tool_calls
    if depth <= MAX_TOOL_ARGUMENT_DEPTH:
        assert call.error is None
    else:
        assert call.arguments is None
        assert call.error is not None
        assert f"nested too deeply (more than {MAX_TOOL_ARGUMENT_DEPTH} levels" in call.error


def test_arguments_given_as_an_object_past_orjsons_depth_are_a_tool_error_not_a_crash() -> None:
    deep = functools.reduce(lambda v, _: [v], range(300), 0)
    (call,) = valid_reply(
        anth.parse_response({"content": [{"type": "tool_use", "id": "t", "name": "x", "input": {"a": deep}}]})
    ).tool_calls
    assert call.error is not None
    assert "nested too deeply" in call.error
    (call,) = anth.parse_response(
        {"content": [{"type": "tool_use", "id": "t", "name": "x", "input": deep}]}
    ).tool_calls
    assert call.error is not None
    assert "not an object" in call.error


def test_an_integer_of_5000_digits_in_the_arguments_is_a_tool_error() -> None:
    (call,) = oai.parse_response(_openai([("c", "t", '{"n": ' + "7" * 5000 + "}")])).tool_calls
    assert call.error is not None
    assert "cannot be read" in call.error


def test_an_empty_tool_name_is_the_models_and_stays_a_call() -> None:
    (call,) = oai.parse_response(_openai([("c", "", "{}")])).tool_calls
    assert call.name == ""


def test_valid_reply_makes_any_model_built_reply_valid() -> None:
    deep = functools.reduce(lambda v, _: {"a": v}, range(100), {})
    reply = ModelReply(
        text="t\ud800",
        tool_calls=[
            ToolCall(
                id="\udfff", name="n" * 5000, arguments={"k": "\ud800", "big": 2**70}, raw_arguments="{}"
            ),
            ToolCall(id="c2", name="deep", arguments=deep, raw_arguments="{}"),
            ToolCall(id="c3", name="none", arguments=None, raw_arguments="\ud800"),
        ],
        stop="tool_use",
        usage=Usage(1, 1),
        refusal="\ud800",
        provider_data={"api": "x", "r": [deep]},
    )
    valid = valid_reply(reply)
    assert (valid.text, valid.refusal, valid.provider_data) == (f"t{U}", U, None)
    first, second, third = valid.tool_calls
    assert first.id == U
    assert len(first.name) == MAX_TOOL_NAME_CHARS
    assert first.name.endswith("…")
    assert first.arguments == {"k": U, "big": 2**70}
    assert second.error is not None
    assert "nested too deeply" in second.error
    assert third.error is not None
    assert third.raw_arguments == U
    for call in valid.tool_calls:
        orjson.dumps([call.id, call.name, call.raw_arguments, call.error])


def test_the_request_after_a_hostile_reply_is_valid_json() -> None:
    from agentd.core.safetext import json_bytes
    from agentd.models import Message, Prompt

    reply = valid_reply(
        anth.parse_response(
            {"content": [{"type": "tool_use", "id": "t", "name": "x", "input": {"n": 2**70}}]}
        )
    )
    body = anth.build_request("m", Prompt(messages=[Message.user("u"), reply.as_message()]))
    sent = json.loads(json_bytes(body))
    assert sent["messages"][1]["content"][0]["input"] == {"n": 2**70}
