"""``openai:MODEL``: the Chat Completions API, for OpenAI and every compatible server.

Works against any base URL that speaks ``POST {base}/chat/completions``:
OpenAI itself, vLLM, llama.cpp's server, Ollama, LM Studio. The key is
optional: without one no ``Authorization`` header is sent (local servers).

Transcript mapping (request):

* ``system`` → a leading ``{"role": "system"}`` message.
* user → ``{"role": "user", "content": text}``.
* assistant → ``{"role": "assistant", "content": text or null, "tool_calls": [...]}``
  with each call as ``{"id", "type": "function", "function": {"name", "arguments"}}``;
  ``arguments`` is the model's own text, or ``"{}"`` when it was not valid JSON.
* tool → ``{"role": "tool", "tool_call_id", "content"}``; the API has no error
  flag, so an error result's content is prefixed with :data:`TOOL_ERROR_PREFIX`.

Reply mapping: ``choices[0].message`` content / ``tool_calls`` / ``refusal``;
``finish_reason`` ``stop`` → end, ``tool_calls`` → tool_use (also whenever
tool calls are present: some servers say ``stop``), ``length`` → max_tokens,
``content_filter`` or a ``refusal`` → refusal. ``usage.prompt_tokens`` /
``completion_tokens``, estimated when a server omits them.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx2
import orjson
import trio

from agentd.errors import ModelResponseError
from agentd.models._http import DEFAULT_MODEL_TIMEOUT_S, MAX_ATTEMPTS, JsonPoster, Sleep, join_url
from agentd.models.base import (
    MAX_TOOL_ARGUMENT_CHARS,
    Message,
    ModelReply,
    StopReason,
    ToolCall,
    ToolSpec,
    Usage,
    estimate_input_tokens,
    estimate_tokens,
)
from agentd.redact import redact
from agentd.telemetry import Telemetry

DEFAULT_BASE_URL = "https://api.openai.com/v1"

#: Prepended to the content of an error tool result (the API has no flag for it).
TOOL_ERROR_PREFIX = "ERROR: "

#: The refusal text when the provider's content filter stopped the answer without one.
CONTENT_FILTER_REFUSAL = "The provider's content filter stopped the answer."

_FINISH: dict[str, StopReason] = {
    "stop": "end",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}


def build_request(
    model: str,
    *,
    system: str | None,
    messages: Sequence[Message],
    tools: Sequence[ToolSpec],
    max_tokens: int | None = None,
) -> dict[str, Any]:
    """The Chat Completions request body for this transcript (pure)."""
    wire: list[dict[str, Any]] = []
    if system:
        wire.append({"role": "system", "content": system})
    for m in messages:
        if m.role == "user":
            wire.append({"role": "user", "content": m.content})
        elif m.role == "assistant":
            entry: dict[str, Any] = {"role": "assistant", "content": m.content or None}
            if m.tool_calls:
                entry["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {
                            "name": c.name,
                            "arguments": "{}" if c.error is not None else (c.raw_arguments or "{}"),
                        },
                    }
                    for c in m.tool_calls
                ]
            wire.append(entry)
        else:
            content = TOOL_ERROR_PREFIX + m.content if m.is_error else m.content
            wire.append({"role": "tool", "tool_call_id": m.tool_call_id or "", "content": content})
    body: dict[str, Any] = {"model": model, "messages": wire}
    if tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.input_schema},
            }
            for t in tools
        ]
    if max_tokens is not None:
        body["max_completion_tokens"] = max_tokens
    return body


def parse_response(body: dict[str, Any], *, estimated_input: int = 0) -> ModelReply:
    """The reply in a Chat Completions response body (pure).

    Args:
        body: the decoded response.
        estimated_input: input tokens to report when the body has no usage.

    Raises:
        ModelResponseError: the body lacks ``choices[0].message`` or has the wrong types
            ("openai returned an unexpected response: ...", naming the field).
    """
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _unexpected("choices[0]", f"is missing ({_keys(body)})")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise _unexpected("choices[0].message", f"is missing ({_keys(choice)})")
    text = message.get("content") or ""
    if not isinstance(text, str):
        raise _unexpected("choices[0].message.content", f"is {type(text).__name__}, expected a string")
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise _unexpected("choices[0].message.tool_calls", f"is {type(raw_calls).__name__}, expected a list")
    calls = [_tool_call(i, raw) for i, raw in enumerate(raw_calls)]
    refusal = message.get("refusal") or None
    finish = choice.get("finish_reason")
    stop: StopReason = _FINISH.get(finish, "end") if isinstance(finish, str) else "end"
    if calls and stop == "end":
        stop = "tool_use"
    if refusal is not None:
        stop = "refusal"
        refusal = str(refusal)
    elif stop == "refusal":
        refusal = text or CONTENT_FILTER_REFUSAL
    usage = body.get("usage")
    if isinstance(usage, dict) and _count(usage.get("prompt_tokens")) is not None:
        tokens = Usage(_count(usage.get("prompt_tokens")) or 0, _count(usage.get("completion_tokens")) or 0)
    else:
        out = text + "".join(c.name + c.raw_arguments for c in calls)
        tokens = Usage(estimated_input, estimate_tokens(out))
    return ModelReply(text=text, tool_calls=calls, stop=stop, usage=tokens, refusal=refusal)


def _unexpected(field: str, problem: str) -> ModelResponseError:
    return ModelResponseError(f"openai returned an unexpected response: {field} {problem}")


def _tool_call(index: int, raw: Any) -> ToolCall:
    where = f"choices[0].message.tool_calls[{index}]"
    if not isinstance(raw, dict) or not isinstance(raw.get("function"), dict):
        raise _unexpected(f"{where}.function", f"is missing: {raw!r:.200}")
    fn = raw["function"]
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        raise _unexpected(f"{where}.function.name", f"is missing or empty: {fn!r:.200}")
    # Some compatible servers omit the id; the transcript still needs one to
    # pair the result with the call.
    given_id = raw.get("id")
    call_id = given_id if isinstance(given_id, str) and given_id else f"call_{index}"
    args = fn.get("arguments")
    if isinstance(args, dict):
        # Some compatible servers send the arguments as an object, not JSON text.
        text = orjson.dumps(args).decode()
        if len(text) > MAX_TOOL_ARGUMENT_CHARS:
            return ToolCall.oversized(call_id, name, text)
        return ToolCall(id=call_id, name=name, arguments=args, raw_arguments=text)
    if args is None:
        args = ""
    if not isinstance(args, str):
        return ToolCall(
            id=call_id,
            name=name,
            arguments=None,
            raw_arguments=orjson.dumps(args).decode(),
            error=f"the arguments for tool {name!r} are JSON {type(args).__name__}, not an object. "
            "Call the tool again with the arguments as one JSON object.",
        )
    return ToolCall.from_raw(call_id, name, args)


def _count(value: Any) -> int | None:
    """A token count, or ``None`` for anything that is not a non-negative integer."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _keys(obj: dict[str, Any]) -> str:
    return f"keys {sorted(obj)!r:.200}"


class OpenAIModel:
    """A Chat Completions model.

    Args:
        name: the model name sent as ``model``.
        base_url: the API root (``…/v1``); ``/chat/completions`` is appended.
        api_key: sent as ``Authorization: Bearer``; ``None`` sends no header.
        max_tokens: sent as ``max_completion_tokens`` when set (servers choose otherwise).
        timeout: the deadline of one call, retries included (``--model-timeout``).
        sleep, rng, wall_clock, telemetry, max_attempts, client: see
            :class:`agentd.models._http.JsonPoster` (injected by tests).
    """

    provider = "openai"

    def __init__(
        self,
        name: str,
        *,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        max_tokens: int | None = None,
        timeout: float = DEFAULT_MODEL_TIMEOUT_S,
        sleep: Sleep = trio.sleep,
        rng: random.Random | None = None,
        wall_clock: Callable[[], float] = time.time,
        telemetry: Telemetry | None = None,
        max_attempts: int = MAX_ATTEMPTS,
        client: httpx2.AsyncClient | None = None,
    ) -> None:
        self.name = name
        self.url = join_url(base_url, "/chat/completions")
        self.max_tokens = max_tokens
        self._headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._poster = JsonPoster(
            provider=self.provider,
            auth_fix="set OPENAI_API_KEY to a valid key for this base URL (OPENAI_BASE_URL)",
            model=name,
            base_url_var="OPENAI_BASE_URL",
            timeout=timeout,
            sleep=sleep,
            rng=rng,
            wall_clock=wall_clock,
            telemetry=telemetry,
            max_attempts=max_attempts,
            client=client,
        )

    def __repr__(self) -> str:
        return f"OpenAIModel({self.name!r}, url={redact(self.url)!r})"

    async def complete(
        self,
        *,
        system: str | None,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
    ) -> ModelReply:
        """One Chat Completions call (see :class:`agentd.models.base.Model`)."""
        body = build_request(
            self.name, system=system, messages=messages, tools=tools, max_tokens=self.max_tokens
        )
        answer = await self._poster.post(self.url, headers=self._headers, body=body)
        return parse_response(answer, estimated_input=estimate_input_tokens(system, messages, tools))

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._poster.aclose()
