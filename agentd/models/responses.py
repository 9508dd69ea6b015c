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
  A result with images has a list as its ``output``: ``{"type": "input_text",
  "text"}`` then ``{"type": "input_image", "image_url": "data:…", "detail":
  "auto"}`` per image (for a model set not to take images, text placeholders
  in the output string instead).

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

from agentd.core.errors import ModelResponseError
from agentd.core.jsonvalue import (
    JSONArray,
    JSONObject,
    JSONValue,
    as_object,
    get_array,
    get_object,
    get_str,
    is_object,
)
from agentd.models._wire import WireFormat, openai_usage
from agentd.models.base import NO_IMAGES_NOTE, Message, ModelReply, Prompt, StopReason, ToolCall
from agentd.models.openai import CONTENT_FILTER_REFUSAL, TOOL_ERROR_PREFIX, OpenAIEndpoint
from agentd.models.settings import TOOL_CHOICE_WORDS, ModelSettings

#: Tag of :attr:`~agentd.models.base.Message.provider_data` written by this wire format.
PROVIDER_DATA_API = "responses"

#: Longest kept item id (ids are short; a hostile server cannot grow the transcript through them).
_MAX_ID = 200


def build_request(model: str, prompt: Prompt, settings: ModelSettings | None = None) -> JSONObject:
    """The Responses API request body for this prompt (pure)."""
    settings = settings or ModelSettings()
    attach = settings.images is not False
    items: JSONArray = []
    for m in prompt.messages:
        if m.role == "user":
            items.append({"role": "user", "content": m.content})
        elif m.role == "assistant":
            data = (
                m.provider_data if m.provider_data and m.provider_data.get("api") == PROVIDER_DATA_API else {}
            )
            items += [dict(r) for r in get_array(data, "reasoning") or () if is_object(r)]
            if m.content:
                message: JSONObject = {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": m.content}],
                }
                message_id = get_str(data, "message_id")
                if message_id is not None:
                    message["id"] = message_id
                items.append(message)
            ids = get_object(data, "call_item_ids") or {}
            for c in m.tool_calls:
                call: JSONObject = {
                    "type": "function_call",
                    "call_id": c.id,
                    "name": c.name,
                    "arguments": "{}" if c.error is not None else (c.raw_arguments or "{}"),
                }
                item_id = get_str(ids, c.id)
                if item_id is not None:
                    call["id"] = item_id
                items.append(call)
        else:
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": m.tool_call_id or "",
                    "output": _output(m, attach),
                }
            )
    body: JSONObject = {"model": model, "input": items, "store": False}
    if prompt.system:
        body["instructions"] = prompt.system
    if prompt.tools:
        body["tools"] = [
            {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.input_schema,
                "strict": False,
            }
            for t in prompt.tools
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
    body.update(settings.sampling())
    if settings.reasoning_effort is not None:
        body["reasoning"] = {"effort": settings.reasoning_effort}
        # With store=false, the reasoning state travels back to us encrypted, or not at all.
        body["include"] = ["reasoning.encrypted_content"]
    body.update(settings.extra)
    return body


def _output(m: Message, attach: bool) -> JSONValue:
    """A tool result's ``output``: its text, or (with images to attach) text and image items."""
    text = m.content if attach else m.text_with_placeholders(NO_IMAGES_NOTE)
    if m.is_error:
        text = TOOL_ERROR_PREFIX + text
    if not (attach and m.images):
        return text
    parts: JSONArray = [{"type": "input_text", "text": text}] if text else []
    parts += [{"type": "input_image", "image_url": image.data_url(), "detail": "auto"} for image in m.images]
    return parts


def parse_response(body: JSONObject, *, estimated_input: int = 0) -> ModelReply:
    """The reply in a Responses API body (pure).

    Raises:
        ModelResponseError: ``output`` is missing or an item has the wrong shape (naming the field).
    """
    output = get_array(body, "output")
    if output is None:
        raise _unexpected("output", f"is missing or not a list (keys {sorted(body)!r:.200})")
    texts: list[str] = []
    refusals: list[str] = []
    calls: list[ToolCall] = []
    reasoning: JSONArray = []
    call_ids: JSONObject = {}
    message_id: str | None = None
    for i, raw in enumerate(output):
        item = as_object(raw)
        if item is None:
            raise _unexpected(f"output[{i}]", f"is not an object: {raw!r:.200}")
        kind = item.get("type")
        item_id = get_str(item, "id")
        if kind == "message":
            parts = get_array(item, "content")
            if parts is None:
                raise _unexpected(f"output[{i}].content", "is missing or not a list")
            for part in parts:
                part_obj = as_object(part) or {}
                if part_obj.get("type") == "output_text":
                    texts.append(str(part_obj.get("text") or ""))
                elif part_obj.get("type") == "refusal":
                    refusals.append(str(part_obj.get("refusal") or ""))
            if item_id is not None and message_id is None:
                message_id = item_id[:_MAX_ID]
        elif kind == "function_call":
            call = _tool_call(i, item)
            calls.append(call)
            if item_id is not None:
                call_ids[call.id] = item_id[:_MAX_ID]
        elif kind == "reasoning":
            reasoning.append({k: v for k, v in item.items() if k != "status"})
        # Other item kinds (hosted tools) carry nothing the loop uses.
    text = "".join(texts)
    stop: StopReason = "tool_use" if calls else "end"
    refusal: str | None = None
    details = get_object(body, "incomplete_details")
    reason = details.get("reason") if details is not None else None
    if body.get("status") == "incomplete" and reason == "max_output_tokens":
        stop = "max_tokens"
    if refusals:
        stop, refusal = "refusal", "".join(refusals) or CONTENT_FILTER_REFUSAL
    elif reason == "content_filter":
        stop, refusal = "refusal", text or CONTENT_FILTER_REFUSAL
    usage = openai_usage(
        body,
        "input_tokens",
        "output_tokens",
        "input_tokens_details",
        estimated_input=estimated_input,
        text=text,
        calls=calls,
    )
    data: JSONObject | None = None
    if reasoning or call_ids or message_id:
        data = {"api": PROVIDER_DATA_API, "reasoning": reasoning, "call_item_ids": call_ids}
        if message_id:
            data["message_id"] = message_id
    return ModelReply(
        text=text, tool_calls=calls, stop=stop, usage=usage, refusal=refusal, provider_data=data
    )


def _unexpected(field: str, problem: str) -> ModelResponseError:
    return ModelResponseError(f"openai-responses returned an unexpected response: {field} {problem}")


def _tool_call(index: int, item: JSONObject) -> ToolCall:
    name = item.get("name")
    if not isinstance(name, str):  # an empty name is the model's: the call is answered "unknown tool"
        raise _unexpected(f"output[{index}].name", f"of a function_call item is missing: {item!r:.200}")
    call_id = get_str(item, "call_id") or f"call_{index}"
    args = item.get("arguments")
    if not isinstance(args, str):
        args = "" if args is None else str(args)
    return ToolCall.from_raw(call_id[:_MAX_ID], name, args)


class ResponsesModel(OpenAIEndpoint):
    """An OpenAI Responses API model.

    ``/responses`` is appended to ``base_url`` (``…/v1``). The arguments are
    :class:`agentd.models._wire.HttpModel`'s.
    """

    provider = "openai-responses"
    path = "/responses"
    wire = WireFormat(build_request, parse_response)
    wire_api = "responses"
