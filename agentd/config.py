"""agentd's settings: four layers, one validated, frozen :class:`Settings`.

Layers, lowest to highest precedence::

    built-in defaults  <  TOML file (--config FILE)  <  environment (AGENTD_…)  <  flags

Each scalar setting is taken from the highest layer that sets it; the
``[watches]`` table merges key by key. MCP servers are the exception: they are
the *union* of every source (``[servers.NAME]`` tables, ``mcp_config`` /
``--mcp-config`` / ``AGENTD_MCP_CONFIG`` files in the ``mcpServers`` JSON
format, ``AGENTD_SERVERS``, ``--mcp-stdio``, ``--mcp-http``) and a name defined
twice is an error that names both sources (see ``rfcs/0031``).

Everything is validated before anything happens: no process is started, no
file written, no socket opened. Reading files the user named (the config
file, ``@FILE`` instructions, ``mcpServers`` JSON) is the only I/O. Every
problem becomes a :class:`~agentd.errors.ConfigError` whose ``setting`` is
spelled the way the user wrote it (``--max-steps``, ``AGENTD_MAX_STEPS`` or
``agentd.toml: max_steps``); several problems are raised together as
:class:`ConfigErrors`, one line each.

Entry points: :func:`load_settings` (used by the CLI and by tests) and
:func:`effective_config` (the redacted view ``agentd check`` prints).
"""

from __future__ import annotations

import contextvars
import difflib
import json
import os
import re
import shlex
import shutil
import sys
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    computed_field,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)
from pydantic_settings.sources.utils import parse_env_vars

from agentd.durations import parse_duration, parse_size
from agentd.errors import ConfigError
from agentd.redact import REDACTED, redact, secret_values, secrets_in

__all__ = [
    "DEFAULT_MAX_READ_BYTES",
    "SERVER_NAME_RE",
    "ConfigErrors",
    "Deprecation",
    "Disposition",
    "Extract",
    "LogFormat",
    "LogLevel",
    "Mode",
    "ModelSettingsConfig",
    "OutputFormat",
    "Overflow",
    "ProviderSpec",
    "RouteConfig",
    "ServerSpec",
    "SessionKind",
    "Settings",
    "SubscriptionSpec",
    "Transport",
    "WatchesConfig",
    "deprecations",
    "effective_config",
    "load_settings",
    "missing_server_commands",
    "parse_mcp_servers_json",
    "parse_route_spec",
    "parse_subscription",
    "route_model_settings",
    "server_secrets",
]

Mode = Literal["once", "loop", "reactive", "schedule"]
"""How the supervisor drives the root agent (ARCHITECTURE.md decision 3)."""
SessionKind = Literal["fresh", "warm"]
"""Whether each loop shift / timer fire starts a fresh root or continues a warm one."""
OutputFormat = Literal["text", "json", "stream-json"]
"""The result on stdout: text, one JSON object, or NDJSON of every step (``stream-json``)."""
LogLevel = Literal["debug", "info", "warning", "error"]
"""The least telemetry level written on stderr (``--log-level``)."""
LogFormat = Literal["auto", "json", "text"]
"""Telemetry lines: NDJSON, readable text, or text on a terminal and NDJSON otherwise (``auto``)."""
Disposition = Literal["spawn", "continue"]
"""A route's action: start a fresh root per event, or deliver into one warm session."""
Overflow = Literal["coalesce", "drop_oldest", "drop_newest", "block"]
"""What a full route queue does with one more event."""
Extract = Literal["auto", "state", "event-log"]
"""How a watch stage turns a re-read resource into events."""
Transport = Literal["stdio", "http"]
Layer = Literal["default", "file", "env", "flag"]

#: Server names prefix tool names (``server__tool``); provider tool-name rules
#: (``^[a-zA-Z0-9_-]{1,64}$``) leave 32 characters for the server half.
SERVER_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
_SESSION_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_ADDR_RE = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9.-]*)):(?P<port>[0-9]{1,5})$")
_ENV_REF_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")

#: Default deadline of one model call, retries included (``--model-timeout``):
#: see ``agentd.models._http.DEFAULT_MODEL_TIMEOUT_S`` for why five minutes.
DEFAULT_MODEL_TIMEOUT = 300.0
#: Default cap on model calls in one turn of one agent (``--max-turn-steps``).
#: Real tasks take a handful to a few dozen tool rounds; a hundred stops a
#: model that calls tools forever within minutes instead of never.
DEFAULT_MAX_TURN_STEPS = 100
#: Default cap on one resource read: large enough for any sane state
#: document, small enough that a runaway resource cannot balloon memory.
DEFAULT_MAX_READ_BYTES = 8 * 1024 * 1024
#: Largest ``@FILE`` instruction or system prompt: far beyond any useful
#: prompt, and it stops ``@/dev/zero`` from eating memory.
MAX_TEXT_FILE_BYTES = 1024 * 1024
#: Spawn routes run at most this many roots at once unless told otherwise
#: (the router's backpressure knob).
DEFAULT_MAX_INFLIGHT = 4
#: Route debounce when none is given: collapses a burst of pushes into one wake.
DEFAULT_ROUTE_DEBOUNCE = 0.25
MODEL_PREFIXES = ("openai", "openai-responses", "anthropic", "azure", "bedrock", "vertex", "script")
MODEL_FORMS = (
    "openai:MODEL (e.g. openai:gpt-4o-mini), anthropic:MODEL (e.g. anthropic:claude-sonnet-4-5), "
    "openai-responses:MODEL, azure:DEPLOYMENT, bedrock:MODEL, vertex:MODEL, NAME:MODEL for a "
    "[providers.NAME] endpoint, or script:FILE"
)
#: Flags that set one model setting each (``--temperature`` → ``model_settings.temperature``).
MODEL_SETTING_FLAGS = ("temperature", "top_p", "max_output_tokens", "reasoning_effort", "thinking_budget")
#: Old names of settings, still accepted for one release with a warning: old → new.
DEPRECATED_SETTINGS = {"max_tokens": "budget_tokens", "max_steps": "budget_steps"}
ROUTE_FORMS = (
    "MATCH=spawn[:MAX_INFLIGHT] or MATCH=continue[:SESSION], then optional ,KEY=VALUE settings "
    "(e.g. 'file:///inbox/*=spawn:2,debounce=50ms,overflow=block'); MATCH @timer binds the timer"
)

_FLAG_NAMES: dict[str, str] = {
    "subscriptions": "--subscribe",
    "routes": "--route",
    "servers": "--mcp-stdio/--mcp-http",
}


class ConfigErrors(ConfigError):
    """Several invalid settings, reported together (one line each).

    ``setting``/``value``/``fix`` are those of the first problem; ``problems``
    holds all of them in the order found.
    """

    def __init__(self, problems: Sequence[ConfigError]) -> None:
        first = problems[0]
        super().__init__(first.setting, first.value, first.fix)
        self.problems: tuple[ConfigError, ...] = tuple(problems)
        self.args = ("\n".join(str(p) for p in self.problems),)

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.problems)


def _raise_all(problems: Sequence[ConfigError]) -> None:
    if len(problems) == 1:
        raise problems[0]
    if problems:
        raise ConfigErrors(problems)


def _problems_of(exc: ConfigError) -> tuple[ConfigError, ...]:
    return exc.problems if isinstance(exc, ConfigErrors) else (exc,)


@dataclass
class _Problem:
    """One problem found inside validation, spelled later by the layer it came from."""

    loc: tuple[str | int, ...]
    value: object
    fix: str


class _Problems(ValueError):
    """Carries cross-field problems out through pydantic's ValidationError."""

    def __init__(self, problems: list[_Problem]) -> None:
        super().__init__("; ".join(p.fix for p in problems))
        self.problems = problems


# --------------------------------------------------------------------------- value parsers


def _duration(value: object, *, positive: bool = False) -> float:
    seconds = parse_duration(value)  # type: ignore[arg-type]  # it rejects non-str/num itself
    if positive and seconds == 0:
        raise ValueError("must be greater than zero; write e.g. 250ms, 30s, 5m or 1h")
    return seconds


def _integer(value: object, *, minimum: int) -> int:
    if isinstance(value, bool):
        raise ValueError(f"must be a whole number ≥ {minimum}, not a boolean")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and re.fullmatch(r"\s*[+-]?[0-9]+\s*", value):
        value = int(value)
    if not isinstance(value, int):
        raise ValueError(f"must be a whole number ≥ {minimum}")
    if value < minimum:
        raise ValueError(f"must be a whole number ≥ {minimum}")
    return value


def _expand_user(path: Path) -> Path:
    """``~`` and ``~user`` expanded; a path naming an unknown user stays as written."""
    try:
        return path.expanduser()
    except RuntimeError:
        return path


def _read_at_file(value: str, what: str) -> str:
    """``@FILE`` reads the file; ``@@text`` is the literal ``@text``; anything else is itself."""
    if value.startswith("@@"):
        return value[1:]
    if not value.startswith("@"):
        return value
    if "\x00" in value:
        raise ValueError("a file path cannot contain a NUL character")
    path = _expand_user(Path(value[1:]))
    try:
        with path.open("rb") as f:
            data = f.read(MAX_TEXT_FILE_BYTES + 1)
        if len(data) > MAX_TEXT_FILE_BYTES:
            raise ValueError(
                f"the {what} file {str(path)!r} is larger than {MAX_TEXT_FILE_BYTES} bytes; shorten it"
            )
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise ValueError(
            f"cannot read the {what} file {str(path)!r} ({reason}); fix the path, "
            f"or write @@ to start literal text with @"
        ) from None


def _check_addr(value: str) -> str:
    m = _ADDR_RE.fullmatch(value.strip())
    if m is None or int(m.group("port")) > 65535:
        raise ValueError("write HOST:PORT, e.g. 0.0.0.0:8080, 127.0.0.1:9090 or [::1]:9090 (port 0-65535)")
    return value.strip()


def _cron_error(expr: str) -> str | None:
    """The reason ``expr`` is not a valid cron expression, or None.

    Uses :func:`agentd.triggers.timer.validate_cron` when that module exists
    (it is the authority: the same code computes next fires), else croniter
    with a five-field check.
    """
    try:
        from agentd.triggers.timer import validate_cron
    except ImportError as exc:
        if exc.name != "agentd.triggers.timer":
            raise
    else:
        return validate_cron(expr)
    from croniter import croniter

    forms = "write 5 UTC fields: minute hour day-of-month month day-of-week (e.g. '*/15 * * * *')"
    text = expr.strip()
    if text.startswith("@"):
        return (
            None
            if croniter.is_valid(text)
            else f"unknown cron alias; use @hourly, @daily, @weekly or {forms}"
        )
    fields = text.split()
    if len(fields) != 5:
        return f"a cron expression has 5 fields, this one has {len(fields)}; {forms}"
    if not croniter.is_valid(text):
        return f"a field is out of range or malformed; {forms}"
    return None


def _model_error(
    spec: str, env: Mapping[str, str], providers: Mapping[str, ProviderSpec] | None = None
) -> ConfigError | None:
    prefix, sep, rest = spec.partition(":")
    if not sep or not rest.strip():
        return ConfigError("model", spec, f"write {MODEL_FORMS}")
    if prefix not in MODEL_PREFIXES and prefix not in (providers or {}):
        from agentd.models import parse_model_spec

        try:  # its message suggests the closest provider name
            parse_model_spec(spec, _provider_configs(providers or {}))
        except ConfigError as exc:
            return exc
        return ConfigError("model", spec, f"write {MODEL_FORMS}")
    if prefix == "script" and not _expand_user(Path(rest)).is_file():
        return ConfigError(
            "model", spec, f"the script file {rest!r} does not exist; give the path of a model script"
        )
    try:
        from agentd.models import validate_model_spec
    except ImportError as exc:
        if exc.name != "agentd.models":
            raise
        return None
    try:
        validate_model_spec(spec, env=env, providers=_provider_configs(providers or {}))
    except ConfigError as exc:
        return exc
    return None


def _provider_configs(providers: Mapping[str, ProviderSpec]) -> dict[str, Any]:
    """The ``[providers.NAME]`` tables as the model factory takes them."""
    from agentd.models import ProviderConfig

    return {
        name: ProviderConfig(
            name=name,
            base_url=p.base_url,
            api=p.api,
            api_key_env=p.api_key_env,
            headers=dict(p.headers),
            prices=p.prices,
        )
        for name, p in providers.items()
    }


# --------------------------------------------------------------------------- models


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ServerSpec(_Frozen):
    """One upstream MCP server: a stdio command or a Streamable HTTP URL (exactly one)."""

    name: str
    """Prefixes the server's tools as ``name__tool``; ``^[A-Za-z0-9_-]{1,32}$``."""
    command: str | None = None
    """Executable for a stdio server (looked up on PATH)."""
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict, repr=False)
    """Extra environment for the server process (may hold credentials: not in repr)."""
    cwd: str | None = None
    url: str | None = None
    """``http(s)://`` endpoint of a Streamable HTTP server."""
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    """HTTP headers sent with every request (may hold credentials: not in repr)."""
    required: bool = False
    """A required server that cannot start or reconnect ends the process (exit 6)."""
    source: str = ""
    """Where this server was defined (for messages and ``agentd check``)."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def transport(self) -> Transport:
        """``"stdio"`` for a command, ``"http"`` for a URL."""
        return "stdio" if self.command is not None else "http"

    @model_validator(mode="before")
    @classmethod
    def _agentd_itself(cls, data: Any) -> Any:
        # `agentd serve NAME` as a server command means this installation's
        # agentd, wherever it is installed (a venv's bin/ need not be on PATH).
        if (
            isinstance(data, dict)
            and data.get("command") == "agentd"
            and isinstance(data.get("args", []), list)
        ):
            data = {**data, "command": sys.executable, "args": ["-m", "agentd", *data.get("args", [])]}
        return data

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not SERVER_NAME_RE.fullmatch(v):
            raise ValueError(
                "a server name is 1-32 letters, digits, '_' or '-' (it prefixes tool names as NAME__tool)"
            )
        return v

    @model_validator(mode="after")
    def _one_transport(self) -> ServerSpec:
        problems: list[_Problem] = []
        if (self.command is None) == (self.url is None):
            problems.append(
                _Problem(
                    ("command",),
                    {"command": self.command, "url": self.url},
                    "a server needs exactly one of command (stdio) or url (HTTP)",
                )
            )
        if self.command is not None and not self.command.strip():
            problems.append(_Problem(("command",), self.command, "give the program to run"))
        if self.url is not None:
            parts = urlsplit(self.url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                problems.append(_Problem(("url",), self.url, "write an http:// or https:// URL"))
            if self.args or self.env or self.cwd:
                problems.append(
                    _Problem(
                        ("url",), self.url, "args, env and cwd apply to command servers only; remove them"
                    )
                )
        if self.command is not None and self.headers:
            problems.append(_Problem(("headers",), "…", "headers apply to url servers only; remove them"))
        if problems:
            raise _Problems(problems)
        return self


class SubscriptionSpec(_Frozen):
    """A resource to subscribe to at startup; ``server=None`` means whichever server lists it."""

    server: str | None = None
    uri: str

    @field_validator("uri")
    @classmethod
    def _uri(cls, v: str) -> str:
        if not v.strip() or any(c.isspace() for c in v):
            raise ValueError("a resource URI is non-empty and has no spaces, e.g. file:///var/inbox.jsonl")
        _check_glob(v)
        return v


def _check_glob(pattern: str) -> None:
    """Raise ValueError (the fix) if ``pattern`` does not compile as a route/subscription glob."""
    from agentd.triggers.glob import compile_glob

    try:
        compile_glob(pattern)
    except ValueError as exc:
        raise ValueError(str(exc).removeprefix("route match: ")) from None


class ModelSettingsConfig(_Frozen):
    """Model settings (``[model_settings]``, ``AGENTD_MODEL_SETTINGS__KEY``, ``--temperature`` …).

    Each key is optional (unset: the provider's default); what the keys mean
    and how each provider carries them is in :mod:`agentd.models.settings`.
    """

    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = None
    """Output-token limit of one reply (``--max-output-tokens``); not the tree-wide ``budget_tokens``."""
    stop: list[str] | None = None
    reasoning_effort: str | None = None
    thinking_budget: int | None = None
    parallel_tool_calls: bool | None = None
    tool_choice: str | None = None
    prompt_cache: str | None = None
    extra: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _values(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        from agentd.models.settings import ModelSettings, SettingError

        problems: list[_Problem] = []
        out: dict[str, Any] = {}
        for key, raw in data.items():
            if key not in cls.model_fields:
                out[key] = raw  # reported as an unknown setting, with its known keys
                continue
            try:
                parsed = ModelSettings.from_mapping({key: raw}).given()
            except SettingError as exc:
                problems.append(_Problem(tuple(exc.key.split(".")), exc.value, exc.fix))
                continue
            if key in parsed:
                out[key] = parsed[key]
        if problems:
            raise _Problems(problems)
        return out

    def to_model_settings(self) -> Any:
        """As :class:`agentd.models.ModelSettings`."""
        from agentd.models.settings import ModelSettings

        return ModelSettings.from_mapping(self.model_dump(exclude_defaults=True))


#: The ``api`` values of a ``[providers.NAME]`` table.
ProviderApi = Literal["chat", "responses", "messages"]


class ProviderSpec(_Frozen):
    """An endpoint declared as ``[providers.NAME]``, used with ``--model NAME:MODEL``."""

    base_url: str
    """The API root, e.g. ``http://127.0.0.1:8000/v1`` for vLLM."""
    api: ProviderApi = "chat"
    """``chat`` (OpenAI Chat Completions), ``responses`` (OpenAI Responses) or ``messages`` (Anthropic)."""
    api_key_env: str | None = None
    """The environment variable that holds its key (none: the server takes no key)."""
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    """Extra request headers (``${VAR}`` is expanded; values may be credentials: not in repr)."""
    prices: str | None = None
    """Price its calls as this ``genai-prices`` provider (e.g. ``openai`` for a proxy); none: unknown."""

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str) -> str:
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("write an http:// or https:// URL, e.g. http://127.0.0.1:8000/v1")
        return v

    @field_validator("api_key_env")
    @classmethod
    def _key_env(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v):
            raise ValueError("the name of an environment variable, e.g. VLLM_API_KEY (not the key itself)")
        return v

    @field_validator("prices")
    @classmethod
    def _prices(cls, v: str | None) -> str | None:
        if v is None:
            return v
        from agentd.models.pricing import known_provider_ids

        known = known_provider_ids()
        if v not in known:
            close = difflib.get_close_matches(v, known, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ValueError(
                f"not a genai-prices provider; {hint}known: {', '.join(known) or 'none installed'}"
            )
        return v


class RouteConfig(_Frozen):
    """A declared route, as written in TOML ``[[routes]]`` or ``--route``.

    The router converts it into its own ``Route``; defaults that depend on the
    running system (``queue_cap``) stay ``None`` here.
    """

    name: str | None = None
    """Route id used in telemetry; the router assigns one when absent."""
    match: str | None = None
    """Exact URI or glob; absent only on the timer route."""
    disposition: Disposition = "spawn"
    max_inflight: int | None = None
    """Spawn routes: concurrent roots (default 4). Not allowed on continue routes."""
    session: str | None = None
    """Continue routes: the warm session to deliver into (default: the root session)."""
    debounce: float = DEFAULT_ROUTE_DEBOUNCE
    max_wait: float | None = None
    """Upper bound on how long debounce may defer a delivery (None: unbounded)."""
    queue_cap: int | None = None
    overflow: Overflow = "coalesce"
    template: str | None = None
    """Instruction for roots spawned by this route (default: the main instruction)."""
    timer: bool = False
    """This route receives the ``--interval``/``--cron`` clock fires."""
    extract: Extract | None = None
    """Run the watch stage on this route (None: plain routing)."""
    on_event: str | None = None
    """Python source of a watch filter; implies ``extract = "auto"`` when extract is unset."""
    reread_on_start: bool = True
    """Deliver one "possibly changed" per owned URI once subscribed at start-up (rfcs/0130)."""

    @field_validator("name")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if not _SESSION_NAME_RE.fullmatch(v):
            raise ValueError(
                "a route name is 1-64 letters, digits, '.', '_' or '-' (it is the route's id in telemetry)"
            )
        if re.fullmatch(r"r[0-9]+", v):
            raise ValueError("names r0, r1, ... are the ids of unnamed routes; pick another name")
        return v

    @field_validator("match")
    @classmethod
    def _match(cls, v: str | None) -> str | None:
        if v is not None and v.strip():
            _check_glob(v)
        return v

    @field_validator("template")
    @classmethod
    def _template(cls, v: str | None) -> str | None:
        if v is not None:
            from agentd.triggers.router import validate_template

            validate_template(v)  # ValueError names the placeholder and the fix
        return v

    model: str | None = None
    """The model of the agents this route starts (default: the supervisor's ``model``)."""
    system: str | None = None
    """Their system prompt (``@FILE`` reads a file; default: the supervisor's ``system``)."""
    model_settings: ModelSettingsConfig | None = None
    """Their model settings, merged key by key over the supervisor's (rfcs/0171)."""

    @field_validator("system", mode="before")
    @classmethod
    def _system(cls, v: object) -> object:
        return _read_at_file(v, "system") if isinstance(v, str) else v

    @field_validator("debounce", mode="before")
    @classmethod
    def _debounce(cls, v: object) -> float:
        return _duration(v)

    @field_validator("max_wait", mode="before")
    @classmethod
    def _max_wait(cls, v: object) -> float | None:
        return None if v is None else _duration(v, positive=True)

    @field_validator("max_inflight", "queue_cap", mode="before")
    @classmethod
    def _counts(cls, v: object) -> int | None:
        return None if v is None else _integer(v, minimum=1)

    @field_validator("session")
    @classmethod
    def _session(cls, v: str | None) -> str | None:
        if v is not None and not _SESSION_NAME_RE.fullmatch(v):
            raise ValueError("a session name is 1-64 letters, digits, '.', '_' or '-'")
        return v

    @field_validator("on_event")
    @classmethod
    def _on_event(cls, v: str | None) -> str | None:
        if v is None:
            return v
        try:
            # compile() only parses: nothing in the filter runs here.
            compile(v, "<on_event>", "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as exc:
            raise ValueError(f"on_event must be Python source; it does not parse ({exc})") from None
        return v

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = dict(data)
            if data.get("on_event") is not None and data.get("extract") is None:
                data["extract"] = "auto"
            if data.get("disposition", "spawn") == "spawn" and data.get("max_inflight") is None:
                data["max_inflight"] = DEFAULT_MAX_INFLIGHT
        return data

    @model_validator(mode="after")
    def _shape(self) -> RouteConfig:
        problems: list[_Problem] = []
        if self.timer and self.match is not None:
            problems.append(
                _Problem(("match",), self.match, "a timer route matches clock fires only; remove match")
            )
        if not self.timer and (self.match is None or not self.match.strip()):
            problems.append(
                _Problem(("match",), self.match, "give the URI or glob this route owns, or set timer = true")
            )
        if self.timer and (self.extract is not None or self.on_event is not None):
            problems.append(
                _Problem(
                    ("extract",),
                    self.extract,
                    "a timer route has no resource to read; remove extract/on_event (watch stages need a URI)",
                )
            )
        if self.disposition == "continue" and self.max_inflight is not None:
            problems.append(
                _Problem(
                    ("max_inflight",),
                    self.max_inflight,
                    "max_inflight applies to spawn routes; a continue route has one consumer",
                )
            )
        if self.disposition == "spawn" and self.session is not None:
            problems.append(
                _Problem(
                    ("session",),
                    self.session,
                    "session applies to continue routes; remove it or use continue",
                )
            )
        if self.disposition == "continue" and self.template is not None:
            problems.append(
                _Problem(
                    ("template",),
                    self.template,
                    "template applies to spawn routes; a continue route delivers the queued set into its "
                    'session as it is: remove template, or use disposition = "spawn"',
                )
            )
        if self.max_wait is not None and self.max_wait < self.debounce:
            problems.append(
                _Problem(("max_wait",), self.max_wait, f"max_wait must be ≥ debounce ({self.debounce}s)")
            )
        if problems:
            raise _Problems(problems)
        return self


class WatchesConfig(_Frozen):
    """Limits of the watch stage (``[watches]`` in TOML, ``AGENTD_WATCHES__…`` in env)."""

    max_watches: int = 5
    """Watches one agent may hold at once."""
    filter_timeout: float = 2.0
    """Wall-clock budget of one ``on_event`` filter run."""
    filter_tool_calls: int = 10
    """Read-only tool calls one filter run may make."""
    events_per_update: int = 100
    """Events extracted from one update before the rest are summarised."""
    notice_lines: int = 20
    """Lines in one notice turn."""
    debounce: float = 3.0
    """Quiet time before a notice is sent."""
    max_wait: float = 15.0
    """Longest a notice waits while events keep coming."""
    resubscribe_attempts: int = 5
    """Resubscribe attempts in a row (1 s doubling to 16 s) before a lost subscription, and
    every watch on it, gives up; a stream that ends right after it was acknowledged counts
    as a failed attempt. 0: give up at the first loss."""

    @field_validator("filter_timeout", "debounce", "max_wait", mode="before")
    @classmethod
    def _durations(cls, v: object) -> float:
        return _duration(v, positive=True)

    @field_validator("max_watches", "filter_tool_calls", mode="before")
    @classmethod
    def _positive(cls, v: object) -> int:
        return _integer(v, minimum=1)

    @field_validator("events_per_update", "notice_lines", mode="before")
    @classmethod
    def _two_or_more(cls, v: object) -> int:
        # One slot holds the GAP summary (events) or the "+N more" line (notice lines): with
        # one, nothing else would fit. The watch stage refuses less than 2 as well.
        return _integer(v, minimum=2)

    @field_validator("resubscribe_attempts", mode="before")
    @classmethod
    def _attempts(cls, v: object) -> int:
        return _integer(v, minimum=0)

    @model_validator(mode="after")
    def _order(self) -> WatchesConfig:
        if self.max_wait < self.debounce:
            raise _Problems(
                [_Problem(("max_wait",), self.max_wait, f"must be ≥ debounce ({self.debounce}s)")]
            )
        return self


# --------------------------------------------------------------------------- sources


@dataclass
class _LoadContext:
    """What one :func:`load_settings` call hands to the settings sources."""

    env: Mapping[str, str]
    file_data: dict[str, Any]
    file_label: str
    origins: dict[str, Layer] = field(default_factory=dict)
    """Top-level field -> the highest layer that set it (filled while sources run)."""
    aliases: dict[tuple[Layer, str], str] = field(default_factory=dict)
    """(layer, field) -> the deprecated name the user wrote it with (for messages)."""
    flag_model_settings: frozenset[str] = frozenset()
    """The model settings given as flags (``--temperature`` …)."""


_CONTEXT: contextvars.ContextVar[_LoadContext | None] = contextvars.ContextVar(
    "agentd_config_load", default=None
)


class _MappingEnvSource(EnvSettingsSource):
    """``AGENTD_…`` variables from a given mapping instead of ``os.environ``.

    ``servers`` is dropped: servers are a union of sources, assembled by
    :func:`load_settings` (``AGENTD_SERVERS`` is read there).
    """

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        self._env = env
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(self._env, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str)

    def __call__(self) -> dict[str, Any]:
        data = super().__call__()
        data.pop("servers", None)
        return data


class _Recording(PydanticBaseSettingsSource):
    """Wraps a source and records which top-level settings it provided."""

    def __init__(self, inner: PydanticBaseSettingsSource, layer: Layer, origins: dict[str, Layer]) -> None:
        super().__init__(inner.settings_cls)
        self._inner = inner
        self._layer = layer
        self._origins = origins

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._inner.get_field_value(field, field_name)

    def __call__(self) -> dict[str, Any]:
        data = self._inner()
        for key in data:
            # Sources run highest precedence first: the first layer seen wins.
            self._origins.setdefault(key, self._layer)
        return data


# --------------------------------------------------------------------------- settings


class Settings(BaseSettings):
    """The validated, frozen configuration of one agentd process.

    Build it with :func:`load_settings`. Constructing ``Settings(**kwargs)``
    directly applies kwargs over ``AGENTD_…`` from ``os.environ`` (no file)
    and enforces the same rules.
    """

    model_config = SettingsConfigDict(
        frozen=True,
        extra="forbid",
        env_prefix="AGENTD_",
        env_nested_delimiter="__",
        # Kubernetes manifests often set a variable to "" to mean "unset".
        env_ignore_empty=True,
        case_sensitive=False,
    )

    mode: Mode = "once"
    instruction: str | None = None
    """The root agent's task (``@FILE`` reads a file)."""
    model: str | None = None
    """``PROVIDER:MODEL`` (openai, openai-responses, anthropic, azure, bedrock, vertex, a
    ``[providers.NAME]``) or ``script:FILE``."""
    model_settings: ModelSettingsConfig = Field(default_factory=ModelSettingsConfig)
    """Per-call model settings (``[model_settings]``; ``--temperature`` …)."""
    providers: dict[str, ProviderSpec] = Field(default_factory=dict)
    """Named model endpoints (``[providers.NAME]``), used as ``--model NAME:MODEL``."""
    system: str | None = None
    """Extra system prompt (``@FILE`` reads a file)."""
    servers: dict[str, ServerSpec] = Field(default_factory=dict)
    interval: float | None = None
    """Seconds between loop shifts / timer fires; 0 (loop only) re-enters at once."""
    cron: str | None = None
    """Five-field UTC cron expression for schedule/reactive timer fires."""
    session: SessionKind = "fresh"
    """Default: warm for ``--mode loop`` with interval 0 or unset, fresh otherwise."""
    budget_steps: int | None = None
    """Tree-wide model-call ceiling (None: unlimited; formerly ``max_steps``)."""
    budget_tokens: int | None = None
    """Tree-wide token ceiling, cached tokens included (None: unlimited; formerly ``max_tokens``)."""
    budget_usd: float | None = None
    """Tree-wide cost ceiling in US dollars, from ``genai-prices`` (None: unlimited)."""
    max_turn_steps: int | None = DEFAULT_MAX_TURN_STEPS
    """Model calls one agent may make in one turn before it ends ``exhausted_steps`` (0/None: no cap)."""
    model_timeout: float = DEFAULT_MODEL_TIMEOUT
    """Deadline of one model call in seconds, retries and backoff included."""
    deadline: float | None = None
    """Wall-clock limit in seconds for the whole run (exit 124)."""
    grace: float = 25.0
    """Drain time after SIGTERM before children are killed (exit 143 when exceeded)."""
    spawn_timeout: float = 5.0
    """Bound on one attempt to start an agent child (a zygote fork, or a fresh interpreter)."""
    max_restarts: int = 5
    """Restart intensity: more than this many restarts within ``restart_period`` opens the breaker."""
    restart_period: float = 60.0
    output: OutputFormat = "text"
    verbose: bool = False
    log_level: LogLevel | None = None
    """Least telemetry level written (None: ``info``, or ``debug`` with ``verbose``)."""
    log_format: LogFormat = "auto"
    """Telemetry line format on stderr."""
    output_truncate: int = 2000
    """``stream-json``: characters kept of each tool call's arguments and result (0: no cut)."""
    subscriptions: list[SubscriptionSpec] = Field(default_factory=list)
    routes: list[RouteConfig] = Field(default_factory=list)
    watch_state: Path | None = None
    """File that persists watch specs across restarts (written later, never at validation);
    default with ``--state-dir``: ``<state-dir>/watches.json``."""
    state_dir: Path | None = None
    """Directory for everything agentd keeps across restarts: watch state, session journals (rfcs/0210)."""
    session_max_tokens: int = 100_000
    """Token budget of one journaled session; the oldest turns beyond it are dropped (rfcs/0211)."""
    shard: str | None = None
    """``INDEX/COUNT`` or ``auto`` (StatefulSet ordinal, ``AGENTD_SHARD_COUNT``); reactive only (rfcs/0213)."""
    health_addr: str | None = None
    """HOST:PORT of the health endpoint (None: no endpoint)."""
    metrics_addr: str | None = None
    """HOST:PORT of the Prometheus endpoint (None: no endpoint)."""
    max_read_bytes: int = DEFAULT_MAX_READ_BYTES
    """Largest resource read accepted from a server."""
    watches: WatchesConfig = Field(default_factory=WatchesConfig)

    _deprecations: tuple[Deprecation, ...] = PrivateAttr(default=())

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Flags (init kwargs) > environment > TOML file; defaults come last."""
        ctx = _CONTEXT.get()
        if ctx is None:
            return (init_settings, _MappingEnvSource(settings_cls, os.environ))
        return (
            _Recording(init_settings, "flag", ctx.origins),
            _Recording(_MappingEnvSource(settings_cls, ctx.env), "env", ctx.origins),
            _Recording(InitSettingsSource(settings_cls, ctx.file_data), "file", ctx.origins),
        )

    # -- field parsing ------------------------------------------------------

    @field_validator("instruction", "system", mode="before")
    @classmethod
    def _text(cls, v: object, info: Any) -> object:
        if isinstance(v, str):
            return _read_at_file(v, info.field_name)
        return v

    @field_validator("interval", mode="before")
    @classmethod
    def _interval(cls, v: object) -> float | None:
        return None if v is None else _duration(v)

    @field_validator("deadline", "restart_period", "spawn_timeout", mode="before")
    @classmethod
    def _positive_durations(cls, v: object) -> float | None:
        return None if v is None else _duration(v, positive=True)

    @field_validator("grace", mode="before")
    @classmethod
    def _grace(cls, v: object) -> float:
        return _duration(v)

    @field_validator("budget_steps", "budget_tokens", mode="before")
    @classmethod
    def _ceilings(cls, v: object) -> int | None:
        return None if v is None else _integer(v, minimum=1)

    @field_validator("budget_usd", mode="before")
    @classmethod
    def _usd(cls, v: object) -> float | None:
        if v is None:
            return None
        text = v.strip().removeprefix("$") if isinstance(v, str) else v
        try:
            amount = float(text)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            amount = float("nan")
        if isinstance(v, bool) or not (amount > 0 and amount != float("inf")):
            raise ValueError("must be an amount in US dollars above 0, e.g. 2.50")
        return amount

    @field_validator("providers", mode="before")
    @classmethod
    def _providers(cls, v: object) -> object:
        if not isinstance(v, dict):
            return v
        from agentd.models.factory import PROVIDER_NAME_RE

        ctx = _CONTEXT.get()
        env = ctx.env if ctx is not None else os.environ
        problems: list[_Problem] = []
        out: dict[str, object] = {}
        for name, table in v.items():
            if not PROVIDER_NAME_RE.fullmatch(str(name)):
                problems.append(
                    _Problem((name,), name, "a provider name is 1-32 lower-case letters, digits, '_' or '-'")
                )
                continue
            if name in MODEL_PREFIXES:
                problems.append(
                    _Problem(
                        (name,), name, f"{name!r} is a built-in provider; give this endpoint another name"
                    )
                )
                continue
            if isinstance(table, dict) and isinstance(table.get("headers"), dict):
                try:
                    table = {
                        **table,
                        "headers": {
                            k: _expand_env_refs(h, env, f"providers.{name}.headers.{k}")
                            if isinstance(h, str)
                            else h
                            for k, h in table["headers"].items()
                        },
                    }
                except ConfigError as exc:
                    problems.append(_Problem((name, "headers"), exc.value, exc.fix))
                    continue
            out[name] = table
        if problems:
            raise _Problems(problems)
        return out

    @field_validator("max_restarts", mode="before")
    @classmethod
    def _restarts(cls, v: object) -> int:
        return _integer(v, minimum=0)

    @field_validator("output_truncate", mode="before")
    @classmethod
    def _output_truncate(cls, v: object) -> int:
        try:
            return _integer(v, minimum=0)
        except ValueError:
            raise ValueError("must be a whole number of characters ≥ 0 (0 keeps everything)") from None

    @field_validator("max_turn_steps", mode="before")
    @classmethod
    def _turn_steps(cls, v: object) -> int | None:
        if v is None:
            return None
        try:
            steps = _integer(v, minimum=0)
        except ValueError:
            raise ValueError("must be a whole number ≥ 0 (0 turns the per-turn cap off)") from None
        return steps or None

    @field_validator("model_timeout", mode="before")
    @classmethod
    def _model_timeout(cls, v: object) -> float:
        return _duration(v, positive=True)

    @field_validator("max_read_bytes", mode="before")
    @classmethod
    def _read_bytes(cls, v: object) -> int:
        size = parse_size(v)  # type: ignore[arg-type]  # it rejects other types itself
        if size < 1:
            raise ValueError("must be at least 1 byte; write e.g. 8MiB")
        return size

    @field_validator("cron")
    @classmethod
    def _cron(cls, v: str | None) -> str | None:
        if v is None:
            return v
        reason = _cron_error(v)
        if reason:
            raise ValueError(reason)
        return v.strip()

    @field_validator("health_addr", "metrics_addr")
    @classmethod
    def _addr(cls, v: str | None) -> str | None:
        return None if v is None else _check_addr(v)

    @field_validator("watch_state")
    @classmethod
    def _watch_state(cls, v: Path | None) -> Path | None:
        if v is None:
            return v
        from agentd.watches.state import refusal

        v = _expand_user(v)
        # Checked now so a daemon does not fail hours later on its first
        # write; nothing is created here (the file is only read).
        why = refusal(v)
        if why is not None:
            raise ValueError(why)
        parent = v.parent
        if not parent.is_dir():
            raise ValueError(f"its directory {str(parent)!r} does not exist; create it or pick another path")
        return v

    @field_validator("state_dir")
    @classmethod
    def _state_dir(cls, v: Path | None) -> Path | None:
        if v is None:
            return v
        from agentd.state.dir import refusal as state_dir_refusal

        v = _expand_user(v)
        why = state_dir_refusal(v)
        if why is not None:
            raise ValueError(why)
        return v

    @field_validator("session_max_tokens", mode="before")
    @classmethod
    def _session_tokens(cls, v: object) -> int:
        from agentd.state.dir import MAX_SESSION_TOKENS

        n = _integer(v, minimum=1000)
        if n > MAX_SESSION_TOKENS:
            raise ValueError(
                f"must be at most {MAX_SESSION_TOKENS} (a restored session must fit one spawn payload)"
            )
        return n

    @field_validator("shard", mode="before")
    @classmethod
    def _shard(cls, v: object) -> str | None:
        if v is None:
            return None
        from agentd.state.shard import parse_shard

        ctx = _CONTEXT.get()
        return parse_shard(str(v), ctx.env if ctx is not None else os.environ).label

    @field_validator("subscriptions", mode="before")
    @classmethod
    def _subscriptions(cls, v: object, info: Any) -> object:
        if not isinstance(v, list):
            return v
        known = set((info.data.get("servers") or {}).keys())
        out: list[object] = []
        problems: list[_Problem] = []
        for i, item in enumerate(v):
            try:
                out.append(parse_subscription(item, known) if isinstance(item, str) else item)
            except ValueError as exc:
                problems.append(_Problem((i,), item, str(exc)))
        if problems:
            raise _Problems(problems)
        return out

    @field_validator("routes", mode="before")
    @classmethod
    def _routes(cls, v: object) -> object:
        if not isinstance(v, list):
            return v
        out: list[object] = []
        problems: list[_Problem] = []
        for i, item in enumerate(v):
            if isinstance(item, str):
                try:
                    out.append(parse_route_spec(item))
                except ConfigError as exc:
                    problems.append(_Problem((i,), item, exc.fix))
            else:
                out.append(item)
        if problems:
            raise _Problems(problems)
        return out

    @model_validator(mode="before")
    @classmethod
    def _default_session(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("session") is None:
            data = dict(data)
            interval: float | None
            try:
                raw = data.get("interval")
                interval = None if raw is None else parse_duration(raw)
            except ValueError:
                interval = None  # reported by the field validator
            # Loop with --interval 0 is "work until done": one warm session
            # keeps its context between shifts. Every other cadence starts fresh.
            # An unset loop interval means 0 (the loop driver's default).
            data["session"] = "warm" if data.get("mode") == "loop" and not interval else "fresh"
        return data

    # -- cross-field rules --------------------------------------------------

    @model_validator(mode="after")
    def _cross_fields(self) -> Settings:
        ctx = _CONTEXT.get()
        env = ctx.env if ctx is not None else os.environ
        problems: list[_Problem] = []
        add = problems.append
        mode = self.mode
        timer_routes = [i for i, r in enumerate(self.routes) if r.timer]
        has_timer = self.interval is not None or self.cron is not None

        if self.model is None:
            add(_Problem(("model",), None, f"choose a model with --model or AGENTD_MODEL: {MODEL_FORMS}"))
        else:
            err = _model_error(self.model, env, self.providers)
            if err is not None:
                add(_Problem(("model",), err.value, err.fix))
            else:
                from agentd.models import settings_problems

                for p in settings_problems(
                    self.model, self.model_settings.to_model_settings(), _provider_configs(self.providers)
                ):
                    add(_Problem(("model_settings", *p.key.split(".")), p.value, p.fix))
        problems += _route_model_problems(self, env)

        needs_instruction = (
            mode != "reactive" or not self.routes or any(r.template is None for r in self.routes)
        )
        if needs_instruction and (self.instruction is None or not self.instruction.strip()):
            if mode == "reactive":
                fix = "give the instruction (argument, --instruction TEXT or @FILE), or a template on every route"
            else:
                fix = f"--mode {mode} needs an instruction: pass it as the argument, --instruction TEXT or --instruction @FILE"
            add(_Problem(("instruction",), self.instruction, fix))

        if self.shard is not None and mode != "reactive":
            add(
                _Problem(
                    ("shard",),
                    self.shard,
                    f"--mode {mode} runs its own root on every replica; shard a --mode reactive daemon, "
                    "or remove --shard",
                )
            )

        if self.session == "warm" and mode in ("once", "reactive"):
            add(
                _Problem(
                    ("session",),
                    self.session,
                    "a once run has one root and no sessions: remove it"
                    if mode == "once"
                    else "reactive sessions are set per route: deliver into a warm session with a continue "
                    "route (--route 'MATCH=continue:NAME'), and remove session",
                )
            )
        seen_ids: dict[str, int] = {}
        for i, r in enumerate(self.routes):
            rid = r.name if r.name is not None else f"r{i}"
            if rid in seen_ids:
                add(
                    _Problem(
                        ("routes", i, "name"),
                        rid,
                        f"route id {rid!r} is already used by routes[{seen_ids[rid]}] (unnamed routes are "
                        "r0, r1, ... in order); give each route a unique name",
                    )
                )
            else:
                seen_ids[rid] = i

        if mode == "once":
            if self.interval is not None:
                add(_Problem(("interval",), self.interval, _once_timer_fix("--interval")))
            if self.cron is not None:
                add(_Problem(("cron",), self.cron, _once_timer_fix("--cron")))
        elif mode == "loop":
            if self.cron is not None:
                add(
                    _Problem(
                        ("cron",),
                        self.cron,
                        "cron fires belong to --mode schedule (or reactive); loop uses --interval",
                    )
                )
        else:
            if self.interval is not None and self.cron is not None:
                add(
                    _Problem(
                        ("cron",),
                        self.cron,
                        f"--mode {mode} takes --interval or --cron, not both; remove one",
                    )
                )
            if self.interval == 0:
                add(
                    _Problem(
                        ("interval",),
                        self.interval,
                        f"--mode {mode} needs an interval > 0 (only loop re-enters immediately with 0)",
                    )
                )
        if mode == "schedule":
            if not has_timer:
                add(_Problem(("mode",), mode, "--mode schedule needs --interval DURATION or --cron 'EXPR'"))
            if self.session == "warm":
                add(
                    _Problem(
                        ("session",),
                        "warm",
                        "schedule runs a fresh root per fire; use --mode loop --session warm to keep a session",
                    )
                )
        if len(timer_routes) > 1:
            add(
                _Problem(
                    ("routes", timer_routes[1], "timer"),
                    True,
                    f"only one route may take the timer (routes {timer_routes} set timer = true); keep one",
                )
            )
        if mode == "reactive" and has_timer and not timer_routes:
            add(
                _Problem(
                    ("interval",) if self.interval is not None else ("cron",),
                    self.interval if self.interval is not None else self.cron,
                    "in reactive mode a timer needs a route with timer = true (or --route '@timer=spawn')",
                )
            )
        if timer_routes and not has_timer:
            add(
                _Problem(
                    ("routes", timer_routes[0], "timer"),
                    True,
                    "a timer route needs --interval or --cron; add one or remove timer = true",
                )
            )

        for i, sub in enumerate(self.subscriptions):
            if sub.server is not None and sub.server not in self.servers:
                add(
                    _Problem(
                        ("subscriptions", i),
                        f"{sub.server}:{sub.uri}",
                        f"no server named {sub.server!r}; define it (known: {sorted(self.servers) or 'none'})",
                    )
                )

        if (
            self.health_addr is not None
            and self.health_addr == self.metrics_addr
            and not self.health_addr.endswith(":0")
        ):
            add(
                _Problem(
                    ("metrics_addr",),
                    self.metrics_addr,
                    "health and metrics cannot share one address; pick another port",
                )
            )
        if problems:
            raise _Problems(problems)
        return self


def route_model_settings(settings: Settings, route: RouteConfig) -> Any:
    """The model settings of the agents ``route`` starts (an :class:`agentd.models.ModelSettings`).

    The supervisor's settings, less those the route's model cannot carry
    (when the route names another model), with the route's own merged over
    them key by key. The route's model spec must be valid.
    """
    from agentd.models import ModelSettings, wire_api

    top = settings.model_settings.to_model_settings()
    own = route.model_settings.to_model_settings() if route.model_settings is not None else ModelSettings()
    model = route.model or settings.model
    if route.model is not None and model is not None:
        top = top.for_api(wire_api(model, _provider_configs(settings.providers)))
    return top.merged(own)


def _route_model_problems(settings: Settings, env: Mapping[str, str]) -> list[_Problem]:
    """Per-route models: valid specs, settings that fit them, one model per continue session."""
    from agentd.models import settings_problems

    problems: list[_Problem] = []
    if settings.model is None:
        return problems
    sessions: dict[str, tuple[int, tuple[Any, ...]]] = {}
    for i, route in enumerate(settings.routes):
        model = route.model or settings.model
        if route.model is not None:
            err = _model_error(route.model, env, settings.providers)
            if err is not None:
                problems.append(_Problem(("routes", i, "model"), err.value, err.fix))
                continue
        if route.model is None and route.model_settings is None and route.system is None:
            profile: tuple[Any, ...] = ()
        else:
            effective = route_model_settings(settings, route)
            own = route.model_settings.to_model_settings().given() if route.model_settings is not None else {}
            for p in settings_problems(model, effective, _provider_configs(settings.providers)):
                # Inherited keys the route's API cannot carry were left out; an inherited key
                # can still clash with the route's own (a temperature with a thinking budget).
                inherited = (
                    "" if p.key.split(".")[0] in own else " (inherited from the top-level [model_settings])"
                )
                problems.append(
                    _Problem(("routes", i, "model_settings", *p.key.split(".")), p.value, p.fix + inherited)
                )
            profile = (model, route.system, tuple(sorted(str(kv) for kv in effective.given().items())))
        if route.disposition != "continue" or route.timer:
            continue
        # Every delivery of a continue session goes to one child, which runs one model:
        # routes sharing a session must agree on it (the root session runs the supervisor's).
        session = route.session or "root"
        if session == "root" and settings.mode in ("once", "loop", "schedule") and profile:
            problems.append(
                _Problem(
                    ("routes", i, "model" if route.model is not None else "model_settings"),
                    route.model or route.model_settings,
                    "this route delivers into the root session, which runs the supervisor's model and settings; "
                    "name another session, or set them at the top level",
                )
            )
            continue
        seen = sessions.setdefault(session, (i, profile))
        if seen[1] != profile:
            problems.append(
                _Problem(
                    ("routes", i, "session"),
                    session,
                    f"routes[{seen[0]}] delivers into the same session with another model, system prompt or "
                    "model settings; one session runs one model: give them the same ones, or separate sessions",
                )
            )
    return problems


def _once_timer_fix(flag: str) -> str:
    modes = (
        "--mode schedule (a fresh root per fire) or --mode reactive with an '@timer' route"
        if flag == "--cron"
        else "--mode loop, --mode schedule, or --mode reactive with an '@timer' route"
    )
    return f"{flag} does not apply to --mode once; use {modes}, or run --mode once from a Kubernetes CronJob"


# --------------------------------------------------------------------------- parsing helpers


#: Route settings ``--route`` takes after the disposition (``,KEY=VALUE``); the
#: others (``on_event``: Python source) need a TOML ``[[routes]]`` table.
ROUTE_FLAG_KEYS = (
    "name",
    "debounce",
    "max_wait",
    "queue_cap",
    "overflow",
    "reread_on_start",
    "extract",
    "template",
)

_OPTION_RE = re.compile(r"^\s*([a-z_]+)\s*=(.*)$", re.DOTALL)


def _disposition(text: str, match: str, disposition: str) -> dict[str, Any]:
    """``spawn[:N]`` / ``continue[:SESSION]`` after MATCH; raises ConfigError naming ``text``."""
    kind, sep, arg = disposition.strip().partition(":")
    out: dict[str, Any] = {"timer": True} if match == "@timer" else {"match": match}
    if kind == "spawn":
        out["disposition"] = "spawn"
        if sep:
            if not re.fullmatch(r"[0-9]{1,6}", arg) or int(arg) < 1:
                raise ConfigError(
                    "--route", text, "MAX_INFLIGHT after spawn: is a whole number ≥ 1, e.g. spawn:4"
                )
            out["max_inflight"] = int(arg)
    elif kind == "continue":
        out["disposition"] = "continue"
        if sep:
            if not _SESSION_NAME_RE.fullmatch(arg):
                raise ConfigError(
                    "--route", text, "SESSION after continue: is 1-64 letters, digits, '.', '_' or '-'"
                )
            out["session"] = arg
    else:
        raise ConfigError(
            "--route", text, f"unknown disposition {kind!r}: use spawn[:MAX_INFLIGHT] or continue[:SESSION]"
        )
    return out


def _is_disposition(text: str) -> bool:
    kind = text.strip().partition(":")[0]
    return kind in ("spawn", "continue")


def parse_route_spec(text: str) -> dict[str, Any]:
    """Parse a ``--route`` value into :class:`RouteConfig` fields.

    Forms: ``MATCH=spawn``, ``MATCH=spawn:MAX_INFLIGHT``, ``MATCH=continue``,
    ``MATCH=continue:SESSION``, each optionally followed by ``,KEY=VALUE``
    settings (:data:`ROUTE_FLAG_KEYS`: ``debounce``, ``max_wait``,
    ``overflow`` …), e.g. ``'memo://*=spawn:2,debounce=50ms,overflow=block'``.
    MATCH may itself contain ``=`` and ``,`` (a query string): the
    disposition is the first ``=spawn``/``=continue`` after which only
    ``KEY=VALUE`` pieces follow. ``@timer`` as MATCH declares the timer route.

    Raises:
        ConfigError: setting ``--route``, the text, and the accepted forms.
    """
    if not isinstance(text, str) or "=" not in text:
        raise ConfigError("--route", text, f"write {ROUTE_FORMS}")
    pieces = text.split(",")
    for k in range(1, len(pieces) + 1):
        base, rest = ",".join(pieces[:k]), pieces[k:]
        match, eq, disposition = base.rpartition("=")
        if not eq or not _is_disposition(disposition):
            continue
        if not all(_OPTION_RE.match(p) for p in rest):
            continue
        break
    else:
        # No recognisable disposition: report it as the old single form would.
        match, _, disposition = text.rpartition("=")
        rest = []
    match = match.strip()
    if not match:
        raise ConfigError("--route", text, f"the MATCH before '=' is empty; write {ROUTE_FORMS}")
    out = _disposition(text, match, disposition)
    for piece in rest:
        m = _OPTION_RE.match(piece)
        assert m is not None
        key, value = m.group(1), m.group(2).strip()
        if key not in ROUTE_FLAG_KEYS:
            close = difflib.get_close_matches(key, ROUTE_FLAG_KEYS, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ConfigError(
                "--route",
                text,
                f"unknown route setting {key!r}; {hint}--route takes {', '.join(ROUTE_FLAG_KEYS)} "
                "(other settings need a [[routes]] table in the config file)",
            )
        if key in out:
            raise ConfigError("--route", text, f"{key} is given twice; keep one")
        out[key] = value
    return out


def parse_subscription(text: str, servers: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
    """Parse ``[SERVER:]URI`` into :class:`SubscriptionSpec` fields.

    URIs contain colons, so a ``SERVER:`` prefix is recognised only when what
    follows is itself a URI with a scheme and the prefix is a configured
    server (``memo:memo://notes``). ``file:///x`` and ``urn:a:b`` stay whole
    URIs. A prefix that is no server but is followed by ``scheme://`` is a
    typo and an error.

    Raises:
        ValueError: the prefix looks like a server name but none is defined.
    """
    text = text.strip()
    prefix, sep, rest = text.partition(":")
    if sep and SERVER_NAME_RE.fullmatch(prefix) and _SCHEME_RE.match(rest):
        if prefix in servers:
            return {"server": prefix, "uri": rest}
        if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", rest):
            raise ValueError(
                f"no server named {prefix!r} (known: {sorted(servers) or 'none'}); "
                "define it, or drop the SERVER: prefix"
            )
    return {"server": None, "uri": text}


def _expand_env_refs(value: str, env: Mapping[str, str], where: str) -> str:
    """Expand ``${VAR}`` and ``${VAR:-default}`` the way Claude Code's ``.mcp.json`` does."""

    def sub(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default
        raise ConfigError(
            where, m.group(0), f"environment variable {name} is not set; set it or write ${{{name}:-default}}"
        )

    return _ENV_REF_RE.sub(sub, value)


def _expand_server(table: dict[str, Any], env: Mapping[str, str], where: str) -> dict[str, Any]:
    out = dict(table)
    for key in ("command", "url", "cwd"):
        if isinstance(out.get(key), str):
            out[key] = _expand_env_refs(out[key], env, f"{where}.{key}")
    if isinstance(out.get("args"), list):
        out["args"] = [
            _expand_env_refs(a, env, f"{where}.args") if isinstance(a, str) else a for a in out["args"]
        ]
    for key in ("env", "headers"):
        if isinstance(out.get(key), dict):
            out[key] = {
                k: _expand_env_refs(v, env, f"{where}.{key}.{k}") if isinstance(v, str) else v
                for k, v in out[key].items()
            }
    return out


def _server_spec(name: str, table: object, *, where: str, source: str) -> ServerSpec:
    """Validate one server table; errors are spelled ``{where}.{field}``."""
    if not isinstance(table, dict):
        raise ConfigError(where, table, "a server is a table/object with command+args or url")
    try:
        return ServerSpec.model_validate({**table, "name": name, "source": source})
    except ValidationError as exc:
        raise _translate(
            exc, lambda loc: where if loc == ("name",) else _join(where, loc), ServerSpec
        ) from None


#: Keys of the ``mcpServers`` JSON that agentd understands; other keys
#: (``autoApprove``, ``timeout``, …) belong to other clients and are ignored.
_MCP_JSON_KEYS = {"command", "args", "env", "cwd", "url", "headers", "type", "required", "disabled"}


def parse_mcp_servers_json(
    text: str, *, label: str, env: Mapping[str, str] | None = None
) -> dict[str, ServerSpec]:
    """Servers from the ``{"mcpServers": {...}}`` JSON of Claude Code/Desktop and Cursor.

    Each entry is ``{"command", "args"?, "env"?, "cwd"?}`` (stdio) or
    ``{"url", "headers"?}`` (HTTP), optionally with ``"type": "stdio" |
    "http" | "streamable-http"`` (checked against the keys present) and the
    agentd extension ``"required": true``. Entries with ``"disabled": true``
    are skipped. ``${VAR}`` / ``${VAR:-default}`` in strings are expanded
    from ``env``. Unknown keys are ignored.

    Raises:
        ConfigError: naming ``{label}: mcpServers.NAME.FIELD``.
    """
    env = os.environ if env is None else env
    duplicates: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for k, v in items:
            if k in seen:
                duplicates.append(k)
            seen[k] = v
        return seen

    try:
        doc = json.loads(text, object_pairs_hook=pairs)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ConfigError(
            label, text[:80], f'not valid JSON ({exc}); write {{"mcpServers": {{...}}}}'
        ) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("mcpServers"), dict):
        raise ConfigError(label, text[:80], 'expected a JSON object with an "mcpServers" object')
    problems: list[ConfigError] = []
    out: dict[str, ServerSpec] = {}
    for name, entry in doc["mcpServers"].items():
        where = f"{label}: mcpServers.{name}"
        if name in duplicates:
            problems.append(ConfigError(where, name, "defined twice in this file; keep one"))
            continue
        if not isinstance(entry, dict):
            problems.append(ConfigError(where, entry, "each server is an object with command or url"))
            continue
        if entry.get("disabled") is True:
            continue
        table = {k: v for k, v in entry.items() if k in _MCP_JSON_KEYS and k not in ("type", "disabled")}
        kind = entry.get("type")
        if kind is not None:
            wants = (
                {"stdio": "command", "http": "url", "streamable-http": "url"}.get(kind)
                if isinstance(kind, str)
                else None
            )
            if wants is None:
                problems.append(ConfigError(f"{where}.type", kind, "use stdio, http or streamable-http"))
                continue
            if wants not in entry:
                problems.append(ConfigError(f"{where}.type", kind, f"a {kind} server needs {wants!r}"))
                continue
        try:
            table = _expand_server(table, env, where)
            out[name] = _server_spec(name, table, where=where, source=label)
        except ConfigError as exc:
            problems.extend(_problems_of(exc))
    _raise_all(problems)
    return out


def _stdio_flag(text: str, env: Mapping[str, str]) -> ServerSpec:
    where = "--mcp-stdio"
    name, sep, command = text.partition("=")
    if not sep or not command.strip():
        raise ConfigError(
            where, text, "write NAME=COMMAND ARGS…, e.g. --mcp-stdio 'memo=memo-server --db /tmp/m'"
        )
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ConfigError(
            where, text, f"the command does not split like a shell line ({exc}); fix the quoting"
        ) from None
    return _server_spec(
        name.strip(),
        {"command": argv[0], "args": argv[1:]},
        where=f"{where} {name.strip()}",
        source=f"--mcp-stdio {name.strip()}",
    )


def _http_flag(text: str) -> ServerSpec:
    where = "--mcp-http"
    name, sep, url = text.partition("=")
    if not sep or not url.strip():
        raise ConfigError(where, text, "write NAME=URL, e.g. --mcp-http 'docs=http://127.0.0.1:8000/mcp'")
    return _server_spec(
        name.strip(),
        {"url": url.strip()},
        where=f"{where} {name.strip()}",
        source=f"--mcp-http {name.strip()}",
    )


# --------------------------------------------------------------------------- spelling & translation


def _join(base: str, loc: Sequence[str | int]) -> str:
    out = base
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _spell(loc: tuple[str | int, ...], origins: Mapping[str, Layer], file_label: str) -> str:
    """The setting's name as the user wrote it, from the layer that set it."""
    if not loc:
        return "settings"
    top = str(loc[0])
    rest = loc[1:]
    layer = origins.get(top, "default")
    if layer == "flag":
        return _join(_FLAG_NAMES.get(top, "--" + top.replace("_", "-")), rest)
    if layer == "env":
        name = "AGENTD_" + top.upper()
        if rest and all(isinstance(p, str) for p in rest):
            return name + "".join("__" + str(p).upper() for p in rest)
        return f"{name} ({_join(top, rest)})" if rest else name
    if layer == "file":
        return f"{file_label}: {_join(top, rest)}"
    return _join(top, rest)


def _fix_for(err: Mapping[str, Any], model: type[BaseModel]) -> str:
    kind = err["type"]
    ctx = err.get("ctx") or {}
    if kind == "value_error":
        return str(ctx.get("error", err["msg"]))
    if kind == "literal_error":
        expected = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        return "choose one of " + ", ".join(expected) if expected else err["msg"]
    if kind == "extra_forbidden":
        name = str(err["loc"][-1])
        known = _known_keys(model, err["loc"][:-1])
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return f"unknown setting; {hint}remove it or check the spelling (known: {', '.join(sorted(known))})"
    if kind == "missing":
        return "this is required"
    if kind in ("bool_parsing", "bool_type"):
        return "write true or false"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return "expected a table/object here"
    if kind in ("list_type",):
        return "expected a list here"
    if kind in ("string_type",):
        return "expected text here"
    return str(err["msg"])


def _known_keys(model: type[BaseModel], loc: Sequence[str | int]) -> list[str]:
    """Field names of the model reached by ``loc`` (for 'did you mean' hints)."""
    current: Any = model
    for part in loc:
        if isinstance(part, int) or current is None:
            continue
        info = current.model_fields.get(str(part)) if hasattr(current, "model_fields") else None
        if info is None:
            current = None
            break
        current = _model_in(info.annotation)
    if current is None or not hasattr(current, "model_fields"):
        return []
    # A server's name and source come from where it is declared, never from its table.
    hidden = {"name", "source"} if current is ServerSpec else set()
    return [n for n in current.model_fields if n not in hidden]


def _model_in(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _translate(
    exc: ValidationError, spell: Callable[[tuple[str | int, ...]], str], model: type[BaseModel]
) -> ConfigError:
    """pydantic's ValidationError -> ConfigError(s), spelled by ``spell(loc)``; ``model`` was being validated."""
    problems: list[ConfigError] = []
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        ctx = err.get("ctx") or {}
        inner = ctx.get("error")
        if isinstance(inner, _Problems):
            for p in inner.problems:
                problems.append(ConfigError(spell(loc + p.loc), p.value, p.fix))
            continue
        problems.append(ConfigError(spell(loc), err.get("input"), _fix_for(err, model)))
    if len(problems) == 1:
        return problems[0]
    return ConfigErrors(problems)


# --------------------------------------------------------------------------- loading


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        if "\x00" in str(path):
            raise OSError(0, "a path cannot contain a NUL character")
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(
            "--config",
            str(path),
            f"cannot read the config file ({exc.strerror or exc}); check the path and permissions",
        ) from None
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError("--config", str(path), "the config file is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("--config", str(path), f"not valid TOML: {exc}") from None


def _file_relative(data: dict[str, Any], folder: Path) -> dict[str, Any]:
    """``data`` (a parsed config file) with the relative input paths it names made relative to ``folder``."""

    def anchor(path: str) -> str:
        expanded = _expand_user(Path(path))
        return str(expanded if expanded.is_absolute() else folder / expanded)

    out = dict(data)
    model = out.get("model")
    if isinstance(model, str) and model.startswith("script:") and model[len("script:") :].strip():
        out["model"] = "script:" + anchor(model[len("script:") :])
    for key in ("instruction", "system"):
        value = out.get(key)
        if isinstance(value, str) and value.startswith("@") and not value.startswith("@@") and len(value) > 1:
            out[key] = "@" + anchor(value[1:])
    mcp = out.get("mcp_config")
    if isinstance(mcp, str):
        out["mcp_config"] = anchor(mcp)
    elif isinstance(mcp, list):
        out["mcp_config"] = [anchor(v) if isinstance(v, str) else v for v in mcp]
    return out


def _as_path_list(value: object, where: str) -> list[Path]:
    if isinstance(value, str | Path):
        return [Path(value)]
    if isinstance(value, list) and all(isinstance(v, str | Path) for v in value):
        return [Path(v) for v in value]
    raise ConfigError(where, value, "give a path (or a list of paths) to an mcpServers JSON file")


def _collect_servers(
    file_servers: object,
    file_mcp: list[Path],
    flags: Mapping[str, Any],
    env: Mapping[str, str],
    file_label: str,
) -> dict[str, ServerSpec]:
    """The union of every server source; a name defined twice is an error naming both."""
    problems: list[ConfigError] = []
    out: dict[str, ServerSpec] = {}

    def add(spec: ServerSpec) -> None:
        if spec.name in out:
            other = out[spec.name]
            problems.append(
                ConfigError(
                    f"server {spec.name}",
                    spec.name,
                    f"defined twice: in {other.source} and in {spec.source}; rename or remove one "
                    "(names prefix tool names, so they must be unique)",
                )
            )
        else:
            out[spec.name] = spec

    def attempt(fn: Any, *a: Any) -> Any:
        try:
            return fn(*a)
        except ConfigError as exc:
            problems.extend(_problems_of(exc))
            return None

    if file_servers is not None:
        if not isinstance(file_servers, dict):
            problems.append(
                ConfigError(f"{file_label}: servers", file_servers, "write [servers.NAME] tables")
            )
        else:
            for name, table in file_servers.items():
                where = f"{file_label}: servers.{name}"

                def one(name: str = name, table: Any = table, where: str = where) -> ServerSpec:
                    if isinstance(table, dict):
                        table = _expand_server(table, env, where)
                    return _server_spec(name, table, where=where, source=f"{file_label} [servers.{name}]")

                spec = attempt(one)
                if spec is not None:
                    add(spec)

    def from_json(path: Path, how: str) -> None:
        label = f"{path} ({how})"
        try:
            if "\x00" in str(path):
                raise OSError(0, "a path cannot contain a NUL character")
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
            problems.append(
                ConfigError(how, str(path), f"cannot read the mcpServers file ({reason}); check the path")
            )
            return
        specs = attempt(lambda: parse_mcp_servers_json(text, label=label, env=env))
        for spec in (specs or {}).values():
            add(spec)

    for path in file_mcp:
        from_json(path, f"mcp_config in {file_label}")
    env_mcp = env.get("AGENTD_MCP_CONFIG")
    if env_mcp:
        for part in env_mcp.split(os.pathsep):
            if part:
                from_json(_expand_user(Path(part)), "AGENTD_MCP_CONFIG")
    env_servers = env.get("AGENTD_SERVERS")
    if env_servers:
        try:
            doc = json.loads(env_servers)
        except json.JSONDecodeError as exc:
            doc = None
            problems.append(ConfigError("AGENTD_SERVERS", env_servers[:80], f"not valid JSON ({exc})"))
        if doc is not None and not isinstance(doc, dict):
            problems.append(
                ConfigError("AGENTD_SERVERS", env_servers[:80], 'write a JSON object {"NAME": {...}}')
            )
        elif isinstance(doc, dict):
            for name, table in doc.items():
                spec = attempt(
                    lambda n=name, t=table: _server_spec(
                        n,
                        _expand_server(t, env, f"AGENTD_SERVERS.{n}") if isinstance(t, dict) else t,
                        where=f"AGENTD_SERVERS.{n}",
                        source="AGENTD_SERVERS",
                    )
                )
                if spec is not None:
                    add(spec)
    for path in flags.get("mcp_config") or []:
        from_json(_expand_user(Path(path)), "--mcp-config")
    for text in flags.get("mcp_stdio") or []:
        spec = attempt(_stdio_flag, text, env)
        if spec is not None:
            add(spec)
    for text in flags.get("mcp_http") or []:
        spec = attempt(_http_flag, text)
        if spec is not None:
            add(spec)
    for name in flags.get("require") or []:
        if name not in out:
            if not any(name in p.setting for p in problems):
                problems.append(
                    ConfigError(
                        "--require", name, f"no server named {name!r} (known: {sorted(out) or 'none'})"
                    )
                )
        else:
            out[name] = out[name].model_copy(update={"required": True})
    _raise_all(problems)
    return out


#: Keys of ``load_settings(flags)`` that are server sources, not settings.
SERVER_FLAG_KEYS = ("mcp_stdio", "mcp_http", "mcp_config", "require")


@contextmanager
def _loading(ctx: _LoadContext) -> Iterator[None]:
    token = _CONTEXT.set(ctx)
    try:
        yield
    finally:
        _CONTEXT.reset(token)


def load_settings(
    flags: Mapping[str, Any],
    *,
    config_file: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """Build and validate the settings from every layer.

    Args:
        flags: settings given on the command line, keyed by field name
            (``max_steps``, ``interval``, ``routes`` …); only the keys present
            override lower layers. ``routes`` may hold ``--route`` strings and
            ``subscriptions`` ``--subscribe`` strings. The server sources
            ``mcp_stdio``, ``mcp_http`` (lists of ``NAME=…`` strings),
            ``mcp_config`` (list of paths) and ``require`` (server names)
            are also taken from here.
        config_file: the TOML file (``--config``); when None,
            ``AGENTD_CONFIG`` from ``env`` names it, if set.
        env: the environment (``os.environ`` when None).

    Returns:
        The frozen, fully validated settings.

    Raises:
        ConfigError: the first problem, or :class:`ConfigErrors` when
            there are several. Nothing has been started or written.
    """
    env = os.environ if env is None else env
    flags = {k: v for k, v in flags.items() if v is not None}
    if config_file is None and env.get("AGENTD_CONFIG"):
        config_file = Path(env["AGENTD_CONFIG"])
    file_label = "config file"
    file_data: dict[str, Any] = {}
    file_mcp: list[Path] = []
    problems: list[ConfigError] = []
    if config_file is not None:
        config_file = _expand_user(Path(config_file))
        file_label = str(config_file)
        # Relative paths the file reads (model script:, @FILE, mcp_config)
        # resolve against the file's folder, so a config and its scripts move
        # together; watch_state, where agentd writes, stays relative to the
        # working directory (rfcs/0137).
        file_data = _file_relative(_read_toml(config_file), config_file.parent)
        if "subscribe" in file_data:
            if "subscriptions" in file_data:
                problems.append(
                    ConfigError(
                        f"{file_label}: subscribe",
                        file_data["subscribe"],
                        "use subscribe or [[subscriptions]], not both",
                    )
                )
            else:
                file_data["subscriptions"] = file_data.pop("subscribe")
        if "mcp_config" in file_data:
            try:
                file_mcp = [
                    _expand_user(p)
                    for p in _as_path_list(file_data.pop("mcp_config"), f"{file_label}: mcp_config")
                ]
            except ConfigError as exc:
                problems.append(exc)
    file_servers = file_data.pop("servers", None)

    try:
        servers = _collect_servers(file_servers, file_mcp, flags, env, file_label)
    except ConfigError as exc:
        problems.extend(_problems_of(exc))
        servers = {}

    settings_flags = {k: v for k, v in flags.items() if k not in (*SERVER_FLAG_KEYS, "servers")}
    routes = settings_flags.get("routes")
    if isinstance(routes, list):
        parsed: list[Any] = []
        for item in routes:
            if isinstance(item, str):
                try:
                    parsed.append(parse_route_spec(item))
                except ConfigError as exc:
                    problems.append(exc)
            else:
                parsed.append(item)
        settings_flags["routes"] = parsed
    _raise_all(problems)

    ctx = _LoadContext(env=env, file_data=file_data, file_label=file_label)
    deprecations = _renamed_settings(settings_flags, ctx)
    given = {k: settings_flags.pop(k) for k in MODEL_SETTING_FLAGS if k in settings_flags}
    if given:
        settings_flags["model_settings"] = {**(settings_flags.get("model_settings") or {}), **given}
        ctx.flag_model_settings = frozenset(given)
    with _loading(ctx):
        try:
            settings = Settings(**settings_flags, servers=servers)
        except ValidationError as exc:
            raise _translate(exc, lambda loc: _spell_in(loc, ctx), Settings) from None
        except SettingsError as exc:
            # pydantic-settings could not decode an AGENTD_… value (bad JSON).
            m = re.search(r'field "([^"]+)"', str(exc))
            name = m.group(1) if m else "settings"
            raw = next((v for k, v in env.items() if k.upper() == f"AGENTD_{name.upper()}"), None)
            raise ConfigError(
                f"AGENTD_{name.upper()}",
                raw,
                'list and table settings in the environment are JSON, e.g. \'["a", "b"]\'',
            ) from None
    settings._deprecations = tuple(deprecations)
    return settings


def deprecations(settings: Settings) -> tuple[Deprecation, ...]:
    """The deprecated setting names ``settings`` was loaded with (to warn about; see ``rfcs/0167``)."""
    return settings._deprecations


@dataclass(frozen=True)
class Deprecation:
    """A setting given under its old name: ``old`` as the user wrote it, ``new`` to write instead."""

    old: str
    new: str

    def message(self) -> str:
        """The warning line (without the ``agentd:`` prefix)."""
        return (
            f"warning: {self.old} is deprecated and will be removed in the next release; "
            f"use {self.new} (same meaning: a tree-wide ceiling, not a per-reply limit)"
        )


def _renamed_settings(flags: dict[str, Any], ctx: _LoadContext) -> list[Deprecation]:
    """Move ``max_tokens`` / ``max_steps`` (every layer) to their new names; one warning each.

    Both names in one layer is an error: the user must say which value they mean.
    """
    found: list[Deprecation] = []
    problems: list[ConfigError] = []
    env = dict(ctx.env)
    for old, new in DEPRECATED_SETTINGS.items():
        flag_old, flag_new = "--" + old.replace("_", "-"), "--" + new.replace("_", "-")
        if old in flags:
            if new in flags:
                problems.append(
                    ConfigError(flag_old, flags[old], f"{flag_old} is the old name of {flag_new}; give one")
                )
            else:
                flags[new] = flags.pop(old)
                ctx.aliases[("flag", new)] = flag_old
                found.append(Deprecation(flag_old, flag_new))
        env_old = next((k for k in env if k.upper() == f"AGENTD_{old.upper()}"), None)
        if env_old is not None:
            if any(k.upper() == f"AGENTD_{new.upper()}" for k in env):
                problems.append(
                    ConfigError(
                        env_old, env[env_old], f"{env_old} is the old name of AGENTD_{new.upper()}; set one"
                    )
                )
            else:
                env[f"AGENTD_{new.upper()}"] = env.pop(env_old)
                ctx.aliases[("env", new)] = env_old
                found.append(Deprecation(env_old, f"AGENTD_{new.upper()}"))
        if old in ctx.file_data:
            where = f"{ctx.file_label}: {old}"
            if new in ctx.file_data:
                problems.append(
                    ConfigError(where, ctx.file_data[old], f"{old} is the old name of {new}; keep one")
                )
            else:
                ctx.file_data[new] = ctx.file_data.pop(old)
                ctx.aliases[("file", new)] = old
                found.append(Deprecation(where, f"{ctx.file_label}: {new}"))
    _raise_all(problems)
    ctx.env = env
    return found


def _spell_in(loc: tuple[str | int, ...], ctx: _LoadContext) -> str:
    """:func:`_spell`, knowing the deprecated names and which model settings came as flags."""
    if not loc:
        return _spell(loc, ctx.origins, ctx.file_label)
    top, rest = str(loc[0]), loc[1:]
    layer = ctx.origins.get(top, "default")
    if top == "model_settings" and rest and layer == "flag":
        key = str(rest[0])
        if key in ctx.flag_model_settings:
            return "--" + key.replace("_", "-")
        # Set below the flags: spelled as the environment or the file wrote it.
        env_name = f"AGENTD_MODEL_SETTINGS__{key.upper()}"
        if any(k.upper() == env_name for k in ctx.env):
            return _spell(loc, {top: "env"}, ctx.file_label)
        return _spell(loc, {top: "file"}, ctx.file_label)
    alias = ctx.aliases.get((layer, top))
    if alias is not None:
        return _join(alias, rest) if layer != "file" else f"{ctx.file_label}: {_join(alias, rest)}"
    return _spell(loc, ctx.origins, ctx.file_label)


# --------------------------------------------------------------------------- check output


def missing_server_commands(
    settings: Settings, env: Mapping[str, str] | None = None
) -> list[tuple[ServerSpec, ConfigError]]:
    """Each stdio server whose command cannot be run, with the problem (``agentd check`` reports them).

    A bare command is looked up on ``PATH`` (the server's own ``env.PATH``
    when it sets one); a path must be an executable file (relative to the
    server's ``cwd`` when it has one). Nothing is started. ``check`` exits 2
    for a required server and warns for the others: an optional server that
    cannot start is only reported as ``failed`` at run time.
    """
    env = os.environ if env is None else env
    out: list[tuple[ServerSpec, ConfigError]] = []
    for spec in settings.servers.values():
        command = spec.command
        if command is None:
            continue
        if os.sep in command:
            path = _expand_user(Path(command))
            if not path.is_absolute() and spec.cwd:
                path = Path(spec.cwd) / path
            found = path.is_file() and os.access(path, os.X_OK)
            fix = "it is not an executable file; fix the path"
        else:
            search = spec.env.get("PATH", env.get("PATH", os.defpath))
            found = shutil.which(command, path=search) is not None
            fix = "it is not on PATH; install it, or give its full path"
        if not found:
            out.append((spec, ConfigError(f"server {spec.name} ({spec.source}) command", command, fix)))
    return out


def server_secrets(settings: Settings) -> list[str]:
    """Values of the servers' settings that are credentials: to hide wherever they appear.

    Every ``headers`` value (and the credential in ``Bearer …``), each ``env``
    value whose name looks like a credential and the credentials inside the
    others (``DATABASE_URL=postgres://u:pw@…``), the values of credential
    flags in ``args`` (``-k VALUE``, ``--token=VALUE``) and the credentials in
    a server URL (userinfo, secret query parameters).
    The CLI registers them (:func:`agentd.redact.register_secrets`) so that
    no error or event can print them; ``agentd check`` hides them too.
    """
    found: list[str] = []
    for spec in settings.servers.values():
        found += [v for v in spec.headers.values() if v]
        for v in spec.headers.values():
            found += secrets_in(v)
        found += secret_values(spec.env)
        found += secrets_in(spec.args)
        if spec.url is not None:
            found += secrets_in(spec.url)
    for provider in settings.providers.values():  # [providers.NAME] headers and URLs, the same way
        found += [v for v in provider.headers.values() if v]
        for v in provider.headers.values():
            found += secrets_in(v)
        found += secrets_in(provider.base_url)
    return found


def effective_config(
    settings: Settings, env: Mapping[str, str] | None = None, *, show_secrets: bool = False
) -> dict[str, Any]:
    """The settings as a JSON-ready dict, with every credential replaced by ``***``.

    Server ``env`` and ``headers`` show their keys only (every value is
    ``***``); everything else goes through :func:`agentd.redact.redact`
    (credential flags in ``args``, URL userinfo, secret query parameters,
    token shapes), and any string containing the value of a credential-named
    variable in ``env`` (``OPENAI_API_KEY`` …) or a server credential has
    that value replaced, wherever it appears.

    Args:
        settings: the validated settings.
        env: the environment the credentials are read from (``os.environ`` by default).
        show_secrets: show everything as configured (``agentd check --show-secrets``).
    """
    env = os.environ if env is None else env
    data: dict[str, Any] = settings.model_dump(mode="json")
    if show_secrets:
        return data
    known = secret_values(env) + server_secrets(settings)
    for server in data["servers"].values():
        for table in ("env", "headers"):
            server[table] = dict.fromkeys(server[table], REDACTED)
    for provider in data["providers"].values():
        provider["headers"] = dict.fromkeys(provider["headers"], REDACTED)
    redacted: dict[str, Any] = redact(data, extra=sorted(set(known), key=len, reverse=True))
    return redacted
