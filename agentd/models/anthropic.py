"""``anthropic:MODEL``: the Messages API.

``POST {base}/v1/messages`` with ``x-api-key`` and ``anthropic-version``. The
request body and the reply parsing here are also what ``bedrock:`` and
``vertex:`` send through the official SDK (:mod:`agentd.models.cloud`).

Transcript mapping (request):

* ``system`` → the top-level ``system`` field (omitted when empty).
* user → ``{"role": "user", "content": text}``.
* assistant → ``{"role": "assistant", "content": [thinking blocks?, text block?, tool_use blocks…]}``;
  a ``tool_use`` block is ``{"type": "tool_use", "id", "name", "input"}``,
  ``input`` being ``{}`` for a call whose arguments were invalid. The
  ``thinking`` / ``redacted_thinking`` blocks of the reply come back first,
  verbatim (with their signatures), as extended thinking with tools requires.
  An assistant turn with neither text nor calls is sent as the text
  ``NO_REPLY`` (the API refuses empty content, and an empty reply means
  exactly that in agentd).
* tool → a ``{"type": "tool_result", "tool_use_id", "content", "is_error"?}``
  block in a user message; a result with images has blocks as its content,
  a ``text`` block (when there is text) then ``{"type": "image", "source":
  {"type": "base64", "media_type", "data"}}`` per image (for a model set not
  to take images, text placeholders instead).
* Consecutive messages that land on the same wire role are merged into one
  message (so the results of one assistant turn travel together, followed
  by any user text that came after them), as the API requires.

Prompt caching (``prompt_cache``, default ``5m``; ``rfcs/0166``): a
``cache_control`` breakpoint on the last tool (caching the tool list), on the
system prompt, on the last block of the request, and on the last block of the
previous user message (where the previous call's request ended), so each call
reads the previous call's whole prefix from the cache and a warm session's
next turn re-reads only what is new. Four breakpoints: the API's maximum.

Settings: ``max_tokens`` (``max_output_tokens``, else
:func:`default_max_output_tokens`), ``temperature``, ``top_p``,
``stop_sequences``, ``thinking: {"type": "enabled", "budget_tokens"}``, and,
only when tools are offered, ``tool_choice`` (``auto``/``none``/``any``/
``tool``) with ``disable_parallel_tool_use`` for ``parallel_tool_calls =
false``; ``extra`` is merged into the body last.

Reply mapping: ``text`` blocks joined, ``tool_use`` blocks → tool calls;
``stop_reason`` ``end_turn``/``stop_sequence``/``pause_turn`` → end,
``tool_use`` → tool_use, ``max_tokens``/``model_context_window_exceeded``
→ max_tokens, ``refusal`` → refusal. Usage: ``input_tokens`` +
``cache_read_input_tokens`` + ``cache_creation_input_tokens`` is the whole
input (the API counts the three apart), ``output_tokens``.
"""

from __future__ import annotations

from agentd.core.errors import ModelResponseError
from agentd.core.jsonvalue import (
    JSONArray,
    JSONObject,
    JSONValue,
    as_array,
    as_object,
    get_array,
    get_str,
    is_object,
)
from agentd.models._wire import HttpModel, WireFormat, messages_usage
from agentd.models.base import (
    MAX_TOOL_ARGUMENT_CHARS,
    NO_IMAGES_NOTE,
    Message,
    ModelReply,
    Prompt,
    StopReason,
    ToolCall,
    json_text,
)
from agentd.models.settings import ModelSettings

DEFAULT_BASE_URL = "https://api.anthropic.com"

#: The API version header value this module's wire format follows.
API_VERSION = "2023-06-01"

#: Output-token limit per reply when none is configured (the API requires
#: one). Current Claude models allow 32k-64k, but agentd does not stream: a
#: non-streaming answer must arrive within a bounded time (the official SDK
#: refuses non-streaming requests above about 21k tokens for that reason), and
#: 16k covers every ordinary reply and tool call.
DEFAULT_MAX_OUTPUT_TOKENS = 16384

#: The older name of :data:`DEFAULT_MAX_OUTPUT_TOKENS`.
DEFAULT_MAX_TOKENS = DEFAULT_MAX_OUTPUT_TOKENS

#: Models whose output limit is below the default (their names, also as
#: Bedrock and Vertex spell them, contain these): the API refuses a larger
#: ``max_tokens`` outright.
SMALLER_OUTPUT_LIMITS: tuple[tuple[str, int], ...] = (
    ("claude-3-5-", 8192),
    ("claude-3-haiku", 4096),
    ("claude-3-opus", 4096),
    ("claude-3-sonnet", 4096),
)

#: Room for the answer itself on top of a thinking budget, when the output
#: limit is left to agentd (thinking counts toward ``max_tokens``).
THINKING_ANSWER_ROOM = 4096

#: Sent for an assistant turn that had neither text nor tool calls.
EMPTY_ASSISTANT_TEXT = "NO_REPLY"

#: The refusal text when the model stopped with ``refusal`` but said nothing.
DEFAULT_REFUSAL = "The model declined to continue."


def default_max_output_tokens(model: str, thinking_budget: int | None = None) -> int:
    """``max_tokens`` to send when ``max_output_tokens`` is not set.

    :data:`DEFAULT_MAX_OUTPUT_TOKENS`, or the model's own smaller limit
    (:data:`SMALLER_OUTPUT_LIMITS`); with a thinking budget, at least the
    budget plus :data:`THINKING_ANSWER_ROOM`.
    """
    limit = DEFAULT_MAX_OUTPUT_TOKENS
    lowered = model.lower()
    for fragment, smaller in SMALLER_OUTPUT_LIMITS:
        if fragment in lowered:
            limit = smaller
            break
    if thinking_budget:
        limit = max(limit, thinking_budget + THINKING_ANSWER_ROOM)
    return limit


#: The ``anthropic-beta`` flag that enables the one-hour cache lifetime (sent only with ``prompt_cache = "1h"``).
EXTENDED_CACHE_TTL_BETA = "extended-cache-ttl-2025-04-11"


def beta_headers(settings: ModelSettings) -> dict[str, str]:
    """The ``anthropic-beta`` header the settings need, if any."""
    return {"anthropic-beta": EXTENDED_CACHE_TTL_BETA} if settings.prompt_cache == "1h" else {}


def cache_control(ttl: str) -> JSONObject:
    """A ``cache_control`` breakpoint with the given lifetime (``5m`` is the API's default)."""
    return {"type": "ephemeral"} if ttl == "5m" else {"type": "ephemeral", "ttl": ttl}


#: Tag of :attr:`~agentd.models.base.Message.provider_data` written by this wire format.
PROVIDER_DATA_API = "messages"

_STOP: dict[str, StopReason] = {
    "end_turn": "end",
    "stop_sequence": "end",
    "pause_turn": "end",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "model_context_window_exceeded": "max_tokens",
    "refusal": "refusal",
}


def build_request(model: str, prompt: Prompt, settings: ModelSettings | None = None) -> JSONObject:
    """The Messages API request body for this prompt (pure)."""
    settings = settings or ModelSettings()
    wire: list[JSONObject] = []
    for m in prompt.messages:
        role: str
        content: str | list[JSONObject]
        if m.role == "user":
            role, content = "user", m.content
        elif m.role == "assistant":
            role = "assistant"
            blocks: list[JSONObject] = _replayed_thinking(m)
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
            if not any(b["type"] in ("text", "tool_use") for b in blocks):
                blocks.append({"type": "text", "text": EMPTY_ASSISTANT_TEXT})
            content = blocks
        else:
            role = "user"
            block: JSONObject = {
                "type": "tool_result",
                "tool_use_id": m.tool_call_id or "",
                "content": _result_content(m, settings.images is not False),
            }
            if m.is_error:
                block["is_error"] = True
            content = [block]
        value: JSONValue = content if isinstance(content, str) else [*content]
        if wire and wire[-1]["role"] == role:
            wire[-1]["content"] = [*_as_blocks(wire[-1]["content"]), *_as_blocks(value)]
        else:
            wire.append({"role": role, "content": value})
    cache = settings.prompt_cache or "5m"
    max_tokens = settings.max_output_tokens or default_max_output_tokens(model, settings.thinking_budget)
    body: JSONObject = {"model": model, "max_tokens": max_tokens, "messages": [*wire]}
    if prompt.system:
        body["system"] = (
            prompt.system
            if cache == "off"
            else [{"type": "text", "text": prompt.system, "cache_control": cache_control(cache)}]
        )
    if prompt.tools:
        specs: list[JSONObject] = [
            {"name": t.name, "description": t.description, "input_schema": t.input_schema}
            for t in prompt.tools
        ]
        if cache != "off":
            specs[-1]["cache_control"] = cache_control(cache)
        body["tools"] = [*specs]
    if cache != "off":
        _mark_prefix(wire, cache_control(cache))
    body.update(settings.sampling())
    if settings.stop is not None:
        body["stop_sequences"] = list(settings.stop)
    if settings.thinking_budget:
        body["thinking"] = {"type": "enabled", "budget_tokens": settings.thinking_budget}
    if prompt.tools:
        choice = tool_choice_field(settings.tool_choice, settings.parallel_tool_calls)
        if choice is not None:
            body["tool_choice"] = choice
    body.update(settings.extra)
    return body


def _result_content(m: Message, attach: bool) -> JSONValue:
    """A ``tool_result``'s content: its text, or (with images to attach) a text block and image blocks."""
    if not (attach and m.images):
        return m.content if attach else m.text_with_placeholders(NO_IMAGES_NOTE)
    blocks: JSONArray = [{"type": "text", "text": m.content}] if m.content else []
    blocks += [
        {"type": "image", "source": {"type": "base64", "media_type": image.mime_type, "data": image.data}}
        for image in m.images
    ]
    return blocks


def tool_choice_field(choice: str | None, parallel: bool | None) -> JSONObject | None:
    """``tool_choice`` as the Messages API spells it (``required`` is ``any``), or None to send none."""
    if choice is None and parallel is not False:
        return None
    if choice is None or choice == "auto":
        field: JSONObject = {"type": "auto"}
    elif choice == "none":
        return {"type": "none"}  # no tool is called: there is nothing to parallelise
    elif choice == "required":
        field = {"type": "any"}
    else:
        field = {"type": "tool", "name": choice}
    if parallel is False:
        field["disable_parallel_tool_use"] = True
    return field


def _replayed_thinking(m: Message) -> list[JSONObject]:
    data = m.provider_data
    if not data or data.get("api") != PROVIDER_DATA_API:
        return []
    return [dict(b) for b in get_array(data, "thinking") or () if is_object(b)]


def _mark_prefix(wire: list[JSONObject], control: JSONObject) -> None:
    """Breakpoints on the request's last block and on the previous user message's last block."""
    users = [i for i, m in enumerate(wire) if m["role"] == "user"]
    marks = [len(wire) - 1] if wire else []
    if len(users) >= 2 and users[-2] not in marks:
        marks.append(users[-2])
    elif len(users) == 1 and users[0] not in marks:
        marks.append(users[0])
    for i in marks:
        blocks = _as_blocks(wire[i]["content"])
        for block in reversed(blocks):
            # Breakpoints cannot sit on thinking blocks or empty text.
            if block.get("type") in ("text", "tool_result", "tool_use") and (
                block.get("type") != "text" or block.get("text")
            ):
                block["cache_control"] = control
                break
        wire[i]["content"] = [*blocks]


def _as_blocks(content: JSONValue) -> list[JSONObject]:
    """A message's content as blocks (copies: the caller may mark them); a text becomes one text block."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [dict(b) for b in as_array(content) or () if is_object(b)]


def parse_response(body: JSONObject) -> ModelReply:
    """The reply in a Messages API response body (pure).

    Raises:
        ModelResponseError: the body lacks ``content`` or has blocks of the wrong shape
            ("anthropic returned an unexpected response: ...", naming the field).
    """
    content = get_array(body, "content")
    if content is None:
        raise _unexpected("content", f"is missing or not a list (keys {sorted(body)!r:.200})")
    texts: list[str] = []
    calls: list[ToolCall] = []
    thinking: JSONArray = []
    for i, raw in enumerate(content):
        block = as_object(raw)
        if block is None:
            raise _unexpected(f"content[{i}]", f"is not an object: {raw!r:.200}")
        kind = block.get("type")
        if kind == "text":
            texts.append(str(block.get("text") or ""))
        elif kind == "tool_use":
            calls.append(_tool_call(i, block))
        elif kind in ("thinking", "redacted_thinking"):
            # Sent back verbatim (signature included) with the next request.
            thinking.append(block)
        # Other block kinds (server tools) carry nothing the loop uses.
    text = "".join(texts)
    reason = get_str(body, "stop_reason")
    stop: StopReason = _STOP.get(reason, "end") if reason is not None else "end"
    if calls and stop == "end":
        stop = "tool_use"
    refusal = (text or DEFAULT_REFUSAL) if stop == "refusal" else None
    data: JSONObject | None = {"api": PROVIDER_DATA_API, "thinking": thinking} if thinking else None
    return ModelReply(
        text=text,
        tool_calls=calls,
        stop=stop,
        usage=messages_usage(body),
        refusal=refusal,
        provider_data=data,
    )


def _unexpected(field: str, problem: str) -> ModelResponseError:
    return ModelResponseError(f"anthropic returned an unexpected response: {field} {problem}")


def _tool_call(index: int, block: JSONObject) -> ToolCall:
    name = get_str(block, "name")
    call_id = get_str(block, "id")
    if name is None:  # an empty name is the model's: the call is answered "unknown tool"
        raise _unexpected(f"content[{index}].name", f"of a tool_use block is missing: {block!r:.200}")
    if not call_id:
        raise _unexpected(f"content[{index}].id", f"of a tool_use block is missing: {block!r:.200}")
    args = block.get("input")
    if is_object(args):
        return ToolCall.from_object(call_id, name, args)
    raw = json_text(args)
    if len(raw) > MAX_TOOL_ARGUMENT_CHARS:
        return ToolCall.oversized(call_id, name, raw)
    return ToolCall.rejected(
        call_id,
        name,
        raw,
        f"the input for tool {name!r} is JSON {type(args).__name__}, not an object. "
        "Call the tool again with the input as one JSON object.",
    )


class AnthropicModel(HttpModel):
    """A Messages API model.

    ``/v1/messages`` is appended to ``base_url``; the key is sent as ``x-api-key``
    (``None`` sends none: a proxy that adds its own). The arguments are
    :class:`agentd.models._wire.HttpModel`'s.
    """

    provider = "anthropic"
    price_provider = "anthropic"
    path = "/v1/messages"
    # The Messages API reports usage itself: nothing is estimated.
    wire = WireFormat(build_request, lambda body, *, estimated_input=0: parse_response(body))
    default_base_url = DEFAULT_BASE_URL
    key_var = "ANTHROPIC_API_KEY"
    base_url_env = "ANTHROPIC_BASE_URL"
    wire_api = "messages"

    @property
    def max_tokens(self) -> int:
        """The output-token limit sent with every call."""
        return self.settings.max_output_tokens or default_max_output_tokens(
            self.name, self.settings.thinking_budget
        )

    def _auth_headers(self, api_key: str | None) -> dict[str, str]:
        headers = {"anthropic-version": API_VERSION, **beta_headers(self.settings)}
        if api_key:
            headers["x-api-key"] = api_key
        return headers
