"""``script:FILE``: a deterministic model that plays a JSON file of assistant turns.

The offline default for demos, dry runs and tests: no network, no key, the
same answers every run. The format (also in ``rfcs/0022-script-model-format.md``)::

    {
      "description": "optional free text",
      "turns": [
        {"text": "Saving a memo about: {instruction}",
         "tool_calls": [{"name": "memo__memo_set",
                         "arguments": {"key": "task", "value": "{instruction}"}}],
         "usage": {"input_tokens": 120, "output_tokens": 30},
         "latency_ms": 250},
        {"text": "The memo tool said: {last_tool_result}"},
        {"tool_calls": [{"name": "memo__memo_get", "invalid_arguments": "{not json"}]},
        {"text": "cut short", "stop": "max_tokens"},
        {"refusal": "I can't help with that."}
      ],
      "then": "no_reply"
    }

A turn (every key optional, unknown keys are errors):

* ``text``: the assistant text. ``{instruction}`` (the first user message),
  ``{input}`` (the latest user message) and ``{last_tool_result}`` (the
  content of the most recent tool result, each image it carried written as
  ``[image TYPE, N bytes]``: what a model that takes images was shown) are
  replaced; any other braces are literal. The same placeholders are replaced in string values inside
  ``arguments``, so real data flows through a demo.
* ``tool_calls``: a list of ``{"name", "arguments"?: object, "id"?: str,
  "invalid_arguments"?: str}``. ``invalid_arguments`` is sent as the raw
  argument text instead of ``arguments`` (to exercise malformed tool-call
  JSON); a turn-level ``invalid_arguments`` applies to each of its calls
  that sets neither. Ids default to ``script-<call>-<k>`` (unique per model).
* ``refusal``: the turn is a refusal with this message (no text or tool calls).
* ``stop``: ``"end"`` (default) or ``"max_tokens"`` (a truncated answer);
  not with tool calls or a refusal.
* ``usage``: ``{"input_tokens": int, "output_tokens": int}``, optionally with
  ``cached_input_tokens`` and ``cache_creation_input_tokens`` (parts of
  ``input_tokens``); otherwise input and output are estimated as
  ``ceil(characters / 4)`` of what was sent and answered.
* ``cost_usd``: what the turn "cost" in US dollars (for dry runs of
  ``--budget-usd``); otherwise the cost is unknown.
* ``latency_ms``: wait this long before answering (a stand-in for model latency).

``then`` says what happens once the turns are used up: ``"no_reply"``
(default) answers ``NO_REPLY`` for every further call (a warm session that
gets more deliveries stays quiet), ``"repeat"`` starts again at the first
turn, ``"stop"`` answers an empty end turn.

A model instance keeps its position across calls: a warm session continues
through the script; every new model (every new child) starts at turn 1.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeGuard, get_args

import trio

from agentd.core.errors import ConfigError, NotAFile
from agentd.core.jsonvalue import JSONObject, JSONValue, is_object
from agentd.models._http import Sleep
from agentd.models.base import (
    Message,
    ModelReply,
    Prompt,
    StopReason,
    ToolCall,
    Usage,
    estimate_input_tokens,
    estimate_tokens,
)
from agentd.state.files import read_regular_file

ThenMode = Literal["no_reply", "repeat", "stop"]
"""What a script does after its last turn."""

THEN_MODES: tuple[ThenMode, ...] = get_args(ThenMode)

#: The reply of an exhausted ``no_reply`` script (agentd's "publish nothing").
NO_REPLY = "NO_REPLY"

#: Scripts are hand-written; anything bigger is a mistake (a log, a binary).
MAX_SCRIPT_BYTES = 8 * 1024 * 1024

_TOP_KEYS = frozenset({"description", "turns", "then"})
_TURN_KEYS = frozenset(
    {"text", "tool_calls", "refusal", "stop", "usage", "cost_usd", "latency_ms", "invalid_arguments"}
)
_CALL_KEYS = frozenset({"name", "arguments", "id", "invalid_arguments"})
_USAGE_KEYS = frozenset(
    {"input_tokens", "output_tokens", "cached_input_tokens", "cache_creation_input_tokens"}
)
_TURN_STOPS: dict[str, Literal["end", "max_tokens"]] = {"end": "end", "max_tokens": "max_tokens"}
_PLACEHOLDER = re.compile(r"\{(instruction|input|last_tool_result)\}")
_FORMAT_HINT = "see the format in rfcs/0022-script-model-format.md or examples/scripts/"


@dataclass(frozen=True, slots=True)
class ScriptToolCall:
    """One scripted tool call (placeholders not yet replaced)."""

    name: str
    arguments: JSONObject
    id: str | None = None
    invalid_arguments: str | None = None


@dataclass(frozen=True, slots=True)
class ScriptTurn:
    """One scripted assistant turn (placeholders not yet replaced)."""

    text: str = ""
    tool_calls: tuple[ScriptToolCall, ...] = ()
    refusal: str | None = None
    stop: Literal["end", "max_tokens"] = "end"
    usage: Usage | None = None
    latency_ms: float = 0.0
    cost_usd: float | None = None


@dataclass(frozen=True, slots=True)
class Script:
    """A parsed, valid script file."""

    source: str
    turns: tuple[ScriptTurn, ...]
    then: ThenMode = "no_reply"


class _Invalid(Exception):
    """A shape problem; ``where`` is like ``turn 2 (turns[1]).tool_calls[0]``."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")


def load_script(path: str | Path, *, spec: str | None = None) -> Script:
    """Read and validate a script file (no network, no side effects).

    Args:
        path: the file (``~`` is expanded; relative paths are relative to the working directory).
        spec: the model setting to name in errors (default ``script:<path>``).

    Raises:
        ConfigError: the file is missing, unreadable, not JSON, or not a valid script;
            the message names the file, the line or turn, and the fix.
    """
    spec = spec if spec is not None else f"script:{path}"
    p = Path(path).expanduser()
    try:
        # A regular file only: a FIFO would block on a writer, a device never end (rfcs/0275).
        raw = read_regular_file(p, MAX_SCRIPT_BYTES)
        if len(raw) > MAX_SCRIPT_BYTES:
            raise ConfigError(
                "model",
                spec,
                f"{str(p)!r} is {p.stat().st_size} bytes, over the {MAX_SCRIPT_BYTES}-byte limit for scripts",
            )
        text = raw.decode("utf-8")
    except NotAFile as exc:
        fix = "name a script file (.json)"
        raise ConfigError("model", spec, f"{str(p)!r} {exc.problem}; {fix}") from None
    except FileNotFoundError:
        raise ConfigError(
            "model", spec, f"script file {str(p)!r} does not exist; fix the path ({_FORMAT_HINT})"
        ) from None
    except UnicodeDecodeError as exc:
        raise ConfigError("model", spec, f"script file {str(p)!r} is not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise ConfigError(
            "model",
            spec,
            f"cannot read script file {str(p)!r} ({exc.strerror or exc}); fix the path or its permissions",
        ) from None
    try:
        data: JSONValue = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            "model",
            spec,
            f"script file {str(p)!r} line {exc.lineno} column {exc.colno}: invalid JSON ({exc.msg}); fix the syntax",
        ) from None
    except RecursionError:
        raise ConfigError("model", spec, f"script file {str(p)!r} nests JSON too deeply") from None
    return parse_script(data, source=str(p), spec=spec)


def parse_script(data: object, *, source: str, spec: str) -> Script:
    """Validate decoded JSON as a script.

    Raises:
        ConfigError: the shape is wrong; the message names ``source``, the turn and the fix.
    """
    try:
        return _parse(data, source)
    except _Invalid as exc:
        raise ConfigError("model", spec, f"script file {source!r} {exc}; {_FORMAT_HINT}") from None


def _parse(data: object, source: str) -> Script:
    if not is_object(data):
        raise _Invalid("top level", f'must be an object like {{"turns": [...]}}, not {_kind(data)}')
    _no_unknown_keys(data, _TOP_KEYS, "top level")
    if "description" in data and not isinstance(data["description"], str):
        raise _Invalid("description", f"must be a string, not {_kind(data['description'])}")
    if "turns" not in data:
        raise _Invalid("top level", 'has no "turns" list')
    raw_turns = data["turns"]
    if not isinstance(raw_turns, list):
        raise _Invalid("turns", f"must be a list of turn objects, not {_kind(raw_turns)}")
    then = data.get("then", "no_reply")
    if then not in THEN_MODES:
        raise _Invalid("then", f"is {then!r}; use one of {', '.join(repr(m) for m in THEN_MODES)}")
    if then == "repeat" and not raw_turns:
        raise _Invalid("then", '"repeat" needs at least one turn')
    turns = tuple(_parse_turn(t, f"turn {i + 1} (turns[{i}])") for i, t in enumerate(raw_turns))
    return Script(source=source, turns=turns, then=then)


def _parse_turn(raw: JSONValue, where: str) -> ScriptTurn:
    if not is_object(raw):
        raise _Invalid(where, f"must be an object, not {_kind(raw)}")
    _no_unknown_keys(raw, _TURN_KEYS, where)
    text = _opt_str(raw, "text", where) or ""
    refusal = _opt_str(raw, "refusal", where)
    turn_invalid = _opt_str(raw, "invalid_arguments", where)
    raw_calls = raw.get("tool_calls", [])
    if not isinstance(raw_calls, list):
        raise _Invalid(f"{where}.tool_calls", f"must be a list, not {_kind(raw_calls)}")
    calls = tuple(_parse_call(c, f"{where}.tool_calls[{k}]", turn_invalid) for k, c in enumerate(raw_calls))
    if turn_invalid is not None and not calls:
        raise _Invalid(where, '"invalid_arguments" needs at least one tool call in the same turn')
    if refusal is not None and (text or calls):
        raise _Invalid(
            where, 'a "refusal" turn cannot also have "text" or "tool_calls"; split it into two turns'
        )
    given_stop = raw.get("stop", "end")
    stop = _TURN_STOPS.get(given_stop) if isinstance(given_stop, str) else None
    if stop is None:
        raise _Invalid(f"{where}.stop", f"is {given_stop!r}; use 'end' or 'max_tokens'")
    if stop != "end" and (calls or refusal is not None):
        raise _Invalid(f"{where}.stop", '"max_tokens" applies only to a text turn')
    usage = None
    if "usage" in raw:
        usage = _parse_usage(raw["usage"], f"{where}.usage")
    latency = raw.get("latency_ms", 0)
    if not _is_number(latency) or not math.isfinite(latency) or latency < 0:
        raise _Invalid(f"{where}.latency_ms", f"must be a number of milliseconds >= 0, not {latency!r}")
    cost = raw.get("cost_usd")
    if cost is not None and (not _is_number(cost) or not math.isfinite(cost) or cost < 0):
        raise _Invalid(f"{where}.cost_usd", f"must be a number of US dollars >= 0, not {cost!r}")
    return ScriptTurn(
        text=text,
        tool_calls=calls,
        refusal=refusal,
        stop=stop,
        usage=usage,
        latency_ms=float(latency),
        cost_usd=None if cost is None else float(cost),
    )


def _parse_call(raw: JSONValue, where: str, turn_invalid: str | None) -> ScriptToolCall:
    if not is_object(raw):
        raise _Invalid(
            where, f'must be an object like {{"name": ..., "arguments": {{...}}}}, not {_kind(raw)}'
        )
    _no_unknown_keys(raw, _CALL_KEYS, where)
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise _Invalid(where, f'needs a "name" (a non-empty string), got {name!r}')
    arguments = raw.get("arguments", {})
    if not is_object(arguments):
        raise _Invalid(f"{where}.arguments", f"must be an object, not {_kind(arguments)}")
    call_id = _opt_str(raw, "id", where)
    if call_id == "":
        raise _Invalid(f"{where}.id", "must not be empty")
    invalid = _opt_str(raw, "invalid_arguments", where)
    if invalid is not None and "arguments" in raw:
        raise _Invalid(where, 'give "arguments" or "invalid_arguments", not both')
    if invalid is None and "arguments" not in raw:
        invalid = turn_invalid
    return ScriptToolCall(name=name, arguments=arguments, id=call_id, invalid_arguments=invalid)


def _parse_usage(raw: JSONValue, where: str) -> Usage:
    if not is_object(raw):
        raise _Invalid(where, f'must be {{"input_tokens": int, "output_tokens": int}}, not {_kind(raw)}')
    _no_unknown_keys(raw, _USAGE_KEYS, where)
    values = []
    for key in ("input_tokens", "output_tokens", "cached_input_tokens", "cache_creation_input_tokens"):
        v = raw.get(key, 0)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise _Invalid(f"{where}.{key}", f"must be an integer >= 0, not {v!r}")
        values.append(v)
    if values[2] + values[3] > values[0]:
        raise _Invalid(
            where,
            "cached_input_tokens + cache_creation_input_tokens are part of input_tokens and cannot exceed it",
        )
    return Usage(*values)


def _no_unknown_keys(obj: JSONObject, allowed: frozenset[str], where: str) -> None:
    unknown = sorted(str(k) for k in obj if k not in allowed)
    if unknown:
        raise _Invalid(where, f"unknown key {unknown[0]!r}; allowed: {', '.join(sorted(allowed))}")


def _opt_str(obj: JSONObject, key: str, where: str) -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise _Invalid(f"{where}.{key}", f"must be a string, not {_kind(value)}")
    return value


def _is_number(v: object) -> TypeGuard[float]:
    """A JSON number (an ``int`` or a ``float``, not a boolean)."""
    return isinstance(v, int | float) and not isinstance(v, bool)


def _kind(value: object) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def _fill(text: str, fields: dict[str, str]) -> str:
    """Replace the placeholders in ``text`` (one pass, no re-expansion)."""
    return _PLACEHOLDER.sub(lambda m: fields[m.group(1)], text)


def _fill_object(obj: JSONObject, fields: dict[str, str]) -> JSONObject:
    """Replace the placeholders in every string inside ``obj``."""
    return {k: _substitute(v, fields) for k, v in obj.items()}


def _substitute(value: JSONValue, fields: dict[str, str]) -> JSONValue:
    """Replace the placeholders in every string inside ``value``."""
    if isinstance(value, str):
        return _fill(value, fields)
    if isinstance(value, dict):
        return _fill_object(value, fields)
    if isinstance(value, list):
        return [_substitute(v, fields) for v in value]
    return value


def placeholder_values(messages: Sequence[Message]) -> dict[str, str]:
    """The placeholder values for a transcript (empty strings when absent)."""
    users = [m.content for m in messages if m.role == "user"]
    tools = [_shown(m) for m in messages if m.role == "tool"]
    return {
        "instruction": users[0] if users else "",
        "input": users[-1] if users else "",
        "last_tool_result": tools[-1] if tools else "",
    }


def _shown(m: Message) -> str:
    """A tool result as the script records it: its text, then one ``[image TYPE, N bytes]`` line per image."""
    lines = [m.content] if m.content else []
    lines += [f"[image {image.mime_type}, {image.size} bytes]" for image in m.images]
    return "\n".join(lines)


class ScriptModel:
    """Plays a :class:`Script`, one turn per :meth:`complete` call.

    Args:
        script: the parsed script (see :func:`load_script`).
        name: the model name to report (default: the script's source path).
        sleep: awaited for a turn's ``latency_ms`` (``trio.sleep``).
        images: whether it takes images from tool results (the ``images`` setting;
            default yes: ``{last_tool_result}`` then names what it was shown).
    """

    provider = "script"
    price_provider = None

    def __init__(
        self, script: Script, *, name: str | None = None, sleep: Sleep = trio.sleep, images: bool = True
    ) -> None:
        self.script = script
        self.takes_images = images
        self.name = name if name is not None else script.source
        self._sleep = sleep
        self._next = 0
        self._calls = 0

    def __repr__(self) -> str:
        return f"ScriptModel({self.name!r}, next_turn={self._next + 1}, of={len(self.script.turns)})"

    @property
    def position(self) -> int:
        """Index of the turn the next call plays (``len(turns)`` once exhausted)."""
        return self._next

    async def complete(self, prompt: Prompt) -> ModelReply:
        """The next scripted turn, with placeholders filled from the prompt's messages."""
        turns = self.script.turns
        if self._next >= len(turns) and self.script.then == "repeat":
            self._next = 0
        turn = turns[self._next] if self._next < len(turns) else None
        if turn is not None and turn.latency_ms > 0:
            # Before advancing: a call cancelled during its latency replays the same turn.
            await self._sleep(turn.latency_ms / 1000.0)
        self._calls += 1
        input_estimate = estimate_input_tokens(prompt)
        if turn is None:
            text = NO_REPLY if self.script.then == "no_reply" else ""
            return ModelReply(
                text=text, tool_calls=[], stop="end", usage=Usage(input_estimate, estimate_tokens(text))
            )
        self._next += 1
        fields = placeholder_values(prompt.messages)
        text = _fill(turn.text, fields)
        refusal = _fill(turn.refusal, fields) if turn.refusal is not None else None
        calls = [self._tool_call(k, c, fields) for k, c in enumerate(turn.tool_calls)]
        stop: StopReason = "refusal" if refusal is not None else ("tool_use" if calls else turn.stop)
        usage = turn.usage
        if usage is None:
            out = text + (refusal or "") + "".join(c.name + c.raw_arguments for c in calls)
            usage = Usage(input_estimate, estimate_tokens(out))
        return ModelReply(
            text=text, tool_calls=calls, stop=stop, usage=usage, refusal=refusal, cost_usd=turn.cost_usd
        )

    def _tool_call(self, k: int, call: ScriptToolCall, fields: dict[str, str]) -> ToolCall:
        call_id = call.id or f"script-{self._calls}-{k}"
        if call.invalid_arguments is not None:
            return ToolCall.from_raw(call_id, call.name, call.invalid_arguments)
        arguments = _fill_object(call.arguments, fields)
        return ToolCall(id=call_id, name=call.name, arguments=arguments, raw_arguments=json.dumps(arguments))

    async def aclose(self) -> None:
        """Nothing to release."""
