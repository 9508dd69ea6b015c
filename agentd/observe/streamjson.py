"""``--output stream-json``: one JSON object per line on stdout, one line per step, as it happens.

Every line has ``type``, ``ts`` (RFC 3339, UTC) and ``session_id`` (this
run's id); the schema is ``docs/stream-json.schema.json`` (version
:data:`SCHEMA_VERSION`, in the ``start`` line). Lines, by ``type``:

==============  ==================================================================
``start``       the run: agentd's version, mode, model, servers, routes, subscriptions, sessions
``delivery``    what starts a turn: a routed update (its URIs), a clock fire, a watch notice
``agent``       an agent starts (its id, role, route and session)
``assistant``   each model reply: its text (cut), how many tool calls it asked for, its usage
``tool_call``   a tool call: name and arguments (as JSON text, cut)
``tool_result`` its result: text (cut), whether it is an error, latency
``turn_end``    an agent's turn ended: its status
``reply``       daemons: a published reply, with its time and cause (the fire or the URIs)
``result``      the final result with usage and cost: always the last line
==============  ==================================================================

Texts are cut at ``--output-truncate`` characters (default 2,000; 0 keeps
everything), with ``truncated: true`` on the line. Secrets are redacted as
in telemetry. Lines go through the same bounded stdout writer as every
result: a reader that stops reading costs lines (counted), never the run.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal, NotRequired, TypedDict

from agentd import __version__
from agentd.core.jsonvalue import as_array, get_str
from agentd.core.redact import redact
from agentd.core.safetext import escape_json_controls, json_bytes
from agentd.observe.output import LineWriter

if TYPE_CHECKING:
    from agentd.config import Settings

#: The stream-json schema version (``docs/stream-json.schema.json``); bumped when a line changes incompatibly.
SCHEMA_VERSION = 1


def _now() -> str:
    from agentd.observe.telemetry import _now_rfc3339

    return _now_rfc3339()


class Delivery(TypedDict):
    """What started a turn: a routed update (its URIs), a clock fire, a watch notice, or the agent that started it."""

    kind: Literal["resource", "timer", "notice", "agent"]
    route: str | None
    uris: list[object]
    parent: NotRequired[object]
    """``kind == "agent"``: the agent whose ``agent_start`` started it (rfcs/0370)."""


class Causes:
    """Which delivery started each agent's current turn (a telemetry tap), for the reply lines.

    A routed delivery or a clock fire is followed at once, in the reactor's
    same step, by the spawn (``subagent.spawn``) or the warm session's turn
    (``session.deliver``) it starts: that agent's cause is the last delivery.
    """

    def __init__(self) -> None:
        self._pending: Delivery | None = None
        self._by_agent: dict[str, Delivery] = {}

    def __len__(self) -> int:
        """Agents whose cause is known (an agent's goes when it exits)."""
        return len(self._by_agent)

    def of(self, agent: str) -> Delivery | None:
        """The cause of ``agent``'s current turn (None: its instruction, e.g. a once run's root)."""
        return self._by_agent.get(agent)

    def on_event(self, event: str, f: Mapping[str, object]) -> Delivery | None:
        """Track ``event``; returns the delivery it announces, if it is one."""
        if event == "route.deliver":
            self._pending = {
                "kind": "resource",
                "route": get_str(f, "route"),
                "uris": list(as_array(f.get("uris")) or ()),
            }
            return self._pending
        if event == "timer.fire":
            self._pending = {"kind": "timer", "route": None, "uris": []}
            return self._pending
        if event == "watch.notice":
            return {
                "kind": "notice",
                "route": get_str(f, "route"),
                "uris": [f.get("uri")] if f.get("uri") else [],
            }
        if event == "subagent.spawn" and f.get("parent") is not None and f.get("agent") is not None:
            # An agent another started (rfcs/0370): its cause is its parent.
            self._by_agent[str(f["agent"])] = {
                "kind": "agent",
                "route": get_str(f, "route"),
                "uris": [],
                "parent": f.get("parent"),
            }
        elif event in ("session.deliver", "subagent.spawn") and f.get("agent") is not None and self._pending:
            self._by_agent[str(f["agent"])] = self._pending
            if event == "subagent.spawn":
                self._pending = None
        elif event == "subagent.exit":
            # Its last reply is written by now: an exited agent's cause is not kept (rfcs/0281).
            self._by_agent.pop(str(f.get("agent")), None)
        return None


class StreamJson:
    """Turns telemetry events and steps into stream-json lines on stdout.

    Args:
        writer: stdout's bounded writer.
        truncate: characters kept of each text (0: all).
        session_id: this run's id (a fresh UUID when None).
    """

    def __init__(self, writer: LineWriter, *, truncate: int, session_id: str | None = None) -> None:
        self._writer = writer
        self._truncate = truncate
        self.session_id = session_id or str(uuid.uuid4())
        self.causes = Causes()
        self._parents: dict[str, str] = {}
        """Agent -> the agent that started it, while it runs: its lines name their parent (rfcs/0370)."""

    # -- lines ---------------------------------------------------------------------

    def _put(self, line: dict[str, object]) -> None:
        record = {"type": line.pop("type"), "ts": _now(), "session_id": self.session_id, **redact(line)}
        # Model output may hold integers past 64 bits or C1 controls: written whole, terminal-safe.
        self._writer.put(escape_json_controls(json_bytes(record, default=str)) + b"\n")

    def _cut(self, text: str, line: dict[str, object]) -> str:
        if self._truncate and len(text) > self._truncate:
            line["truncated"] = True
            return text[: self._truncate]
        return text

    def start(self, settings: Settings, *, routes: list[str]) -> None:
        """The first line: what runs (``routes``: the router's route ids)."""
        self._put(
            {
                "type": "start",
                "schema_version": SCHEMA_VERSION,
                "version": __version__,
                "mode": settings.mode,
                "model": settings.model,
                "servers": sorted(settings.servers),
                "routes": routes,
                "subscriptions": [
                    f"{s.server}:{s.uri}" if s.server else s.uri for s in settings.subscriptions
                ],
                # The named sessions continue routes deliver into (each one warm agent).
                "sessions": sorted(
                    {r.session for r in settings.routes if r.disposition == "continue" and r.session}
                ),
            }
        )

    def reply(self, *, agent: str, route: str | None, status: str, text: str) -> None:
        """A daemon's published reply, with its cause."""
        line: dict[str, object] = {"type": "reply", "agent": agent, "route": route, "status": status}
        line["result"] = self._cut(text, line)
        line["cause"] = self.causes.of(agent)
        self._put(line)

    def result(self, result: Mapping[str, object]) -> None:
        """The last line."""
        self._put({"type": "result", **result})

    # -- the tap -------------------------------------------------------------------

    def on_event(self, event: str, fields: Mapping[str, object]) -> None:
        """A :meth:`agentd.observe.telemetry.Telemetry.add_tap` tap: the events and steps that make lines."""
        try:
            self._on_event(event, fields)
        except Exception:  # a line must never break the supervisor
            return

    def _on_event(self, event: str, f: Mapping[str, object]) -> None:
        if event == "subagent.spawn" and f.get("parent") is not None:
            self._parents[str(f.get("agent"))] = str(f.get("parent"))
        elif event == "subagent.exit":
            self._parents.pop(str(f.get("agent")), None)
        self._on_line(event, f)

    def _put_of(self, line: dict[str, object]) -> None:
        """``_put``, with the line's agent's parent named when another agent started it."""
        parent = self._parents.get(str(line.get("agent")))
        if parent is not None:
            line["parent"] = parent
        self._put(line)

    def _on_line(self, event: str, f: Mapping[str, object]) -> None:
        delivery = self.causes.on_event(event, f)
        if delivery is not None:
            extra = {"watch": f.get("watch"), "session": f.get("session")} if event == "watch.notice" else {}
            self._put({"type": "delivery", **delivery, **extra})
            return
        if event == "subagent.spawn":
            self._put_of(
                {
                    "type": "agent",
                    "agent": f.get("agent"),
                    "role": f.get("role"),
                    "route": f.get("route"),
                    "session": f.get("session"),
                    **(
                        {"depth": f.get("depth"), "type": f.get("type")}
                        if f.get("parent") is not None
                        else {}
                    ),
                }
            )
        elif event == "step.assistant":
            line: dict[str, object] = {
                "type": "assistant",
                "agent": f.get("agent"),
                "route": f.get("route"),
                "model": f.get("model"),
                "tool_calls": f.get("tool_calls", 0),
                "usage": {
                    "input_tokens": f.get("input_tokens", 0),
                    "output_tokens": f.get("output_tokens", 0),
                    "cached_input_tokens": f.get("cached_input_tokens", 0),
                },
                "cost_usd": f.get("cost_usd"),
            }
            line["text"] = self._cut(str(f.get("text") or ""), line)
            self._put_of(line)
        elif event == "tool.refused":
            # The child answered "unknown tool" itself: the call never reached the supervisor.
            self._put_of(
                {"type": "tool_call", "agent": f.get("agent"), "name": f.get("tool"), "refused": True}
            )
        elif event == "step.tool_call":
            line = {"type": "tool_call", "agent": f.get("agent"), "name": f.get("name")}
            line["arguments"] = self._cut(json_bytes(f.get("arguments") or {}, default=str).decode(), line)
            self._put_of(line)
        elif event == "step.tool_result":
            line = {
                "type": "tool_result",
                "agent": f.get("agent"),
                "name": f.get("name"),
                "is_error": bool(f.get("is_error")),
                "latency_ms": f.get("latency_ms"),
            }
            line["content"] = self._cut(_content_text(f.get("content")), line)
            self._put_of(line)
        elif event == "turn.end":
            self._put_of(
                {
                    "type": "turn_end",
                    "agent": f.get("agent"),
                    "route": f.get("route"),
                    "status": f.get("status"),
                    "idle": bool(f.get("idle")),
                }
            )


def _content_text(content: object) -> str:
    """A tool result's content blocks as text (text blocks as is, others by kind)."""
    if not isinstance(content, list | tuple):
        return "" if content is None else str(content)
    parts = []
    for block in content:
        text = getattr(block, "text", None)
        parts.append(text if isinstance(text, str) else f"[{getattr(block, 'type', 'content')}]")
    return "\n".join(parts)


__all__ = ["SCHEMA_VERSION", "Causes", "Delivery", "StreamJson"]
