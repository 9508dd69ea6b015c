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

Settings (:class:`~agentd.models.settings.ModelSettings`) go on the wire as
the API documents them: ``temperature``, ``top_p``, ``max_completion_tokens``,
``stop``, ``reasoning_effort``, and, only when tools are offered (the API
refuses them otherwise), ``parallel_tool_calls`` and ``tool_choice``
(``"auto"``/``"none"``/``"required"`` or ``{"type": "function", "function":
{"name"}}``); ``extra`` is merged into the body last.

Reply mapping: ``choices[0].message`` content / ``tool_calls`` / ``refusal``;
``finish_reason`` ``stop`` → end, ``tool_calls`` → tool_use (also whenever
tool calls are present: some servers say ``stop``), ``length`` → max_tokens,
``content_filter`` or a ``refusal`` → refusal. ``usage.prompt_tokens`` (every
input token) / ``completion_tokens``, with
``usage.prompt_tokens_details.cached_tokens`` (OpenAI's automatic prompt
caching) and ``cache_write_tokens``; estimated when a server omits usage.

The same client serves Azure OpenAI (``azure:DEPLOYMENT``: the factory builds
the deployment URL, its ``api-version`` and the ``api-key`` or bearer header)
and every ``[providers.NAME]`` endpoint.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
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
from agentd.models.pricing import price_call
from agentd.models.settings import TOOL_CHOICE_WORDS, ModelSettings
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
    settings: ModelSettings | None = None,
) -> dict[str, Any]:
    """The Chat Completions request body for this transcript (pure).

    ``max_tokens`` is the older spelling of ``settings.max_output_tokens``
    (the setting wins when both are given).
    """
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
    settings = settings or ModelSettings()
    limit = settings.max_output_tokens if settings.max_output_tokens is not None else max_tokens
    if limit is not None:
        body["max_completion_tokens"] = limit
    if settings.temperature is not None:
        body["temperature"] = settings.temperature
    if settings.top_p is not None:
        body["top_p"] = settings.top_p
    if settings.stop is not None:
        body["stop"] = list(settings.stop)
    if settings.reasoning_effort is not None:
        body["reasoning_effort"] = settings.reasoning_effort
    if tools:
        if settings.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = settings.parallel_tool_calls
        if settings.tool_choice is not None:
            body["tool_choice"] = tool_choice_field(settings.tool_choice)
    body.update(settings.extra)
    return body


def tool_choice_field(choice: str) -> str | dict[str, Any]:
    """``tool_choice`` as Chat Completions spells it: a word, or the function to force."""
    if choice in TOOL_CHOICE_WORDS:
        return choice
    return {"type": "function", "function": {"name": choice}}


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
        tokens = usage_from(usage, "prompt_tokens", "completion_tokens", "prompt_tokens_details")
    else:
        out = text + "".join(c.name + c.raw_arguments for c in calls)
        tokens = Usage(estimated_input, estimate_tokens(out))
    return ModelReply(text=text, tool_calls=calls, stop=stop, usage=tokens, refusal=refusal)


def usage_from(usage: dict[str, Any], input_key: str, output_key: str, details_key: str) -> Usage:
    """OpenAI usage (Chat Completions or Responses spelling) as a :class:`Usage`.

    The input count already includes the cached tokens; the cache figures are
    clamped into it, so a server reporting more cached tokens than input
    tokens cannot make a count negative.
    """
    total_in = _count(usage.get(input_key)) or 0
    details = usage.get(details_key)
    details = details if isinstance(details, dict) else {}
    cached = min(_count(details.get("cached_tokens")) or 0, total_in)
    written = min(_count(details.get("cache_write_tokens")) or 0, total_in - cached)
    return Usage(total_in, _count(usage.get(output_key)) or 0, cached, written)


def response_model(body: dict[str, Any]) -> str | None:
    """The model name the provider reported (a dated snapshot, an Azure deployment's model), if any."""
    name = body.get("model")
    return name[:200] if isinstance(name, str) and name else None


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
    """A Chat Completions model (OpenAI, Azure OpenAI, or any compatible server).

    Args:
        name: the model name sent as ``model`` (for Azure: the deployment).
        base_url: the API root (``…/v1``); ``/chat/completions`` is appended.
        api_key: sent as ``Authorization: Bearer``; ``None`` sends no header.
        max_tokens: the older spelling of ``settings.max_output_tokens``.
        settings: the model settings sent with every call.
        url: the whole request URL, when the path is not ``/chat/completions`` under
            ``base_url`` (Azure's deployment URLs); overrides ``base_url``.
        headers: extra request headers (``api-key``, a ``[providers.NAME]`` table).
        provider: the provider name in telemetry and messages (``openai``, ``azure``, NAME).
        price_provider: the ``genai-prices`` provider id to price calls with (None: unknown).
        auth_fix, base_url_var: what 401/403 and 404 messages tell the user.
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
        settings: ModelSettings | None = None,
        url: str | None = None,
        headers: Mapping[str, str] | None = None,
        provider: str = "openai",
        price_provider: str | None = "openai",
        auth_fix: str = "set OPENAI_API_KEY to a valid key for this base URL (OPENAI_BASE_URL)",
        base_url_var: str = "OPENAI_BASE_URL",
        timeout: float = DEFAULT_MODEL_TIMEOUT_S,
        sleep: Sleep = trio.sleep,
        rng: random.Random | None = None,
        wall_clock: Callable[[], float] = time.time,
        telemetry: Telemetry | None = None,
        max_attempts: int = MAX_ATTEMPTS,
        client: httpx2.AsyncClient | None = None,
    ) -> None:
        self.name = name
        self.provider = provider
        self.price_provider = price_provider
        self.url = url if url is not None else join_url(base_url, "/chat/completions")
        self.settings = settings or ModelSettings()
        if max_tokens is not None and self.settings.max_output_tokens is None:
            self.settings = replace(self.settings, max_output_tokens=max_tokens)
        self.max_tokens = self.settings.max_output_tokens
        self._headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._headers.update(headers or {})
        self._poster = JsonPoster(
            provider=provider,
            auth_fix=auth_fix,
            model=name,
            base_url_var=base_url_var,
            timeout=timeout,
            sleep=sleep,
            rng=rng,
            wall_clock=wall_clock,
            telemetry=telemetry,
            max_attempts=max_attempts,
            client=client,
        )

    def __repr__(self) -> str:
        return f"OpenAIModel({self.name!r}, provider={self.provider!r}, url={redact(self.url)!r})"

    async def complete(
        self,
        *,
        system: str | None,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
    ) -> ModelReply:
        """One Chat Completions call (see :class:`agentd.models.base.Model`)."""
        body = build_request(self.name, system=system, messages=messages, tools=tools, settings=self.settings)
        answer = await self._poster.post(self.url, headers=self._headers, body=body)
        reply = parse_response(answer, estimated_input=estimate_input_tokens(system, messages, tools))
        cost = price_call(self.price_provider, (response_model(answer), self.name), reply.usage)
        return replace(reply, cost_usd=cost)

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._poster.aclose()
