"""Telemetry for a person: the ``human`` format (progress) and the ``text`` format (every event).

Both render the same records the NDJSON lines are made of (``ts``, ``level``,
``event`` and the event's redacted fields, :mod:`agentd.observe.telemetry`): nothing
here keeps a second account of the run (rfcs/0320).

**human** (``--log-format human``; ``auto`` on a terminal) chooses per event:

=========  =====================================================================
progress   a model call (model, tokens, cost, time), the model's interim text
           (what it said beside its tool calls, a few lines at most), each tool
           call (server, tool, its arguments on one line), a wake (a routed
           delivery, a clock fire, a loop shift), a watch notice, a daemon's
           ready, drain and turn ends, and one summary line at exit
problem    every warning and error, whole: wrapped at the terminal's width
           (at spaces, never inside a word, a path or a URL), never cut
internal   everything else: shown only at ``--verbose``, as one ``text`` line
=========  =====================================================================

The telemetry level still applies first: ``-q`` (level ``error``) leaves
the errors and the run's final error line; progress lines are info.
The answer itself is on stdout, never here.

**text** (``--log-format text``): ``HH:MM:SS.mmm LEVEL event key=value …``
for every event; values are cut at :data:`TEXT_VALUE_CHARS`, except the
fields that say what went wrong and what to do (:data:`MESSAGE_FIELDS`).

Every piece of a line goes through :func:`agentd.core.safetext.escape_controls`
before agentd adds its own colours: whatever a model or a server chose to
write, a line writes nothing but its own characters.
"""

from __future__ import annotations

import os
import re
import textwrap
from collections.abc import Callable, Mapping

from agentd.core.durations import ascii_int
from agentd.core.safetext import escape_controls, json_bytes

#: Longest field value the text format shows (the JSON format keeps everything).
TEXT_VALUE_CHARS = 120
#: Fields that say what went wrong and what to do: never cut, in any format for people.
MESSAGE_FIELDS = frozenset({"error", "fix", "reason", "message", "problem", "note", "warning"})
#: Lines of the model's interim text shown (each at most the terminal's width); the rest is cut with "…".
INTERIM_LINES = 3
#: Characters of a model's interim text read at most (a reply's text may be 64 KiB; three lines show).
INTERIM_READ_CHARS = 1024
#: Width used when the terminal's cannot be read (and ``COLUMNS`` is not set).
DEFAULT_WIDTH = 100
#: Narrowest width lines are fitted to (a tool call's arguments keep at least a few characters).
MIN_WIDTH = 40

#: The tag column of a human line.
_TAG = 8
_INDENT = " " * _TAG
#: SGR colours by tag (only when colours are on).
_COLOURS = {
    "model": "36",
    "said": "2",
    "tool": "34",
    "wake": "35",
    "notice": "35",
    "ready": "32",
    "stop": "33",
    "turn": "32",
    "done": "1",
    "warning": "33",
    "error": "1;31",
    "debug": "2",
    "info": "2",
}
_RESET = "\x1b[0m"
#: Problems another line already says whole (shown only at --verbose): the final error line
#: (with the fix), and a failed connection attempt (its server.state line follows with the error).
_SAID_ELSEWHERE = frozenset({"model.fatal", "supervisor.required_server_failed", "upstream.connect_failed"})
#: What a daemon says when it is ready, by mode.
_READY = {
    "reactive": "watching for changes",
    "schedule": "waiting for the schedule",
    "loop": "running in a loop",
}
_SPACES = re.compile(r"\s+")


def colours_wanted(env: Mapping[str, str], fd: int) -> bool:
    """Colours only on a terminal that is not ``dumb``, and never with ``NO_COLOR`` set (no-color.org)."""
    if env.get("NO_COLOR") or env.get("TERM", "") == "dumb":
        return False
    try:
        return os.isatty(fd)
    except OSError:
        return False


def terminal_width(fd: int, env: Mapping[str, str]) -> Callable[[], int]:
    """The width lines are fitted to, read at each line (a resized terminal is followed)."""

    def width() -> int:
        try:  # a COLUMNS that is not ASCII digits ("²" passes isdigit()) is ignored, as shells do
            columns = ascii_int(env.get("COLUMNS", ""))
        except ValueError:
            columns = 0
        if columns > 0:
            return max(MIN_WIDTH, columns)
        try:
            columns_now = os.get_terminal_size(fd).columns
        except OSError:
            return DEFAULT_WIDTH
        # A terminal that does not know its size (a pty opened by a program) says 0.
        return max(MIN_WIDTH, columns_now) if columns_now > 0 else DEFAULT_WIDTH

    return width


class HumanView:
    """Renders telemetry records as the ``human`` format's lines.

    Args:
        colour: add SGR colours (:func:`colours_wanted`).
        width: the terminal's width, asked at each line.
        verbose: also show the internal events (as ``text`` lines).
    """

    def __init__(self, *, colour: bool, width: Callable[[], int], verbose: bool) -> None:
        self._colour = colour
        self._width = width
        self._verbose = verbose
        self._mode = "once"
        """The run's mode (from ``supervisor.start``): a daemon's wakes and turn ends are worth a line."""
        self._once_root: object = None
        """A once run's root agent (from ``subagent.spawn``): the summary line tells how it ended."""

    def render(self, record: Mapping[str, object]) -> str:
        """The lines (each ending in a newline) for one record; empty when it shows nothing."""
        event = str(record.get("event", ""))
        level = str(record.get("level", "info"))
        if event == "supervisor.start":
            self._mode = str(record.get("mode") or "once")
        elif event == "subagent.spawn" and self._mode == "once" and record.get("role") == "root":
            self._once_root = record.get("agent")
        if level in ("warning", "error"):
            return self._problem(level, event, record)
        progress = self._progress(event, record)
        if progress is not None:
            return progress
        if self._verbose:
            return self._line(level, text_line(record, head=False).rstrip("\n"))
        return ""

    # -- progress -------------------------------------------------------------------

    def _progress(self, event: str, f: Mapping[str, object]) -> str | None:
        """The progress lines of ``event``; None when it is not a progress event."""
        match event:
            case "step.assistant":
                return self._model_call(f)
            case "step.tool_call":
                return self._tool_call(f)
            case "tool.call" if f.get("error"):
                name = _tool_name(f.get("server"), f.get("tool"))
                return self._wrapped("tool", f"{name} failed: {_text(f.get('error'))}")
            case "route.deliver":
                uris = [_text(u) for u in _items(f.get("uris"))]
                shown = ", ".join(uris[:3]) + (f" and {len(uris) - 3} more" if len(uris) > 3 else "")
                return self._fitted("wake", f"route {_text(f.get('route'))}: {shown}")
            case "timer.fire":
                return self._line("wake", "the clock fired")
            case "loop.shift":
                return self._line("wake", "loop: a new shift" + (" (warm session)" if f.get("warm") else ""))
            case "watch.notice":
                lines = _count(f.get("lines"))
                text = f"watch {_text(f.get('watch'))} on {_text(f.get('uri'))}: {lines} line{_s(lines)}"
                if f.get("session"):
                    text += f" into session {_text(f.get('session'))}"
                return self._fitted("notice", text)
            case "ready.changed" if self._mode != "once" and f.get("ready") is True:
                return self._line("ready", _READY.get(self._mode, "running") + " (Ctrl-C stops)")
            case "drain.start":
                agents = _count(f.get("agents"))
                grace = _number(f.get("grace_s"))
                text = f"draining: {agents} agent{_s(agents)} running"
                return self._line("stop", text + (f", {_duration(grace)} grace" if grace is not None else ""))
            case "turn.end" if self._mode != "once":
                route = f" (route {_text(f.get('route'))})" if f.get("route") else ""
                return self._line("turn", f"{_text(f.get('agent'))} {_text(f.get('status'))}{route}")
            case "supervisor.exit":
                return self._summary(f)
        return None

    def _model_call(self, f: Mapping[str, object]) -> str:
        model = _text(f.get("model"))
        provider = _text(f.get("provider"))
        parts = [f"{provider}:{model}" if provider and not model.startswith(provider + ":") else model]
        tokens_in, tokens_out = _count(f.get("input_tokens")), _count(f.get("output_tokens"))
        cached = _count(f.get("cached_input_tokens"))
        parts.append(f"{tokens_in:,} in" + (f" ({cached:,} cached)" if cached else ""))
        parts.append(f"{tokens_out:,} out")
        cost = _number(f.get("cost_usd"))
        if cost is not None:
            parts.append(_usd(cost))
        latency = _number(f.get("latency_ms"))
        if latency is not None:
            parts.append(_duration(latency / 1000))
        out = self._line("model", " · ".join(parts))
        text = f.get("text")
        if _count(f.get("tool_calls")) and isinstance(text, str) and text.strip():
            out += self._interim(text)
        return out

    def _interim(self, text: str) -> str:
        """What the model said beside its tool calls: one paragraph, at most :data:`INTERIM_LINES` lines."""
        room = max(MIN_WIDTH, self._width()) - _TAG
        head = text[: min(INTERIM_READ_CHARS, room * (INTERIM_LINES + 1))]
        flat = escape_controls(_SPACES.sub(" ", head).strip())
        lines = textwrap.wrap(flat, room, break_long_words=True, break_on_hyphens=False)
        if len(lines) > INTERIM_LINES or len(text) > len(head):
            lines = lines[:INTERIM_LINES]
            last = lines[-1]
            lines[-1] = (last if len(last) < room else last[: room - 1]) + "…"
        return "".join(self._line("said", line) for line in lines)

    def _tool_call(self, f: Mapping[str, object]) -> str:
        name = _tool_name(f.get("server"), f.get("tool") or f.get("name"))
        try:
            arguments = json_bytes(f.get("arguments") or {}, default=str).decode()
        except (TypeError, ValueError):  # nested past every encoder's depth
            arguments = "{…}"
        room = max(MIN_WIDTH, self._width()) - _TAG - len(name) - 1
        return self._line("tool", f"{name} {_cut(escape_controls(arguments), max(room, 16))}")

    def _summary(self, f: Mapping[str, object]) -> str:
        counters = f.get("counters")
        c = counters if isinstance(counters, Mapping) else {}
        code = _count(f.get("exit_code"))
        status = _text(f.get("status")) or ("ok" if code == 0 else "failed")
        steps = _count(c.get("model_calls"))
        tokens = _count(c.get("input_tokens")) + _count(c.get("output_tokens"))
        parts = [status, f"{steps} step{_s(steps)}", f"{tokens:,} tokens"]
        cost = _number(f.get("cost_usd"))
        if cost is not None and (steps or cost):
            parts.append(_usd(cost))
        elif steps:
            parts.append("cost unknown")
        duration = _number(f.get("duration_s"))
        if duration is not None:
            parts.append(_duration(duration))
        if code:
            parts.append(f"exit {code}")
        unavailable = f.get("servers_unavailable")
        if isinstance(unavailable, Mapping) and unavailable:
            # A run that went on without a server does not end looking clean (rfcs/0315).
            gone = ", ".join(f"{_text(name)} ({_text(why)})" for name, why in unavailable.items())
            parts.append(f"without {gone}")
        return self._wrapped("done", " · ".join(parts))

    # -- problems -------------------------------------------------------------------

    def _problem(self, level: str, event: str, f: Mapping[str, object]) -> str:
        """A warning or an error, whole: the event, its fields, then what went wrong and the fix."""
        if event in _SAID_ELSEWHERE and not self._verbose:
            return ""
        if event == "subagent.exit":
            if f.get("agent") == self._once_root and not self._verbose:
                return ""  # the summary line says how the once run's root ended
            # An agent that ended badly: who, how, and why when known.
            f = {k: v for k, v in f.items() if k not in ("returncode", "exit_code")}
        parts = [escape_controls(event)]
        said: list[str] = []
        traceback = None
        for key, value in f.items():
            if key in ("ts", "level", "severity", "event", "fix") or value is None:
                continue
            if key == "traceback" and isinstance(value, str):
                traceback = value
            elif key in MESSAGE_FIELDS and isinstance(value, str):
                said.append(escape_controls(value))
            else:
                parts.append(f"{escape_controls(key)}={_text_value(value, cut=False)}")
        text = " ".join(parts) + (": " + "; ".join(said) if said else "")
        fix = f.get("fix")
        if isinstance(fix, str) and fix:
            text += " — fix: " + escape_controls(fix)
        out = self._wrapped(level, text)
        if traceback is not None:
            out += "".join(_INDENT + escape_controls(t) + "\n" for t in traceback.rstrip("\n").split("\n"))
        return out

    # -- lines ----------------------------------------------------------------------

    def _line(self, tag: str, text: str) -> str:
        """One line: the tag in its column, then ``text`` (already escaped)."""
        head = f"{tag:<{_TAG - 1}} "
        if not self._colour:
            return head + text + "\n"
        colour = _COLOURS.get(tag, "0")
        if tag in ("said", "debug", "info"):
            return f"\x1b[{colour}m{head}{text}{_RESET}\n"
        return f"\x1b[{colour}m{head}{_RESET}{text}\n"

    def _fitted(self, tag: str, text: str) -> str:
        """One line cut to the terminal's width (a progress line naming URIs and routes)."""
        return self._line(tag, _cut(text, max(MIN_WIDTH, self._width()) - _TAG))

    def _wrapped(self, tag: str, text: str) -> str:
        """Whole: wrapped at spaces to the terminal's width, continuation lines indented; never cut."""
        room = max(MIN_WIDTH, self._width()) - _TAG
        lines = textwrap.wrap(text, room, break_long_words=False, break_on_hyphens=False) or [""]
        return self._line(tag, lines[0]) + "".join(_INDENT + line + "\n" for line in lines[1:])


# -- the text format --------------------------------------------------------------------


def text_line(record: Mapping[str, object], *, head: bool = True) -> str:
    """``HH:MM:SS.mmm LEVEL event key=value …``: every event, for a person at a terminal.

    Fields that are None are left out; long values are cut, except
    :data:`MESSAGE_FIELDS`; a traceback follows on its own lines. Every part
    goes through :func:`agentd.core.safetext.escape_controls`. Without ``head``:
    from the event on (the human format gives the level its own column).
    """
    parts = [escape_controls(str(record.get("event", "")))]
    if head:
        ts = str(record.get("ts", ""))
        level = str(record.get("level", "info")).upper()
        parts[:0] = [ts[11:23] if len(ts) >= 23 else ts, f"{level:<7}"]
    traceback = None
    for key, value in record.items():
        if key in ("ts", "level", "severity", "event") or value is None:
            continue
        if key == "traceback" and isinstance(value, str):
            traceback = value
            continue
        parts.append(f"{escape_controls(key)}={_text_value(value, cut=key not in MESSAGE_FIELDS)}")
    line = " ".join(parts) + "\n"
    if traceback:
        line += "".join("    " + escape_controls(t) + "\n" for t in traceback.rstrip("\n").split("\n"))
    return line


def _text_value(value: object, *, cut: bool) -> str:
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if v not in (0, None, {}, [])}  # a person wants what moved
    if isinstance(value, str) and value and " " not in value and "=" not in value:
        text = value
    else:
        try:
            text = json_bytes(value, default=str).decode()
        except (TypeError, ValueError):
            text = f"<{type(value).__name__} nested too deeply to show>"
    # Controls shown as escapes: a model's tool name or URI cannot act on the terminal or fake a line.
    text = escape_controls(text)
    return _cut(text, TEXT_VALUE_CHARS) if cut else text


# -- small helpers -------------------------------------------------------------------


def _cut(text: str, room: int) -> str:
    return text if len(text) <= room else text[: max(room - 1, 0)] + "…"


def _text(value: object) -> str:
    return "" if value is None else escape_controls(str(value))


def _items(value: object) -> list[object]:
    return list(value) if isinstance(value, list | tuple) else []


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _s(n: int) -> str:
    return "" if n == 1 else "s"


def _usd(cost: float) -> str:
    return f"${cost:.4f}" if cost < 1 else f"${cost:,.2f}"


def _duration(seconds: float) -> str:
    if seconds.is_integer() and 0 < seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}m{rest:02d}s"


def _tool_name(server: object, tool: object) -> str:
    return f"{_text(server)}/{_text(tool)}" if server else _text(tool)


__all__ = [
    "DEFAULT_WIDTH",
    "INTERIM_LINES",
    "INTERIM_READ_CHARS",
    "MESSAGE_FIELDS",
    "TEXT_VALUE_CHARS",
    "HumanView",
    "colours_wanted",
    "terminal_width",
    "text_line",
]
