"""The settings models below :class:`~agentd.config.Settings`: servers, subscriptions, routes, providers, watches.

Size: a little over 600 lines because each table of the configuration file is
one model here, with its field docs (what ``agentd check`` and the errors
quote); the rules that span tables live in :mod:`agentd.config._rules`.
"""

from __future__ import annotations

import difflib
import re
import sys
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from agentd.config._problems import _Problem, _Problems
from agentd.config._values import _check_glob, _check_tool_globs, _duration, _integer, _read_at_file
from agentd.config._vocab import (
    _SESSION_NAME_RE,
    DEFAULT_MAX_INFLIGHT,
    DEFAULT_ROUTE_DEBOUNCE,
    DEFAULT_STARTUP_TIMEOUT,
    SERVER_NAME_RE,
    Disposition,
    Extract,
    Overflow,
    ProtocolSetting,
    ProviderApi,
    ToolScope,
    TransportSetting,
)
from agentd.core.errors import ConfigError
from agentd.core.limits import TokenAuthMethod
from agentd.watches.limits import WatchLimits

if TYPE_CHECKING:
    from agentd.models import ProviderConfig
    from agentd.models.settings import ModelSettings


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class OAuthSpec(_Frozen):
    """OAuth 2.1 client credentials for a remote server (machine to machine, no browser).

    The token is fetched from the authorization server the resource server
    names (checked against ``issuer``), cached in the state directory and
    fetched again shortly before it expires.
    """

    client_id: str
    client_secret: str | None = Field(default=None, repr=False)
    """The secret itself (write ``${VAR}`` to take it from the environment); or ``client_secret_env``."""
    client_secret_env: str | None = None
    """Name of the environment variable that holds the secret."""
    issuer: str
    """The authorization server's issuer URL: the credentials are only ever sent there."""
    scope: str | None = None
    """Space-separated scopes to request (None: what the server asks for)."""
    token_endpoint_auth_method: TokenAuthMethod = "client_secret_basic"

    @field_validator("client_id")
    @classmethod
    def _client_id(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("give the client id the authorization server issued")
        return v

    @field_validator("issuer")
    @classmethod
    def _issuer(cls, v: str) -> str:
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("write the authorization server's issuer as an http:// or https:// URL")
        return v

    @model_validator(mode="after")
    def _one_secret(self) -> OAuthSpec:
        if (self.client_secret is None) == (self.client_secret_env is None):
            raise _Problems(
                [
                    _Problem(
                        ("client_secret",),
                        "…",
                        "give exactly one of client_secret (e.g. '${DOCS_SECRET}') or client_secret_env",
                    )
                ]
            )
        return self


class ServerSpec(_Frozen):
    """One upstream MCP server: a stdio command or an HTTP URL (exactly one)."""

    name: str
    """Prefixes the server's tools as ``name__tool``; ``^[A-Za-z0-9_-]{1,32}$``."""
    command: str | None = None
    """Executable for a stdio server (looked up on PATH)."""
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict, repr=False)
    """Extra environment for the server process (may hold credentials: not in repr)."""
    cwd: str | None = None
    url: str | None = None
    """``http(s)://`` endpoint of a Streamable HTTP (or legacy HTTP+SSE) server."""
    transport: TransportSetting | None = None
    """``stdio`` for a command; ``http`` (Streamable HTTP) or ``sse`` (the legacy HTTP+SSE
    transport) for a URL, or ``auto`` (the default for a URL): Streamable HTTP, falling back
    to HTTP+SSE when the server refuses it with a 4xx; the transport found is kept for the
    life of the process (rfcs/0286). Filled in when not given."""
    protocol: ProtocolSetting = "auto"
    """The MCP version to speak: ``auto`` probes ``server/discover`` and falls back to the
    ``initialize`` handshake when the probe fails in any way (the era found is kept for the
    life of the process); a version skips the probe (rfcs/0285)."""
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    """HTTP headers sent with every request (may hold credentials: not in repr)."""
    bearer_token_env: str | None = None
    """Name of an environment variable whose value is sent as ``Authorization: Bearer …``."""
    oauth: OAuthSpec | None = None
    """OAuth 2.1 client credentials (url servers only)."""
    timeout: float | None = None
    """Seconds one tool call may take (None: the ``tool_timeout`` setting)."""
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT
    """Seconds for start (spawn or connect) + handshake + the first catalog fetch."""
    allowed_tools: list[str] | None = None
    """Globs over this server's tool names: only these are offered (None: all)."""
    disallowed_tools: list[str] = Field(default_factory=list)
    """Globs over this server's tool names that are never offered."""
    required: bool = False
    """A required server that cannot start or reconnect ends the process (exit 6)."""
    source: str = ""
    """Where this server was defined (for messages and ``agentd check``)."""

    @model_validator(mode="before")
    @classmethod
    def _agentd_itself(cls, data: object) -> object:
        # `agentd serve NAME` as a server command means this installation's
        # agentd, wherever it is installed (a venv's bin/ need not be on PATH).
        if (
            isinstance(data, dict)
            and data.get("command") == "agentd"
            and isinstance(data.get("args", []), list)
        ):
            data = {**data, "command": sys.executable, "args": ["-m", "agentd", *data.get("args", [])]}
        if isinstance(data, dict) and data.get("transport") is None:
            data = {**data, "transport": "stdio" if data.get("command") is not None else "auto"}
        return data

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not SERVER_NAME_RE.fullmatch(v):
            raise ValueError(
                "a server name is 1-32 letters, digits, '_' or '-' (it prefixes tool names as NAME__tool)"
            )
        return v

    @field_validator("timeout", mode="before")
    @classmethod
    def _timeout(cls, v: object) -> float | None:
        return None if v is None else _duration(v, positive=True)

    @field_validator("startup_timeout", mode="before")
    @classmethod
    def _startup_timeout(cls, v: object) -> float:
        return _duration(v, positive=True)

    @field_validator("bearer_token_env")
    @classmethod
    def _bearer_env(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v):
            raise ValueError("give the name of an environment variable (e.g. DOCS_TOKEN), not its value")
        return v

    _tool_globs = field_validator("allowed_tools", "disallowed_tools")(_check_tool_globs)

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
        if self.command is not None and self.transport != "stdio":
            problems.append(
                _Problem(("transport",), self.transport, "a command server's transport is stdio; remove it")
            )
        if self.url is not None and self.transport == "stdio":
            problems.append(
                _Problem(("transport",), self.transport, "a url server's transport is http, sse or auto")
            )
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
        if self.command is not None:
            for key in ("headers", "bearer_token_env", "oauth"):
                if getattr(self, key):
                    problems.append(_Problem((key,), "…", f"{key} is for url servers only; remove it"))
        auths = [k for k in ("bearer_token_env", "oauth") if getattr(self, k)]
        if "Authorization" in {h.title() for h in self.headers}:
            auths.append("headers.Authorization")
        if len(auths) > 1:
            problems.append(
                _Problem((auths[1].split(".")[0],), "…", f"use one of {' or '.join(auths)}, not both")
            )
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
    images: bool | None = None
    """Whether the model takes images from tool results (unset: yes for the providers' own endpoints)."""
    extra: dict[str, object] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _values(cls, data: object) -> object:
        if not isinstance(data, dict):
            return data
        from agentd.models.settings import ModelSettings, SettingError

        problems: list[_Problem] = []
        out: dict[str, object] = {}
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

    def to_model_settings(self) -> ModelSettings:
        """As :class:`agentd.models.ModelSettings`."""
        from agentd.models.settings import ModelSettings

        return ModelSettings.from_mapping(self.model_dump(exclude_defaults=True))


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
    images: bool | None = None
    """Whether its models take images from tool results (``images`` in a route's settings wins); none: no."""

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

    def config(self, name: str) -> ProviderConfig:
        """As the model factory takes it (:class:`agentd.models.ProviderConfig`), named ``name``."""
        from agentd.models import ProviderConfig

        return ProviderConfig(
            name=name,
            base_url=self.base_url,
            api=self.api,
            api_key_env=self.api_key_env,
            headers=dict(self.headers),
            prices=self.prices,
            images=self.images,
        )


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
    allowed_tools: list[str] | None = None
    """Globs over ``server__tool`` names: the agents of this route are offered only these (None: all)."""
    disallowed_tools: list[str] = Field(default_factory=list)
    """Globs over ``server__tool`` names never offered to this route's agents."""
    tools: ToolScope = "all"
    """``read-only``: offer only upstream tools annotated read-only (and the self-tools)."""

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

    @field_validator("allowed_tools", "disallowed_tools", mode="before")
    @classmethod
    def _tool_lists(cls, v: object) -> object:
        if isinstance(v, str):  # --route ...,allowed_tools=a;b is split on ';' by the route parser
            return [part.strip() for part in v.split(";") if part.strip()]
        return v

    _tool_globs = field_validator("allowed_tools", "disallowed_tools")(_check_tool_globs)

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
    def _defaults(cls, data: object) -> object:
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


#: The watch stage's own defaults: the ``[watches]`` table takes them, never restates them.
_LIMITS = WatchLimits()

#: ``WatchLimits`` field -> the ``[watches]`` key that sets it.
_LIMIT_KEYS = {
    "max_watches": "max_watches",
    "max_watches_total": "max_watches_total",
    "filter_time_secs": "filter_timeout",
    "filter_tool_calls": "filter_tool_calls",
    "events_per_update": "events_per_update",
    "lines_per_notice": "notice_lines",
    "debounce_quiet_secs": "debounce",
    "debounce_max_secs": "max_wait",
    "resubscribe_attempts": "resubscribe_attempts",
}


class WatchesConfig(_Frozen):
    """Limits of the watch stage (``[watches]`` in TOML, ``AGENTD_WATCHES__…`` in env).

    The settings face of :class:`agentd.watches.limits.WatchLimits`: the same
    defaults, and a table is only accepted if the stage accepts the limits it
    makes (:meth:`limits`), so ``agentd check`` never passes what the run refuses.
    """

    max_watches: int = _LIMITS.max_watches
    """Watches one agent may hold at once."""
    max_watches_total: int = _LIMITS.max_watches_total
    """Watches all agents together may hold at once (rfcs/0265)."""
    filter_timeout: float = _LIMITS.filter_time_secs
    """Wall-clock budget of one ``on_event`` filter run."""
    filter_tool_calls: int = _LIMITS.filter_tool_calls
    """Read-only tool calls one filter run may make."""
    events_per_update: int = _LIMITS.events_per_update
    """Events extracted from one update before the rest are summarised."""
    notice_lines: int = _LIMITS.lines_per_notice
    """Lines in one notice turn."""
    debounce: float = _LIMITS.debounce_quiet_secs
    """Quiet time before a notice is sent."""
    max_wait: float = _LIMITS.debounce_max_secs
    """Longest a notice waits while events keep coming."""
    resubscribe_attempts: int = _LIMITS.resubscribe_attempts
    """Resubscribe attempts in a row (1 s doubling to 16 s) before a lost subscription, and
    every watch on it, gives up; a stream that ends right after it was acknowledged counts
    as a failed attempt. 0: give up at the first loss."""

    def limits(self) -> WatchLimits:
        """The watch stage's limits from this table.

        Raises:
            ConfigError: a combination the stage cannot run with (names the field and the fix).
        """
        return WatchLimits(
            max_watches=self.max_watches,
            max_watches_total=self.max_watches_total,
            filter_time_secs=float(self.filter_timeout),
            filter_tool_calls=self.filter_tool_calls,
            events_per_update=self.events_per_update,
            lines_per_notice=self.notice_lines,
            debounce_quiet_secs=float(self.debounce),
            debounce_max_secs=float(self.max_wait),
            # The upstream connections do the resubscribing, with these attempts and delays.
            resubscribe_attempts=self.resubscribe_attempts,
        )

    @field_validator("filter_timeout", "debounce", "max_wait", mode="before")
    @classmethod
    def _durations(cls, v: object) -> float:
        return _duration(v, positive=True)

    @field_validator("max_watches", "max_watches_total", "filter_tool_calls", mode="before")
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
        try:
            self.limits()
        except ConfigError as exc:
            field = exc.setting.removeprefix("watch limit ")
            raise _Problems([_Problem((_LIMIT_KEYS.get(field, field),), exc.value, exc.fix)]) from None
        return self
