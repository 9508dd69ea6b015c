"""The control protocol between the supervisor and each agent child: typed frames.

A child has two private channels to the supervisor, both socketpairs the
supervisor made for it:

* the **MCP channel**: the child is an MCP client of the supervisor there
  (:mod:`agentd.selfmcp.server`: the handshake, ``tools/list`` and
  ``tools/call``; only ``tools/call`` is reachable by the model). It lists only
  the tools the model was offered; a call of any other name, including
  anything that looks like a control message, is answered "unknown tool"
  (:func:`unknown_tool_text`).
* the **control channel** (this module): typed frames, one JSON object per
  line, that the model can never produce because no tool call reaches it.

Frames, by ``type``::

    supervisor → child
      spawn          SpawnPayload   first frame, exactly once: the agent's task, model and tools
      usage_verdict  UsageVerdict   answers a UsageReport (same id): proceed, or stop and why
      next_turn      NextTurn       answers a TurnEnd (same id): exit, or continue with the next
                                    input; for a warm session the answer waits, at zero CPU,
                                    for its next delivery
    child → supervisor
      usage          UsageReport    after every model call: tokens, cost, latency, the reply's text
      turn_end       TurnEnd        when a turn reaches a terminal status (also when the
                                    provider is unusable: ``fatal_infra`` says why)
      event          ChildEvent     a telemetry event for the supervisor's stream
                                    (``model.retry``, ``tool.refused`` or
                                    ``tool.content_omitted``); no answer
      transcript     TranscriptPart the messages a turn added (journaled sessions only: sent
                                    just before that turn's TurnEnd, in one or more parts); no answer

Rules a child must keep, or be killed (``subagent.exit`` names the broken rule):

* every line is one frame of the child → supervisor union, within
  :data:`MAX_CHILD_FRAME_BYTES`; integers are non-negative and bounded, texts
  are bounded (:data:`MAX_TEXT_CHARS` for a turn's result), statuses and event
  names come from closed vocabularies, unknown keys and reserved event fields
  (:data:`RESERVED_EVENT_FIELDS`) are refused;
* ``id`` numbers the requests (``usage`` and ``turn_end``) 1, 2, 3, … in the
  order sent; the answer carries the same ``id``;
* one turn's transcript parts stay within
  :data:`agentd.supervisor.children.channel.MAX_TURN_TRANSCRIPT_BYTES`.

The supervisor serves requests one at a time, in order: it reads the next
frame only after answering the previous request (a request sent before that
answer waits, unread, in the socket). The child in turn refuses a second
``spawn`` and an answer it did not ask for or whose ``id`` does not match.

Validation happens in the per-child reader task (:mod:`agentd.supervisor.children.channel`),
outside the reactor: the reactor only ever sees frames that passed it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Final, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from agentd.core.errors import ProtocolError
from agentd.core.exitcodes import TerminalStatus
from agentd.core.safetext import json_bytes

#: Self-tools the model sees as ordinary tools (rfcs/0001: the self-MCP server is the one way a child asks the supervisor).
SELF_TOOL_NAMES: Final = (
    "subscribe",
    "unsubscribe",
    "read_resource",
    "list_resources",
    "watch_start",
    "watch_stop",
    "watch_list",
    "agent_start",
    "agent_wait",
    "agent_cancel",
    "agent_list",
)

#: The self-tools that start and follow agents (rfcs/0370): not offered at ``max_depth``.
AGENT_TOOL_NAMES: Final = frozenset({"agent_start", "agent_wait", "agent_cancel", "agent_list"})

#: Self-tools that may hold a turn while other agents run (rfcs/0370): a reply's calls of
#: them run together, and the child bounds them by the supervisor's own wait, not its link's.
WAITING_TOOLS: Final = frozenset({"agent_start", "agent_wait"})

#: Longest a waiting self-tool holds the turn on the child's side: the supervisor's own
#: bound on a wait (an hour) and slack. Only a supervisor that stopped answering reaches it.
WAITING_TOOL_TIMEOUT: Final = 3600.0 + 120.0


def unknown_tool_text(name: str, offered: Iterable[str]) -> str:
    """The tool result for a call of a tool the model was not offered.

    The child's loop and the supervisor's hub both answer with it: the model
    sees the same words whichever side refused the call.
    """
    return f"unknown tool {name[:MAX_NAME_CHARS]!r}; the tools you can call are: {', '.join(offered)}"


# -- bounds ---------------------------------------------------------------------------

#: Longest child → supervisor line. A valid frame is at most a turn's result
#: (:data:`MAX_TEXT_CHARS`, up to 6 bytes each once JSON-escaped) plus small fields.
MAX_CHILD_FRAME_BYTES: Final = 8 * 1024 * 1024
#: Longest supervisor → child line (the spawn payload carries the instruction and
#: every tool's schema; the same cap as an MCP line on the self-MCP channel).
MAX_SUPERVISOR_FRAME_BYTES: Final = 64 * 1024 * 1024
#: Longest turn result a child may report, in characters (a child cuts longer
#: answers with a note). Far beyond any model's output limit.
MAX_TEXT_CHARS: Final = 1_000_000
#: Longest short text (a provider or model name, an error message).
MAX_NAME_CHARS: Final = 256
MAX_MESSAGE_CHARS: Final = 4096
#: Tokens one model call may report (input or output). No model context comes close.
MAX_TOKENS_PER_CALL: Final = 100_000_000
#: Steps one usage report may carry (the loop reports 1 per model call).
MAX_STEPS_PER_REPORT: Final = 1000
#: Cost one usage report may carry, in US dollars: far above any single model call.
MAX_CALL_COST_USD: Final = 1_000_000.0
#: Latency one usage report may carry: a day, in milliseconds.
MAX_LATENCY_MS: Final = 86_400_000.0
#: Assistant text a usage report carries (for ``--output stream-json``, which cuts it
#: further to ``--output-truncate``); the turn's result travels whole in ``turn_end``.
MAX_STEP_TEXT_CHARS: Final = 65_536
#: Request ids: a child makes two per model call at most; 2**53 keeps them exact in JSON.
MAX_ID: Final = 2**53
#: A child telemetry event: at most this many fields, each key and text this long.
MAX_EVENT_FIELDS: Final = 16
MAX_EVENT_TEXT: Final = 1024

NonNegInt = Annotated[int, Field(ge=0, le=MAX_ID)]
Tokens = Annotated[int, Field(ge=0, le=MAX_TOKENS_PER_CALL)]
Name = Annotated[str, Field(max_length=MAX_NAME_CHARS)]
Message = Annotated[str, Field(max_length=MAX_MESSAGE_CHARS)]

StopReason = Literal["tokens", "steps", "deadline", "draining"]
"""Why the supervisor tells an agent to stop at its next turn boundary."""

ChildEventName = Literal["model.retry", "tool.refused", "tool.content_omitted"]
"""Telemetry events a child may send (closed: anything else is a protocol error)."""

EventFieldKey = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,31}$")]
EventFieldValue = (
    Annotated[str, Field(max_length=MAX_EVENT_TEXT)]
    | Annotated[int, Field(ge=-MAX_ID, le=MAX_ID)]
    | Annotated[float, Field(allow_inf_nan=False)]
    | bool
    | None
)

#: Field names a child event may not set: the supervisor writes them itself.
RESERVED_EVENT_FIELDS: Final = frozenset({"ts", "event", "agent", "level", "severity"})


class Frame(BaseModel):
    """Base of every frame: immutable, strict types, unknown keys refused."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


# -- supervisor → child -----------------------------------------------------------------


class ToolSpecFrame(Frame):
    """One tool offered to the model (already namespaced, e.g. ``memo__memo_set``)."""

    name: str
    description: str = ""
    input_schema: dict[str, object] = Field(default_factory=dict)


class ProviderFrame(Frame):
    """A ``[providers.NAME]`` endpoint (see :class:`agentd.models.ProviderConfig`)."""

    name: str
    base_url: str
    api: Literal["chat", "responses", "messages"] = "chat"
    api_key_env: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    prices: str | None = None
    images: bool | None = None


class ToolCallFrame(Frame):
    """One tool call of an assistant message, as the transcript keeps it."""

    id: Annotated[str, Field(max_length=MAX_MESSAGE_CHARS)]
    name: Annotated[str, Field(max_length=MAX_MESSAGE_CHARS)]
    raw_arguments: str = ""
    error: str | None = None


class MessageFrame(Frame):
    """One transcript message (:class:`agentd.models.Message`) as data: it is only ever shown to the model."""

    role: Literal["user", "assistant", "tool"]
    content: str = ""
    tool_calls: tuple[ToolCallFrame, ...] = ()
    tool_call_id: Annotated[str, Field(max_length=MAX_MESSAGE_CHARS)] | None = None
    is_error: bool = False
    provider_data: dict[str, object] | None = None


class SpawnPayload(Frame):
    """What a new child runs: the first frame on its control channel.

    Attributes:
        agent: the agent id the supervisor gave it.
        model: the model spec (``openai:…``, ``anthropic:…``, ``script:…``).
        system: the system prompt, if any.
        instruction: the first user message.
        tools: the only tools the model is offered (and the only ones it may call).
        model_timeout: the deadline of one model call in seconds (None: the model's default).
        max_turn_steps: model calls one turn may make before it ends
            ``exhausted_steps`` (None: no cap).
        model_settings: the model settings, as :meth:`agentd.models.ModelSettings.given` writes them.
        providers: the ``[providers.NAME]`` endpoints a ``NAME:MODEL`` spec may name.
        history: a restored session's conversation (from its journal): the
            transcript starts with it, then ``instruction`` (the delivery).
        journal: send each turn's new messages (:class:`TranscriptPart`) before its turn end.
        traceparent: the turn's trace context (tracing on), which the child's tool calls carry.
    """

    type: Literal["spawn"] = "spawn"
    agent: str
    model: str
    system: str | None = None
    instruction: str
    tools: tuple[ToolSpecFrame, ...] = ()
    model_timeout: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    max_turn_steps: Annotated[int, Field(ge=1)] | None = None
    model_settings: dict[str, object] = Field(default_factory=dict)
    providers: dict[str, ProviderFrame] = Field(default_factory=dict)
    history: tuple[MessageFrame, ...] = ()
    journal: bool = False
    traceparent: Annotated[str, Field(max_length=MAX_NAME_CHARS)] | None = None
    """The W3C ``traceparent`` of the agent's turn span, when tracing is on."""


class UsageVerdict(Frame):
    """The answer to a :class:`UsageReport`: go on, or stop at this turn boundary (and why)."""

    type: Literal["usage_verdict"] = "usage_verdict"
    id: NonNegInt = 0
    proceed: bool
    reason: StopReason | None = None


class NextTurn(Frame):
    """The answer to a :class:`TurnEnd`: exit, or run another turn with ``input``."""

    type: Literal["next_turn"] = "next_turn"
    id: NonNegInt = 0
    action: Literal["exit", "continue"]
    input: str = ""
    traceparent: Annotated[str, Field(max_length=MAX_NAME_CHARS)] | None = None
    """The W3C ``traceparent`` of the next turn's span, when tracing is on."""


SupervisorFrame: TypeAlias = Annotated[SpawnPayload | UsageVerdict | NextTurn, Field(discriminator="type")]

# -- child → supervisor -----------------------------------------------------------------


class UsageReport(Frame):
    """Sent after every model call; the answer is a :class:`UsageVerdict`."""

    type: Literal["usage"] = "usage"
    id: NonNegInt
    input_tokens: Tokens
    output_tokens: Tokens
    steps: Annotated[int, Field(ge=0, le=MAX_STEPS_PER_REPORT)] = 1
    latency_ms: Annotated[float, Field(ge=0, le=MAX_LATENCY_MS, allow_inf_nan=False)] = 0.0
    provider: Name = ""
    model: Name = ""
    cached_input_tokens: Tokens = 0
    """The part of ``input_tokens`` read from the provider's prompt cache."""
    cache_creation_input_tokens: Tokens = 0
    """The part of ``input_tokens`` written to the provider's prompt cache."""
    cost_usd: Annotated[float, Field(ge=0, le=MAX_CALL_COST_USD, allow_inf_nan=False)] | None = None
    """What the call cost in US dollars (``genai-prices``); None: unknown."""
    text: Annotated[str, Field(max_length=MAX_STEP_TEXT_CHARS)] = ""
    """The reply's assistant text, cut at :data:`MAX_STEP_TEXT_CHARS` (``--output stream-json``)."""
    tool_calls: Annotated[int, Field(ge=0, le=MAX_STEPS_PER_REPORT)] = 0
    """How many tool calls the reply asked for."""

    @model_validator(mode="after")
    def _cache_within_input(self) -> UsageReport:
        if self.cached_input_tokens + self.cache_creation_input_tokens > self.input_tokens:
            raise ValueError("cached_input_tokens + cache_creation_input_tokens exceed input_tokens")
        return self


class TurnEnd(Frame):
    """Sent when a turn reaches a terminal status; the answer is a :class:`NextTurn`.

    Attributes:
        status: the turn's terminal status.
        text: the turn's result (the final or partial answer).
        idle: the reply publishes nothing (empty, or a ``NO_REPLY`` line).
        fatal_infra: set when the model provider is unusable (auth failed,
            unreachable after retries): the reason, which ends the run with exit 4.
    """

    type: Literal["turn_end"] = "turn_end"
    id: NonNegInt
    status: TerminalStatus
    text: Annotated[str, Field(max_length=MAX_TEXT_CHARS)] = ""
    idle: bool = False
    fatal_infra: Message | None = None


class ChildEvent(Frame):
    """A telemetry event from the child, written to the supervisor's stream with ``agent`` added."""

    type: Literal["event"] = "event"
    event: ChildEventName
    fields: Annotated[dict[EventFieldKey, EventFieldValue], Field(max_length=MAX_EVENT_FIELDS)] = Field(
        default_factory=dict
    )


#: Messages one transcript part may carry (a child splits a turn's messages into parts).
MAX_TRANSCRIPT_MESSAGES: Final = 4096


class TranscriptPart(Frame):
    """Messages a turn added to the transcript, sent before its :class:`TurnEnd` (no answer).

    Only children whose spawn payload says ``journal`` send it; the supervisor
    appends the turn's parts to the session journal when the turn ends.
    """

    type: Literal["transcript"] = "transcript"
    messages: Annotated[tuple[MessageFrame, ...], Field(max_length=MAX_TRANSCRIPT_MESSAGES)]


ChildFrame: TypeAlias = Annotated[
    UsageReport | TurnEnd | ChildEvent | TranscriptPart, Field(discriminator="type")
]

_CHILD_FRAME: TypeAdapter[UsageReport | TurnEnd | ChildEvent | TranscriptPart] = TypeAdapter(ChildFrame)
_SUPERVISOR_FRAME: TypeAdapter[SpawnPayload | UsageVerdict | NextTurn] = TypeAdapter(SupervisorFrame)


def _describe(exc: ValidationError) -> str:
    """The first problem of a validation error, without echoing the (untrusted, maybe huge) input."""
    errors = exc.errors(include_input=False, include_url=False, include_context=False)
    if not errors:
        return "invalid frame"
    first = errors[0]
    where = ".".join(str(p) for p in first.get("loc", ()))
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where + ': ' if where else ''}{first.get('msg', 'invalid')}{more}"[:MAX_MESSAGE_CHARS]


def parse_child_frame(line: bytes) -> UsageReport | TurnEnd | ChildEvent | TranscriptPart:
    """Validate one line from a child.

    Raises:
        ProtocolError: the line is not a valid child frame (the reason names the field).
    """
    try:
        frame = _CHILD_FRAME.validate_json(line)
    except ValidationError as exc:
        raise ProtocolError(f"invalid frame from the child: {_describe(exc)}") from None
    if isinstance(frame, ChildEvent) and RESERVED_EVENT_FIELDS & frame.fields.keys():
        taken = sorted(RESERVED_EVENT_FIELDS & frame.fields.keys())
        raise ProtocolError(f"invalid frame from the child: event fields {taken} are reserved")
    return frame


def parse_supervisor_frame(line: bytes) -> SpawnPayload | UsageVerdict | NextTurn:
    """Validate one line from the supervisor (the child's side).

    Raises:
        ProtocolError: the line is not a valid supervisor frame.
    """
    try:
        return _SUPERVISOR_FRAME.validate_json(line)
    except ValidationError as exc:
        raise ProtocolError(f"invalid frame from the supervisor: {_describe(exc)}") from None


def encode(frame: Frame) -> bytes:
    """One frame as a JSON line (with its newline); never fails on what a text field holds.

    A text that is not valid Unicode (a lone surrogate, which no UTF-8
    encoder writes) is written with U+FFFD in its place (rfcs/0270): the
    frame still validates, its lengths unchanged.
    """
    try:
        return frame.model_dump_json().encode() + b"\n"
    except ValueError:  # pydantic's PydanticSerializationError
        return json_bytes(frame.model_dump(mode="json")) + b"\n"


__all__ = [
    "AGENT_TOOL_NAMES",
    "MAX_CHILD_FRAME_BYTES",
    "MAX_STEP_TEXT_CHARS",
    "MAX_SUPERVISOR_FRAME_BYTES",
    "MAX_TEXT_CHARS",
    "SELF_TOOL_NAMES",
    "WAITING_TOOLS",
    "WAITING_TOOL_TIMEOUT",
    "ChildEvent",
    "ChildEventName",
    "ChildFrame",
    "Frame",
    "MessageFrame",
    "NextTurn",
    "SpawnPayload",
    "StopReason",
    "SupervisorFrame",
    "ToolCallFrame",
    "ToolSpecFrame",
    "TranscriptPart",
    "TurnEnd",
    "UsageReport",
    "UsageVerdict",
    "encode",
    "parse_child_frame",
    "parse_supervisor_frame",
    "unknown_tool_text",
]
