"""The agent child process: run the loop, talk to the supervisor over two private channels.

A child starts in one of two ways, with the same code after that:

* forked from the zygote (:mod:`agentd.agent.zygote`), the fast path: the
  heavy imports are already done, so a child is ready in milliseconds;
* as a fresh interpreter, ``python -P -m agentd.agent.child MCP_FD CONTROL_FD``,
  the fallback when no zygote is usable.

Its two channels to the supervisor are sockets it inherited:

* ``MCP_FD``: it is an MCP client of the supervisor there, for the tools the
  model was offered and nothing else;
* ``CONTROL_FD``: typed frames (:mod:`agentd.selfmcp.protocol`). The first
  frame is the spawn payload; then the child reports usage after every model
  call and its turn ends, and sends telemetry events (``model.retry``).

Model calls go straight to the provider. When the supervisor goes away (its
end of the control channel closes) the child stops at once, whatever it is
doing: a child never outlives its supervisor, even without a death signal.

Exit status: 0 after the supervisor said exit (or went away); 4 when the
model provider is unusable (the supervisor already got the reason as a turn
end); 1 on a bug.
"""

from __future__ import annotations

import math
import os
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, TypedDict, TypeGuard, get_args

import trio

from agentd.core.jsonvalue import as_object
from agentd.core.safetext import valid_text
from agentd.observe.telemetry import Telemetry
from agentd.observe.timeline import mark
from agentd.selfmcp.control import FrameStream, read_first_line
from agentd.selfmcp.protocol import (
    MAX_CALL_COST_USD,
    MAX_CHILD_FRAME_BYTES,
    MAX_EVENT_FIELDS,
    MAX_EVENT_TEXT,
    MAX_ID,
    MAX_LATENCY_MS,
    MAX_MESSAGE_CHARS,
    MAX_NAME_CHARS,
    MAX_STEP_TEXT_CHARS,
    MAX_SUPERVISOR_FRAME_BYTES,
    MAX_TEXT_CHARS,
    MAX_TOKENS_PER_CALL,
    RESERVED_EVENT_FIELDS,
    ChildEvent,
    ChildEventName,
    Frame,
    NextTurn,
    SpawnPayload,
    ToolSpecFrame,
    TranscriptPart,
    TurnEnd,
    UsageReport,
    UsageVerdict,
    encode,
    parse_supervisor_frame,
)

if TYPE_CHECKING:
    from mcp import Client

    from agentd.agent.loop import ModelCall, ToolResult
    from agentd.core.exitcodes import TerminalStatus
    from agentd.models import Message, ModelSettings, ToolSpec
    from agentd.models.factory import Providers

#: Exit status after the supervisor said exit, or went away.
EXIT_OK = 0
#: Exit status of a child whose provider failed fatally (auth / unreachable).
EXIT_FATAL_INFRA = 4
#: Exit status of a child that hit an unexpected error.
EXIT_CRASH = 1

#: How long a child waits for the answer to a usage report (or a self-MCP
#: request) before treating the supervisor as gone. Turn ends of warm
#: sessions wait without this bound.
LINK_TIMEOUT = 120.0

#: Telemetry frames queued for the supervisor before new ones are dropped
#: (a child never blocks on telemetry).
EVENT_BACKLOG = 64

#: How long closing the model's HTTP pool may take once the child is stopping.
MODEL_CLOSE_TIMEOUT = 1.0

_CHILD_EVENTS = frozenset(get_args(ChildEventName))


class ControlLink:
    """The child's end of the control channel: requests with typed answers, and telemetry.

    :meth:`run` must be running (it writes the queued frames and reads the
    answers). When the supervisor closes the channel, ``run`` records it in
    :attr:`supervisor_gone` and cancels ``scope``: the child stops at once.
    """

    def __init__(self, frames: FrameStream) -> None:
        self._frames = frames
        self._out_send, self._out_recv = trio.open_memory_channel[Frame](EVENT_BACKLOG)
        self._answer_send, self._answer_recv = trio.open_memory_channel[UsageVerdict | NextTurn](1)
        self._last_id = 0
        self.supervisor_gone = False
        self.dropped_events = 0

    async def run(self, scope: trio.CancelScope) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._writer)
            await self._reader()
            nursery.cancel_scope.cancel()
        self.supervisor_gone = True
        scope.cancel()

    async def _writer(self) -> None:
        async for frame in self._out_recv:
            try:
                await self._frames.send(frame)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                return  # the reader sees the EOF and stops the child

    async def _reader(self) -> None:
        from agentd.core.errors import ProtocolError

        while True:
            line = await self._frames.receive_line()
            if line is None:
                return
            frame = parse_supervisor_frame(line)
            if isinstance(frame, SpawnPayload):
                raise ProtocolError("a second spawn payload arrived")
            try:
                self._answer_send.send_nowait(frame)
            except trio.WouldBlock:
                raise ProtocolError(f"an unrequested {frame.type} frame arrived") from None

    async def _request(
        self, frame: UsageReport | TurnEnd, *, timeout: float | None
    ) -> UsageVerdict | NextTurn:
        from agentd.core.errors import ProtocolError

        await self._out_send.send(frame)
        with trio.fail_after(math.inf if timeout is None else timeout):
            answer = await self._answer_recv.receive()
        expected = UsageVerdict if isinstance(frame, UsageReport) else NextTurn
        if answer.id != frame.id or not isinstance(answer, expected):
            raise ProtocolError(
                f"answer {answer.type} #{answer.id} does not match request {frame.type} #{frame.id}"
            )
        return answer

    def _next_id(self) -> int:
        self._last_id += 1
        return self._last_id

    async def report_usage(self, *, call: ModelCall) -> UsageVerdict:
        """Report one model call; the answer says whether to go on.

        Values are clamped into the protocol's bounds here, so what a provider
        reports (a negative or absurd token count) never turns an honest
        child into one the supervisor must kill.
        """
        total_in = _clamp(call.input_tokens, MAX_TOKENS_PER_CALL)
        cached = _clamp(call.cached_input_tokens, total_in)
        latency_ms = call.latency_ms
        report = UsageReport(
            id=self._next_id(),
            input_tokens=total_in,
            output_tokens=_clamp(call.output_tokens, MAX_TOKENS_PER_CALL),
            steps=_clamp(call.steps, 1000),
            latency_ms=min(max(float(latency_ms), 0.0), MAX_LATENCY_MS) if math.isfinite(latency_ms) else 0.0,
            provider=str(call.provider)[:MAX_NAME_CHARS],
            model=str(call.model)[:MAX_NAME_CHARS],
            cached_input_tokens=cached,
            cache_creation_input_tokens=_clamp(call.cache_creation_input_tokens, total_in - cached),
            cost_usd=_cost(call.cost_usd),
            text=str(call.text)[:MAX_STEP_TEXT_CHARS],
            tool_calls=_clamp(call.tool_calls, 1000),
        )
        answer = await self._request(report, timeout=LINK_TIMEOUT)
        assert isinstance(answer, UsageVerdict)
        return answer

    async def turn_end(
        self, *, status: TerminalStatus, text: str, idle: bool, fatal_infra: str | None = None
    ) -> NextTurn:
        """End a turn; the answer is exit, or the next turn's input (a warm session waits for it)."""
        if len(text) > MAX_TEXT_CHARS:
            note = f"\n[agentd: result cut at {MAX_TEXT_CHARS} of {len(text)} characters]"
            text = text[: MAX_TEXT_CHARS - len(note)] + note
        end = TurnEnd(
            id=self._next_id(),
            status=status,
            text=text,
            idle=bool(idle),
            # A provider's error message may quote what it was sent: valid text only (rfcs/0270).
            fatal_infra=None if fatal_infra is None else valid_text(fatal_infra[:MAX_MESSAGE_CHARS]),
        )
        answer = await self._request(end, timeout=None)
        assert isinstance(answer, NextTurn)
        return answer

    async def send_transcript(self, messages: Sequence[Message]) -> None:
        """Send a turn's new messages as transcript parts (queued before its turn end, never dropped)."""
        from agentd.agent.transcript import parts

        for group in parts(messages):
            await self._out_send.send(TranscriptPart(messages=group))

    def post_event(self, event: str, fields: Mapping[str, object]) -> None:
        """Queue a telemetry event for the supervisor; dropped (and counted) if the queue is full."""
        from pydantic import ValidationError

        if not _is_child_event(event):
            return
        try:
            frame = ChildEvent(event=event, fields=_event_fields(fields))
        except ValidationError:
            self.dropped_events += 1
            return
        try:
            self._out_send.send_nowait(frame)
        except trio.WouldBlock:
            self.dropped_events += 1


def _is_child_event(event: str) -> TypeGuard[ChildEventName]:
    """Whether a child may send ``event`` (the protocol's closed list)."""
    return event in _CHILD_EVENTS


def _cost(value: object) -> float | None:
    """A call's cost as the protocol carries it: a finite amount within bounds, else unknown."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value) if 0 <= value <= MAX_CALL_COST_USD else None


def _clamp(value: float, top: int) -> int:
    try:
        n = int(value)
    except (TypeError, ValueError, OverflowError):
        return 0
    return min(max(n, 0), top)


def _event_fields(fields: Mapping[str, object]) -> dict[str, str | int | float | bool | None]:
    """Fields coerced into what a child event may carry (scalars, bounded texts, plain keys)."""
    import re

    out: dict[str, str | int | float | bool | None] = {}
    for key, value in fields.items():
        if len(out) >= MAX_EVENT_FIELDS:
            break
        if key in RESERVED_EVENT_FIELDS or not re.fullmatch(r"[a-z][a-z0-9_]{0,31}", key):
            continue
        if (
            value is None
            or isinstance(value, bool)
            or (isinstance(value, int) and -MAX_ID <= value <= MAX_ID)
            or (isinstance(value, float) and math.isfinite(value))
        ):
            out[key] = value
        else:
            out[key] = str(value)[:MAX_EVENT_TEXT]
    return out


class ChildTelemetry(Telemetry):
    """Telemetry inside a child: events go to the supervisor as control frames (never to stderr)."""

    def __init__(self, link: ControlLink) -> None:
        super().__init__(stream=None)
        self._link = link

    def emit(self, event: str, /, **fields: object) -> None:
        self._link.post_event(event, fields)


class SelfMcpLink:
    """:class:`agentd.agent.loop.SupervisorLink`: tools over MCP, usage and turn ends over control frames."""

    def __init__(
        self,
        client: Client,
        control: ControlLink,
        release: Callable[[], None] | None = None,
        *,
        images: bool = False,
    ) -> None:
        self._client = client
        self._control = control
        self._release = release
        self._images = images

    async def call_tool(self, name: str, arguments: dict[str, object]) -> ToolResult:
        from agentd.agent.loop import ToolResult
        from agentd.selfmcp.protocol import WAITING_TOOL_TIMEOUT, WAITING_TOOLS

        # A self-tool that waits for other agents is bounded by the supervisor (rfcs/0370).
        bound = WAITING_TOOL_TIMEOUT if name in WAITING_TOOLS else LINK_TIMEOUT
        try:
            with trio.fail_after(bound):
                result = await self._client.call_tool(name, dict(arguments))
        except trio.TooSlowError:
            return ToolResult(f"tool {name!r} did not answer within {bound:g}s", True)
        except Exception as exc:  # an MCPError from the supervisor: the model sees it
            return ToolResult(f"tool {name!r} failed: {exc}", True)
        from agentd.agent.content import convert

        got = convert(result, images=self._images)
        for part in got.omitted:
            fields = {"tool": name, "kind": part.kind, "mime_type": part.mime_type, "bytes": part.size}
            if part.reason == "model_takes_no_images":
                fields["fix"] = "if the model takes images, set images = true in [model_settings]"
            self._control.post_event("tool.content_omitted", {**fields, "reason": part.reason})
        return ToolResult(got.text, got.is_error, got.images)

    async def report_usage(self, *, call: ModelCall) -> UsageVerdict:
        if self._release is not None:
            # The first model call is over: the zygote may warm its next spare now.
            release, self._release = self._release, None
            release()
        return await self._control.report_usage(call=call)

    async def turn_end(self, *, status: TerminalStatus, text: str, idle: bool) -> NextTurn:
        answer = await self._control.turn_end(status=status, text=text, idle=idle)
        if answer.traceparent:
            # The next turn's span: current from here on in this task (the loop's), so the
            # MCP SDK puts it in the _meta of that turn's tool calls.
            from agentd.observe.tracing import attach_traceparent

            attach_traceparent(answer.traceparent)
        return answer

    def tool_refused(self, name: str) -> None:
        self._control.post_event("tool.refused", {"tool": name, "reason": "not offered to the model"})

    async def record_transcript(self, messages: Sequence[Message]) -> None:
        await self._control.send_transcript(messages)


async def amain(
    payload: SpawnPayload,
    mcp_sock: socket.socket,
    control_sock: socket.socket,
    release: Callable[[], None] | None = None,
) -> int:
    """Run one agent to the end; returns the process exit status.

    ``release`` is called when the first model request has been sent (an HTTP
    provider) or its call is over (a zygote's child: the zygote then forks its
    next spare; see :mod:`agentd.agent.zygote`). Calling it again does nothing.
    """
    mark("child.trio", payload.agent)
    if release is not None:
        from agentd.models._http import after_first_request_sent

        after_first_request_sent(release)  # else (an SDK provider) at its first usage report
    from mcp import Client

    from agentd.agent.loop import run_agent
    from agentd.core.errors import FatalInfraError
    from agentd.models import make_model
    from agentd.models.base import takes_images
    from agentd.observe.tracing import child_turn_context
    from agentd.selfmcp.transport import stream_transport

    control = ControlLink(
        FrameStream(
            trio.SocketStream(trio.socket.from_stdlib_socket(control_sock)),
            max_line=MAX_SUPERVISOR_FRAME_BYTES,
        )
    )
    mcp_stream = trio.SocketStream(trio.socket.from_stdlib_socket(mcp_sock))
    model = make_model(
        payload.model, env=os.environ, telemetry=ChildTelemetry(control), **_model_options(payload)
    )
    tools = _tool_specs(payload)
    mark("child.model", payload.agent)
    code = EXIT_OK
    async with trio.open_nursery() as nursery:
        nursery.start_soon(control.run, nursery.cancel_scope)
        try:
            async with Client(stream_transport(mcp_stream), mode="2026-07-28", cache=None) as client:
                link = SelfMcpLink(client, control, release, images=takes_images(model))
                mark("child.mcp", payload.agent)
                try:
                    # The supervisor's turn span: the MCP SDK puts it in each tool call's _meta.
                    with child_turn_context(payload.traceparent):
                        await run_agent(
                            model,
                            link,
                            system=payload.system,
                            instruction=payload.instruction,
                            tools=tools,
                            max_turn_steps=payload.max_turn_steps,
                            history=_history(payload),
                            journal=payload.journal,
                        )
                except FatalInfraError as exc:
                    # Tell the supervisor why before going: it decides the exit code (4).
                    await control.turn_end(status="crashed", text="", idle=False, fatal_infra=str(exc))
                    code = EXIT_FATAL_INFRA
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(MODEL_CLOSE_TIMEOUT):
                await model.aclose()
        nursery.cancel_scope.cancel()
    return EXIT_OK if control.supervisor_gone else code


def _tool_specs(payload: SpawnPayload) -> list[ToolSpec]:
    """The tools the payload offers, as the model layer takes them."""
    from agentd.models import ToolSpec

    return [
        ToolSpec(name=t.name, description=t.description, input_schema=dict(as_object(t.input_schema) or {}))
        for t in payload.tools
    ]


def warm_start(model_specs: list[str]) -> None:
    """Run a child's start-up path once, without I/O, in a spare child before its agent is known.

    A forked child's first pass over this code copies every page it writes
    (reference counts on shared objects): ~1,600 page faults, 6-8 ms of CPU
    before the first model request. A spare (:mod:`agentd.agent.zygote`)
    takes them here, ahead of need: the payload's validation, trio's first
    run, the control link, each model of ``model_specs`` (with placeholder
    credentials and a loopback URL that is never contacted; closed at once)
    and the self-MCP client over a socketpair nobody serves.
    """
    line = encode(
        SpawnPayload(
            agent="warm",
            model=model_specs[0] if model_specs else "script:warm",
            instruction="",
            tools=(ToolSpecFrame(name="warm", input_schema={"type": "object"}),),
        )
    )
    payload = parse_supervisor_frame(line[:-1])
    assert isinstance(payload, SpawnPayload)
    trio.run(_warm_start, payload, model_specs)


async def _warm_start(payload: SpawnPayload, model_specs: list[str]) -> None:
    import contextlib

    from mcp import Client

    from agentd.models import make_model
    from agentd.selfmcp.transport import stream_transport

    mcp_ours, mcp_theirs = trio.socket.socketpair()
    ctl_ours, ctl_theirs = trio.socket.socketpair()
    control = ControlLink(FrameStream(trio.SocketStream(ctl_ours), max_line=MAX_SUPERVISOR_FRAME_BYTES))
    for spec in model_specs:
        with contextlib.suppress(Exception):
            model = make_model(
                spec, env=_WARM_ENV, telemetry=ChildTelemetry(control), **_model_options(payload)
            )
            await model.aclose()
    assert _tool_specs(payload)
    async with Client(stream_transport(trio.SocketStream(mcp_ours)), mode="2026-07-28", cache=None):
        pass
    for sock in (mcp_theirs, ctl_ours, ctl_theirs):
        sock.close()


#: The environment of :func:`warm_start`'s models: placeholders, a loopback URL never contacted.
_WARM_ENV = {
    "OPENAI_API_KEY": "warm",
    "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
    "ANTHROPIC_API_KEY": "warm",
    "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
}


def _history(payload: SpawnPayload) -> list[Message]:
    """A restored session's conversation (empty for a new agent)."""
    if not payload.history:
        return []
    from agentd.agent.transcript import history

    return history(payload.history)


class _ModelOptions(TypedDict, total=False):
    """The ``make_model`` keywords a spawn payload can carry."""

    timeout: float
    settings: ModelSettings
    providers: Providers


def _model_options(payload: SpawnPayload) -> _ModelOptions:
    """``make_model`` keywords the spawn payload carries (absent: the model's defaults)."""
    from agentd.models import ModelSettings, ProviderConfig

    options: _ModelOptions = {}
    if payload.model_timeout is not None:
        options["timeout"] = payload.model_timeout
    if payload.model_settings:
        options["settings"] = ModelSettings.from_mapping(payload.model_settings)
    if payload.providers:
        options["providers"] = {
            name: ProviderConfig.from_payload(table.model_dump()) for name, table in payload.providers.items()
        }
    return options


def run_child(
    payload: SpawnPayload,
    mcp_sock: socket.socket,
    control_sock: socket.socket,
    *,
    release: Callable[[], None] | None = None,
) -> int:
    """Entry used after fork and by ``python -m``: run the agent under a fresh trio run."""
    try:
        return trio.run(amain, payload, mcp_sock, control_sock, release)
    except BaseException as exc:  # the supervisor sees the crash as the channels closing
        from agentd.core.redact import redact

        print(redact(f"agentd child {payload.agent}: {type(exc).__name__}: {exc}"), file=sys.stderr)
        return EXIT_CRASH


def read_spawn_payload(control_sock: socket.socket) -> SpawnPayload:
    """Read and validate the spawn payload, the first frame on a fresh child's control channel.

    Raises:
        EOFError: the supervisor closed the channel first.
        ProtocolError: the first frame is not a valid spawn payload.
    """
    from agentd.core.errors import ProtocolError

    frame = parse_supervisor_frame(read_first_line(control_sock, max_line=MAX_SUPERVISOR_FRAME_BYTES))
    if not isinstance(frame, SpawnPayload):
        raise ProtocolError(f"the first frame is {frame.type!r}, not the spawn payload")
    return frame


def main(argv: list[str] | None = None) -> int:
    """``python -P -m agentd.agent.child MCP_FD CONTROL_FD``: the slow path (no zygote).

    The supervisor starts this in a session of its own (so a signal to its
    process group does not reach us) and without a death signal (it starts
    us from a worker thread, whose exit would fire one): a dead supervisor
    closes our control channel, and that stops us.
    """
    args = sys.argv[1:] if argv is None else argv
    mcp_sock = socket.socket(fileno=int(args[0]))
    control_sock = socket.socket(fileno=int(args[1]))
    payload = read_spawn_payload(control_sock)
    return run_child(payload, mcp_sock, control_sock)


__all__ = ["MAX_CHILD_FRAME_BYTES", "ChildTelemetry", "ControlLink", "SelfMcpLink", "main", "run_child"]


if __name__ == "__main__":
    raise SystemExit(main())
