"""Finding events in the inbox file by walking it (in a worker thread).

The log holds at most ``mem_cap`` pending events; older pending ones, and
every message already acknowledged, are only on disk. :func:`walk_pending`
brings pending events of a byte range back (a refill, or a lookup by id);
:func:`scan_all` finds every line with an id, pending or not, for
``inbox://AGENT/message/{id}``; :func:`read_messages` reads those lines whole.
Memory stays bounded by one read step and the events asked for.
"""

from __future__ import annotations

import os
from collections import deque
from typing import TypeAlias

import orjson

from agentd.servers._inboxlog import MAX_LINE_BYTES, Entry, Note, find_newline, message_id, walk
from agentd.servers._intervals import IntervalSet
from agentd.servers.inbox.cursor import DRAIN_CHUNK, reader
from agentd.servers.inbox.files import InboxDir

Located: TypeAlias = tuple[int | None, int, int, bool]
"""Where a message with a given id is: (seq if known, start, end, pending)."""


def walk_pending(
    directory: InboxDir, dir_fd: int, start: int, seq: int, stop: int, notes: list[Note], below: int | None,
    acked: IntervalSet, keep: int, match_id: str | None = None, *, uri: str,
) -> list[Entry]:  # fmt: skip
    """Pending events in ``[start, stop)`` (worker thread): the first and the newest ``keep`` (or those with ``match_id``)."""
    fd = directory.open_inbox(dir_fd)
    try:
        first: Entry | None = None
        newest: deque[Entry] = deque(maxlen=max(keep, 1))
        found: list[Entry] = []
        for entry in walk(
            reader(fd),
            start=start,
            seq=seq,
            stop_offset=stop,
            notes=notes,
            agent=directory.names.agent,
            uri=uri,
        ):
            if below is not None and entry.seq >= below:
                break
            if entry.seq in acked:
                continue
            if match_id is not None:
                if entry.id == match_id:
                    found.append(entry)
                continue
            if first is None:
                first = entry
            newest.append(entry)
    finally:
        os.close(fd)
    if match_id is not None:
        return found
    out = list(newest)
    if first is not None and (not out or out[0].seq != first.seq):
        out.insert(0, first)
    return out


def scan_all(directory: InboxDir, dir_fd: int, msg_id: str) -> list[Located]:
    """Every line of the file with ``msg_id`` (worker thread): (seq if known, start, end, pending=False)."""
    agent = directory.names.agent
    needle = msg_id.encode()
    fd = directory.open_inbox(dir_fd)
    out: list[Located] = []
    try:
        read = reader(fd)
        size = os.fstat(fd).st_size
        pos = 0
        while pos < size:
            chunk = read(pos, DRAIN_CHUNK)
            if not chunk:
                break
            last = chunk.rfind(b"\n")
            if last < 0:
                nl = find_newline(read, pos, size)
                end = size if nl is None else nl + 1
                if end - pos <= MAX_LINE_BYTES:
                    _match_line(read(pos, end - pos), pos, agent, msg_id, needle, out)
                pos = end
                continue
            start = 0
            while start <= last:
                nl = chunk.index(b"\n", start)
                _match_line(chunk[start : nl + 1], pos + start, agent, msg_id, needle, out)
                start = nl + 1
            pos += last + 1
    finally:
        os.close(fd)
    return out


def _match_line(line: bytes, offset: int, agent: str, msg_id: str, needle: bytes, out: list[Located]) -> None:
    if needle not in line and not msg_id.startswith(f"{agent}@"):
        return
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return
    if isinstance(obj, dict) and message_id(obj.get("id"), agent, offset) == msg_id:
        out.append((None, offset, offset + len(line), False))


def read_messages(directory: InboxDir, located: list[Located], msg_id: str) -> list[dict[str, object]]:
    """The lines at ``located``, whole, each with its id, seq, offset and whether it is pending."""
    out: list[dict[str, object]] = []
    fd = directory.open_inbox()
    try:
        for seq, start, end, is_pending in located:
            try:
                obj = orjson.loads(os.pread(fd, end - start, start))
            except orjson.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                for key in ("seq", "offset", "pending"):  # the line's own fields of these names are kept
                    if key in obj:
                        obj[f"message_{key}"] = obj.pop(key)
                out.append({**obj, "id": msg_id, "seq": seq, "offset": start, "pending": is_pending})
    finally:
        os.close(fd)
    return out
