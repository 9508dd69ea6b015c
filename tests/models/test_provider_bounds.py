"""Fault catalog: model providers that misbehave are bounded and their errors are clear.

Every case runs the real ``agentd`` command (``--mode once``, the real child
process and its HTTP client) against the loopback fake provider
(``tests/fakes/provider_server.py``), which answers in the real OpenAI or
Anthropic wire format and misbehaves on demand: trickling a body, streaming
an endless one, 4xx error bodies in each provider's own format, malformed
200s, 70 MB of tool-call arguments, a model that never stops calling tools.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from agentd.core.exitcodes import ExitCode
from agentd.models._http import MAX_RESPONSE_BYTES
from agentd.models.base import MAX_TOOL_ARGUMENT_CHARS
from tests.fakes.provider_server import (
    RecordedRequest,
    Reply,
    anthropic_error,
    anthropic_reply,
    endless_chunks,
    openai_error,
    openai_reply,
    provider_server,
)
from tests.support.agentd_proc import Agentd, run_agentd
from tests.support.leftovers import tagged_env

pytestmark = pytest.mark.fault

#: Slack on wall-time assertions for a shared, loaded 2-core machine.
SLACK_S = 4.0

PROVIDERS: dict[str, dict[str, Any]] = {
    "openai": {
        "model": "openai:gpt-fake",
        "env": lambda url: {"OPENAI_BASE_URL": url + "/v1", "OPENAI_API_KEY": "sk-bounds-test-key"},
        "ok": lambda text: openai_reply(text),
    },
    "anthropic": {
        "model": "anthropic:claude-fake",
        "env": lambda url: {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-ant-bounds-test-key"},
        "ok": lambda text: anthropic_reply(text),
    },
}


def _env(tmp_path: Path, provider: str, url: str) -> dict[str, str]:
    return tagged_env(tmp_path, **PROVIDERS[provider]["env"](url))


def _no_crash_noise(a: Agentd) -> None:
    stderr = "\n".join(a.raw_stderr)
    assert "ExceptionGroup" not in stderr
    assert "Traceback" not in stderr
    assert not a.find("supervisor.internal_error")


def _once_result(a: Agentd) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(a.out)
    return result


# ------------------------------------------------------------------ deadline per call


async def test_a_provider_trickling_one_byte_every_2s_is_cut_at_the_model_timeout(tmp_path: Path) -> None:
    body = json.dumps(openai_reply("never whole").json).encode()
    arrived: list[float] = []

    def trickle(_req: RecordedRequest) -> Reply:
        arrived.append(trio.current_time())
        return Reply(200, body=body, trickle_s=2.0)

    async with provider_server([trickle]) as srv:
        args = ["--model", "openai:gpt-fake", "--model-timeout", "3s", "--output", "json", "question"]
        async with run_agentd(args, env=_env(tmp_path, "openai", srv.base_url)) as a:
            assert await a.wait_exit(timeout=30) == ExitCode.FATAL_INFRA, a.tail()
            ended = trio.current_time()
    assert len(arrived) == 1  # the deadline covers the whole call, retries included
    assert 3.0 <= ended - arrived[0] < 3.0 + SLACK_S
    assert srv.body_bytes_sent[0] < 10  # a few bytes arrived, never the whole body
    (fatal,) = a.find("model.fatal")
    assert "did not answer within 3s (--model-timeout" in fatal["error"]
    assert _once_result(a)["error"]["message"] == fatal["error"]
    _no_crash_noise(a)


# ------------------------------------------------------------------ response size cap


async def test_an_800mb_body_is_cut_at_the_response_cap_and_ends_with_exit_4(tmp_path: Path) -> None:
    huge = Reply(200, stream=endless_chunks(800 * 1024 * 1024))
    async with provider_server([huge]) as srv:
        args = ["--model", "openai:gpt-fake", "question"]
        async with run_agentd(args, env=_env(tmp_path, "openai", srv.base_url)) as a:
            assert await a.wait_exit(timeout=60) == ExitCode.FATAL_INFRA, a.tail()
    # The child stopped reading at the cap: what left the server is the cap plus socket buffers
    # (counted per whole 1 MiB chunk handed to the kernel, so exactly the cap is possible).
    sent = srv.body_bytes_sent[0]
    print(
        f"800 MB body: {sent / 2**20:.0f} MiB sent before agentd hung up (cap {MAX_RESPONSE_BYTES / 2**20:.0f} MiB)"
    )
    assert MAX_RESPONSE_BYTES <= sent < MAX_RESPONSE_BYTES + 32 * 1024 * 1024
    assert len(srv.requests) == 1
    (fatal,) = a.find("model.fatal")
    assert f"over the {MAX_RESPONSE_BYTES}-byte response cap" in fatal["error"]
    _no_crash_noise(a)


# ------------------------------------------------------------------ 4xx and malformed 200s


ERRORS: dict[str, tuple[str, Callable[[], Reply], str, str]] = {
    # name: (provider, reply, what the message must contain, the fix it must give)
    "openai-404-model-not-found": (
        "openai",
        lambda: openai_error(
            404,
            "The model `gpt-fake` does not exist or you do not have access to it.",
            code="model_not_found",
        ),
        "refused the request with HTTP 404 (Not Found)",
        "check the model name ('gpt-fake')",
    ),
    "openai-400-invalid-request": (
        "openai",
        lambda: openai_error(
            400, "Invalid value for 'max_completion_tokens': must be positive.", param="max_completion_tokens"
        ),
        "refused the request with HTTP 400 (Bad Request)",
        "rejected the request as invalid",
    ),
    "anthropic-404-not-found": (
        "anthropic",
        lambda: anthropic_error(404, "model: claude-fake", type_="not_found_error"),
        "refused the request with HTTP 404 (Not Found)",
        "check the model name ('claude-fake')",
    ),
    "anthropic-400-invalid-request": (
        "anthropic",
        lambda: anthropic_error(400, "messages: roles must alternate between user and assistant"),
        "refused the request with HTTP 400 (Bad Request)",
        "rejected the request as invalid",
    ),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
async def test_4xx_ends_with_exit_4_and_the_providers_own_message(tmp_path: Path, case: str) -> None:
    provider, reply, status_text, fix = ERRORS[case]
    answer = reply()
    provider_says = answer.json["error"]["message"]
    async with provider_server([answer]) as srv:
        args = ["--model", PROVIDERS[provider]["model"], "--output", "json", "question"]
        async with run_agentd(args, env=_env(tmp_path, provider, srv.base_url)) as a:
            assert await a.wait_exit() == ExitCode.FATAL_INFRA, a.tail()
    assert len(srv.requests) == 1  # never retried: the same request fails again
    (fatal,) = a.find("model.fatal")
    for part in (status_text, provider_says, fix):
        assert part in fatal["error"]
    result = _once_result(a)
    assert (result["exit_code"], result["error"]["message"]) == (4, fatal["error"])
    _no_crash_noise(a)


MALFORMED: dict[str, tuple[str, Reply, str]] = {
    "openai-no-choices": (
        "openai",
        Reply(200, {"id": "x", "object": "chat.completion"}),
        "choices[0] is missing",
    ),
    "openai-message-not-object": (
        "openai",
        Reply(200, {"choices": [{"index": 0, "message": "hi", "finish_reason": "stop"}]}),
        "choices[0].message is missing",
    ),
    "openai-not-json": ("openai", Reply(200, body=b"<html>gateway</html>"), "a body that is not JSON"),
    "anthropic-content-not-list": (
        "anthropic",
        Reply(200, {"type": "message", "content": "hi", "stop_reason": "end_turn"}),
        "content is missing or not a list",
    ),
    "anthropic-tool-use-without-id": (
        "anthropic",
        Reply(200, {"type": "message", "content": [{"type": "tool_use", "name": "x", "input": {}}]}),
        "content[0].id of a tool_use block is missing",
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
async def test_a_malformed_200_names_the_field_and_ends_with_exit_4(tmp_path: Path, case: str) -> None:
    provider, reply, field = MALFORMED[case]
    async with provider_server([reply]) as srv:
        args = ["--model", PROVIDERS[provider]["model"], "question"]
        async with run_agentd(args, env=_env(tmp_path, provider, srv.base_url)) as a:
            assert await a.wait_exit() == ExitCode.FATAL_INFRA, a.tail()
    (fatal,) = a.find("model.fatal")
    assert f"{provider} returned an unexpected response" in fatal["error"]
    assert field in fatal["error"]
    _no_crash_noise(a)


# ------------------------------------------------------------------ tool-call arguments


@pytest.mark.slow
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_70mb_of_tool_arguments_go_back_to_the_model_as_a_tool_error(
    tmp_path: Path, provider: str
) -> None:
    big = "a" * (70 * 1000 * 1000)
    if provider == "openai":
        first = openai_reply(tool_calls=[("c1", "read_resource", json.dumps({"uri": big}))])
    else:
        first = anthropic_reply(tool_uses=[("t1", "read_resource", {"uri": big})])
    del big
    async with provider_server([first, PROVIDERS[provider]["ok"]("recovered")]) as srv:
        args = ["--model", PROVIDERS[provider]["model"], "question"]
        async with run_agentd(args, env=_env(tmp_path, provider, srv.base_url)) as a:
            assert await a.wait_exit(timeout=60) == ExitCode.OK, a.tail()
    assert a.out.strip() == "recovered"
    second = srv.requests[1]
    # The next request carries the tool error, and not the 70 MB.
    assert len(second.body) < 64 * 1024
    assert f"over the limit of {MAX_TOOL_ARGUMENT_CHARS}; the tool was not called" in second.body.decode()
    assert a.find("tool.call") == []  # the supervisor never saw the call
    _no_crash_noise(a)


# ------------------------------------------------------------------ per-turn step cap


def _runaway(srv_requests: list[RecordedRequest]) -> Callable[[RecordedRequest], Reply]:
    def reply(_req: RecordedRequest) -> Reply:
        n = len(srv_requests)  # different arguments each time: never a stall
        return openai_reply(tool_calls=[(f"c{n}", "list_resources", json.dumps({"page": n}))])

    return reply


@pytest.mark.slow
async def test_a_model_that_calls_tools_forever_stops_at_the_default_cap_of_100(tmp_path: Path) -> None:
    async with provider_server() as srv:
        srv.push(*[_runaway(srv.requests)] * 150)
        args = ["--model", "openai:gpt-fake", "question"]
        async with run_agentd(args, env=_env(tmp_path, "openai", srv.base_url)) as a:
            assert await a.wait_exit(timeout=90) == ExitCode.BUDGET, a.tail()
    assert len(srv.requests) == 100
    assert [e["status"] for e in a.find("turn.end")] == ["exhausted_steps"]
    assert len(a.find("tool.call")) == 99  # the 100th call's tools never ran
    _no_crash_noise(a)


async def test_max_turn_steps_changes_the_cap(tmp_path: Path) -> None:
    async with provider_server() as srv:
        srv.push(*[_runaway(srv.requests)] * 10)
        args = ["--model", "openai:gpt-fake", "--max-turn-steps", "3", "question"]
        async with run_agentd(args, env=_env(tmp_path, "openai", srv.base_url)) as a:
            assert await a.wait_exit() == ExitCode.BUDGET, a.tail()
    assert len(srv.requests) == 3
    assert [e["status"] for e in a.find("turn.end")] == ["exhausted_steps"]


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--model-timeout", "0", "--model-timeout: '0' is not valid: must be greater than zero"),
        ("--model-timeout", "soon", "--model-timeout: 'soon' is not valid: not a duration"),
        ("--max-turn-steps", "-1", "--max-turn-steps: '-1' is not valid: must be a whole number ≥ 0"),
    ],
)
async def test_bounds_settings_are_validated_before_anything_runs(
    tmp_path: Path, flag: str, value: str, message: str
) -> None:
    async with run_agentd(
        ["--model", "openai:gpt-fake", flag, value, "q"], env=_env(tmp_path, "openai", "http://127.0.0.1:9")
    ) as a:
        assert await a.wait_exit() == ExitCode.CONFIG
    assert message in "\n".join(a.raw_stderr)
    assert a.find("supervisor.start") == []
