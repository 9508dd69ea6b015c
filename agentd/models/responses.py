"""``openai-responses:MODEL``: the OpenAI Responses API, for models that only offer it.

``POST {base}/responses`` (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``, as for
``openai:``). agentd keeps the conversation itself, so every request carries
the whole transcript and ``store`` is ``false`` (nothing is kept by the
provider between calls).

Transcript mapping (request ``input`` items):

* ``system`` → the top-level ``instructions``.
* user → ``{"role": "user", "content": text}``.
* assistant → the reply's ``reasoning`` items first, verbatim (with their
  ``encrypted_content``: a reasoning model continues its chain of thought
  across tool calls only if it gets them back), then
  ``{"type": "message", "role": "assistant", "content": [{"type":
  "output_text", "text"}]}`` and one ``{"type": "function_call", "call_id",
  "name", "arguments"}`` per tool call (with the item ``id`` the provider gave,
  which is how a reasoning item finds the item that followed it).
  ``arguments`` is ``"{}"`` for a call whose arguments were invalid.
* tool → ``{"type": "function_call_output", "call_id", "output"}``; the API
  has no error flag, so an error result's output starts with ``ERROR: ``.

Settings: ``temperature``, ``top_p``, ``max_output_tokens``,
``reasoning: {"effort"}`` (and then ``include:
["reasoning.encrypted_content"]``), and, with tools, ``parallel_tool_calls``
and ``tool_choice`` (``{"type": "function", "name"}`` to force one);
``extra`` is merged into the body last. Tools are
``{"type": "function", "name", "description", "parameters", "strict": false}``.

Reply mapping: ``output`` items: ``message`` → its ``output_text`` parts
joined (a ``refusal`` part → refusal), ``function_call`` → a tool call,
``reasoning`` → kept for the next request. ``status: "incomplete"`` with
``incomplete_details.reason`` ``max_output_tokens`` → max_tokens,
``content_filter`` → refusal. Usage: ``input_tokens`` (cached included),
``input_tokens_details.cached_tokens``, ``output_tokens``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import httpx2
import trio

from agentd.errors import ModelResponseError
from agentd.models._http import DEFAULT_MODEL_TIMEOUT_S, MAX_ATTEMPTS, JsonPoster, Sleep, join_url
from agentd.models.base import (
    Message,
    ModelReply,
    StopReason,
    ToolCall,
    ToolSpec,
    Usage,
    estimate_input_tokens,
    estimate_tokens,
)
from agentd.models.openai import (
    CONTENT_FILTER_REFUSAL,
    DEFAULT_BASE_URL,
    TOOL_ERROR_PREFIX,
    response_model,
    usage_from,
)
from agentd.models.pricing import price_call
from agentd.models.settings import TOOL_CHOICE_WORDS, ModelSettings
from agentd.redact import redact
from agentd.telemetry import Telemetry

#: Tag of :attr:`~agentd.models.base.Message.provider_data` written by this wire format.
PROVIDER_DATA_API = "responses"

#: Longest kept item id (ids are short; a hostile server cannot grow the transcript through them).
_MAX_ID = 200


def build_request(
    model: str,
    *,
    system: str | None,
    messages: Sequence[Message],
    tools: Sequence[ToolSpec],
    settings: ModelSettings | None = None,
) -> dict[str, Any]:
    """The Responses API request body for this transcript (pure)."""
    settings = settings or ModelSettings()
    items: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "user":
            items.append({"role": "user", "content": m.content})
        elif m.role == "assistant":
            data = (
                m.provider_data if m.provider_data and m.provider_data.get("api") == PROVIDER_DATA_API else {}
            )
            items += [dict(r) for r in data.get("reasoning", ()) if isinstance(r, dict)]
            if m.content:
                message: dict[str, Any] = {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": m.content}],
                }
                if isinstance(data.get("message_id"), str):
                    message["id"] = data["message_id"]
                items.append(message)
            ids = data.get("call_item_ids") or {}
            for c in m.tool_calls:
                call: dict[str, Any] = {
                    "type": "function_call",
                    "call_id": c.id,
                    "name": c.name,
                    "arguments": "{}" if c.error is not None else (c.raw_arguments or "{}"),
                }
                if isinstance(ids.get(c.id), str):
                    call["id"] = ids[c.id]
                items.append(call)
        else:
            output = TOOL_ERROR_PREFIX + m.content if m.is_error else m.content
            items.append({"type": "function_call_output", "call_id": m.tool_call_id or "", "output": output})
    body: dict[str, Any] = {"model": model, "input": items, "store": False}
    if system:
        body["instructions"] = system
    if tools:
        body["tools"] = [
            {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.input_schema,
                "strict": False,
            }
            for t in tools
        ]
        if settings.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = settings.parallel_tool_calls
        if settings.tool_choice is not None:
            body["tool_choice"] = (
                settings.tool_choice
                if settings.tool_choice in TOOL_CHOICE_WORDS
                else {"type": "function", "name": settings.tool_choice}
            )
    if settings.max_output_tokens is not None:
        body["max_output_tokens"] = settings.max_output_tokens
    if settings.temperature is not None:
        body["temperature"] = settings.temperature
    if settings.top_p is not None:
        body["top_p"] = settings.top_p
    if settings.reasoning_effort is not None:
        body["reasoning"] = {"effort": settings.reasoning_effort}
        # With store=false, the reasoning state travels back to us encrypted, or not at all.
        body["include"] = ["reasoning.encrypted_content"]
    body.update(settings.extra)
    return body


def parse_response(body: dict[str, Any], *, estimated_input: int = 0) -> ModelReply:
    """The reply in a Responses API body (pure).

    Raises:
        ModelResponseError: ``output`` is missing or an item has the wrong shape (naming the field).
    """
    output = body.get("output")
    if not isinstance(output, list):
        raise _unexpected("output", f"is missing or not a list (keys {sorted(body)!r:.200})")
    texts: list[str] = []
    refusals: list[str] = []
    calls: list[ToolCall] = []
    reasoning: list[dict[str, Any]] = []
    call_ids: dict[str, str] = {}
    message_id: str | None = None
    for i, item in enumerate(output):
        if not isinstance(item, dict):
            raise _unexpected(f"output[{i}]", f"is not an object: {item!r:.200}")
        kind = item.get("type")
        if kind == "message":
            parts = item.get("content")
            if not isinstance(parts, list):
                raise _unexpected(f"output[{i}].content", "is missing or not a list")
            for part in parts:
                if isinstance(part, dict) and part.get("type") == "output_text":
                    texts.append(str(part.get("text") or ""))
                elif isinstance(part, dict) and part.get("type") == "refusal":
                    refusals.append(str(part.get("refusal") or ""))
            if isinstance(item.get("id"), str) and message_id is None:
                message_id = item["id"][:_MAX_ID]
        elif kind == "function_call":
            call = _tool_call(i, item)
            calls.append(call)
            if isinstance(item.get("id"), str):
                call_ids[call.id] = item["id"][:_MAX_ID]
        elif kind == "reasoning":
            reasoning.append({k: v for k, v in item.items() if k != "status"})
        # Other item kinds (hosted tools) carry nothing the loop uses.
    text = "".join(texts)
    stop: StopReason = "tool_use" if calls else "end"
    refusal: str | None = None
    details = body.get("incomplete_details")
    reason = details.get("reason") if isinstance(details, dict) else None
    if body.get("status") == "incomplete" and reason == "max_output_tokens":
        stop = "max_tokens"
    if refusals:
        stop, refusal = "refusal", "".join(refusals) or CONTENT_FILTER_REFUSAL
    elif reason == "content_filter":
        stop, refusal = "refusal", text or CONTENT_FILTER_REFUSAL
    usage = body.get("usage")
    if isinstance(usage, dict) and isinstance(usage.get("input_tokens"), int):
        tokens = usage_from(usage, "input_tokens", "output_tokens", "input_tokens_details")
    else:
        tokens = Usage(
            estimated_input, estimate_tokens(text + "".join(c.name + c.raw_arguments for c in calls))
        )
    data: dict[str, Any] | None = None
    if reasoning or call_ids or message_id:
        data = {"api": PROVIDER_DATA_API, "reasoning": reasoning, "call_item_ids": call_ids}
        if message_id:
            data["message_id"] = message_id
    return ModelReply(
        text=text, tool_calls=calls, stop=stop, usage=tokens, refusal=refusal, provider_data=data
    )


def _unexpected(field: str, problem: str) -> ModelResponseError:
    return ModelResponseError(f"openai-responses returned an unexpected response: {field} {problem}")


def _tool_call(index: int, item: dict[str, Any]) -> ToolCall:
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise _unexpected(f"output[{index}].name", f"of a function_call item is missing: {item!r:.200}")
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        call_id = f"call_{index}"
    args = item.get("arguments")
    if not isinstance(args, str):
        args = "" if args is None else str(args)
    return ToolCall.from_raw(call_id[:_MAX_ID], name, args)


class ResponsesModel:
    """An OpenAI Responses API model.

    Args:
        name: the model name sent as ``model``.
        base_url: the API root (``…/v1``); ``/responses`` is appended.
        api_key: sent as ``Authorization: Bearer``; ``None`` sends no header.
        settings: the model settings sent with every call.
        headers: extra request headers (a ``[providers.NAME]`` table).
        provider: the provider name in telemetry and messages.
        price_provider: the ``genai-prices`` provider id to price calls with (None: unknown).
        timeout: the deadline of one call, retries included (``--model-timeout``).
        sleep, rng, wall_clock, telemetry, max_attempts, client: see
            :class:`agentd.models._http.JsonPoster` (injected by tests).
    """

    def __init__(
        self,
        name: str,
        *,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        settings: ModelSettings | None = None,
        headers: Mapping[str, str] | None = None,
        provider: str = "openai-responses",
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
        self.url = join_url(base_url, "/responses")
        self.settings = settings or ModelSettings()
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
        return f"ResponsesModel({self.name!r}, url={redact(self.url)!r})"

    async def complete(
        self,
        *,
        system: str | None,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
    ) -> ModelReply:
        """One Responses API call (see :class:`agentd.models.base.Model`)."""
        body = build_request(self.name, system=system, messages=messages, tools=tools, settings=self.settings)
        answer = await self._poster.post(self.url, headers=self._headers, body=body)
        reply = parse_response(answer, estimated_input=estimate_input_tokens(system, messages, tools))
        return replace(
            reply, cost_usd=price_call(self.price_provider, (response_model(answer), self.name), reply.usage)
        )

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._poster.aclose()
