"""``agentd serve memo``: a small key/value notebook as a watchable state resource.

Resource ``memo://notes`` (``application/json``): one JSON object, note key ->
any JSON value. Tools ``memo_set(key, value)`` and ``memo_delete(key)`` change
it and notify subscribers; ``memo_get(key)`` reads one note (read-only).

With ``--file PATH`` the notes persist in PATH (a JSON object), written
atomically (temp file, fsync, rename, directory fsync) with PATH's permission
bits kept (a 0600 file stays 0600). PATH must be a regular file: a symlink,
FIFO or device there is refused (at start, and on every read and write), so
the server never writes through a link or blocks on a pipe. Edits other programs
make to PATH are picked up through inotify on its directory and pushed like
our own changes; our own writes are recognised by content and not pushed
twice. A file that is not a JSON object is reported as the resource's read
error and left untouched; the next ``memo_set``/``memo_delete`` starts from an
empty object and first copies the bad file to ``PATH.corrupt``. Deleting PATH
empties the notes.
"""

from __future__ import annotations

import argparse
import os
import stat
from typing import Final

import orjson
from mcp_types import ToolAnnotations

from agentd.servers._base import (
    STATE_MIME,
    ConfigError,
    ResourceError,
    SourceGate,
    ToolError,
    WatchableServer,
    describe,
)
from agentd.servers._inotify import (
    IN_CLOSE_WRITE,
    IN_DELETE,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    Inotify,
    InotifyError,
)
from agentd.servers._safefs import UnsafePath, copy_regular, describe_kind, read_regular, write_atomic

SUMMARY: Final = "a JSON key/value notebook (memo://notes), optionally persisted to a file"

#: ``agentd serve memo --help``: what it serves and how agentd uses it.
HELP: Final = """\
resources:
  memo://notes              every note: one JSON object, key -> any JSON value
                            (state; subscribers are told of each change)
tools:
  memo_set(key, value)      set a note (any JSON value)
  memo_delete(key)          delete a note
  memo_get(key)             read one note (read-only)
--file PATH keeps the notes in PATH (written atomically; edits others make to it
are picked up and pushed like the server's own).

with agentd:
  agentd --mcp-stdio 'memo=agentd serve memo --file notes.json' \\
         --mode reactive --subscribe memo:memo://notes \\
         --route 'memo://notes=continue' "act on the notes"
  mcpServers JSON: {"memo": {"command": "agentd", "args": ["serve", "memo"]}}"""

NOTES_URI: Final = "memo://notes"
#: Directory events that can change the file's content or existence.
_FILE_MASK: Final = IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--file", metavar="PATH", help="persist the notes in this JSON file (watched for edits)"
    )


class MemoStore:
    """The notes and, with a file, their persistence. Synchronous; never awaits."""

    def __init__(self, path: str | None) -> None:
        self.path = os.path.abspath(path) if path else None
        self.notes: dict[str, object] = {}
        self.error: str | None = None
        """Why the file cannot be used right now (reads fail with it); None when fine."""
        if self.path is not None:
            self.reload()

    def reload(self) -> bool:
        """Re-read the file; returns True when what readers see changed."""
        assert self.path is not None
        before = (self.notes, self.error)
        try:
            raw = read_regular(self.path)
        except FileNotFoundError:
            self.notes, self.error = {}, None
            return before != (self.notes, self.error)
        except OSError as exc:
            self.error = (
                f"cannot read the memo file {self.path!r}: {exc.strerror}; "
                "fix its permissions (the server picks the change up by itself)"
            )
            return before != (self.notes, self.error)
        try:
            value = orjson.loads(raw) if raw.strip() else {}
        except orjson.JSONDecodeError as exc:
            self.error = (
                f"the memo file {self.path!r} is not valid JSON ({exc}); fix or delete it, "
                "or call memo_set to start over (the bad file is kept as .corrupt)"
            )
            return before != (self.notes, self.error)
        if not isinstance(value, dict):
            self.error = (
                f"the memo file {self.path!r} holds a JSON {type(value).__name__}, not an object; "
                "make it an object like {} or call memo_set to start over (the bad file is kept as .corrupt)"
            )
            return before != (self.notes, self.error)
        self.notes, self.error = value, None
        return before != (self.notes, self.error)

    def body(self) -> str:
        if self.error is not None:
            raise ResourceError(self.error)
        return orjson.dumps(self.notes, option=orjson.OPT_SORT_KEYS).decode()

    def commit(self, notes: dict[str, object]) -> None:
        """Make ``notes`` current, persisting first; on a write error nothing changes."""
        if self.path is not None:
            if self.error is not None and os.path.lexists(self.path):
                copy_regular(self.path, self.path + ".corrupt")
            write_atomic(self.path, orjson.dumps(notes, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
        self.notes, self.error = notes, None


def _check_key(key: str) -> None:
    if not key:
        raise ToolError("key must be a non-empty string, e.g. memo_set(key='todo', value='buy milk')")


def build(args: argparse.Namespace) -> WatchableServer:
    """Construct the memo server from parsed flags (see the module docstring)."""
    path: str | None = args.file
    if path is not None:
        directory = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(directory):
            raise ConfigError("--file", path, f"its directory {directory!r} does not exist; create it first")
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            mode = None
        if mode is not None and not stat.S_ISREG(mode):
            raise ConfigError(
                "--file",
                path,
                f"it is {describe_kind(mode)}; give the path of a regular file such as notes.json "
                "(the server never writes through a link or reads a pipe)",
            )
    store = MemoStore(path)
    server = WatchableServer(
        "memo",
        instructions="A shared notebook: read memo://notes, change it with memo_set / memo_delete.",
    )
    gate = SourceGate("the memo file watcher")

    async def notes() -> str:
        await gate.wait_ready()
        return store.body()

    server.mcp.resource(
        NOTES_URI,
        name="notes",
        mime_type=STATE_MIME,
        description=describe(
            "The notebook: a JSON object of note key -> value. Changes are pushed.",
            name="notes",
            uri=NOTES_URI,
        ),
    )(notes)

    async def apply(notes: dict[str, object]) -> None:
        try:
            store.commit(notes)
        except UnsafePath as exc:
            raise ToolError(f"could not write the memo file: {exc.strerror}") from exc
        except OSError as exc:
            raise ToolError(
                f"could not write the memo file {store.path!r}: {exc.strerror}; "
                "fix the file's directory permissions or free disk space, then retry"
            ) from exc
        await server.notify_changed(NOTES_URI)

    @server.mcp.tool(
        description="Set note `key` to `value` (any JSON). Subscribers of memo://notes are notified.",
        # It writes (a loop shift that calls it did work, rfcs/0280) and may overwrite a note.
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True),
    )
    async def memo_set(key: str, value: object) -> dict[str, object]:
        _check_key(key)
        base = {} if store.error is not None else dict(store.notes)
        base[key] = value
        await apply(base)
        return {"key": key, "value": value}

    @server.mcp.tool(
        description="Delete note `key`. Subscribers of memo://notes are notified.",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False),
    )
    async def memo_delete(key: str) -> dict[str, object]:
        _check_key(key)
        if store.error is not None:
            raise ToolError(store.error)
        if key not in store.notes:
            known = ", ".join(repr(k) for k in sorted(store.notes)) or "(none)"
            raise ToolError(f"no note {key!r} to delete; existing keys: {known}")
        base = dict(store.notes)
        del base[key]
        await apply(base)
        return {"key": key, "deleted": True}

    @server.mcp.tool(
        description="Return the value of note `key`.",
        annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True),
    )
    async def memo_get(key: str) -> object:
        if store.error is not None:
            raise ToolError(store.error)
        if key not in store.notes:
            known = ", ".join(repr(k) for k in sorted(store.notes)) or "(none)"
            raise ToolError(f"no note {key!r}; existing keys: {known}")
        return store.notes[key]

    async def watch_file() -> None:
        if store.path is None:
            gate.running()
            return
        name = os.path.basename(store.path)
        try:
            ino = Inotify()
            ino.add_watch(os.path.dirname(store.path), _FILE_MASK)
        except InotifyError as exc:
            gate.failed(f"cannot watch the memo file's directory: {exc}")
            return
        with ino:
            # Catch edits made between build() and the watch landing.
            store.reload()
            gate.running()
            async for batch in ino:
                if any(ev.name == name or ev.overflow for ev in batch) and store.reload():
                    await server.notify_changed(NOTES_URI)

    server.add_source(watch_file)
    return server
