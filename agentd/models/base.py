"""The provider-neutral model interface: transcript types, the reply, the ``Model`` protocol.

The agent loop speaks only these types. Each provider converts the transcript
to its own wire format on the way out and its answer back into a
:class:`ModelReply` on the way in, so the loop never sees a provider's JSON.

A transcript is a sequence of :class:`Message`: ``user`` turns (the
instruction, deliveries, notices), ``assistant`` turns (text and tool calls,
normally built with :meth:`ModelReply.as_message`) and ``tool`` results (one
per tool call, linked by ``tool_call_id``). What one call asks is a
:class:`Prompt`: the transcript, the system prompt (apart from the
transcript, because providers place it differently) and the tools offered.

A tool result may carry images (:class:`ImagePart`, already checked: a
known type, valid base64, under the size cap; see :mod:`agentd.agent.content`
and rfcs/0290). Each wire format attaches them the way its API takes images
from a tool, or, for a model set not to take images, writes
:meth:`ImagePart.placeholder` instead.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol, get_args, runtime_checkable

from agentd.core.jsonvalue import JSONObject, JSONValue, as_object
from agentd.core.safetext import TooDeep, json_bytes, valid_json, valid_text

Role = Literal["user", "assistant", "tool"]
"""Who speaks a transcript message."""

#: How much of a bad argument string an error message quotes back to the model.
_QUOTE_CHARS = 200

#: Longest tool-call arguments (JSON text, in characters) passed on to a tool.
#: Real arguments are a few KB (a file written in one call: some hundred KB);
#: 4 Mi leaves room for that and stays well under every channel the call
#: crosses (self-MCP lines, an upstream server's stdio line cap). Longer
#: arguments are not parsed: the model gets a tool error saying so, and the
#: transcript keeps only their first characters.
MAX_TOOL_ARGUMENT_CHARS = 4 * 1024 * 1024

#: Deepest nesting of tool-call arguments (objects and arrays) passed on to a
#: tool. Real arguments nest a few levels (a manifest, some twenty); the
#: parsers on the way refuse far less than a thousand (the MCP SDK's about
#: 200 for a whole message, orjson 255 when writing), so deeper arguments
#: would fail somewhere later. They are not passed on: the model gets a
#: tool error saying so.
MAX_TOOL_ARGUMENT_DEPTH = 64

#: Longest tool name or call id kept from a reply. Offered names are at most
#: 64 characters (provider rules); a longer name is never offered, so it is
#: cut (ending in "…") and the call answered "unknown tool".
MAX_TOOL_NAME_CHARS = 256

StopReason = Literal["end", "tool_use", "refusal", "max_tokens"]
"""Why a model turn ended.

* ``end``: the model finished its answer (the loop may end the run).
* ``tool_use``: the model asked for tools; run them and call the model again.
* ``refusal``: the model (or the provider's filter) declined; see ``ModelReply.refusal``.
* ``max_tokens``: the answer was cut at the output-token limit.
"""


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One tool the model may call.

    Attributes:
        name: the tool name the model must use (already namespaced, e.g. ``memo__memo_set``).
        description: what the tool does, for the model.
        input_schema: a JSON Schema object for the tool's arguments.
    """

    name: str
    description: str
    input_schema: JSONObject


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call the model asked for.

    Attributes:
        id: the provider's call id; the matching tool result carries it back.
        name: the tool to call.
        arguments: the parsed arguments, or ``None`` when ``error`` is set.
        raw_arguments: the arguments exactly as the model produced them (JSON text).
        error: why the arguments are unusable (invalid JSON, not an object).
            The agent loop sends this back to the model as an error tool
            result instead of calling the tool.
    """

    id: str
    name: str
    arguments: JSONObject | None
    raw_arguments: str
    error: str | None = None

    @classmethod
    def rejected(cls, id: str, name: str, raw_arguments: str, error: str) -> ToolCall:
        """A call whose arguments are unusable: never run; ``error`` goes back to the model as its result."""
        return cls(id=id, name=name, arguments=None, raw_arguments=raw_arguments, error=error)

    @classmethod
    def oversized(cls, id: str, name: str, raw_arguments: str) -> ToolCall:
        """A call whose arguments exceed :data:`MAX_TOOL_ARGUMENT_CHARS`: an error, never parsed or run.

        Only the first characters of the arguments are kept, so a runaway
        model cannot fill the transcript (and every later request) with them.
        """
        return cls.rejected(
            id,
            name,
            raw_arguments[:_QUOTE_CHARS],
            f"the arguments for tool {name!r} are {len(raw_arguments)} characters long, over the "
            f"limit of {MAX_TOOL_ARGUMENT_CHARS}; the tool was not called. Call it again with smaller "
            "arguments (split the work into several calls).",
        )

    @classmethod
    def too_deep(cls, id: str, name: str, raw_arguments: str) -> ToolCall:
        """A call whose arguments nest deeper than :data:`MAX_TOOL_ARGUMENT_DEPTH`: an error, never run."""
        return cls.rejected(
            id,
            name,
            raw_arguments[:_QUOTE_CHARS],
            f"the arguments for tool {name!r} are nested too deeply (more than {MAX_TOOL_ARGUMENT_DEPTH} "
            "levels of objects and arrays); the tool was not called. Call it again with flatter arguments.",
        )

    @classmethod
    def from_object(cls, id: str, name: str, arguments: JSONObject) -> ToolCall:
        """A call whose arguments came already parsed (a JSON object), kept with their JSON text.

        Oversized or unwritably deep arguments make the call an error; the
        rest of what the model put there (a lone surrogate, nesting past
        :data:`MAX_TOOL_ARGUMENT_DEPTH`) is dealt with by :meth:`validated`.
        orjson writes the text when it can: it measures a huge input in
        milliseconds.
        """
        try:
            raw_arguments = json_bytes(arguments).decode()
        except TooDeep:
            return cls.too_deep(id, name, "")
        if len(raw_arguments) > MAX_TOOL_ARGUMENT_CHARS:
            return cls.oversized(id, name, raw_arguments)
        return cls(id=id, name=name, arguments=arguments, raw_arguments=raw_arguments)

    @classmethod
    def from_raw(cls, id: str, name: str, raw_arguments: str) -> ToolCall:
        """Parse the model's JSON argument text; bad JSON, a non-object or oversized text sets ``error``.

        An empty string counts as ``{}`` (some servers send that for tools
        without parameters).
        """
        if len(raw_arguments) > MAX_TOOL_ARGUMENT_CHARS:
            return cls.oversized(id, name, raw_arguments)
        if raw_arguments.strip() == "":
            return cls(id=id, name=name, arguments={}, raw_arguments=raw_arguments)
        try:
            parsed: JSONValue = json.loads(raw_arguments)
        except RecursionError:
            return cls.too_deep(id, name, raw_arguments)
        except json.JSONDecodeError as exc:
            return cls.rejected(
                id,
                name,
                raw_arguments,
                f"the arguments for tool {name!r} are not valid JSON ({exc.msg} at line "
                f"{exc.lineno} column {exc.colno}): {raw_arguments[:_QUOTE_CHARS]!r}. "
                "Call the tool again with the arguments as one JSON object.",
            )
        except ValueError as exc:  # an integer of more than 4,300 digits
            return cls.rejected(
                id,
                name,
                raw_arguments[:_QUOTE_CHARS],
                f"the arguments for tool {name!r} cannot be read ({str(exc)[:_QUOTE_CHARS]}). "
                "Call the tool again with the arguments as one JSON object.",
            )
        if not isinstance(parsed, dict):
            return cls.rejected(
                id,
                name,
                raw_arguments,
                f"the arguments for tool {name!r} are JSON {type(parsed).__name__}, not an object: "
                f"{raw_arguments[:_QUOTE_CHARS]!r}. Call the tool again with the arguments as one JSON object.",
            )
        # A JSON "\ud800" escape parses into a lone surrogate: :meth:`validated` deals with it.
        return cls(id=id, name=name, arguments=parsed, raw_arguments=raw_arguments)

    def validated(self) -> ToolCall:
        """This call as the rest of agentd may rely on it, whoever built it (:func:`valid_reply`).

        Its name and id are valid text of at most :data:`MAX_TOOL_NAME_CHARS`;
        its arguments valid JSON (:func:`agentd.core.safetext.valid_json`: a lone
        surrogate becomes U+FFFD) within :data:`MAX_TOOL_ARGUMENT_DEPTH` and
        :data:`MAX_TOOL_ARGUMENT_CHARS`, else the call is an error. The one
        walk over the arguments: the constructors above only make sure
        nothing raises.
        """
        id, name = _bounded_name(self.id), _bounded_name(self.name)
        if self.error is not None or self.arguments is None:
            error = self.error or f"the arguments for tool {name!r} are missing; the tool was not called."
            return ToolCall.rejected(id, name, valid_text(self.raw_arguments), valid_text(error))
        raw_arguments = valid_text(self.raw_arguments)
        if len(raw_arguments) > MAX_TOOL_ARGUMENT_CHARS:
            return ToolCall.oversized(id, name, raw_arguments)
        try:
            valid = as_object(valid_json(self.arguments, max_depth=MAX_TOOL_ARGUMENT_DEPTH))
        except TooDeep:
            return ToolCall.too_deep(id, name, raw_arguments)
        if valid is None:  # a Model that put something else than an object there
            return ToolCall.rejected(
                id, name, raw_arguments, f"the arguments for tool {name!r} are not a JSON object."
            )
        return ToolCall(id=id, name=name, arguments=valid, raw_arguments=raw_arguments)


def _bounded_name(text: str) -> str:
    """A tool name or call id as valid text of at most :data:`MAX_TOOL_NAME_CHARS` (cut ones end in "…")."""
    text = valid_text(text)
    return text if len(text) <= MAX_TOOL_NAME_CHARS else text[: MAX_TOOL_NAME_CHARS - 1] + "…"


def json_text(value: object) -> str:
    """Any decoded JSON value as JSON text, for quoting back to the model; "" when nested too deeply to write."""
    try:
        return json_bytes(value).decode()
    except TooDeep:
        return ""


ImageMime = Literal["image/png", "image/jpeg", "image/gif", "image/webp"]
"""The image types every provider agentd speaks takes (Anthropic's list; OpenAI takes the same four)."""

IMAGE_MIMES: tuple[ImageMime, ...] = get_args(ImageMime)

#: Input tokens one image is estimated at, for providers that report no usage
#: (and the script model): about what Anthropic bills for an image at its
#: largest size after its own resize (~1.15 megapixels / 750).
IMAGE_TOKEN_ESTIMATE = 1600


@dataclass(frozen=True, slots=True)
class ImagePart:
    """An image a tool returned, as the model may see it.

    Built only from checked data (:func:`agentd.agent.content.tool_result`):
    ``mime_type`` is what the bytes are (sniffed, not what the server
    claimed), ``data`` is valid standard base64.

    Attributes:
        mime_type: one of :data:`IMAGE_MIMES`.
        data: the image, base64 (standard alphabet, padded, no whitespace).
        size: the decoded size in bytes.
    """

    mime_type: ImageMime
    data: str
    size: int

    def data_url(self) -> str:
        """The image as a ``data:`` URL (how the OpenAI APIs take an inline image)."""
        return f"data:{self.mime_type};base64,{self.data}"

    def placeholder(self, why: str) -> str:
        """The text that stands in for the image where it is not attached: type, size and ``why``."""
        return f"[image {self.mime_type}, {self.size} bytes: not shown, {why}]"


#: Why an image is not attached for a model set not to take images.
NO_IMAGES_NOTE = "this model is not set to take images"


@dataclass(frozen=True, slots=True)
class Message:
    """One message of the provider-neutral transcript.

    Attributes:
        role: ``user``, ``assistant`` or ``tool``.
        content: the text (for ``tool``: the tool's result text).
        tool_calls: the calls an ``assistant`` message made (empty otherwise).
        tool_call_id: for ``tool`` messages, the id of the call this answers.
        is_error: for ``tool`` messages, whether the result is an error.
        provider_data: for ``assistant`` messages, what the provider that wrote
            the reply needs back verbatim on the next call (Anthropic thinking
            blocks, Responses reasoning items), tagged ``{"provider": NAME, ...}``;
            only that provider reads it, every other one ignores it.
        images: for ``tool`` messages, the images the result carried, shown
            after its text (empty otherwise).
    """

    role: Role
    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None
    is_error: bool = False
    provider_data: Mapping[str, object] | None = None
    images: tuple[ImagePart, ...] = ()

    @classmethod
    def user(cls, content: str) -> Message:
        """A user turn (instruction, delivery or notice)."""
        return cls(role="user", content=content)

    @classmethod
    def assistant(
        cls,
        content: str,
        tool_calls: Sequence[ToolCall] = (),
        *,
        provider_data: Mapping[str, object] | None = None,
    ) -> Message:
        """An assistant turn, with the tool calls it made."""
        return cls(
            role="assistant", content=content, tool_calls=list(tool_calls), provider_data=provider_data
        )

    @classmethod
    def tool_result(
        cls, tool_call_id: str, content: str, *, is_error: bool = False, images: Sequence[ImagePart] = ()
    ) -> Message:
        """The result of one tool call (its text, then its images)."""
        return cls(
            role="tool", content=content, tool_call_id=tool_call_id, is_error=is_error, images=tuple(images)
        )

    def text_with_placeholders(self, why: str) -> str:
        """The text, each image written as its placeholder (``why`` says why it is not shown)."""
        if not self.images:
            return self.content
        notes = "\n".join(image.placeholder(why) for image in self.images)
        return f"{self.content}\n{notes}" if self.content else notes


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens one model call consumed (as the provider reported, or estimated).

    Every provider's figures are brought to one meaning (``rfcs/0167``):

    Attributes:
        input_tokens: every input token of the call, those read from the
            prompt cache and those written to it included (OpenAI's
            ``prompt_tokens``; Anthropic's ``input_tokens`` +
            ``cache_read_input_tokens`` + ``cache_creation_input_tokens``).
        output_tokens: tokens generated (thinking and reasoning included).
        cached_input_tokens: the part of ``input_tokens`` read from the cache
            (OpenAI ``prompt_tokens_details.cached_tokens``, Anthropic
            ``cache_read_input_tokens``), billed at a discount.
        cache_creation_input_tokens: the part of ``input_tokens`` written to
            the cache (Anthropic ``cache_creation_input_tokens``), billed at a premium.
    """

    input_tokens: int
    output_tokens: int
    cached_input_tokens: int = 0
    cache_creation_input_tokens: int = 0

    @property
    def total(self) -> int:
        """Input plus output tokens: every token the provider bills (the token budget counts these)."""
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True, slots=True)
class ModelReply:
    """One assistant turn as the agent loop sees it.

    Attributes:
        text: the assistant's text (may be empty, e.g. with tool calls).
        tool_calls: the tools to call, in order.
        stop: why the turn ended.
        usage: the tokens this call consumed.
        refusal: the refusal message when ``stop == "refusal"``.
        cost_usd: what the call cost in USD (``genai-prices``), ``None`` when unknown.
        provider_data: what the provider needs back on the next call (see :class:`Message`).
    """

    text: str
    tool_calls: list[ToolCall]
    stop: StopReason
    usage: Usage
    refusal: str | None = None
    cost_usd: float | None = None
    provider_data: Mapping[str, object] | None = None

    def as_message(self) -> Message:
        """This reply as the assistant message to append to the transcript."""
        return Message.assistant(self.text, self.tool_calls, provider_data=self.provider_data)


def valid_reply(reply: ModelReply) -> ModelReply:
    """``reply`` as the rest of agentd may rely on it, whatever the model emitted (rfcs/0270).

    Its texts are valid Unicode (a lone surrogate becomes U+FFFD), every tool
    call is :meth:`ToolCall.validated` (a call that cannot be made is an
    error the model reads as the tool's result), and provider extras nested
    deeper than :data:`MAX_TOOL_ARGUMENT_DEPTH` are dropped (they only let a
    provider reuse its reasoning). Control characters and NULs are kept:
    every wire agentd writes carries them.
    """
    data = reply.provider_data
    if data is not None:
        try:
            data = as_object(valid_json(dict(data), max_depth=MAX_TOOL_ARGUMENT_DEPTH))
        except TooDeep:
            data = None
    return replace(
        reply,
        text=valid_text(reply.text),
        tool_calls=[c.validated() for c in reply.tool_calls],
        refusal=None if reply.refusal is None else valid_text(reply.refusal),
        provider_data=data,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Prompt:
    """What one model call asks: the transcript so far, the system prompt, the tools offered.

    One value from the agent loop to the model, and from a model to its wire
    format's ``build_request``, so the three always travel together.

    Attributes:
        messages: the transcript, oldest first (the agent loop hands a
            snapshot: appending to its own transcript does not change a prompt).
        system: the system prompt, ``None`` (or empty) for none.
        tools: the tools the model may call, in the order offered.
    """

    messages: Sequence[Message]
    system: str | None = None
    tools: Sequence[ToolSpec] = ()


@runtime_checkable
class Model(Protocol):
    """A model provider: one method to get the next assistant turn.

    Implementations are used by one task at a time (an agent child runs one
    loop); ``complete`` may be cancelled at any await and must then leave the
    model usable or closed, never half-updated.

    Any object with these members is a model (the protocol is structural); a
    model written for a test or an embedding reads the :class:`Prompt` and
    answers a :class:`ModelReply`::

        class Echo:
            provider = "echo"
            name = "echo"

            async def complete(self, prompt: Prompt) -> ModelReply:
                said = prompt.messages[-1].content if prompt.messages else ""
                return ModelReply(text=said, tool_calls=[], stop="end",
                                  usage=Usage(estimate_input_tokens(prompt), estimate_tokens(said)))

            async def aclose(self) -> None:
                pass
    """

    provider: str
    """The provider prefix of the spec (``openai``, ``anthropic``, ``azure``, ``bedrock``, ``vertex``,
    ``openai-responses``, ``script``, or a ``[providers.NAME]`` name)."""
    name: str
    """The model name after the prefix (for ``script``: the file path)."""

    async def complete(self, prompt: Prompt) -> ModelReply:
        """Return the next assistant turn for this prompt.

        Raises:
            agentd.core.errors.ModelAuthError: the provider rejected the credentials.
            agentd.core.errors.ModelUnavailableError: unreachable or overloaded after every retry.
            agentd.core.errors.ModelError: the provider answered something unusable.
        """
        ...

    async def aclose(self) -> None:
        """Release connections; the model is unusable afterwards."""
        ...


#: Characters per token for deterministic estimates (script model, and
#: providers that answer without a usage block). Four is the usual rule of
#: thumb for English text with BPE tokenizers.
CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    """A deterministic token estimate: ``ceil(len(text) / CHARS_PER_TOKEN)``."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def estimate_input_tokens(prompt: Prompt) -> int:
    """Estimate the input tokens of one call from the characters its prompt sends."""
    chars = len(prompt.system or "")
    images = 0
    for m in prompt.messages:
        chars += len(m.content)
        images += len(m.images)
        for c in m.tool_calls:
            chars += len(c.name) + len(c.raw_arguments)
    for t in prompt.tools:
        chars += len(t.name) + len(t.description) + len(repr(t.input_schema))
    return math.ceil(chars / CHARS_PER_TOKEN) + images * IMAGE_TOKEN_ESTIMATE


def takes_images(model: object) -> bool:
    """Whether ``model`` is set to take images (its ``takes_images``; a model without one takes none)."""
    return getattr(model, "takes_images", False) is True
