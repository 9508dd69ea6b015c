"""``anthropic:`` against a loopback server speaking the Messages API wire format."""

from __future__ import annotations

import pytest

from agentd.core.errors import ModelAuthError, ModelError, ModelUnavailableError
from agentd.models import Message, Prompt, ToolSpec, make_model
from agentd.models._http import MAX_ATTEMPTS
from agentd.models.anthropic import API_VERSION, AnthropicModel
from tests.fakes.provider_server import (
    FixedRandom,
    RecordingSleep,
    Reply,
    anthropic_error,
    anthropic_reply,
    provider_server,
    unused_port,
)

WEATHER = ToolSpec(
    name="weather__get",
    description="Current weather for a city.",
    input_schema={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def _model(base: str, *, key: str | None = "sk-ant-test", **kwargs) -> AnthropicModel:
    kwargs.setdefault("sleep", RecordingSleep())
    kwargs.setdefault("rng", FixedRandom(0.5))
    return AnthropicModel("claude-test", base_url=base, api_key=key, **kwargs)


async def test_plain_answer_request_and_reply() -> None:
    async with provider_server([anthropic_reply("Hi!", usage=(30, 2))]) as server:
        model = _model(server.base_url)
        reply = await model.complete(Prompt(messages=[Message.user("hello")], system="You are terse."))
        await model.aclose()
    assert (reply.text, reply.stop, reply.refusal) == ("Hi!", "end", None)
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (30, 2)
    [req] = server.requests
    assert (req.method, req.path) == ("POST", "/v1/messages")
    assert req.headers["x-api-key"] == "sk-ant-test"
    assert req.headers["anthropic-version"] == API_VERSION == "2023-06-01"
    assert "authorization" not in req.headers
    cache = {"type": "ephemeral"}
    assert req.json == {
        "model": "claude-test",
        "max_tokens": 16384,
        "system": [{"type": "text", "text": "You are terse.", "cache_control": cache}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hello", "cache_control": cache}]}
        ],
    }


async def test_make_model_reads_env_and_max_tokens() -> None:
    async with provider_server([anthropic_reply("ok")]) as server:
        model = make_model(
            "anthropic:claude-x",
            env={"ANTHROPIC_BASE_URL": server.base_url + "/", "ANTHROPIC_API_KEY": "k1"},
            max_tokens=1024,
        )
        await model.complete(Prompt(messages=[Message.user("hi")]))
        await model.aclose()
    [req] = server.requests
    assert req.path == "/v1/messages"
    assert req.headers["x-api-key"] == "k1"
    assert req.json["max_tokens"] == 1024
    assert "system" not in req.json


async def test_tool_use_round_trip_merges_results_into_one_user_message() -> None:
    async with provider_server(
        [
            anthropic_reply(
                "Checking both.",
                tool_uses=[
                    ("toolu_1", "weather__get", {"city": "Oslo"}),
                    ("toolu_2", "weather__get", {"city": "Rome"}),
                ],
            ),
            anthropic_reply("Oslo 3°C; Rome unknown."),
        ]
    ) as server:
        model = _model(server.base_url)
        transcript = [Message.user("weather in Oslo and Rome?")]
        first = await model.complete(Prompt(messages=transcript, system="sys", tools=[WEATHER]))
        assert (first.text, first.stop) == ("Checking both.", "tool_use")
        assert [(c.id, c.name, c.arguments, c.error) for c in first.tool_calls] == [
            ("toolu_1", "weather__get", {"city": "Oslo"}, None),
            ("toolu_2", "weather__get", {"city": "Rome"}, None),
        ]
        transcript += [
            first.as_message(),
            Message.tool_result("toolu_1", "3°C"),
            Message.tool_result("toolu_2", "station offline", is_error=True),
            Message.user("also: be brief"),
        ]
        second = await model.complete(Prompt(messages=transcript, system="sys", tools=[WEATHER]))
        await model.aclose()
    assert second.stop == "end"
    body = server.requests[1].json
    # Prompt caching: breakpoints on the tool list, the system prompt, the previous request's
    # end (the first user message) and this request's end.
    cache = {"type": "ephemeral"}
    assert body["system"] == [{"type": "text", "text": "sys", "cache_control": cache}]
    assert body["tools"] == [
        {
            "name": "weather__get",
            "description": "Current weather for a city.",
            "input_schema": WEATHER.input_schema,
            "cache_control": cache,
        }
    ]
    assert body["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "weather in Oslo and Rome?", "cache_control": cache}],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking both."},
                {"type": "tool_use", "id": "toolu_1", "name": "weather__get", "input": {"city": "Oslo"}},
                {"type": "tool_use", "id": "toolu_2", "name": "weather__get", "input": {"city": "Rome"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "3°C"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": "station offline",
                    "is_error": True,
                },
                {"type": "text", "text": "also: be brief", "cache_control": cache},
            ],
        },
    ]


async def test_refusal_stop_reason() -> None:
    async with provider_server([anthropic_reply(None, stop_reason="refusal")]) as server:
        model = _model(server.base_url)
        reply = await model.complete(Prompt(messages=[Message.user("bad")]))
        await model.aclose()
    assert reply.stop == "refusal"
    assert reply.refusal == "The model declined to continue."


async def test_max_tokens_stop_reason() -> None:
    async with provider_server([anthropic_reply("partial", stop_reason="max_tokens")]) as server:
        model = _model(server.base_url)
        reply = await model.complete(Prompt(messages=[Message.user("go")]))
        await model.aclose()
    assert (reply.text, reply.stop) == ("partial", "max_tokens")


async def test_tool_use_input_not_an_object_sets_error() -> None:
    async with provider_server(
        [anthropic_reply(None, tool_uses=[("toolu_1", "weather__get", "Oslo")])]
    ) as server:
        model = _model(server.base_url)
        reply = await model.complete(Prompt(messages=[Message.user("go")], tools=[WEATHER]))
        await model.aclose()
    [call] = reply.tool_calls
    assert call.arguments is None
    assert call.raw_arguments == '"Oslo"'
    assert call.error is not None
    assert "not an object" in call.error


async def test_529_overloaded_then_success() -> None:
    sleep = RecordingSleep()
    async with provider_server(
        [anthropic_error(529, "Overloaded", type_="overloaded_error"), anthropic_reply("ok")]
    ) as server:
        model = _model(server.base_url, sleep=sleep)
        reply = await model.complete(Prompt(messages=[Message.user("hi")]))
        await model.aclose()
    assert reply.text == "ok"
    assert sleep.delays == [0.5]


async def test_429_with_retry_after_then_success() -> None:
    sleep = RecordingSleep()
    async with provider_server(
        [
            anthropic_error(429, "rate limited", type_="rate_limit_error", headers={"retry-after": "4"}),
            anthropic_reply("ok"),
        ]
    ) as server:
        model = _model(server.base_url, sleep=sleep)
        await model.complete(Prompt(messages=[Message.user("hi")]))
        await model.aclose()
    assert sleep.delays == [4.0]


@pytest.mark.parametrize("status", [401, 403])
async def test_auth_failure_is_fatal_without_retry(status: int) -> None:
    sleep = RecordingSleep()
    async with provider_server(
        [anthropic_error(status, "invalid x-api-key", type_="authentication_error")]
    ) as server:
        model = _model(server.base_url, sleep=sleep)
        with pytest.raises(
            ModelAuthError, match=rf"HTTP {status} .*invalid x-api-key.*set ANTHROPIC_API_KEY"
        ):
            await model.complete(Prompt(messages=[Message.user("hi")]))
        await model.aclose()
    assert len(server.requests) == 1
    assert sleep.delays == []


async def test_bad_request_is_model_error() -> None:
    async with provider_server([anthropic_error(400, "messages: roles must alternate")]) as server:
        model = _model(server.base_url)
        with pytest.raises(ModelError, match=r"HTTP 400 .*messages: roles must alternate"):
            await model.complete(Prompt(messages=[Message.user("hi")]))
        await model.aclose()


async def test_unreachable_port_is_unavailable_after_retries() -> None:
    sleep = RecordingSleep()
    model = _model(f"http://127.0.0.1:{unused_port()}", sleep=sleep)
    with pytest.raises(
        ModelUnavailableError, match=r"anthropic at http://127\.0\.0\.1:\d+/v1/messages still failing"
    ):
        await model.complete(Prompt(messages=[Message.user("hi")]))
    await model.aclose()
    assert len(sleep.delays) == MAX_ATTEMPTS - 1


async def test_malformed_json_body_is_model_error() -> None:
    async with provider_server([Reply(200, body=b"event: ping\n\n")]) as server:
        model = _model(server.base_url)
        with pytest.raises(
            ModelError, match=r"anthropic returned an unexpected response: HTTP 200 .* not JSON"
        ):
            await model.complete(Prompt(messages=[Message.user("hi")]))
        await model.aclose()


async def test_body_without_content_is_model_error() -> None:
    async with provider_server([Reply(200, {"type": "message", "stop_reason": "end_turn"})]) as server:
        model = _model(server.base_url)
        with pytest.raises(
            ModelError, match=r"anthropic returned an unexpected response: content is missing"
        ):
            await model.complete(Prompt(messages=[Message.user("hi")]))
        await model.aclose()
