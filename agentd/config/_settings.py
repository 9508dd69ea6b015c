"""The validated, frozen :class:`Settings` of one agentd process."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

from pydantic import (
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from agentd.config._agents import AgentDefinition
from agentd.config._flags import parse_route_spec, parse_subscription
from agentd.config._models import (
    ModelSettingsConfig,
    ProviderSpec,
    RouteConfig,
    ServerSpec,
    SubscriptionSpec,
    WatchesConfig,
)
from agentd.config._problems import _Problem, _Problems
from agentd.config._rules import cross_field_problems
from agentd.config._servers import _expand_env_refs
from agentd.config._sources import _CONTEXT, Deprecation, _MappingEnvSource, _Recording
from agentd.config._values import (
    _check_addr,
    _check_tool_globs,
    _cron_error,
    _dollars,
    _duration,
    _expand_user,
    _integer,
    _read_at_file,
)
from agentd.config._vocab import (
    DEFAULT_MAX_AGENTS,
    DEFAULT_MAX_CHILDREN,
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_READ_BYTES,
    DEFAULT_MAX_SELF_SUBSCRIPTIONS,
    DEFAULT_MAX_SELF_SUBSCRIPTIONS_PER_SESSION,
    DEFAULT_MAX_TURN_STEPS,
    DEFAULT_MODEL_TIMEOUT,
    DEFAULT_TOOL_TIMEOUT,
    MODEL_PREFIXES,
    LogFormat,
    LogLevel,
    Mode,
    OutputFormat,
    SessionKind,
)
from agentd.core.durations import ascii_number, parse_duration, parse_size
from agentd.core.errors import ConfigError
from agentd.observe.output import DEFAULT_TELEMETRY_BUFFER

MIN_STATUS_TOKEN_LENGTH = 16
"""Shortest bearer token accepted for the status (as for the bundled servers' ``--http``): shorter is guessable."""


def read_status_token(path: Path) -> str:
    """The bearer token in the first line of ``path`` (``--status-token-file``).

    Raises:
        ValueError: the file cannot be read, or the token is shorter than :data:`MIN_STATUS_TOKEN_LENGTH`
            (the settings turn it into a message naming ``--status-token-file``).
    """
    try:
        with open(path, encoding="utf-8") as f:
            token = f.readline().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(
            f"it cannot be read ({getattr(exc, 'strerror', None) or exc}); name a readable file"
        ) from exc
    if len(token) < MIN_STATUS_TOKEN_LENGTH:
        raise ValueError(
            f"its first line is {len(token)} characters long: put a bearer token of at least "
            f"{MIN_STATUS_TOKEN_LENGTH} random characters there (e.g. openssl rand -hex 24 > FILE)"
        )
    return token


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
    """Least telemetry level written (None: ``info``, ``debug`` with ``verbose``, ``error`` with ``quiet``)."""
    log_format: LogFormat = "auto"
    """Telemetry line format on stderr."""
    output_truncate: int = 2000
    """``stream-json``: characters kept of each tool call's arguments and result (0: no cut)."""
    subscriptions: list[SubscriptionSpec] = Field(default_factory=list)
    routes: list[RouteConfig] = Field(default_factory=list)
    watch_state: Path | None = None
    """File that persists watch specs across restarts (written later, never at validation);
    default with ``--state-dir``: ``<state-dir>/watches.json``."""
    session_max_tokens: int = 100_000
    """Token budget of one journaled session; the oldest turns beyond it are dropped (rfcs/0211)."""
    shard: str | None = None
    """``INDEX/COUNT`` or ``auto`` (StatefulSet ordinal, ``AGENTD_SHARD_COUNT``); reactive only (rfcs/0213)."""
    health_addr: str | None = None
    """HOST:PORT of the health endpoint (None: no endpoint)."""
    metrics_addr: str | None = None
    """HOST:PORT of the Prometheus endpoint (None: no endpoint)."""
    status_show_content: bool = False
    """``GET /status`` and the status page show instruction texts and tool arguments (rfcs/0336)."""
    status_token_file: Path | None = None
    """File whose first line is the bearer token ``GET /status`` and the page need (required for them
    beyond loopback; rfcs/0336)."""
    max_read_bytes: int = DEFAULT_MAX_READ_BYTES
    """Largest resource read accepted from a server."""
    max_self_subscriptions_per_session: int = DEFAULT_MAX_SELF_SUBSCRIPTIONS_PER_SESSION
    """Subscriptions one session's model may hold at once (its own ``subscribe``; rfcs/0265)."""
    max_self_subscriptions: int = DEFAULT_MAX_SELF_SUBSCRIPTIONS
    """Subscriptions the models of every session may hold together (rfcs/0265)."""
    agents: Annotated[dict[str, AgentDefinition], NoDecode] = Field(default_factory=dict)
    """The agents an agent may start, by name (``agent_start``'s ``type``): ``--agents`` over
    ``AGENTD_AGENTS`` over ``[agents.NAME]`` over ``.claude/agents/*.md`` over
    ``~/.claude/agents/*.md`` (rfcs/0370). Filled by :func:`load_settings`."""
    max_depth: int = DEFAULT_MAX_DEPTH
    """How deep agents may start agents: roots are 0; an agent at this depth is not offered
    the agent tools (0: no agent starts agents; rfcs/0370)."""
    max_children: int = DEFAULT_MAX_CHILDREN
    """Children one agent may have running at once; past it ``agent_start`` is a tool error."""
    max_agents: int = DEFAULT_MAX_AGENTS
    """Agents started by agents that may run at once, in all; past it ``agent_start`` is a tool error."""
    claude_agents: bool = True
    """Read Claude Code's agent files (``.claude/agents``, ``~/.claude/agents``) as definitions."""
    watches: WatchesConfig = Field(default_factory=WatchesConfig)
    tool_timeout: float = DEFAULT_TOOL_TIMEOUT
    """Seconds one upstream tool call may take (a server's ``timeout`` overrides it)."""
    allowed_tools: Annotated[list[str] | None, NoDecode] = None
    """Globs over ``server__tool`` names: only these are offered to any agent (None: all)."""
    disallowed_tools: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Globs over ``server__tool`` names never offered to any agent."""
    state_dir: Path | None = None
    """Directory for everything agentd keeps across restarts: watch state, session journals
    (rfcs/0210), OAuth tokens, once runs' conversations; None: kept in memory only, but a
    once run's conversation goes to the per-user state directory (rfcs/0303)."""
    continue_conversation: bool = False
    """``--continue``: the once run continues the conversation saved last (rfcs/0303)."""
    resume: str | None = None
    """``--resume ID``: the once run continues this conversation (a ``session_id``)."""
    ephemeral: bool = False
    """A once run saves no conversation (``--ephemeral``)."""
    quiet: bool = False
    """``-q``: only the answer and errors (telemetry at ``error``: no progress, no warnings; rfcs/0301, 0320)."""
    reconnect_backoff: Annotated[tuple[float, ...] | None, NoDecode] = None
    """Seconds before reconnect attempt 1, 2, … of an upstream server, comma-separated
    (``AGENTD_RECONNECT_BACKOFF=1,2,4``; None: 1, 2, 4, 8, 16 s). An operator knob; tests
    use it to fail fast."""
    telemetry_buffer: int = DEFAULT_TELEMETRY_BUFFER
    """Bytes of telemetry held while stderr is slow or blocked; beyond it lines are dropped
    and counted (``AGENTD_TELEMETRY_BUFFER``)."""

    _deprecations: tuple[Deprecation, ...] = PrivateAttr(default=())
    _ignored: tuple[str, ...] = PrivateAttr(default=())
    _agent_warnings: tuple[str, ...] = PrivateAttr(default=())
    _agent_notes: tuple[str, ...] = PrivateAttr(default=())

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
    def _text(cls, v: object, info: ValidationInfo) -> object:
        if isinstance(v, str):
            return _read_at_file(v, info.field_name or "")
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

    @field_validator("tool_timeout", mode="before")
    @classmethod
    def _tool_timeout(cls, v: object) -> float:
        return _duration(v, positive=True)

    @field_validator("allowed_tools", "disallowed_tools", mode="before")
    @classmethod
    def _tool_lists(cls, v: object) -> object:
        # The environment and flags give "a,b" (or JSON); TOML gives a list.
        if isinstance(v, str):
            text = v.strip()
            if text.startswith("["):
                try:
                    return json.loads(text)
                except json.JSONDecodeError:
                    raise ValueError(
                        'write comma-separated globs, or a JSON list like ["files__*"]'
                    ) from None
            return [part.strip() for part in text.split(",") if part.strip()]
        return v

    _tool_globs = field_validator("allowed_tools", "disallowed_tools")(_check_tool_globs)

    @field_validator("reconnect_backoff", mode="before")
    @classmethod
    def _backoff(cls, v: object) -> object:
        if v is None:
            return v
        fix = "give comma-separated seconds, e.g. '1,2,4,8,16'"
        parts = v.split(",") if isinstance(v, str) else v
        if not isinstance(parts, list | tuple) or not parts:
            raise ValueError(fix)
        try:  # a string is ASCII digits (float() reads "١٢" as 12); TOML gives numbers
            values = tuple(
                ascii_number(p.strip()) if isinstance(p, str) else float(p)
                for p in parts
                if not isinstance(p, bool)
            )
        except (TypeError, ValueError):
            raise ValueError(fix) from None
        if len(values) != len(parts):
            raise ValueError(fix)
        if any(not (x >= 0) or x == float("inf") for x in values):
            raise ValueError(fix)
        return values

    @field_validator("telemetry_buffer", mode="before")
    @classmethod
    def _telemetry_buffer(cls, v: object) -> int:
        try:
            size = parse_size(v)  # type: ignore[arg-type]  # it rejects other types itself
        except ValueError:
            size = -1
        if size < 1024:
            raise ValueError("give a size of at least 1KiB, e.g. 8MiB")
        return size

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

    @field_validator("resume", mode="before")
    @classmethod
    def _resume(cls, v: object) -> object:
        if not isinstance(v, str):
            return v
        from agentd.state.conversations import ID_RE

        text = v.strip()
        if not ID_RE.fullmatch(text):
            raise ValueError(
                "a session id is letters, digits, '-' and '_': the session_id a run prints with --output json"
            )
        return text

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

    @field_validator("output_truncate", mode="before")
    @classmethod
    def _output_truncate(cls, v: object) -> int:
        try:
            return _integer(v, minimum=0)
        except ValueError:
            raise ValueError("must be a whole number of characters ≥ 0 (0 keeps everything)") from None

    @field_validator("budget_steps", "budget_tokens", mode="before")
    @classmethod
    def _ceilings(cls, v: object) -> int | None:
        return None if v is None else _integer(v, minimum=1)

    @field_validator("budget_usd", mode="before")
    @classmethod
    def _usd(cls, v: object) -> float | None:
        return None if v is None else _dollars(v)

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

    @field_validator("max_self_subscriptions_per_session", "max_self_subscriptions", mode="before")
    @classmethod
    def _subscription_caps(cls, v: object, info: ValidationInfo) -> int:
        default = (
            DEFAULT_MAX_SELF_SUBSCRIPTIONS
            if info.field_name == "max_self_subscriptions"
            else DEFAULT_MAX_SELF_SUBSCRIPTIONS_PER_SESSION
        )
        try:
            return _integer(v, minimum=1)
        except ValueError:
            raise ValueError(
                f"give a whole number of subscriptions, 1 or more (default {default}); past it a model's "
                "subscribe is refused with a tool error"
            ) from None

    @field_validator("max_depth", mode="before")
    @classmethod
    def _depth(cls, v: object) -> int:
        try:
            return _integer(v, minimum=0)
        except ValueError:
            raise ValueError(
                f"give a whole number ≥ 0 (default {DEFAULT_MAX_DEPTH}; 0: no agent starts agents)"
            ) from None

    @field_validator("max_children", "max_agents", mode="before")
    @classmethod
    def _agent_caps(cls, v: object, info: ValidationInfo) -> int:
        children = info.field_name == "max_children"
        default = DEFAULT_MAX_CHILDREN if children else DEFAULT_MAX_AGENTS
        what = "children one agent may have running" if children else "agents started by agents, in all"
        try:
            return _integer(v, minimum=1)
        except ValueError:
            raise ValueError(
                f"give a whole number of {what}, 1 or more (default {default}); past it a model's "
                "agent_start is refused with a tool error"
            ) from None

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

    @field_validator("status_token_file")
    @classmethod
    def _status_token_file(cls, v: Path | None) -> Path | None:
        if v is None:
            return v
        v = _expand_user(v)
        read_status_token(v)  # a missing file or a short token is exit 2 now, not a 401 later
        return v

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

    @field_validator("subscriptions", mode="before")
    @classmethod
    def _subscriptions(cls, v: object, info: ValidationInfo) -> object:
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
    def _default_session(cls, data: object) -> object:
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
        problems = cross_field_problems(
            self, ctx.env if ctx is not None else os.environ, run_inputs=ctx is None or ctx.run_inputs
        )
        if problems:
            raise _Problems(problems)
        return self
