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
  A tool message carries only text, so a result's images follow the tool
  messages of that turn in one user message: per result, a text part naming
  the call, then ``{"type": "image_url", "image_url": {"url": "data:…"}}``
  parts (the tool text says they follow). For a model set not to take images
  (``images = false``), each image is a text placeholder instead.

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
from agentd.models._wire import HttpModel, WireFormat, openai_usage
from agentd.models._wire import usage_from as usage_from  # the OpenAI usage reader, under its older home
from agentd.models.base import NO_IMAGES_NOTE, Message, ModelReply, Prompt, StopReason, ToolCall, json_text
from agentd.models.settings import TOOL_CHOICE_WORDS, ModelSettings

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


def build_request(model: str, prompt: Prompt, settings: ModelSettings | None = None) -> JSONObject:
    """The Chat Completions request body for this prompt (pure)."""
    settings = settings or ModelSettings()
    attach = settings.images is not False
    wire: JSONArray = []
    images: JSONArray = []  # the image parts of the tool results just written, sent after them
    if prompt.system:
        wire.append({"role": "system", "content": prompt.system})
    for m in prompt.messages:
        if m.role != "tool" and images:
            wire.append({"role": "user", "content": images})
            images = []
        if m.role == "user":
            wire.append({"role": "user", "content": m.content})
        elif m.role == "assistant":
            entry: JSONObject = {"role": "assistant", "content": m.content or None}
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
            content = _tool_text(m, attach)
            wire.append({"role": "tool", "tool_call_id": m.tool_call_id or "", "content": content})
            if attach and m.images:
                images += image_parts(m)
    if images:
        wire.append({"role": "user", "content": images})
    body: JSONObject = {"model": model, "messages": wire}
    if prompt.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.input_schema},
            }
            for t in prompt.tools
        ]
    if settings.max_output_tokens is not None:
        body["max_completion_tokens"] = settings.max_output_tokens
    body.update(settings.sampling())
    if settings.stop is not None:
        body["stop"] = list(settings.stop)
    if settings.reasoning_effort is not None:
        body["reasoning_effort"] = settings.reasoning_effort
    if prompt.tools:
        if settings.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = settings.parallel_tool_calls
        if settings.tool_choice is not None:
            body["tool_choice"] = tool_choice_field(settings.tool_choice)
    body.update(settings.extra)
    return body


def _tool_text(m: Message, attach: bool) -> str:
    """A tool message's content: its text, and what became of its images."""
    text = m.content if attach else m.text_with_placeholders(NO_IMAGES_NOTE)
    if attach and m.images:
        note = f"[agentd: the {len(m.images)} image(s) of this result follow in the next user message]"
        text = f"{text}\n{note}" if text else note
    return TOOL_ERROR_PREFIX + text if m.is_error else text


def image_parts(m: Message) -> JSONArray:
    """A tool result's images as Chat Completions user-message parts, after a text part naming the call."""
    parts: JSONArray = [
        {"type": "text", "text": f"[agentd: the image(s) of the result of tool call {m.tool_call_id}]"}
    ]
    parts += [{"type": "image_url", "image_url": {"url": image.data_url()}} for image in m.images]
    return parts


def tool_choice_field(choice: str) -> JSONValue:
    """``tool_choice`` as Chat Completions spells it: a word, or the function to force."""
    if choice in TOOL_CHOICE_WORDS:
        return choice
    return {"type": "function", "function": {"name": choice}}


def parse_response(body: JSONObject, *, estimated_input: int = 0) -> ModelReply:
    """The reply in a Chat Completions response body (pure).

    Args:
        body: the decoded response.
        estimated_input: input tokens to report when the body has no usage.

    Raises:
        ModelResponseError: the body lacks ``choices[0].message`` or has the wrong types
            ("openai returned an unexpected response: ...", naming the field).
    """
    choices = get_array(body, "choices")
    choice = as_object(choices[0]) if choices else None
    if choice is None:
        raise _unexpected("choices[0]", f"is missing ({_keys(body)})")
    message = get_object(choice, "message")
    if message is None:
        raise _unexpected("choices[0].message", f"is missing ({_keys(choice)})")
    text = message.get("content") or ""
    if not isinstance(text, str):
        raise _unexpected("choices[0].message.content", f"is {type(text).__name__}, expected a string")
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise _unexpected("choices[0].message.tool_calls", f"is {type(raw_calls).__name__}, expected a list")
    calls = [_tool_call(i, raw) for i, raw in enumerate(raw_calls)]
    refusal_value = message.get("refusal") or None
    finish = get_str(choice, "finish_reason")
    stop: StopReason = _FINISH.get(finish, "end") if finish is not None else "end"
    if calls and stop == "end":
        stop = "tool_use"
    refusal: str | None = None
    if refusal_value is not None:
        stop = "refusal"
        refusal = str(refusal_value)
    elif stop == "refusal":
        refusal = text or CONTENT_FILTER_REFUSAL
    usage = openai_usage(
        body,
        "prompt_tokens",
        "completion_tokens",
        "prompt_tokens_details",
        estimated_input=estimated_input,
        text=text,
        calls=calls,
    )
    return ModelReply(text=text, tool_calls=calls, stop=stop, usage=usage, refusal=refusal)


def _unexpected(field: str, problem: str) -> ModelResponseError:
    return ModelResponseError(f"openai returned an unexpected response: {field} {problem}")


def _tool_call(index: int, raw: JSONValue) -> ToolCall:
    where = f"choices[0].message.tool_calls[{index}]"
    item = as_object(raw)
    fn = get_object(item, "function") if item is not None else None
    if item is None or fn is None:
        raise _unexpected(f"{where}.function", f"is missing: {raw!r:.200}")
    name = get_str(fn, "name")
    if name is None:
        # An empty name is the model's: the call is answered "unknown tool".
        raise _unexpected(f"{where}.function.name", f"is missing or not a string: {fn!r:.200}")
    # Some compatible servers omit the id; the transcript still needs one to
    # pair the result with the call.
    call_id = get_str(item, "id") or f"call_{index}"
    args = fn.get("arguments")
    if is_object(args):
        # Some compatible servers send the arguments as an object, not JSON text.
        return ToolCall.from_object(call_id, name, args)
    if args is None:
        args = ""
    if not isinstance(args, str):
        return ToolCall.rejected(
            call_id,
            name,
            json_text(args),
            f"the arguments for tool {name!r} are JSON {type(args).__name__}, not an object. "
            "Call the tool again with the arguments as one JSON object.",
        )
    return ToolCall.from_raw(call_id, name, args)


def _keys(obj: JSONObject) -> str:
    return f"keys {sorted(obj)!r:.200}"


class OpenAIEndpoint(HttpModel):
    """What the Chat Completions and Responses clients share: the base URL, the key (a bearer token), the prices."""

    price_provider = "openai"
    default_base_url = DEFAULT_BASE_URL
    key_var = "OPENAI_API_KEY"
    base_url_env = "OPENAI_BASE_URL"


class OpenAIModel(OpenAIEndpoint):
    """A Chat Completions model (OpenAI, Azure OpenAI, or any compatible server).

    ``/chat/completions`` is appended to ``base_url`` (``…/v1``). The arguments
    are :class:`agentd.models._wire.HttpModel`'s.
    """

    provider = "openai"
    path = "/chat/completions"
    wire = WireFormat(build_request, parse_response)
    wire_api = "chat"

    @property
    def max_tokens(self) -> int | None:
        """The output-token limit sent (``settings.max_output_tokens``), if any."""
        return self.settings.max_output_tokens
