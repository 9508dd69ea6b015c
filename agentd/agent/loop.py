"""The inner agentic loop: model call → tool calls → results → … → final answer.

One run of the loop is a *turn*. It ends in a terminal status
(:data:`agentd.core.exitcodes.TerminalStatus`). A warm session runs many turns in
one process; between turns it waits for its next delivery inside
:meth:`SupervisorLink.turn_end`.

The loop talks to the world only through two seams, both injected: a
:class:`agentd.models.Model` and a :class:`SupervisorLink` (the child's
private channels in production, a fake in unit tests).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import trio

from agentd.agent.content import bound_images
from agentd.core.exitcodes import TerminalStatus
from agentd.core.safetext import json_bytes
from agentd.models import Message, Model, ModelReply, Prompt, ToolCall, ToolSpec, valid_reply
from agentd.models.base import ImagePart
from agentd.selfmcp.protocol import WAITING_TOOLS, NextTurn, StopReason, UsageVerdict, unknown_tool_text
from agentd.watches.notices import is_no_reply

#: The same tool call with the same arguments this many times in a row is a stall.
STALL_REPEATS = 3

#: Longest tool result passed back to the model, in characters; longer ones are cut with a note.
MAX_TOOL_RESULT_CHARS = 64_000


@dataclass
class ToolResult:
    """What a tool call returned, as the model will see it (images after the text)."""

    text: str
    is_error: bool = False
    images: tuple[ImagePart, ...] = ()


@dataclass(frozen=True)
class ModelCall:
    """One model call as the loop reports it (the control link clamps it into the protocol's bounds)."""

    input_tokens: int
    output_tokens: int
    steps: int
    latency_ms: float
    provider: str
    model: str
    cached_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cost_usd: float | None = None
    text: str = ""
    """The reply's text (stream-json's ``assistant`` line)."""
    tool_calls: int = 0
    """How many tool calls the reply asked for."""


class SupervisorLink(Protocol):
    """What the loop needs from the supervisor: tools (self-MCP), usage and turn ends (control frames).

    The answers are the control protocol's own frames
    (:class:`~agentd.selfmcp.protocol.UsageVerdict`, :class:`~agentd.selfmcp.protocol.NextTurn`).
    """

    async def call_tool(self, name: str, arguments: dict[str, object]) -> ToolResult: ...

    async def report_usage(self, *, call: ModelCall) -> UsageVerdict:
        """Report one model call; the answer says whether to go on."""
        ...

    async def turn_end(self, *, status: TerminalStatus, text: str, idle: bool) -> NextTurn: ...

    def tool_refused(self, name: str) -> None:
        """The model called ``name``, which it was not offered (reported, never forwarded)."""
        ...

    async def record_transcript(self, messages: Sequence[Message]) -> None:
        """The messages this turn added, for the session journal (called before ``turn_end``)."""
        ...


@dataclass
class RunState:
    """State of one agent across its turns."""

    messages: list[Message] = field(default_factory=list)
    """The transcript, in the provider-neutral shape."""
    turn_steps: int = 0
    """Model calls made in the current turn."""
    recent_calls: list[str] = field(default_factory=list)
    """Fingerprints of the latest tool calls, for stall detection (last STALL_REPEATS)."""
    last_text: str = ""
    """The latest assistant text (the partial result if the turn stops early)."""


def _fingerprint(call: ToolCall) -> str:
    args = (
        call.raw_arguments if call.arguments is None else json_bytes(call.arguments, sort_keys=True).decode()
    )
    return f"{call.name}\x00{args}"


def _cap(text: str) -> str:
    if len(text) <= MAX_TOOL_RESULT_CHARS:
        return text
    return (
        text[:MAX_TOOL_RESULT_CHARS]
        + f"\n[agentd: result cut at {MAX_TOOL_RESULT_CHARS} of {len(text)} characters]"
    )


async def run_turn(
    model: Model,
    link: SupervisorLink,
    state: RunState,
    *,
    system: str | None,
    tools: Sequence[ToolSpec],
    max_turn_steps: int | None = None,
) -> TerminalStatus:
    """Run the loop until a final answer or a terminal condition; returns the status.

    Only the tools in ``tools`` are ever forwarded to the supervisor; a call of
    any other name (a hallucinated tool, or an attempt to reach the control
    plane) comes back to the model as an "unknown tool" result.

    ``max_turn_steps`` caps the model calls of this turn: when the call that
    reaches it still asks for tools, the turn ends ``exhausted_steps`` without
    running them (None: no cap).
    """
    offered = [t.name for t in tools]
    offered_set = frozenset(offered)
    state.turn_steps = 0
    state.recent_calls.clear()
    while True:
        started = time.monotonic()
        # A snapshot: what this call was asked stays as it was while the transcript grows.
        prompt = Prompt(system=system, messages=tuple(state.messages), tools=tools)
        # Whatever the model emitted (lone surrogates, odd names, arguments nested a thousand
        # deep), from here on the reply is valid text and each call can be made or is an error.
        reply: ModelReply = valid_reply(await model.complete(prompt))
        latency_ms = (time.monotonic() - started) * 1000
        state.turn_steps += 1
        verdict = await link.report_usage(
            call=ModelCall(
                input_tokens=reply.usage.input_tokens,
                output_tokens=reply.usage.output_tokens,
                steps=1,
                latency_ms=latency_ms,
                provider=model.provider,
                model=model.name,
                cached_input_tokens=reply.usage.cached_input_tokens,
                cache_creation_input_tokens=reply.usage.cache_creation_input_tokens,
                cost_usd=reply.cost_usd,
                text=reply.text,
                tool_calls=len(reply.tool_calls),
            )
        )
        # as_message keeps what the provider needs back next call (thinking blocks, reasoning items).
        state.messages.append(reply.as_message())
        if reply.text:
            state.last_text = reply.text
        if reply.stop == "refusal":
            state.last_text = reply.refusal or reply.text
            return "refused"
        if not reply.tool_calls:
            # A final answer stands even if this very call spent the budget.
            state.last_text = reply.text
            return "completed"
        if not verdict.proceed:
            return _status_for(verdict.reason)
        if max_turn_steps is not None and state.turn_steps >= max_turn_steps:
            return "exhausted_steps"
        calls = reply.tool_calls
        i = 0
        while i < len(calls):
            # A run of agent_start / agent_wait calls runs together (rfcs/0370); anything else in order.
            j = i + 1
            if _together(calls[i], offered_set):
                while j < len(calls) and _together(calls[j], offered_set):
                    j += 1
            batch = calls[i:j]
            i = j
            results = await _call_batch(link, batch, offered, offered_set)
            for call, result in zip(batch, results, strict=True):
                fp = _fingerprint(call)
                state.recent_calls.append(fp)
                del state.recent_calls[:-STALL_REPEATS]
                state.messages.append(
                    Message.tool_result(
                        call.id, _cap(result.text), is_error=result.is_error, images=result.images
                    )
                )
                if result.images:
                    bound_images(state.messages)
                if len(state.recent_calls) == STALL_REPEATS and len(set(state.recent_calls)) == 1:
                    return "stalled"


def _together(call: ToolCall, offered: frozenset[str]) -> bool:
    """A call that may run beside the reply's neighbouring ones: a valid, offered waiting self-tool."""
    return call.error is None and call.name in offered and call.name in WAITING_TOOLS


async def _call_batch(
    link: SupervisorLink, batch: Sequence[ToolCall], offered: list[str], offered_set: frozenset[str]
) -> list[ToolResult]:
    """Run ``batch``'s calls (together when there are several); their results in the batch's order."""
    if len(batch) == 1:
        return [await _call_one(link, batch[0], offered, offered_set)]
    results: list[ToolResult | None] = [None] * len(batch)

    async def one(k: int, call: ToolCall) -> None:
        results[k] = await _call_one(link, call, offered, offered_set)

    async with trio.open_nursery() as nursery:
        for k, call in enumerate(batch):
            nursery.start_soon(one, k, call)
    return [r if r is not None else ToolResult("the call did not run", True) for r in results]


async def _call_one(
    link: SupervisorLink, call: ToolCall, offered: list[str], offered_set: frozenset[str]
) -> ToolResult:
    if call.error is not None:
        return ToolResult(call.error, True)
    if call.name not in offered_set:
        link.tool_refused(call.name)
        return ToolResult(unknown_tool_text(call.name, offered), True)
    return await link.call_tool(call.name, dict(call.arguments or {}))


def _status_for(reason: StopReason | None) -> TerminalStatus:
    if reason == "tokens":
        return "exhausted_tokens"
    if reason == "deadline":
        return "deadline"
    return "exhausted_steps"


async def run_agent(
    model: Model,
    link: SupervisorLink,
    *,
    system: str | None,
    instruction: str,
    tools: Sequence[ToolSpec],
    max_turn_steps: int | None = None,
    history: Sequence[Message] = (),
    journal: bool = False,
) -> None:
    """Run turns until the supervisor says exit. Each turn's status goes to ``turn_end``.

    ``max_turn_steps``: see :func:`run_turn`. ``history``: a restored
    session's conversation; ``instruction`` (the delivery that woke it)
    follows it. ``journal``: before each turn end, hand the messages the turn
    added to ``link.record_transcript`` (the first turn's include the history's
    successor, the instruction).
    """
    state = RunState(messages=[*history, Message(role="user", content=instruction)])
    recorded = len(history)
    while True:
        status = await run_turn(model, link, state, system=system, tools=tools, max_turn_steps=max_turn_steps)
        if journal:
            await link.record_transcript(state.messages[recorded:])
            recorded = len(state.messages)
        text = state.last_text
        nxt = await link.turn_end(status=status, text=text, idle=is_no_reply(text))
        if nxt.action == "exit":
            return
        state.last_text = ""
        state.messages.append(Message(role="user", content=nxt.input))
