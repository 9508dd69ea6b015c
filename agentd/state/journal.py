"""The session journal's file format: framed, checksummed records; torn tails; compaction.

One file per warm session, ``sessions/<id>.journal`` under the state
directory, written by the supervisor only (never by an agent child)::

    agentd-session-journal 1\n          the file's first bytes (a foreign file is refused)
    record*                              each: length (u32 LE), CRC-32 (u32 LE), JSON payload

Records (validated strictly when read, unknown keys refused):

* ``{"t": "open", "session": NAME}``: first record; names the session (the
  file name is a hash of it, so a renamed file is detected).
* ``{"t": "turn", "messages": [...], "subs": [[URI, SERVER], ...]}``: one per
  completed turn: the messages the turn added (its user input first) and the
  session's self-subscriptions as they stood at the turn's end.

A write is one ``write`` of whole records followed by ``fsync``. A crash can
leave the last record short (its head or body cut, or zero-filled pages):
that is a *torn tail*, expected after a crash, and dropped: the session is
restored as of the last complete turn. A bad record with good bytes after it,
a checksum that fails in the middle, a payload that is not a valid record,
or a file larger than :data:`MAX_JOURNAL_BYTES` is *corruption*: the good
prefix is kept, the file itself is moved aside for inspection, and the error
says where. A file that does not start with the magic is not a journal at
all (*foreign*): it is refused and left as it is (rfcs/0275).

Files are opened through :mod:`agentd.state.files`: never through a link,
regular files of agentd's user only, read up to a bound.

Nothing here imports trio: :mod:`agentd.state.sessions` runs these functions
in worker threads.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from agentd.selfmcp.protocol import MessageFrame
from agentd.state import files
from agentd.state.filelock import fsync_dir

MAGIC: Final = b"agentd-session-journal 1\n"
_HEAD = struct.Struct("<II")
#: Longest record accepted (a turn's messages): the spawn payload's cap, which a restore must fit.
MAX_RECORD_BYTES: Final = 64 * 1024 * 1024
#: File name suffix of a journal.
SUFFIX: Final = ".journal"
#: The user message that stands where compaction dropped turns.
COMPACTED_NOTE: Final = (
    "[agentd: earlier turns of this conversation were dropped to keep it within the session's token budget]"
)
#: Characters per token in the estimate compaction uses (no tokenizer in the supervisor).
CHARS_PER_TOKEN: Final = 4

#: Largest journal read: past it the file is damaged (its turns in the first this-many bytes are kept).
MAX_JOURNAL_BYTES: Final = files.MAX_STATE_FILE_BYTES

Problem = Literal["torn", "corrupt", "foreign"]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class OpenRecord(_Record):
    t: Literal["open"] = "open"
    session: Annotated[str, Field(min_length=1, max_length=1024)]


class TurnRecord(_Record):
    t: Literal["turn"] = "turn"
    messages: tuple[MessageFrame, ...]
    subs: tuple[tuple[Annotated[str, Field(max_length=4096)], str | None], ...] = ()


_RECORD: TypeAdapter[OpenRecord | TurnRecord] = TypeAdapter(
    Annotated[OpenRecord | TurnRecord, Field(discriminator="t")]
)


def file_name(session: str) -> str:
    """The journal's file name for ``session`` (a hash: any session name is a safe file name)."""
    return "s-" + hashlib.sha256(session.encode()).hexdigest()[:32] + SUFFIX


def encode(record: OpenRecord | TurnRecord) -> bytes:
    """One framed record."""
    payload = record.model_dump_json().encode()
    return _HEAD.pack(len(payload), zlib.crc32(payload)) + payload


@dataclass
class Contents:
    """What a journal file holds, as far as it could be read.

    Attributes:
        session: the session it names (None: not even the open record was read).
        turns: the complete turns, oldest first.
        subs: the self-subscriptions at the last complete turn.
        good_bytes: length of the valid prefix (magic and whole records).
        problem: None, ``torn`` (the last record is cut short), ``corrupt``, or
            ``foreign`` (not a journal: it does not start with the magic).
        detail: what was wrong and where (for the error message).
    """

    session: str | None = None
    turns: list[tuple[MessageFrame, ...]] = field(default_factory=list)
    subs: tuple[tuple[str, str | None], ...] = ()
    good_bytes: int = 0
    problem: Problem | None = None
    detail: str = ""


def parse(data: bytes) -> Contents:
    """Read a journal's bytes (see the module docstring for torn tails and corruption)."""
    out = Contents()
    if not data.startswith(MAGIC):
        if MAGIC.startswith(data):  # cut inside the magic itself: a file created, never finished
            out.problem, out.detail = "torn", "the file ends inside its header"
            return out
        out.problem, out.detail = "foreign", "it does not start like an agentd session journal"
        return out
    off = out.good_bytes = len(MAGIC)
    size = len(data)
    while off < size:
        rest = size - off
        if rest < _HEAD.size:
            out.problem, out.detail = "torn", f"a record head is cut short at byte {off}"
            return out
        length, crc = _HEAD.unpack_from(data, off)
        end = off + _HEAD.size + length
        if length == 0:
            if not any(data[off:]):
                out.problem, out.detail = "torn", f"zero-filled tail from byte {off}"
            else:
                out.problem, out.detail = "corrupt", f"an empty record at byte {off}"
            return out
        if length > MAX_RECORD_BYTES:
            out.problem, out.detail = "corrupt", f"a record at byte {off} claims {length} bytes"
            return out
        if end > size:
            out.problem, out.detail = "torn", f"the last record (byte {off}) is cut short"
            return out
        payload = data[off + _HEAD.size : end]
        if zlib.crc32(payload) != crc:
            if end == size:
                out.problem, out.detail = "torn", f"the last record (byte {off}) fails its checksum"
            else:
                out.problem, out.detail = "corrupt", f"the record at byte {off} fails its checksum"
            return out
        try:
            record = _RECORD.validate_json(payload)
        except ValidationError as exc:
            first = exc.errors(include_input=False, include_url=False)[0]
            where = ".".join(str(p) for p in first.get("loc", ()))
            out.problem = "corrupt"
            out.detail = f"the record at byte {off} is not a journal record ({where}: {first.get('msg')})"
            return out
        if isinstance(record, OpenRecord):
            if out.session is not None:
                out.problem, out.detail = "corrupt", f"a second open record at byte {off}"
                return out
            out.session = record.session
        elif out.session is None:
            out.problem, out.detail = "corrupt", f"a turn record at byte {off} before the open record"
            return out
        else:
            out.turns.append(record.messages)
            out.subs = record.subs
        off = out.good_bytes = end
    return out


# -- compaction -------------------------------------------------------------------------


def message_tokens(m: MessageFrame) -> int:
    """Estimated tokens of one message (characters / :data:`CHARS_PER_TOKEN`, plus a little framing)."""
    chars = len(m.content) + sum(len(c.name) + len(c.raw_arguments) for c in m.tool_calls)
    if m.provider_data:
        chars += len(str(m.provider_data))
    return chars // CHARS_PER_TOKEN + 4


def turn_tokens(turn: Sequence[MessageFrame]) -> int:
    return sum(message_tokens(m) for m in turn)


def compact(
    turns: Sequence[tuple[MessageFrame, ...]], budget_tokens: int
) -> tuple[list[tuple[MessageFrame, ...]], int]:
    """Drop the oldest turns until the conversation fits ``budget_tokens``; returns (turns, dropped).

    The first instruction (the first message of the first turn) always stays,
    followed by :data:`COMPACTED_NOTE` once anything was dropped; then as
    many of the newest whole turns as fit (a turn is never cut, so every tool
    call keeps its result). The system prompt is not in the journal: it comes
    from the configuration at every start.
    """
    if not turns or sum(turn_tokens(t) for t in turns) <= budget_tokens:
        return list(turns), 0
    first = turns[0]
    head: list[MessageFrame] = [first[0]]
    body: list[tuple[MessageFrame, ...]] = []
    rest = list(turns[1:])
    if len(first) > 1 and first[1].role == "user" and first[1].content == COMPACTED_NOTE:
        tail = first[2:]
    else:
        tail = first[1:]
    if tail:
        rest.insert(0, tuple(tail))
    note = MessageFrame(role="user", content=COMPACTED_NOTE)
    used = message_tokens(first[0]) + message_tokens(note)
    for turn in reversed(rest):
        cost = turn_tokens(turn)
        if used + cost > budget_tokens:
            break
        body.insert(0, turn)
        used += cost
    dropped = len(rest) - len(body)
    head.append(note)
    return [tuple(head), *body], dropped


# -- files (blocking: run in a worker thread) ----------------------------------------------


def read(path: Path) -> Contents:
    """Read a journal file, up to :data:`MAX_JOURNAL_BYTES` (beyond it the file is ``corrupt``).

    Raises:
        NotAFile: it is a link, FIFO, device, socket or directory (never opened for reading).
        NotOurs: another user owns it.
        OSError: it cannot be read (unreadable is not corrupt).
    """
    data = files.read_state_file(path, MAX_JOURNAL_BYTES)
    if len(data) <= MAX_JOURNAL_BYTES:
        return parse(data)
    out = parse(data[:MAX_JOURNAL_BYTES])
    if out.problem != "foreign":
        out.problem = "corrupt"
        out.detail = f"it is larger than {MAX_JOURNAL_BYTES} bytes, the most agentd reads of a journal"
    return out


def write_whole(
    path: Path,
    session: str,
    turns: Sequence[tuple[MessageFrame, ...]],
    subs: tuple[tuple[str, str | None], ...],
) -> None:
    """Write a complete journal atomically (a unique temp file, fsync, rename, fsync of the directory)."""
    data = bytearray(MAGIC)
    data += encode(OpenRecord(session=session))
    for i, turn in enumerate(turns):
        data += encode(TurnRecord(messages=turn, subs=subs if i == len(turns) - 1 else ()))
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    # O_EXCL: a fresh file, never a link or anything planted under the name.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        _write_all(fd, bytes(data))
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def open_append(path: Path) -> int:
    """The journal opened to append (a regular file of agentd's user; never through a link)."""
    return files.open_state_file(path, os.O_WRONLY | os.O_APPEND)


def append(fd: int, data: bytes) -> None:
    """Append whole records and make them durable."""
    _write_all(fd, data)
    os.fsync(fd)


def truncate(path: Path, good_bytes: int) -> None:
    """Cut a torn tail off (durably)."""
    fd = files.open_state_file(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, good_bytes)
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


__all__ = [
    "COMPACTED_NOTE",
    "MAGIC",
    "MAX_JOURNAL_BYTES",
    "MAX_RECORD_BYTES",
    "Contents",
    "OpenRecord",
    "TurnRecord",
    "append",
    "compact",
    "encode",
    "file_name",
    "parse",
    "read",
    "turn_tokens",
    "write_whole",
]
