"""``agentd serve inbox``: an agent's message inbox (a JSON Lines file) as a watchable event log.

Identity and files
------------------
The agent name comes from ``--agent``, else ``$AGENTD_INBOX_AGENT``, else the
first line of ``~/.agentd/inbox-agent``. Names are ``[A-Za-z0-9_.-]+`` and do
not start with a dot. In the inbox directory (``--dir``, default
``~/.agentd/inbox``)::

    <agent>.inbox                  the inbox: JSON Lines, appended to by anyone
    .<agent>.hwm                   high-water mark (JSON, replaced atomically)
    .<agent>.state                 acked / handled / responded ids (JSON, atomic)
    .<agent>.lock                  flock()ed by the one server draining the inbox
    .<agent>.watcher-active        sentinel: {"pid", "start_time", "host", "since"}

Inbox line shape
----------------
One JSON object per line, newline-terminated::

    {"id": "m-17", "from": "alice", "ts": "2026-11-03T10:00:00Z",
     "urgent": false, "text": "build is red", ...any other fields, kept}

``id`` (string or number) is recommended; a line without one gets
``"<agent>@<byte offset>"``. ``from`` is the sender's agent name (needed by
``respond``). ``urgent`` defaults to false. Writers should append each line
with one ``write`` on a file opened ``O_APPEND``.

Delivery
--------
The file is watched with inotify on its directory (no polling). On a change
the server reads from the high-water mark to the end: every complete line
that is a JSON object becomes a message; the batch is ordered urgent first
(then file order), appended to the ``inbox://<agent>`` event log (``MESSAGE``
events with the message fields; a message's own ``seq``/``type`` fields are
kept as ``message_seq``/``message_type``) and pushed once. A line that is not
(yet) valid JSON, or a last line without its newline that does not parse,
stops the drain there: it is re-read on the next change, never skipped; after
3 such attempts an in-band ``ERROR`` event says which byte offset to fix.

The high-water mark is ``{"offset", "last_id", "last_sha256"}``: the byte just
past the last delivered line, that line's id and its hash. It is written after
each batch is pushed, so a restart re-delivers nothing handed over and picks up
everything appended while down (a crash between push and write re-delivers
that one batch). If the file shrank or the line before ``offset`` no longer
hashes the same (the file was rewritten, e.g. by a sync tool), delivery resumes
after the line whose id is ``last_id``, or from the start when it is gone, with
an ``ERROR`` event saying so.

One drainer per inbox: ``flock`` on the lock file plus the sentinel. A second
server for the same inbox exits with status 1 and a message naming the running
one. A sentinel left by a dead process (pid gone, or a different start time)
is taken over. On a clean stop the sentinel is removed.

Clients that declare the experimental ``claude/channel`` capability also get
each message as a ``notifications/claude/channel`` notification
(``{"content": text, "meta": {...string fields}}``); ``--channel always``
sends it to every handshake-era client, ``never`` to none.

Tools: ``ack(id)``, ``respond(id, text)`` (appends ``{"id", "from", "ts",
"urgent": false, "text", "in_reply_to"}`` to ``<dir>/<sender>.inbox``) and
``mark_handled(id, note=None)``; their effect shows in ``inbox://<agent>/status``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import logging
import os
import re
import socket
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Literal

import orjson
import psutil
from mcp_types import ToolAnnotations

from agentd.servers._base import (
    EVENTS_MIME,
    STATE_MIME,
    ConfigError,
    EventRing,
    ServerStartError,
    SourceGate,
    ToolError,
    WatchableServer,
    describe,
    write_atomic,
)
from agentd.servers._inotify import (
    IN_CLOSE_WRITE,
    IN_CREATE,
    IN_DELETE,
    IN_MODIFY,
    IN_MOVED_TO,
    Inotify,
    InotifyError,
)

SUMMARY: Final = (
    "an agent's JSON Lines inbox as an event log (inbox://AGENT), with ack / respond / mark_handled"
)

log = logging.getLogger("agentd.servers.inbox")

#: Attempts at an unparsable line before an in-band ERROR tells the user.
DEFER_WARN_AFTER: Final = 3
#: Ids remembered (sender, acked, handled) for the reply tools; older ones are forgotten.
KNOWN_IDS: Final = 10_000
CHANNEL_METHOD: Final = "notifications/claude/channel"
CHANNEL_CAPABILITY: Final = "claude/channel"
_INBOX_MASK: Final = IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DELETE
_NAME_RE: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_META_KEY_RE: Final = re.compile(r"[^A-Za-z0-9_]")

ChannelPolicy = Literal["auto", "always", "never"]


def valid_agent(name: str) -> bool:
    return bool(_NAME_RE.fullmatch(name)) and len(name) <= 128


def resolve_agent(flag: str | None, env: dict[str, str] | os._Environ[str], home: str) -> str:
    """``--agent`` > ``$AGENTD_INBOX_AGENT`` > ``~/.agentd/inbox-agent``.

    Raises:
        ConfigError: no identity found, or it is not a valid name.
    """
    if flag:
        source, name = "--agent", flag
    elif env.get("AGENTD_INBOX_AGENT"):
        source, name = "AGENTD_INBOX_AGENT", env["AGENTD_INBOX_AGENT"]
    else:
        path = os.path.join(home, ".agentd", "inbox-agent")
        try:
            with open(path, encoding="utf-8") as f:
                name = f.readline().strip()
        except OSError:
            raise ConfigError(
                "--agent",
                None,
                f"no inbox identity: pass --agent NAME, set AGENTD_INBOX_AGENT, or write the name to {path}",
            ) from None
        source = path
    if not valid_agent(name):
        raise ConfigError(source, name, "use letters, digits, '_', '.', '-' (not starting with '.')")
    return name


# --------------------------------------------------------------------------- pure drain


@dataclass
class Hwm:
    """Where delivery stopped: the byte after the last delivered line."""

    offset: int = 0
    last_id: str | None = None
    last_sha256: str | None = None
    last_len: int = 0

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "offset": self.offset,
                "last_id": self.last_id,
                "last_sha256": self.last_sha256,
                "last_len": self.last_len,
            }
        )

    @classmethod
    def from_json(cls, raw: bytes) -> Hwm:
        d = orjson.loads(raw)
        return cls(int(d["offset"]), d.get("last_id"), d.get("last_sha256"), int(d.get("last_len", 0)))


@dataclass
class Deferral:
    """A line the drain could not consume yet."""

    offset: int
    attempts: int
    reason: str


@dataclass
class Drain:
    """What one read of the inbox found."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    """New messages, urgent first then file order."""
    hwm: Hwm = field(default_factory=Hwm)
    """The mark to persist once the messages are handed over."""
    deferred: Deferral | None = None
    warnings: list[str] = field(default_factory=list)
    """Problems to report in-band (ERROR events) and on stderr."""


def _message_id(value: object, agent: str, offset: int) -> str:
    if isinstance(value, str | int) and not isinstance(value, bool) and str(value):
        return str(value)
    return f"{agent}@{offset}"


def _find_after_id(data: bytes, last_id: str, agent: str) -> int | None:
    """Offset just past the last complete line whose id is ``last_id``."""
    found: int | None = None
    pos = 0
    for line in data.splitlines(keepends=True):
        end = pos + len(line)
        if line.endswith(b"\n"):
            with contextlib.suppress(orjson.JSONDecodeError):
                obj = orjson.loads(line)
                if isinstance(obj, dict) and _message_id(obj.get("id"), agent, pos) == last_id:
                    found = end
        pos = end
    return found


def drain_bytes(data: bytes, hwm: Hwm, agent: str, deferral: Deferral | None) -> Drain:
    """Decide what is new in the inbox contents ``data`` after ``hwm``. Pure.

    Args:
        data: the whole inbox file.
        hwm: the current high-water mark.
        agent: the inbox owner (for synthesized ids).
        deferral: the previous drain's deferral (to count attempts).
    """
    out = Drain(hwm=Hwm(hwm.offset, hwm.last_id, hwm.last_sha256, hwm.last_len))
    start = hwm.offset
    intact = start <= len(data)
    if intact and start > 0 and hwm.last_sha256 is not None:
        prev = data[start - hwm.last_len : start]
        intact = hashlib.sha256(prev).hexdigest() == hwm.last_sha256
    if not intact:
        resume = _find_after_id(data, hwm.last_id, agent) if hwm.last_id is not None else None
        if resume is not None:
            start = resume
            out.warnings.append(
                f"the inbox was rewritten; resuming after message {hwm.last_id!r} (byte {resume})"
            )
        else:
            start = 0
            out.warnings.append(
                "the inbox was truncated or rewritten and the last delivered message is gone; "
                "delivering it again from the start"
            )
        out.hwm = Hwm(start)
    pos = start
    urgent: list[dict[str, Any]] = []
    normal: list[dict[str, Any]] = []
    while pos < len(data):
        nl = data.find(b"\n", pos)
        end = len(data) if nl < 0 else nl + 1
        line = data[pos:end]
        if not line.strip():
            if nl < 0:
                break  # trailing whitespace without newline: wait for more
            pos = end
            out.hwm = Hwm(end, out.hwm.last_id, out.hwm.last_sha256, out.hwm.last_len)
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            obj = None
        if not isinstance(obj, dict):
            reason = "an incomplete last line" if nl < 0 else "a line that is not a JSON object"
            attempts = deferral.attempts + 1 if deferral is not None and deferral.offset == pos else 1
            out.deferred = Deferral(pos, attempts, reason)
            if attempts == DEFER_WARN_AFTER:
                out.warnings.append(
                    f"byte {pos} of the inbox is {reason} after {attempts} attempts; delivery waits "
                    "there: finish or fix that line (each line must be one JSON object)"
                )
            break
        msg_id = _message_id(obj.get("id"), agent, pos)
        msg = dict(obj)
        msg["id"] = msg_id
        msg.setdefault("urgent", False)
        (urgent if msg.get("urgent") is True else normal).append(msg)
        out.hwm = Hwm(end, msg_id, hashlib.sha256(line).hexdigest(), len(line))
        pos = end
    out.messages = urgent + normal
    return out


# --------------------------------------------------------------------------- single drainer


def process_start_time(pid: int) -> float | None:
    """The process's start time (seconds since the epoch), or None if it does not exist."""
    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
        return None


def sentinel_is_live(info: dict[str, Any]) -> bool:
    """Whether a sentinel's owner still runs (same host, pid alive, same start time)."""
    if info.get("host") not in (None, socket.gethostname()):
        return True  # another host: we cannot check it, so we respect it
    pid = info.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    started = process_start_time(pid)
    recorded = info.get("start_time")
    if started is None:
        return False
    return not (isinstance(recorded, int | float) and abs(started - recorded) > 1.0)


class DrainerLock:
    """Hold the inbox: flock on ``.<agent>.lock`` and the sentinel file."""

    def __init__(self, directory: str, agent: str, inbox: str) -> None:
        self.lock_path = os.path.join(directory, f".{agent}.lock")
        self.sentinel_path = os.path.join(directory, f".{agent}.watcher-active")
        self.inbox = inbox
        self._fd: int | None = None
        self.took_over: dict[str, Any] | None = None

    def _read_sentinel(self) -> dict[str, Any] | None:
        try:
            with open(self.sentinel_path, "rb") as f:
                info = orjson.loads(f.read())
        except (OSError, orjson.JSONDecodeError):
            return None
        return info if isinstance(info, dict) else None

    def acquire(self) -> None:
        """Take the inbox or raise :class:`ServerStartError` naming the current holder."""
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ServerStartError(self._busy_message(self._read_sentinel())) from None
        info = self._read_sentinel()
        if info is not None and info.get("pid") != os.getpid() and sentinel_is_live(info):
            os.close(fd)
            raise ServerStartError(self._busy_message(info))
        self.took_over = info
        me = psutil.Process()
        write_atomic(
            self.sentinel_path,
            orjson.dumps(
                {
                    "pid": os.getpid(),
                    "start_time": me.create_time(),
                    "host": socket.gethostname(),
                    "since": datetime.now(UTC).isoformat(),
                    "inbox": self.inbox,
                }
            ),
        )
        self._fd = fd

    def _busy_message(self, info: dict[str, Any] | None) -> str:
        who = f"pid {info.get('pid')} on {info.get('host')}" if info else "another process"
        return (
            f"{self.inbox} is already drained by {who} (sentinel {self.sentinel_path}); "
            "stop that server first, or serve another inbox with --agent"
        )

    def release(self) -> None:
        if self._fd is None:
            return
        info = self._read_sentinel()
        if info is not None and info.get("pid") == os.getpid():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.sentinel_path)
        os.close(self._fd)  # releases the flock
        self._fd = None


# --------------------------------------------------------------------------- the server


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class InboxState:
    """Ids known to the reply tools and what was done with them; persisted atomically."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.senders: OrderedDict[str, str | None] = OrderedDict()
        self.acked: OrderedDict[str, str] = OrderedDict()
        self.handled: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.responded: OrderedDict[str, str] = OrderedDict()
        try:
            with open(path, "rb") as f:
                d = orjson.loads(f.read())
            self.senders.update(d.get("senders", {}))
            self.acked.update(d.get("acked", {}))
            self.handled.update(d.get("handled", {}))
            self.responded.update(d.get("responded", {}))
        except (OSError, orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
            pass  # no state yet, or unreadable: start empty (the inbox itself is the record)

    @staticmethod
    def _cap(d: OrderedDict[str, Any]) -> None:
        while len(d) > KNOWN_IDS:
            d.popitem(last=False)

    def remember(self, msg_id: str, sender: str | None) -> None:
        self.senders[msg_id] = sender
        self.senders.move_to_end(msg_id)
        self._cap(self.senders)

    def save(self) -> None:
        for d in (self.acked, self.handled, self.responded):
            self._cap(d)
        write_atomic(
            self.path,
            orjson.dumps(
                {
                    "senders": self.senders,
                    "acked": self.acked,
                    "handled": self.handled,
                    "responded": self.responded,
                }
            ),
        )

    def require(self, msg_id: str) -> None:
        if msg_id not in self.senders:
            recent = ", ".join(repr(k) for k in list(self.senders)[-5:]) or "(none yet)"
            raise ToolError(
                f"unknown message id {msg_id!r}: use an id from inbox:// events; recent ids: {recent}"
            )


def _channel_meta(msg: dict[str, Any]) -> dict[str, str]:
    meta: dict[str, str] = {}
    for key, value in msg.items():
        if key == "text":
            continue
        clean = _META_KEY_RE.sub("_", key)
        meta[clean] = value if isinstance(value, str) else orjson.dumps(value).decode()
    return meta


class InboxServer:
    """State and behaviour of one inbox server; ``build`` wires it to a WatchableServer."""

    def __init__(self, directory: str, agent: str, channel: ChannelPolicy) -> None:
        self.dir = directory
        self.agent = agent
        self.channel = channel
        self.inbox_path = os.path.join(directory, f"{agent}.inbox")
        self.hwm_path = os.path.join(directory, f".{agent}.hwm")
        self.uri = f"inbox://{agent}"
        self.status_uri = f"inbox://{agent}/status"
        self.ring = EventRing()
        self.state = InboxState(os.path.join(directory, f".{agent}.state"))
        self.hwm = self._load_hwm()
        self.deferral: Deferral | None = None
        self.delivered = 0
        self.gate = SourceGate(f"the inbox watcher for {self.inbox_path}")
        self.server = WatchableServer(
            "inbox",
            instructions=(
                f"The inbox of agent {agent!r}. Read {self.uri} for new messages (pushed); "
                "reply with respond(id, text), and record progress with ack(id) / mark_handled(id)."
            ),
            experimental={CHANNEL_CAPABILITY: {}},
        )

    def _load_hwm(self) -> Hwm:
        try:
            with open(self.hwm_path, "rb") as f:
                return Hwm.from_json(f.read())
        except FileNotFoundError:
            return Hwm()
        except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ConfigError(
                "high-water mark",
                self.hwm_path,
                f"it cannot be read ({exc}); fix it, or delete it to re-deliver the whole inbox",
            ) from exc

    def status(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "inbox": self.inbox_path,
            "hwm": {"offset": self.hwm.offset, "last_id": self.hwm.last_id},
            "delivered": self.delivered,
            "deferred": None
            if self.deferral is None
            else {
                "offset": self.deferral.offset,
                "attempts": self.deferral.attempts,
                "reason": self.deferral.reason,
            },
            "acked": dict(self.state.acked),
            "handled": dict(self.state.handled),
            "responded": dict(self.state.responded),
        }

    def read_inbox(self) -> bytes:
        try:
            with open(self.inbox_path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return b""

    async def drain(self) -> None:
        """Read what is new, hand it over (ring, push, channel), then persist the mark."""
        try:
            data = self.read_inbox()
        except OSError as exc:
            self.ring.error(f"cannot read {self.inbox_path}: {exc.strerror}; fix its permissions")
            await self.server.notify_changed(self.uri)
            return
        previous = self.deferral
        result = drain_bytes(data, self.hwm, self.agent, previous)
        self.deferral = result.deferred
        for warning in result.warnings:
            log.warning("%s: %s", self.inbox_path, warning)
            self.ring.error(warning)
        for msg in result.messages:
            fields = {k: v for k, v in msg.items() if k not in ("seq", "type")}
            for k in ("seq", "type"):
                if k in msg:
                    fields[f"message_{k}"] = msg[k]
            self.ring.append("MESSAGE", fields)
            sender = msg.get("from")
            self.state.remember(msg["id"], sender if isinstance(sender, str) else None)
        if result.messages or result.warnings:
            await self.server.notify_changed(self.uri)
            await self.send_channel(result.messages)
        moved = result.hwm != self.hwm
        if moved:
            write_atomic(self.hwm_path, result.hwm.to_json())
            self.hwm = result.hwm
        self.delivered += len(result.messages)
        if result.messages:
            self.state.save()
        if moved or result.messages or (previous != self.deferral):
            await self.server.notify_changed(self.status_uri)

    async def send_channel(self, messages: list[dict[str, Any]]) -> None:
        if self.channel == "never" or not messages:
            return
        for msg in messages:
            params = {"content": str(msg.get("text", "")), "meta": _channel_meta(msg)}
            needed = None if self.channel == "always" else CHANNEL_CAPABILITY
            await self.server.notify_custom(CHANNEL_METHOD, params, capability=needed)

    async def watch(self) -> None:
        try:
            ino = Inotify()
            ino.add_watch(self.dir, _INBOX_MASK)
        except InotifyError as exc:
            self.gate.failed(f"cannot watch the inbox directory: {exc}")
            return
        name = os.path.basename(self.inbox_path)
        with ino:
            await self.drain()  # what arrived while we were down
            self.gate.running()
            async for batch in ino:
                if any(ev.name == name or ev.overflow for ev in batch):
                    await self.drain()

    def respond(self, msg_id: str, text: str) -> dict[str, Any]:
        self.state.require(msg_id)
        sender = self.state.senders[msg_id]
        if sender is None or not valid_agent(sender):
            raise ToolError(
                f"message {msg_id!r} has no usable 'from' ({sender!r}), so there is no inbox to reply to"
            )
        reply_id = f"{self.agent}-{uuid.uuid4().hex[:12]}"
        reply: dict[str, Any] = {
            "id": reply_id,
            "from": self.agent,
            "ts": _now(),
            "urgent": False,
            "text": text,
            "in_reply_to": msg_id,
        }
        target = os.path.join(self.dir, f"{sender}.inbox")
        line = orjson.dumps(reply) + b"\n"
        try:
            fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                os.write(fd, line)  # one write on O_APPEND: never interleaves with other appenders
            finally:
                os.close(fd)
        except OSError as exc:
            raise ToolError(
                f"could not append the reply to {target}: {exc.strerror}; check the directory"
            ) from exc
        self.state.responded[msg_id] = reply_id
        self.state.save()
        return {"to": sender, "inbox": target, "reply": reply}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--agent", help="inbox owner (else $AGENTD_INBOX_AGENT, else ~/.agentd/inbox-agent)")
    parser.add_argument("--dir", help="inbox directory (default ~/.agentd/inbox)")
    parser.add_argument(
        "--channel",
        choices=["auto", "always", "never"],
        default="auto",
        help="send notifications/claude/channel: to clients that declare it (auto), to all, or never",
    )


def build(args: argparse.Namespace) -> WatchableServer:
    """Construct the inbox server; takes the drainer lock (see the module docstring)."""
    home = os.path.expanduser("~")
    agent = resolve_agent(args.agent, os.environ, home)
    directory = os.path.abspath(args.dir or os.path.join(home, ".agentd", "inbox"))
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            "--dir", directory, f"it cannot be created ({exc.strerror}); choose another"
        ) from exc
    inbox = InboxServer(directory, agent, args.channel)
    lock = DrainerLock(directory, agent, inbox.inbox_path)
    lock.acquire()
    if lock.took_over is not None:
        log.warning("took over a stale sentinel from pid %s", lock.took_over.get("pid"))
    server = inbox.server
    server.add_cleanup(lock.release)
    gate = inbox.gate

    async def events() -> str:
        await gate.wait_ready()
        return inbox.ring.body()

    async def status() -> str:
        await gate.wait_ready()
        return orjson.dumps(inbox.status()).decode()

    server.mcp.resource(
        inbox.uri,
        name="inbox",
        mime_type=EVENTS_MIME,
        description=describe(
            f"New messages in {agent}'s inbox as MESSAGE events (urgent first within a batch); "
            "source problems as ERROR events.",
            name="inbox",
            uri=inbox.uri,
            on_event="f\"{event['from']}: {event['text']}\" if event['type'] == 'MESSAGE' else None",
        ),
    )(events)
    server.mcp.resource(
        inbox.status_uri,
        name="inbox-status",
        mime_type=STATE_MIME,
        description=describe(
            "Delivery state: high-water mark, a line waiting to become valid, acked / handled / responded ids.",
            name="inbox-status",
            uri=inbox.status_uri,
        ),
    )(status)

    async def record(kind: str) -> None:
        try:
            inbox.state.save()
        except OSError as exc:
            raise ToolError(f"could not record {kind}: {exc.strerror}; check {inbox.dir}") from exc
        await server.notify_changed(inbox.status_uri)

    @server.mcp.tool(description="Acknowledge message `id` (seen). Shown in inbox status.")
    async def ack(id: str) -> dict[str, Any]:
        inbox.state.require(id)
        inbox.state.acked[id] = _now()
        await record("the ack")
        return {"id": id, "acked": True}

    @server.mcp.tool(
        description="Reply to message `id`: appends a line with in_reply_to to the sender's inbox.",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False),
    )
    async def respond(id: str, text: str) -> dict[str, Any]:
        result = inbox.respond(id, text)
        await server.notify_changed(inbox.status_uri)
        return result

    @server.mcp.tool(description="Mark message `id` handled, with an optional note. Shown in inbox status.")
    async def mark_handled(id: str, note: str | None = None) -> dict[str, Any]:
        inbox.state.require(id)
        inbox.state.handled[id] = {"ts": _now(), "note": note}
        await record("handled")
        return {"id": id, "handled": True}

    server.add_source(inbox.watch)
    return server
