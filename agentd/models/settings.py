"""Model settings: what a user may ask of the model per call, and which wire APIs can carry it.

:class:`ModelSettings` is provider-neutral and pure: every field is optional
(``None``: the provider's own default). Each provider module maps it onto its
wire format, exactly as the provider documents the field:

==================== ======================== ============================ =============================
setting              Chat Completions         Responses                    Messages (Anthropic, Bedrock,
                     (openai, azure, NAME)    (openai-responses)           Vertex)
==================== ======================== ============================ =============================
temperature          ``temperature``          ``temperature``              ``temperature`` (0-1)
top_p                ``top_p``                ``top_p``                    ``top_p``
max_output_tokens    ``max_completion_tokens`` ``max_output_tokens``       ``max_tokens`` (required;
                                                                           a per-model default)
stop                 ``stop`` (at most 4)     —                            ``stop_sequences``
reasoning_effort     ``reasoning_effort``     ``reasoning.effort``         —
thinking_budget      —                        —                            ``thinking.budget_tokens``
parallel_tool_calls  ``parallel_tool_calls``  ``parallel_tool_calls``      ``tool_choice.disable_parallel_tool_use``
tool_choice          ``tool_choice``          ``tool_choice``              ``tool_choice`` (``any``/``tool``)
prompt_cache         — (automatic)            — (automatic)                ``cache_control`` breakpoints
images               ``image_url`` parts, in  ``input_image`` items in     ``image`` blocks in the
                     a user message after     the ``function_call_output`` ``tool_result``
                     the tool results
extra                merged into the body     merged into the body         merged into the body
==================== ======================== ============================ =============================

``images`` says whether the model takes images from tool results (rfcs/0290);
unset, :func:`images_by_default` decides: yes for the providers' own
endpoints (Anthropic's, OpenAI's but for its text-only models, Bedrock,
Vertex) and the script model, no behind any other base URL, whose model
agentd cannot know (a ``[providers.NAME]`` table or a route may say
``images = true``). A model that does not take images gets a text
placeholder naming each image's type and size.

A setting the chosen API cannot carry is an error (:func:`check_settings`),
found before anything runs; ``extra`` carries anything else verbatim. The
``script:`` model takes every setting and ignores it (it stands in for a real
model in dry runs).

Layers (``rfcs/0165``): the ``[model_settings]`` table, ``AGENTD_MODEL_SETTINGS__KEY``
and the flags give the supervisor's settings; a route's own table is merged
over them key by key (:meth:`ModelSettings.merged`). Keys a route inherited
that its provider cannot carry are left out for that route
(:meth:`ModelSettings.for_api`); keys it set itself must fit.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, get_args

from agentd.core.durations import ascii_number
from agentd.core.jsonvalue import JSONObject, JSONValue

WireApi = Literal["chat", "responses", "messages", "script"]
"""The wire formats agentd speaks: Chat Completions, Responses, Anthropic Messages, and the script model."""

ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]
"""OpenAI's ``reasoning_effort`` values (which ones a model accepts is the model's business)."""

PromptCache = Literal["5m", "1h", "off"]
"""Anthropic prompt caching: breakpoints with the 5-minute or the 1-hour lifetime, or none."""

REASONING_EFFORTS: tuple[str, ...] = get_args(ReasoningEffort)
PROMPT_CACHES: tuple[str, ...] = get_args(PromptCache)

#: Tool-choice words every API understands (``required`` is Anthropic's ``any``).
TOOL_CHOICE_WORDS = ("auto", "none", "required")

#: A tool name as every provider allows it (and as agentd names tools: ``server__tool``).
TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,128}$")

#: Anthropic's smallest thinking budget.
MIN_THINKING_BUDGET = 1024

#: OpenAI accepts at most four stop sequences.
MAX_OPENAI_STOP = 4

#: Body fields agentd itself writes: ``extra`` may not replace them (the
#: transcript, the tools, the model and streaming are agentd's to decide).
RESERVED_BODY_FIELDS = frozenset(
    {"model", "messages", "input", "system", "instructions", "tools", "stream", "anthropic_version"}
)

#: Which settings each API carries (``extra`` goes everywhere).
SUPPORTED: dict[WireApi, frozenset[str]] = {
    "chat": frozenset(
        {
            "temperature",
            "top_p",
            "max_output_tokens",
            "stop",
            "reasoning_effort",
            "parallel_tool_calls",
            "tool_choice",
            "images",
            "extra",
        }
    ),
    "responses": frozenset(
        {
            "temperature",
            "top_p",
            "max_output_tokens",
            "reasoning_effort",
            "parallel_tool_calls",
            "tool_choice",
            "images",
            "extra",
        }
    ),
    "messages": frozenset(
        {
            "temperature",
            "top_p",
            "max_output_tokens",
            "stop",
            "thinking_budget",
            "parallel_tool_calls",
            "tool_choice",
            "prompt_cache",
            "images",
            "extra",
        }
    ),
    "script": frozenset(
        {
            "temperature",
            "top_p",
            "max_output_tokens",
            "stop",
            "reasoning_effort",
            "thinking_budget",
            "parallel_tool_calls",
            "tool_choice",
            "prompt_cache",
            "images",
            "extra",
        }
    ),
}

#: What to use instead, when an API cannot carry a setting.
_INSTEAD: dict[tuple[str, WireApi], str] = {
    ("thinking_budget", "chat"): "use reasoning_effort for OpenAI-style reasoning models",
    ("thinking_budget", "responses"): "use reasoning_effort for OpenAI-style reasoning models",
    ("reasoning_effort", "messages"): "use thinking_budget (extended thinking) for Anthropic models",
    ("stop", "responses"): "the Responses API has no stop sequences; use openai:MODEL (Chat Completions)",
    ("prompt_cache", "chat"): "OpenAI caches prompts automatically; remove prompt_cache",
    ("prompt_cache", "responses"): "OpenAI caches prompts automatically; remove prompt_cache",
}


class SettingError(ValueError):
    """One invalid model setting: ``key`` names it, ``value`` is what was given, the message is the fix."""

    def __init__(self, key: str, value: object, fix: str) -> None:
        super().__init__(fix)
        self.key = key
        self.value = value
        self.fix = fix


@dataclass(frozen=True, slots=True)
class ModelSettings:
    """Per-call model settings (all optional: ``None`` means the provider's default).

    Attributes:
        temperature: sampling temperature (0-2; Anthropic: 0-1).
        top_p: nucleus sampling mass (0-1).
        max_output_tokens: output-token limit of one reply. Anthropic requires
            one: agentd then sends a per-model default (see
            :func:`agentd.models.anthropic.default_max_output_tokens`); the
            OpenAI APIs send nothing (the model's own limit applies).
        stop: stop sequences.
        reasoning_effort: OpenAI reasoning effort (``none`` … ``xhigh``).
        thinking_budget: Anthropic extended thinking, in tokens (≥ 1024); 0 turns it off.
        parallel_tool_calls: whether the model may ask for several tools in one reply.
        tool_choice: ``auto``, ``none``, ``required`` or the name of one tool to force.
        prompt_cache: Anthropic ``cache_control`` breakpoints: ``5m`` (the
            default when unset), ``1h`` (for daemons whose wake-ups are further
            apart than five minutes; writes cost more) or ``off``.
        images: whether the model takes images from tool results (unset:
            :func:`images_by_default`, decided when the model is built).
        extra: raw fields merged into the request body (anything else the provider documents).
    """

    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = None
    stop: tuple[str, ...] | None = None
    reasoning_effort: ReasoningEffort | None = None
    thinking_budget: int | None = None
    parallel_tool_calls: bool | None = None
    tool_choice: str | None = None
    prompt_cache: PromptCache | None = None
    images: bool | None = None
    extra: Mapping[str, JSONValue] = field(default_factory=dict)

    def given(self) -> dict[str, object]:
        """The settings that are set, as plain JSON-ready values (``extra`` only when non-empty)."""
        out: dict[str, object] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "extra":
                if value:
                    out["extra"] = dict(value)
            elif value is not None:
                out[f.name] = list(value) if f.name == "stop" else value
        return out

    def sampling(self) -> JSONObject:
        """``temperature`` and ``top_p`` where set, as every wire format spells them in its body."""
        out: JSONObject = {}
        if self.temperature is not None:
            out["temperature"] = self.temperature
        if self.top_p is not None:
            out["top_p"] = self.top_p
        return out

    def merged(self, over: ModelSettings) -> ModelSettings:
        """These settings with every key ``over`` sets replacing ours (``extra`` merged key by key)."""
        # Values of several types: each is the same field of another ModelSettings (so of its type), for replace(**).
        changes: dict[str, Any] = {}
        for f in fields(over):
            value = getattr(over, f.name)
            if f.name == "extra":
                if value:
                    changes["extra"] = {**self.extra, **value}
            elif value is not None:
                changes[f.name] = value
        return replace(self, **changes)

    def for_api(self, api: WireApi) -> ModelSettings:
        """Only the settings ``api`` can carry (used for inherited settings; see the module docstring)."""
        keep = SUPPORTED[api]
        # Values of several types: each field's empty value (None, or {} for extra), for replace(**).
        cleared: dict[str, Any] = {
            f.name: (None if f.name != "extra" else {}) for f in fields(self) if f.name not in keep
        }
        return replace(self, **cleared)

    @classmethod
    def from_mapping(cls, data: Mapping[str, object]) -> ModelSettings:
        """Parse and validate a settings table (TOML, env JSON, the spawn payload).

        Values are checked on their own (ranges, vocabularies, types);
        :func:`check_settings` then checks them against the API that will carry them.

        Raises:
            SettingError: the first invalid key (unknown keys included).
        """
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            import difflib

            close = difflib.get_close_matches(unknown[0], sorted(known), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise SettingError(
                unknown[0],
                data[unknown[0]],
                f"unknown model setting; {hint}known: {', '.join(sorted(known))} "
                "(put provider fields agentd does not know under extra)",
            )
        # Values of several types: each is what its own parser returned (the field's type), for the constructor's **.
        values: dict[str, Any] = {}
        for key, raw in data.items():
            if raw is None:
                continue
            values[key] = _PARSERS[key](key, raw)
        return cls(**values)


def _number(key: str, raw: object, low: float, high: float, *, low_open: bool = False) -> float:
    given = raw
    if isinstance(raw, str):
        try:  # ASCII digits only: float() would read "١٢" as 12
            raw = ascii_number(raw.strip())
        except ValueError:
            raise SettingError(key, given, f"give a number from {low:g} to {high:g}") from None
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
        raise SettingError(key, given, f"give a number from {low:g} to {high:g}")
    value = float(raw)
    raw = given
    if value > high or value < low or (low_open and value == low):
        bound = f"above {low:g}" if low_open else f"from {low:g}"
        raise SettingError(key, raw, f"give a number {bound} up to {high:g}")
    return value


def _whole(key: str, raw: object, *, minimum: int, what: str) -> int:
    if isinstance(raw, str) and re.fullmatch(r"\s*[+-]?[0-9]+\s*", raw):
        raw = int(raw)
    if isinstance(raw, float) and raw.is_integer():
        raw = int(raw)
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < minimum:
        raise SettingError(key, raw, f"give a whole number ≥ {minimum} ({what})")
    return raw


def _temperature(key: str, raw: object) -> float:
    return _number(key, raw, 0.0, 2.0)


def _top_p(key: str, raw: object) -> float:
    return _number(key, raw, 0.0, 1.0, low_open=True)


def _max_output(key: str, raw: object) -> int:
    return _whole(key, raw, minimum=1, what="tokens per reply")


def _thinking(key: str, raw: object) -> int:
    value = _whole(key, raw, minimum=0, what=f"thinking tokens; at least {MIN_THINKING_BUDGET}, or 0 for off")
    if 0 < value < MIN_THINKING_BUDGET:
        raise SettingError(
            key,
            raw,
            f"Anthropic's smallest thinking budget is {MIN_THINKING_BUDGET} tokens; raise it, or 0 for off",
        )
    return value


def _stop(key: str, raw: object) -> tuple[str, ...]:
    items = [raw] if isinstance(raw, str) else raw
    if not isinstance(items, list | tuple) or not items:
        raise SettingError(key, raw, 'give a stop sequence or a list of them, e.g. ["END"]')
    for item in items:
        if not isinstance(item, str) or not item:
            raise SettingError(key, raw, "each stop sequence is non-empty text")
    return tuple(items)


def _choice(vocab: tuple[str, ...]) -> Callable[[str, object], str]:
    def parse(key: str, raw: object) -> str:
        if not isinstance(raw, str) or raw.strip().lower() not in vocab:
            raise SettingError(key, raw, f"choose one of {', '.join(vocab)}")
        return raw.strip().lower()

    return parse


def _bool(key: str, raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lower() in ("true", "false", "1", "0", "yes", "no"):
        return raw.strip().lower() in ("true", "1", "yes")
    raise SettingError(key, raw, "write true or false")


def _tool_choice(key: str, raw: object) -> str:
    if isinstance(raw, str) and raw.strip().lower() in TOOL_CHOICE_WORDS:
        return raw.strip().lower()
    if isinstance(raw, str) and TOOL_NAME_RE.fullmatch(raw):
        return raw
    raise SettingError(
        key, raw, "choose auto, none, required, or the name of one tool to force (e.g. memo__memo_get)"
    )


def _extra(key: str, raw: object) -> JSONObject:
    if not isinstance(raw, Mapping):
        raise SettingError(key, raw, "write a table of raw request fields, e.g. extra = { seed = 7 }")
    taken = sorted(RESERVED_BODY_FIELDS & set(raw))
    if taken:
        raise SettingError(
            f"{key}.{taken[0]}",
            raw[taken[0]],
            f"agentd writes {taken[0]!r} itself; remove it from extra",
        )
    return {str(k): v for k, v in raw.items()}


_PARSERS: dict[str, Callable[[str, object], object]] = {
    "temperature": _temperature,
    "top_p": _top_p,
    "max_output_tokens": _max_output,
    "stop": _stop,
    "reasoning_effort": _choice(REASONING_EFFORTS),
    "thinking_budget": _thinking,
    "parallel_tool_calls": _bool,
    "tool_choice": _tool_choice,
    "prompt_cache": _choice(PROMPT_CACHES),
    "images": _bool,
    "extra": _extra,
}


#: Models on OpenAI's own API that take no images (name prefixes, lower case):
#: sending them one fails the whole request.
TEXT_ONLY_OPENAI_MODELS: tuple[str, ...] = (
    "gpt-3.5",
    "gpt-4-0",
    "gpt-4-32k",
    "o1-mini",
    "o1-preview",
    "o3-mini",
    "davinci",
    "babbage",
)


def images_by_default(api: WireApi, *, own_endpoint: bool, model: str) -> bool:
    """Whether a model takes images from tool results when ``images`` is not set (rfcs/0290).

    Args:
        api: the wire API the model is spoken to over.
        own_endpoint: the request goes to the provider's own public endpoint
            (Anthropic's, OpenAI's, Bedrock's or Vertex's), so the model is the
            provider's own and its name says what it is.
        model: the model name.

    Every Claude model since Claude 3 takes images; OpenAI's current models
    do, but for :data:`TEXT_ONLY_OPENAI_MODELS`. Behind any other base URL
    (vLLM, llama.cpp, Ollama, a gateway) the model could be anything, and a
    text-only one fails the request: no, unless configured.
    """
    if api == "script":
        return True
    if not own_endpoint:
        return False
    if api == "messages":
        return True
    name = model.lower()
    return not (name == "gpt-4" or name.startswith(TEXT_ONLY_OPENAI_MODELS))


def check_settings(settings: ModelSettings, api: WireApi, *, model: str) -> list[SettingError]:
    """Every reason ``settings`` cannot go to a model spoken to over ``api`` (empty: they fit).

    Besides which keys the API carries: Anthropic's temperature range (0-1),
    extended thinking's rules (a budget below the output limit; no
    temperature, ``top_p`` of at least 0.95, no forced tool), and OpenAI's
    limit of four stop sequences.
    """
    problems: list[SettingError] = []
    for key, value in settings.given().items():
        if key not in SUPPORTED[api]:
            instead = _INSTEAD.get((key, api), "remove it, or pass the provider's own field under extra")
            problems.append(SettingError(key, value, f"{model} cannot take {key}: {instead}"))
    if api == "chat" and settings.stop is not None and len(settings.stop) > MAX_OPENAI_STOP:
        problems.append(
            SettingError(
                "stop", list(settings.stop), f"OpenAI takes at most {MAX_OPENAI_STOP} stop sequences"
            )
        )
    if api == "messages":
        if settings.temperature is not None and settings.temperature > 1:
            problems.append(
                SettingError("temperature", settings.temperature, f"{model} takes a temperature from 0 to 1")
            )
        budget = settings.thinking_budget or 0
        if budget:
            if settings.max_output_tokens is not None and settings.max_output_tokens <= budget:
                problems.append(
                    SettingError(
                        "max_output_tokens",
                        settings.max_output_tokens,
                        f"with thinking_budget = {budget} the output limit must be larger (thinking counts "
                        "toward it); raise max_output_tokens or lower thinking_budget",
                    )
                )
            if settings.temperature is not None:
                problems.append(
                    SettingError(
                        "temperature",
                        settings.temperature,
                        "extended thinking (thinking_budget) does not take a temperature; remove one of them",
                    )
                )
            if settings.top_p is not None and settings.top_p < 0.95:
                problems.append(
                    SettingError(
                        "top_p",
                        settings.top_p,
                        "with extended thinking top_p must be from 0.95 to 1, or unset",
                    )
                )
            if settings.tool_choice is not None and settings.tool_choice not in ("auto", "none"):
                problems.append(
                    SettingError(
                        "tool_choice",
                        settings.tool_choice,
                        "with extended thinking a tool cannot be forced; use auto or none",
                    )
                )
    return problems
