"""Transcript messages as data: :class:`agentd.models.Message` to and from the control protocol's frames.

The same shape travels in three places: a child's :class:`~agentd.selfmcp.protocol.TranscriptPart`
frames (a turn's new messages), the session journal's records, and a restored
session's spawn payload (``history``). A message is only ever data shown to
the model: nothing in it is interpreted by the supervisor, and a tool call
in a restored history is never run again.

Images are not kept (rfcs/0290): a tool result's images become text
placeholders naming their type and size, so a journal grows with the text of
a conversation only and a restored session is told to call the tool again.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from agentd.models import Message, ToolCall
from agentd.selfmcp.protocol import MessageFrame, ToolCallFrame, encode

#: Why a restored session's image is a placeholder.
IMAGE_NOT_KEPT = "images are not kept in the session journal; call the tool again to see it"

#: Bytes of encoded messages one transcript part carries at most: well under the
#: child -> supervisor line cap (8 MiB), so a part never breaks the protocol.
PART_BYTES = 4 * 1024 * 1024

#: Characters of a message's longest text kept when the message alone would not
#: fit in one part (a tool call's multi-megabyte arguments); the rest is cut with a note.
MESSAGE_CUT_CHARS = 512 * 1024


def to_frame(message: Message) -> MessageFrame:
    """A transcript message as a frame (what the journal stores and the child sends)."""
    return MessageFrame.model_construct(
        role=message.role,
        content=message.text_with_placeholders(IMAGE_NOT_KEPT),
        tool_calls=tuple(
            ToolCallFrame.model_construct(id=c.id, name=c.name, raw_arguments=c.raw_arguments, error=c.error)
            for c in message.tool_calls
        ),
        tool_call_id=message.tool_call_id,
        is_error=message.is_error,
        provider_data=dict(message.provider_data) if message.provider_data is not None else None,
    )


def from_frame(frame: MessageFrame) -> Message:
    """A frame as a transcript message (a restored history); tool calls are parsed as the model wrote them."""
    calls = [
        ToolCall(id=c.id, name=c.name, arguments=None, raw_arguments=c.raw_arguments, error=c.error)
        if c.error is not None
        else ToolCall.from_raw(c.id, c.name, c.raw_arguments)
        for c in frame.tool_calls
    ]
    return Message(
        role=frame.role,
        content=frame.content,
        tool_calls=calls,
        tool_call_id=frame.tool_call_id,
        is_error=frame.is_error,
        provider_data=frame.provider_data,
    )


def _cut(text: str) -> str:
    if len(text) <= MESSAGE_CUT_CHARS:
        return text
    return text[:MESSAGE_CUT_CHARS] + f"\n[agentd: cut at {MESSAGE_CUT_CHARS} of {len(text)} characters]"


def fitted(frame: MessageFrame) -> MessageFrame:
    """``frame``, with its long texts cut when it alone would exceed :data:`PART_BYTES`."""
    if len(encode(frame)) <= PART_BYTES:
        return frame
    return frame.model_copy(
        update={
            "content": _cut(frame.content),
            "tool_calls": tuple(
                c.model_copy(update={"raw_arguments": _cut(c.raw_arguments)}) for c in frame.tool_calls
            ),
            # Provider extras are only an optimisation (thinking blocks); too big, they go.
            "provider_data": None,
        }
    )


def parts(messages: Iterable[Message]) -> Iterator[tuple[MessageFrame, ...]]:
    """The messages as frames, grouped so each group encodes to at most about :data:`PART_BYTES`."""
    group: list[MessageFrame] = []
    size = 0
    for message in messages:
        frame = fitted(to_frame(message))
        n = len(encode(frame))
        if group and (size + n > PART_BYTES or len(group) >= 4096):
            yield tuple(group)
            group, size = [], 0
        group.append(frame)
        size += n
    if group:
        yield tuple(group)


def history(frames: Sequence[MessageFrame]) -> list[Message]:
    """A restored session's messages, in order."""
    return [from_frame(f) for f in frames]


__all__ = ["PART_BYTES", "from_frame", "history", "parts", "to_frame"]
