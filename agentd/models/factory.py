"""Model specs (``provider:name``): validation without I/O, and construction.

Specs:

* ``openai:MODEL``: Chat Completions at ``OPENAI_BASE_URL`` (default
  ``https://api.openai.com/v1``), ``OPENAI_API_KEY`` (required only for the
  default OpenAI URL).
* ``openai-responses:MODEL``: the Responses API at the same base URL and key.
* ``anthropic:MODEL``: ``ANTHROPIC_BASE_URL`` (default ``https://api.anthropic.com``),
  ``ANTHROPIC_API_KEY`` (required only for the default Anthropic URL).
* ``azure:DEPLOYMENT``: Azure OpenAI, on agentd's Chat Completions client:
  ``AZURE_OPENAI_ENDPOINT``, ``AZURE_OPENAI_API_KEY`` (``api-key`` header) or
  ``AZURE_OPENAI_AD_TOKEN`` (a Microsoft Entra bearer token, which wins when
  both are set, as in the official SDK), ``OPENAI_API_VERSION`` (default
  :data:`AZURE_API_VERSION`; ``v1`` selects the version-less ``/openai/v1`` API).
* ``bedrock:MODEL`` / ``vertex:MODEL``: Anthropic models on AWS / Google
  Cloud, through the official SDK (:mod:`agentd.models.cloud`; extras
  the ``bedrock`` / ``vertex`` extras).
* ``NAME:MODEL``: an endpoint declared as ``[providers.NAME]``
  (:class:`ProviderConfig`): several OpenAI-compatible servers (vLLM,
  llama.cpp, Ollama, a hosted one) in one configuration.
* ``script:FILE``: a script file (see :mod:`agentd.models.script`).

The split is at the first colon, so model names may contain colons
(``openai:llama3.1:8b`` for Ollama).
"""

from __future__ import annotations

import difflib
import random
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal, get_args
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

import trio

from agentd.core.errors import ConfigError
from agentd.core.jsonvalue import JSONObject, get_str
from agentd.models import anthropic as _anthropic
from agentd.models import openai as _openai
from agentd.models._http import DEFAULT_MODEL_TIMEOUT_S, MAX_ATTEMPTS, Sleep
from agentd.models._wire import HttpModel, PosterOptions
from agentd.models.base import Model
from agentd.models.script import ScriptModel, load_script
from agentd.models.settings import ModelSettings, SettingError, WireApi, check_settings
from agentd.observe.telemetry import Telemetry

Provider = Literal["openai", "openai-responses", "anthropic", "azure", "bedrock", "vertex", "script"]
"""The built-in provider prefixes a model spec may use (``[providers.NAME]`` adds more)."""

PROVIDERS: tuple[Provider, ...] = get_args(Provider)

#: The wire API each built-in provider speaks.
WIRE_APIS: dict[str, WireApi] = {
    "openai": "chat",
    "azure": "chat",
    "openai-responses": "responses",
    "anthropic": "messages",
    "bedrock": "messages",
    "vertex": "messages",
    "script": "script",
}

#: The Azure OpenAI ``api-version`` sent when ``OPENAI_API_VERSION`` is not set:
#: the latest generally available version of the dated data-plane API.
AZURE_API_VERSION = "2024-10-21"

#: A ``[providers.NAME]`` name: lower-case, so ``NAME:MODEL`` reads like the built-ins.
PROVIDER_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")

#: What a ``[providers.NAME]`` endpoint speaks (``api``).
ProviderApi = Literal["chat", "responses", "messages"]

#: The providers reached through a cloud's SDK (:mod:`agentd.models.cloud`), by prefix.
_CLOUDS: dict[str, Literal["bedrock", "vertex"]] = {"bedrock": "bedrock", "vertex": "vertex"}

_PROVIDER_APIS: tuple[ProviderApi, ...] = get_args(ProviderApi)

_EXAMPLES = "openai:gpt-4o-mini, anthropic:claude-sonnet-4-5, or script:examples/scripts/hello.json"


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    """An endpoint declared as ``[providers.NAME]``, used as ``NAME:MODEL``.

    Attributes:
        name: the prefix of its model specs.
        base_url: the API root (``…/v1`` for the OpenAI APIs).
        api: ``chat`` (Chat Completions, the default), ``responses`` or
            ``messages`` (an Anthropic-compatible endpoint).
        api_key_env: the environment variable holding its key (sent as
            ``Authorization: Bearer``, or ``x-api-key`` for ``messages``); None: no key.
        headers: extra headers sent with every request.
        prices: the ``genai-prices`` provider id its calls are priced as (e.g.
            ``openai`` for a proxy in front of OpenAI); None: cost unknown.
        images: whether its models take images from tool results (the
            ``images`` model setting, which wins where set); None: no, unless
            ``base_url`` is the provider's own (rfcs/0290).
    """

    name: str
    base_url: str
    api: ProviderApi = "chat"
    api_key_env: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    prices: str | None = None
    images: bool | None = None

    def to_payload(self) -> JSONObject:
        """As a JSON-ready table (the spawn payload carries it to the child)."""
        return {
            "name": self.name,
            "base_url": self.base_url,
            "api": self.api,
            "api_key_env": self.api_key_env,
            "headers": dict(self.headers),
            "prices": self.prices,
            "images": self.images,
        }

    @classmethod
    def from_payload(cls, data: Mapping[str, object]) -> ProviderConfig:
        """The inverse of :meth:`to_payload`.

        Raises:
            ValueError: a field has the wrong shape (the payload was not made by :meth:`to_payload`).
        """
        api = data.get("api", "chat")
        headers = data.get("headers") or {}
        images = data.get("images")
        if (
            api not in _PROVIDER_APIS
            or not isinstance(headers, Mapping)
            or not isinstance(images, bool | None)
        ):
            raise ValueError(
                f"not a provider table: api={api!r}, headers of type {type(headers).__name__}, images={images!r}"
            )
        return cls(
            name=str(data["name"]),
            base_url=str(data["base_url"]),
            api=api,
            api_key_env=get_str(data, "api_key_env"),
            headers={str(k): str(v) for k, v in headers.items()},
            prices=get_str(data, "prices"),
            images=images,
        )


Providers = Mapping[str, ProviderConfig]


def parse_model_spec(spec: str, providers: Providers | None = None) -> tuple[str, str]:
    """Split ``provider:name`` and check both parts (no I/O).

    Raises:
        ConfigError: no or unknown provider prefix, or an empty / padded name.
    """
    providers = providers or {}
    known = [*PROVIDERS, *sorted(providers)]
    prefix, sep, name = spec.partition(":")
    if not sep:
        guess = "anthropic" if spec.lower().startswith("claude") else "openai"
        raise ConfigError(
            "model",
            spec,
            f"name the provider before the model, e.g. {guess}:{spec.strip() or 'MODEL'} "
            f"(providers: {', '.join(known)})",
        )
    if prefix not in PROVIDERS and prefix not in providers:
        close = difflib.get_close_matches(prefix.lower(), known, n=1)
        hint = f"did you mean {close[0]}:{name}? " if close else ""
        raise ConfigError(
            "model",
            spec,
            f"unknown provider {prefix!r}; {hint}use one of {', '.join(known)} (e.g. {_EXAMPLES}), "
            "or declare it as [providers.NAME]",
        )
    what = "script file" if prefix == "script" else ("deployment name" if prefix == "azure" else "model name")
    if not name.strip():
        raise ConfigError("model", spec, f"the {what} after {prefix + ':'!r} is empty; e.g. {_EXAMPLES}")
    if name != name.strip():
        raise ConfigError("model", spec, f"the {what} {name!r} has leading or trailing spaces; remove them")
    return prefix, name


def wire_api(spec: str, providers: Providers | None = None) -> WireApi:
    """The wire API a (valid) spec's model is spoken to over."""
    prefix, _ = parse_model_spec(spec, providers)
    if prefix in WIRE_APIS:
        return WIRE_APIS[prefix]
    return (providers or {})[prefix].api


def settings_problems(
    spec: str, settings: ModelSettings, providers: Providers | None = None
) -> list[SettingError]:
    """Why ``settings`` cannot go to the model ``spec`` names (empty: they fit). The spec must be valid."""
    return check_settings(settings, wire_api(spec, providers), model=spec)


def _base_url(spec: str, env: Mapping[str, str], var: str, default: str) -> str:
    url = env.get(var) or default
    _check_url(spec, url, var, default)
    return url


def _check_url(spec: str, url: str, what: str, example: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError("model", spec, f"{what}={url!r} is not an http(s) URL; set it like {example!r}")


def _check_key(spec: str, env: Mapping[str, str], var: str, url: str, default: str) -> str | None:
    key = env.get(var) or None
    if key is None and url.rstrip("/") == default.rstrip("/"):
        raise ConfigError(
            "model",
            spec,
            f"{var} is not set and {default} needs a key: export {var}=..., "
            "or point the base URL at a server that needs none",
        )
    return key


@dataclass(frozen=True, slots=True)
class _Azure:
    url: str
    headers: dict[str, str]


def _azure(spec: str, deployment: str, env: Mapping[str, str]) -> _Azure:
    endpoint = env.get("AZURE_OPENAI_ENDPOINT")
    if not endpoint:
        raise ConfigError(
            "model",
            spec,
            "azure: AZURE_OPENAI_ENDPOINT is not set: export AZURE_OPENAI_ENDPOINT=https://RESOURCE.openai.azure.com",
        )
    _check_url(spec, endpoint, "AZURE_OPENAI_ENDPOINT", "https://RESOURCE.openai.azure.com")
    token = env.get("AZURE_OPENAI_AD_TOKEN")
    key = env.get("AZURE_OPENAI_API_KEY")
    if token:
        headers = {"authorization": f"Bearer {token}"}
    elif key:
        headers = {"api-key": key}
    else:
        raise ConfigError(
            "model",
            spec,
            "azure: neither a key nor a token is set: export AZURE_OPENAI_API_KEY=... (the resource's key) or "
            "AZURE_OPENAI_AD_TOKEN=... (a Microsoft Entra access token)",
        )
    version = env.get("OPENAI_API_VERSION") or AZURE_API_VERSION
    parts = urlsplit(endpoint)
    root = parts.path.rstrip("/")
    if version == "v1":
        path, query = f"{root}/openai/v1/chat/completions", parts.query
    else:
        path = f"{root}/openai/deployments/{quote(deployment, safe='')}/chat/completions"
        query = "&".join(q for q in (parts.query, urlencode({"api-version": version})) if q)
    return _Azure(urlunsplit((parts.scheme, parts.netloc, path, query, "")), headers)


def _named(spec: str, config: ProviderConfig, env: Mapping[str, str]) -> str | None:
    """The key of a ``[providers.NAME]`` endpoint (None: it takes none)."""
    _check_url(spec, config.base_url, f"[providers.{config.name}] base_url", "http://127.0.0.1:8000/v1")
    if config.api_key_env is None:
        return None
    key = env.get(config.api_key_env)
    if not key:
        raise ConfigError(
            "model",
            spec,
            f"[providers.{config.name}] takes its key from {config.api_key_env}, which is not set: "
            f"export {config.api_key_env}=..., or remove api_key_env for a server that needs no key",
        )
    return key


def validate_model_spec(
    spec: str,
    env: Mapping[str, str],
    *,
    providers: Providers | None = None,
) -> None:
    """Check a model spec and its environment before any side effect (no network I/O).

    ``script:`` reads and validates the file; the HTTP providers check the
    base URL and that the default public endpoints have a key; ``azure:``
    its endpoint and credential; ``bedrock:`` / ``vertex:`` that the extra is
    installed and the region set (credentials are resolved on the first call:
    that may need the network, e.g. an instance role).

    Raises:
        ConfigError: with ``setting="model"``, the spec as value, and the fix.
    """
    providers = providers or {}
    provider, name = parse_model_spec(spec, providers)
    if provider in ("openai", "openai-responses"):
        url = _base_url(spec, env, "OPENAI_BASE_URL", _openai.DEFAULT_BASE_URL)
        _check_key(spec, env, "OPENAI_API_KEY", url, _openai.DEFAULT_BASE_URL)
    elif provider == "anthropic":
        url = _base_url(spec, env, "ANTHROPIC_BASE_URL", _anthropic.DEFAULT_BASE_URL)
        _check_key(spec, env, "ANTHROPIC_API_KEY", url, _anthropic.DEFAULT_BASE_URL)
    elif provider == "azure":
        _azure(spec, name, env)
    elif provider in _CLOUDS:
        from agentd.models import cloud

        cloud.check_environment(_CLOUDS[provider], spec, env)
    elif provider == "script":
        load_script(name, spec=spec)
    else:
        _named(spec, providers[provider], env)


def prewarm(specs: list[str], *, sdks: bool = True, http: bool = True) -> None:
    """Do, before forking, the expensive setup the children of these model specs need.

    ``sdks``: import the official SDK of ``bedrock:`` / ``vertex:`` when one
    of them is used (2-3 s). ``http``: the TLS context and HTTP transport
    every HTTP provider uses, and the price database (about 0.35 s
    together); nothing for ``script:`` alone. Specs are not validated here
    (they were, before anything started).
    """
    from agentd.models import _http, pricing

    prefixes = set()
    for spec in specs:
        prefix, sep, _ = spec.partition(":")
        if sep:
            prefixes.add(prefix)
    if http and prefixes - {"script"}:
        _http.prewarm()
        pricing.prewarm()
    if sdks:
        for provider in sorted(prefixes & _CLOUDS.keys()):
            from agentd.models import cloud

            if not cloud.missing_modules(_CLOUDS[provider]):
                cloud.prewarm(_CLOUDS[provider])


def make_model(
    spec: str,
    *,
    env: Mapping[str, str],
    providers: Providers | None = None,
    settings: ModelSettings | None = None,
    max_tokens: int | None = None,
    timeout: float = DEFAULT_MODEL_TIMEOUT_S,
    telemetry: Telemetry | None = None,
    sleep: Sleep = trio.sleep,
    rng: random.Random | None = None,
    wall_clock: Callable[[], float] = time.time,
    max_attempts: int = MAX_ATTEMPTS,
) -> Model:
    """Build the model a spec names (validating it first; no network I/O until ``complete``).

    Args:
        spec: ``PROVIDER:MODEL`` (see the module docstring) or ``script:FILE``.
        env: where the provider's base URL and key are read from (``os.environ`` in production).
        providers: the ``[providers.NAME]`` endpoints.
        settings: the model settings sent with every call (see :mod:`agentd.models.settings`).
        max_tokens: the older spelling of ``settings.max_output_tokens``.
        timeout: the deadline of one model call in seconds, retries included
            (``--model-timeout``; HTTP providers only).
        telemetry: receives ``model.retry`` events.
        sleep, rng, wall_clock, max_attempts: retry seams for tests.

    Raises:
        ConfigError: see :func:`validate_model_spec`, and settings the provider cannot take.
    """
    if max_tokens is not None and max_tokens < 1:
        raise ConfigError("max_tokens", max_tokens, "use a positive number of tokens, or leave it unset")
    providers = providers or {}
    settings = settings or ModelSettings()
    if max_tokens is not None and settings.max_output_tokens is None:
        settings = settings.merged(ModelSettings(max_output_tokens=max_tokens))
    validate_model_spec(spec, env, providers=providers)
    problems = settings_problems(spec, settings, providers)
    if problems:
        raise ConfigError(f"model_settings.{problems[0].key}", problems[0].value, problems[0].fix)
    provider, name = parse_model_spec(spec, providers)
    seams: PosterOptions = {
        "timeout": timeout,
        "sleep": sleep,
        "rng": rng,
        "wall_clock": wall_clock,
        "telemetry": telemetry,
        "max_attempts": max_attempts,
    }
    if provider == "openai" or provider == "openai-responses":
        url = _base_url(spec, env, "OPENAI_BASE_URL", _openai.DEFAULT_BASE_URL)
        api_key = _check_key(spec, env, "OPENAI_API_KEY", url, _openai.DEFAULT_BASE_URL)
        return _http_class("responses" if provider == "openai-responses" else "chat")(
            name, base_url=url, api_key=api_key, settings=settings, **seams
        )
    if provider == "anthropic":
        url = _base_url(spec, env, "ANTHROPIC_BASE_URL", _anthropic.DEFAULT_BASE_URL)
        return _anthropic.AnthropicModel(
            name,
            base_url=url,
            api_key=_check_key(spec, env, "ANTHROPIC_API_KEY", url, _anthropic.DEFAULT_BASE_URL),
            settings=settings,
            **seams,
        )
    if provider == "azure":
        azure = _azure(spec, name, env)
        return _openai.OpenAIModel(
            name,
            url=azure.url,
            headers=azure.headers,
            settings=settings,
            provider="azure",
            price_provider="azure",
            auth_fix=(
                "set AZURE_OPENAI_API_KEY to the resource's key, or AZURE_OPENAI_AD_TOKEN to a valid "
                "Microsoft Entra token for it (AZURE_OPENAI_ENDPOINT)"
            ),
            base_url_var="AZURE_OPENAI_ENDPOINT; the deployment is the name after 'azure:'",
            **seams,
        )
    if provider in _CLOUDS:
        from agentd.models.cloud import CloudAnthropicModel

        return CloudAnthropicModel(
            name, provider=_CLOUDS[provider], settings=settings, timeout=timeout, max_attempts=max_attempts
        )
    if provider == "script":
        return ScriptModel(
            load_script(name, spec=spec), name=name, sleep=sleep, images=settings.images is not False
        )
    config = providers[provider]
    if settings.images is None and config.images is not None:
        settings = replace(settings, images=config.images)
    return _http_class(config.api)(
        name,
        base_url=config.base_url,
        api_key=_named(spec, config, env),
        headers=dict(config.headers),
        settings=settings,
        provider=config.name,
        price_provider=config.prices,
        auth_fix=(
            f"set {config.api_key_env} to a valid key for [providers.{config.name}]"
            if config.api_key_env
            else f"give [providers.{config.name}] an api_key_env, or the headers its server expects"
        ),
        base_url_var=f"[providers.{config.name}] base_url",
        **seams,
    )


def _http_class(api: ProviderApi) -> type[HttpModel]:
    """The client class of a wire API (the Responses client is imported only when used)."""
    if api == "responses":
        from agentd.models.responses import ResponsesModel

        return ResponsesModel
    if api == "messages":
        return _anthropic.AnthropicModel
    return _openai.OpenAIModel
