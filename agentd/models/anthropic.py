"""``anthropic:MODEL``: the Messages API.

``POST {base}/v1/messages`` with ``x-api-key`` and ``anthropic-version``.

Transcript mapping (request):

* ``system`` → the top-level ``system`` field (omitted when empty).
* user → ``{"role": "user", "content": text}``.
* assistant → ``{"role": "assistant", "content": [text block?, tool_use blocks…]}``;
  a ``tool_use`` block is ``{"type": "tool_use", "id", "name", "input"}``,
  ``input`` being ``{}`` for a call whose arguments were invalid. An assistant
  turn with neither text nor calls is sent as the text ``NO_REPLY`` (the API
  refuses empty content, and an empty reply means exactly that in agentd).
* tool → a ``{"type": "tool_result", "tool_use_id", "content", "is_error"?}``
  block in a user message.
* Consecutive messages that land on the same wire role are merged into one
  message (so the results of one assistant turn travel together, followed
  by any user text that came after them), as the API requires.

Reply mapping: ``text`` blocks joined, ``tool_use`` blocks → tool calls;
``stop_reason`` ``end_turn``/``stop_sequence``/``pause_turn`` → end,
``tool_use`` → tool_use, ``max_tokens``/``model_context_window_exceeded``
→ max_tokens, ``refusal`` → refusal; ``usage.input_tokens`` / ``output_tokens``.
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
)
from agentd.redact import redact
from agentd.telemetry import Telemetry

DEFAULT_BASE_URL = "https://api.anthropic.com"

#: The API version header value this module's wire format follows.
API_VERSION = "2023-06-01"

#: Output-token limit per call when none is configured (the API requires one).
DEFAULT_MAX_TOKENS = 8192

#: Sent for an assistant turn that had neither text nor tool calls.
EMPTY_ASSISTANT_TEXT = "NO_REPLY"

#: The refusal text when the model stopped with ``refusal`` but said nothing.
DEFAULT_REFUSAL = "The model declined to continue."

_STOP: dict[str, StopReason] = {
    "end_turn": "end",
    "stop_sequence": "end",
    "pause_turn": "end",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "model_context_window_exceeded": "max_tokens",
    "refusal": "refusal",
}


def build_request(
    model: str,
    *,
    system: str | None,
    messages: Sequence[Message],
    tools: Sequence[ToolSpec],
    max_tokens: int = DEFAULT_MAX_TOKENS,
) -> dict[str, Any]:
    """The Messages API request body for this transcript (pure)."""
    wire: list[dict[str, Any]] = []
    for m in messages:
        role: str
        content: str | list[dict[str, Any]]
        if m.role == "user":
            role, content = "user", m.content
        elif m.role == "assistant":
            role = "assistant"
            blocks: list[dict[str, Any]] = []
            if m.content:
                blocks.append({"type": "text", "text": m.content})
            for c in m.tool_calls:
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": c.id,
                        "name": c.name,
                        "input": c.arguments if c.arguments is not None else {},
                    }
                )
            if not blocks:
                blocks.append({"type": "text", "text": EMPTY_ASSISTANT_TEXT})
            content = blocks
        else:
            role = "user"
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": m.tool_call_id or "",
                "content": m.content,
            }
            if m.is_error:
                block["is_error"] = True
            content = [block]
        if wire and wire[-1]["role"] == role:
            wire[-1]["content"] = _as_blocks(wire[-1]["content"]) + _as_blocks(content)
        else:
            wire.append({"role": role, "content": content})
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "messages": wire}
    if system:
        body["system"] = system
    if tools:
        body["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in tools
        ]
    return body


def _as_blocks(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def parse_response(body: dict[str, Any]) -> ModelReply:
    """The reply in a Messages API response body (pure).

    Raises:
        ModelResponseError: the body lacks ``content`` or has blocks of the wrong shape
            ("anthropic returned an unexpected response: ...", naming the field).
    """
    content = body.get("content")
    if not isinstance(content, list):
        raise _unexpected("content", f"is missing or not a list (keys {sorted(body)!r:.200})")
    texts: list[str] = []
    calls: list[ToolCall] = []
    for i, block in enumerate(content):
        if not isinstance(block, dict):
            raise _unexpected(f"content[{i}]", f"is not an object: {block!r:.200}")
        kind = block.get("type")
        if kind == "text":
            texts.append(str(block.get("text") or ""))
        elif kind == "tool_use":
            calls.append(_tool_call(i, block))
        # Other block kinds (thinking, server tools) carry nothing the loop uses.
    text = "".join(texts)
    reason = body.get("stop_reason")
    stop: StopReason = _STOP.get(reason, "end") if isinstance(reason, str) else "end"
    if calls and stop == "end":
        stop = "tool_use"
    refusal = (text or DEFAULT_REFUSAL) if stop == "refusal" else None
    usage = body.get("usage")
    if not isinstance(usage, dict):
        usage = {}
    tokens = Usage(_int(usage.get("input_tokens")), _int(usage.get("output_tokens")))
    return ModelReply(text=text, tool_calls=calls, stop=stop, usage=tokens, refusal=refusal)


def _unexpected(field: str, problem: str) -> ModelResponseError:
    return ModelResponseError(f"anthropic returned an unexpected response: {field} {problem}")


def _tool_call(index: int, block: dict[str, Any]) -> ToolCall:
    name = block.get("name")
    call_id = block.get("id")
    if not isinstance(name, str) or not name:
        raise _unexpected(f"content[{index}].name", f"of a tool_use block is missing: {block!r:.200}")
    if not isinstance(call_id, str) or not call_id:
        raise _unexpected(f"content[{index}].id", f"of a tool_use block is missing: {block!r:.200}")
    args = block.get("input")
    # orjson: it measures a huge input in milliseconds, and any depth orjson parsed it serializes
    # (json.dumps would hit Python's recursion limit on a deeply nested input).
    raw = orjson.dumps(args).decode()
    if len(raw) > MAX_TOOL_ARGUMENT_CHARS:
        return ToolCall.oversized(call_id, name, raw)
    if not isinstance(args, dict):
        return ToolCall(
            id=call_id,
            name=name,
            arguments=None,
            raw_arguments=raw,
            error=f"the input for tool {name!r} is JSON {type(args).__name__}, not an object. "
            "Call the tool again with the input as one JSON object.",
        )
    return ToolCall(id=call_id, name=name, arguments=args, raw_arguments=raw)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


class AnthropicModel:
    """A Messages API model.

    Args:
        name: the model name sent as ``model``.
        base_url: the API root; ``/v1/messages`` is appended.
        api_key: sent as ``x-api-key``; ``None`` sends no key (a proxy that adds its own).
        max_tokens: the output-token limit per call.
        timeout: the deadline of one call, retries included (``--model-timeout``).
        sleep, rng, wall_clock, telemetry, max_attempts, client: see
            :class:`agentd.models._http.JsonPoster` (injected by tests).
    """

    provider = "anthropic"

    def __init__(
        self,
        name: str,
        *,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        timeout: float = DEFAULT_MODEL_TIMEOUT_S,
        sleep: Sleep = trio.sleep,
        rng: random.Random | None = None,
        wall_clock: Callable[[], float] = time.time,
        telemetry: Telemetry | None = None,
        max_attempts: int = MAX_ATTEMPTS,
        client: httpx2.AsyncClient | None = None,
    ) -> None:
        self.name = name
        self.url = join_url(base_url, "/v1/messages")
        self.max_tokens = max_tokens
        self._headers = {"anthropic-version": API_VERSION}
        if api_key:
            self._headers["x-api-key"] = api_key
        self._poster = JsonPoster(
            provider=self.provider,
            auth_fix="set ANTHROPIC_API_KEY to a valid key for this base URL (ANTHROPIC_BASE_URL)",
            model=name,
            base_url_var="ANTHROPIC_BASE_URL",
            timeout=timeout,
            sleep=sleep,
            rng=rng,
            wall_clock=wall_clock,
            telemetry=telemetry,
            max_attempts=max_attempts,
            client=client,
        )

    def __repr__(self) -> str:
        return f"AnthropicModel({self.name!r}, url={redact(self.url)!r})"

    async def complete(
        self,
        *,
        system: str | None,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
    ) -> ModelReply:
        """One Messages API call (see :class:`agentd.models.base.Model`)."""
        body = build_request(
            self.name, system=system, messages=messages, tools=tools, max_tokens=self.max_tokens
        )
        answer = await self._poster.post(self.url, headers=self._headers, body=body)
        return parse_response(answer)

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._poster.aclose()
