"""``openai:`` against a loopback server speaking the Chat Completions wire format."""

from __future__ import annotations

import email.utils

import pytest
import trio

from agentd.core.errors import FatalInfraError, ModelAuthError, ModelError, ModelUnavailableError
from agentd.models import Message, Prompt, ToolSpec, make_model
from agentd.models._http import MAX_ATTEMPTS, RETRY_AFTER_MAX_S
from agentd.models.openai import TOOL_ERROR_PREFIX, OpenAIModel
from agentd.observe.telemetry import NullTelemetry
from tests.fakes.provider_server import (
    FixedRandom,
    RecordingSleep,
    Reply,
    openai_error,
    openai_reply,
    provider_server,
    provider_server_thread,
    unused_port,
)

MEMO_SET = ToolSpec(
    name="memo__memo_set",
    description="Store a memo.",
    input_schema={"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
)


def _model(base: str, *, key: str | None = "sk-test", **kwargs) -> OpenAIModel:
    kwargs.setdefault("sleep", RecordingSleep())
    kwargs.setdefault("rng", FixedRandom(0.5))
    return OpenAIModel("gpt-test", base_url=base, api_key=key, **kwargs)


async def test_plain_answer_request_and_reply() -> None:
    async with provider_server([openai_reply("Hello there.", usage=(21, 3))]) as server:
        model = _model(server.url("/v1"))
        reply = await model.complete(Prompt(messages=[Message.user("hi")], system="Be brief."))
        await model.aclose()
    assert reply.text == "Hello there."
    assert reply.stop == "end"
    assert reply.tool_calls == []
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (21, 3)
    assert reply.refusal is None
    [req] = server.requests
    assert (req.method, req.path) == ("POST", "/v1/chat/completions")
    assert req.headers["authorization"] == "Bearer sk-test"
    assert req.headers["content-type"] == "application/json"
    assert req.json == {
        "model": "gpt-test",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
    }


async def test_no_key_sends_no_authorization_header() -> None:
    async with provider_server([openai_reply("ok")]) as server:
        model = make_model("openai:llama3.1:8b", env={"OPENAI_BASE_URL": server.url("/v1")})
        await model.complete(Prompt(messages=[Message.user("hi")]))
        await model.aclose()
    [req] = server.requests
    assert "authorization" not in req.headers
    assert req.json["model"] == "llama3.1:8b"
    assert req.json["messages"] == [{"role": "user", "content": "hi"}]


async def test_tool_call_round_trip() -> None:
    async with provider_server(
        [
            openai_reply(
                None,
                tool_calls=[
                    ("call_a", "memo__memo_set", '{"key": "x"}'),
                    ("call_b", "memo__memo_set", '{"key": "y"}'),
                ],
            ),
            openai_reply("Both saved."),
        ]
    ) as server:
        model = _model(server.url("/v1"))
        transcript = [Message.user("save x and y")]
        first = await model.complete(Prompt(messages=transcript, tools=[MEMO_SET]))
        assert first.stop == "tool_use"
        assert [(c.id, c.name, c.arguments, c.error) for c in first.tool_calls] == [
            ("call_a", "memo__memo_set", {"key": "x"}, None),
            ("call_b", "memo__memo_set", {"key": "y"}, None),
        ]
        transcript += [
            first.as_message(),
            Message.tool_result("call_a", "saved x"),
            Message.tool_result("call_b", "disk full", is_error=True),
        ]
        second = await model.complete(Prompt(messages=transcript, tools=[MEMO_SET]))
        await model.aclose()
    assert (second.text, second.stop) == ("Both saved.", "end")
    body = server.requests[1].json
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "memo__memo_set",
                "description": "Store a memo.",
                "parameters": MEMO_SET.input_schema,
            },
        }
    ]
    assert body["messages"] == [
        {"role": "user", "content": "save x and y"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "memo__memo_set", "arguments": '{"key": "x"}'},
                },
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "memo__memo_set", "arguments": '{"key": "y"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "saved x"},
        {"role": "tool", "tool_call_id": "call_b", "content": TOOL_ERROR_PREFIX + "disk full"},
    ]


async def test_refusal_field_means_refusal() -> None:
    async with provider_server([openai_reply(None, refusal="I can't help with that.")]) as server:
        model = _model(server.url("/v1"))
        reply = await model.complete(Prompt(messages=[Message.user("bad")]))
        await model.aclose()
    assert reply.stop == "refusal"
    assert reply.refusal == "I can't help with that."
    assert reply.text == ""


async def test_content_filter_means_refusal() -> None:
    async with provider_server([openai_reply(None, finish_reason="content_filter")]) as server:
        model = _model(server.url("/v1"))
        reply = await model.complete(Prompt(messages=[Message.user("bad")]))
        await model.aclose()
    assert reply.stop == "refusal"
    assert reply.refusal == "The provider's content filter stopped the answer."


async def test_length_means_max_tokens() -> None:
    async with provider_server([openai_reply("cut sh", finish_reason="length")]) as server:
        model = _model(server.url("/v1"), max_tokens=16)
        reply = await model.complete(Prompt(messages=[Message.user("long")]))
        await model.aclose()
    assert reply.stop == "max_tokens"
    assert server.requests[0].json["max_completion_tokens"] == 16


async def test_invalid_tool_call_json_sets_error_and_is_sent_back_as_empty_object() -> None:
    async with provider_server(
        [openai_reply(None, tool_calls=[("call_1", "memo__memo_set", "{not json")]), openai_reply("retrying")]
    ) as server:
        model = _model(server.url("/v1"))
        first = await model.complete(Prompt(messages=[Message.user("go")], tools=[MEMO_SET]))
        [call] = first.tool_calls
        assert call.arguments is None
        assert call.raw_arguments == "{not json"
        assert call.error is not None
        assert "not valid JSON" in call.error
        assert "'memo__memo_set'" in call.error
        transcript = [
            Message.user("go"),
            first.as_message(),
            Message.tool_result("call_1", call.error, is_error=True),
        ]
        await model.complete(Prompt(messages=transcript, tools=[MEMO_SET]))
        await model.aclose()
    sent = server.requests[1].json["messages"][1]["tool_calls"][0]["function"]
    assert sent == {"name": "memo__memo_set", "arguments": "{}"}


async def test_429_with_retry_after_then_success() -> None:
    sleep = RecordingSleep()
    telemetry = NullTelemetry()
    async with provider_server(
        [
            openai_error(429, "Rate limit reached", type_="rate_limit_error", headers={"Retry-After": "2"}),
            openai_reply("ok"),
        ]
    ) as server:
        model = _model(server.url("/v1"), sleep=sleep, telemetry=telemetry)
        reply = await model.complete(Prompt(messages=[Message.user("hi")]))
        await model.aclose()
    assert reply.text == "ok"
    assert sleep.delays == [2.0]
    assert len(server.requests) == 2
    assert server.requests[0].body == server.requests[1].body
    assert telemetry.snapshot(["model.retries"]) == {"model.retries": 1}


async def test_retry_after_ms_and_http_date() -> None:
    sleep = RecordingSleep()
    now = 1_800_000_000.0
    date = email.utils.formatdate(now + 7, usegmt=True)
    async with provider_server(
        [
            openai_error(429, "slow down", headers={"retry-after-ms": "1500", "retry-after": "9"}),
            openai_error(503, "busy", headers={"Retry-After": date}),
            openai_error(503, "busy", headers={"Retry-After": "3600"}),
            openai_reply("ok"),
        ]
    ) as server:
        model = _model(server.url("/v1"), sleep=sleep, wall_clock=lambda: now)
        await model.complete(Prompt(messages=[Message.user("hi")]))
        await model.aclose()
    assert sleep.delays == [1.5, 7.0, RETRY_AFTER_MAX_S]


async def test_5xx_then_success_uses_full_jitter_backoff() -> None:
    sleep = RecordingSleep()
    async with provider_server(
        [
            openai_error(500, "internal", type_="server_error"),
            openai_error(502, "bad gateway"),
            Reply(504, body=b"<html>gateway timeout</html>", headers={"content-type": "text/html"}),
            openai_reply("finally"),
        ]
    ) as server:
        model = _model(server.url("/v1"), sleep=sleep, rng=FixedRandom(0.5))
        reply = await model.complete(Prompt(messages=[Message.user("hi")]))
        await model.aclose()
    assert reply.text == "finally"
    # full jitter: uniform(0, min(30, 1 * 2**(n-1))) with random() == 0.5
    assert sleep.delays == [0.5, 1.0, 2.0]


async def test_dropped_connection_is_retried() -> None:
    sleep = RecordingSleep()
    async with provider_server([Reply(drop=True), openai_reply("ok")]) as server:
        model = _model(server.url("/v1"), sleep=sleep)
        reply = await model.complete(Prompt(messages=[Message.user("hi")]))
        await model.aclose()
    assert reply.text == "ok"
    assert len(sleep.delays) == 1


async def test_5xx_every_time_is_unavailable_after_max_attempts() -> None:
    sleep = RecordingSleep()
    async with provider_server([openai_error(503, "overloaded")] * MAX_ATTEMPTS) as server:
        model = _model(server.url("/v1"), sleep=sleep)
        with pytest.raises(ModelUnavailableError, match=r"after 5 attempts; last: HTTP 503: overloaded"):
            await model.complete(Prompt(messages=[Message.user("hi")]))
        await model.aclose()
    assert len(server.requests) == MAX_ATTEMPTS
    assert sleep.delays == [0.5, 1.0, 2.0, 4.0]


async def test_401_is_auth_error_without_retry() -> None:
    sleep = RecordingSleep()
    async with provider_server(
        [openai_error(401, "Incorrect API key provided", type_="invalid_api_key")]
    ) as server:
        model = _model(server.url("/v1"), sleep=sleep)
        with pytest.raises(
            ModelAuthError, match=r"HTTP 401 .*Incorrect API key provided.*set OPENAI_API_KEY"
        ) as info:
            await model.complete(Prompt(messages=[Message.user("hi")]))
        await model.aclose()
    assert isinstance(info.value, FatalInfraError)
    assert info.value.exit_code == 4
    assert "sk-test" not in str(info.value)
    assert len(server.requests) == 1
    assert sleep.delays == []


async def test_other_4xx_is_model_error_with_provider_message() -> None:
    async with provider_server([openai_error(400, "The model `gpt-test` does not exist")]) as server:
        model = _model(server.url("/v1"))
        with pytest.raises(ModelError, match=r"HTTP 400 .*The model `gpt-test` does not exist"):
            await model.complete(Prompt(messages=[Message.user("hi")]))
        await model.aclose()
    assert len(server.requests) == 1


async def test_unreachable_port_is_unavailable_after_retries() -> None:
    sleep = RecordingSleep()
    model = _model(f"http://127.0.0.1:{unused_port()}/v1", sleep=sleep)
    with pytest.raises(ModelUnavailableError, match=r"still failing after 5 attempts; last: ConnectError"):
        await model.complete(Prompt(messages=[Message.user("hi")]))
    await model.aclose()
    assert sleep.delays == [0.5, 1.0, 2.0, 4.0]


async def test_malformed_json_body_is_model_error() -> None:
    async with provider_server(
        [Reply(200, body=b'{"choices": [', headers={"content-type": "application/json"})]
    ) as server:
        model = _model(server.url("/v1"))
        with pytest.raises(ModelError, match=r"HTTP 200 .* not JSON .*'\{\"choices\": \['"):
            await model.complete(Prompt(messages=[Message.user("hi")]))
        await model.aclose()
    assert len(server.requests) == 1


async def test_json_without_choices_is_model_error() -> None:
    async with provider_server([Reply(200, {"object": "list"})]) as server:
        model = _model(server.url("/v1"))
        with pytest.raises(
            ModelError, match=r"openai returned an unexpected response: choices\[0\] is missing"
        ):
            await model.complete(Prompt(messages=[Message.user("hi")]))
        await model.aclose()


@pytest.mark.realclock
async def test_one_real_retry_over_loopback() -> None:
    """The default ``trio.sleep`` really waits; Retry-After: 0 keeps it short."""
    async with provider_server(
        [openai_error(503, "busy", headers={"Retry-After": "0"}), openai_reply("ok")]
    ) as server:
        model = OpenAIModel("m", base_url=server.url("/v1"))
        with trio.fail_after(10):
            reply = await model.complete(Prompt(messages=[Message.user("hi")]))
        await model.aclose()
    assert reply.text == "ok"
    assert len(server.requests) == 2


def test_threaded_server_for_synchronous_callers() -> None:
    """``provider_server_thread`` serves from its own trio run (for subprocess-driven tests)."""
    with provider_server_thread([openai_reply("from a thread")]) as server:

        async def call() -> str:
            model = OpenAIModel("m", base_url=server.url("/v1"))
            try:
                return (await model.complete(Prompt(messages=[Message.user("hi")]))).text
            finally:
                await model.aclose()

        assert trio.run(call) == "from a thread"
    assert [r.path for r in server.requests] == ["/v1/chat/completions"]
