"""The supervisor's end of one child's control channel.

:func:`serve_control` runs in the child's own task (started by the tree),
never in the reactor. It reads the child's frames, validates each one
(:func:`agentd.selfmcp.protocol.parse_child_frame`: types, bounds, closed
vocabularies), and only then turns it into a typed reactor event
(:class:`~agentd.events.UsageReported`,
:class:`~agentd.events.TurnEnded`) or a telemetry line; the
reactor's answer goes back as a frame with the request's id.

The first broken rule ends the conversation: :class:`~agentd.core.errors.ProtocolError`
propagates to the tree, which kills the child and reports the reason in
``subagent.exit``. Nothing of an invalid frame reaches the reactor.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import trio

from agentd.core.errors import ProtocolError
from agentd.events import ReactorEvent, Reply, TurnEnded, UsageReported
from agentd.observe.telemetry import Telemetry
from agentd.selfmcp.control import FrameStream
from agentd.selfmcp.protocol import (
    ChildEvent,
    MessageFrame,
    NextTurn,
    TranscriptPart,
    TurnEnd,
    UsageReport,
    UsageVerdict,
    parse_child_frame,
)

#: How long a usage report may wait for the reactor's verdict. The reactor
#: answers in microseconds; only a wedged reactor runs this out (and then
#: the child is stopped rather than left waiting).
USAGE_REPLY_TIMEOUT = 30.0

#: Bytes of transcript parts one turn may send before its turn end: far above what
#: the per-turn step cap and the tool-result cut allow an honest child.
MAX_TURN_TRANSCRIPT_BYTES = 256 * 1024 * 1024

Journal = Callable[[Sequence[MessageFrame]], Awaitable[None]]
"""Records one child's finished turn (its session journal, or a once root's conversation); returns once durable."""


async def serve_control(
    agent: str,
    frames: FrameStream,
    *,
    events: trio.MemorySendChannel[ReactorEvent],
    telemetry: Telemetry,
    journal: Journal | None = None,
) -> None:
    """Serve ``agent``'s control channel until the child closes it.

    Transcript parts are held until the turn's end; then ``journal`` records
    them (appended and fsynced) before the reactor hears of the turn end, so
    whatever follows a turn end (its result published, the next delivery)
    happens after the turn is durable. Without ``journal`` they are dropped.

    Requests are served one at a time, in order: the next frame is read only
    after the previous request was answered (a child has at most one request
    outstanding; a warm session's turn end waits here for its next delivery).

    Raises:
        ProtocolError: the child sent an invalid frame, or the reactor did not
            answer a usage report within :data:`USAGE_REPLY_TIMEOUT`.
    """
    expected_id = 1
    transcript: list[MessageFrame] = []
    transcript_bytes = 0
    while True:
        line = await frames.receive_line()
        if line is None:
            return
        frame = parse_child_frame(line)
        if isinstance(frame, ChildEvent):
            _relay_event(agent, frame, telemetry)
            continue
        if isinstance(frame, TranscriptPart):
            transcript_bytes += len(line)
            if transcript_bytes > MAX_TURN_TRANSCRIPT_BYTES:
                raise ProtocolError(f"a turn's transcript exceeds {MAX_TURN_TRANSCRIPT_BYTES} bytes")
            transcript.extend(frame.messages)
            continue
        if frame.id != expected_id:
            raise ProtocolError(f"request id {frame.id} out of order (expected {expected_id})")
        expected_id += 1
        answer: UsageVerdict | NextTurn
        if isinstance(frame, UsageReport):
            answer = await _ask(events, agent, frame, timeout=USAGE_REPLY_TIMEOUT)
        else:
            if transcript and journal is not None:
                await journal(transcript)
            transcript, transcript_bytes = [], 0
            answer = await _ask(events, agent, frame, timeout=None)
        try:
            await frames.send(answer)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return  # the child is gone; its exit is reported by the tree


async def _ask(
    events: trio.MemorySendChannel[ReactorEvent],
    agent: str,
    frame: UsageReport | TurnEnd,
    *,
    timeout: float | None,
) -> UsageVerdict | NextTurn:
    send, recv = trio.open_memory_channel[UsageVerdict | NextTurn](1)
    event: ReactorEvent
    if isinstance(frame, UsageReport):
        event = UsageReported(agent=agent, report=frame, reply=Reply[UsageVerdict](send))
    else:
        event = TurnEnded(agent=agent, end=frame, reply=Reply[NextTurn](send))
    await events.send(event)
    if timeout is None:
        return await recv.receive()
    with trio.move_on_after(timeout):
        return await recv.receive()
    raise ProtocolError(f"the supervisor did not answer a usage report within {timeout:g}s")


def _relay_event(agent: str, frame: ChildEvent, telemetry: Telemetry) -> None:
    """Write a child's telemetry event to the supervisor's stream, attributed to the child."""
    if frame.event == "model.retry":
        telemetry.incr("model.retries")
    telemetry.emit(frame.event, agent=agent, **frame.fields)


__all__ = ["MAX_TURN_TRANSCRIPT_BYTES", "USAGE_REPLY_TIMEOUT", "Journal", "serve_control"]
