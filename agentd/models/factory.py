"""Model specs (``provider:name``): validation without I/O, and construction.

Specs:

* ``openai:MODEL``: ``OPENAI_BASE_URL`` (default ``https://api.openai.com/v1``),
  ``OPENAI_API_KEY`` (required only for the default OpenAI URL).
* ``anthropic:MODEL``: ``ANTHROPIC_BASE_URL`` (default ``https://api.anthropic.com``),
  ``ANTHROPIC_API_KEY`` (required only for the default Anthropic URL).
* ``script:FILE``: a script file (see :mod:`agentd.models.script`).

The split is at the first colon, so model names may contain colons
(``openai:llama3.1:8b`` for Ollama).
"""

from __future__ import annotations

import difflib
import random
import time
from collections.abc import Callable, Mapping
from typing import Literal, get_args
from urllib.parse import urlsplit

import trio

from agentd.errors import ConfigError
from agentd.models import anthropic as _anthropic
from agentd.models import openai as _openai
from agentd.models._http import DEFAULT_MODEL_TIMEOUT_S, MAX_ATTEMPTS, Sleep
from agentd.models.base import Model
from agentd.models.script import ScriptModel, load_script
from agentd.telemetry import Telemetry

Provider = Literal["openai", "anthropic", "script"]
"""The provider prefixes a model spec may use."""

PROVIDERS: tuple[Provider, ...] = get_args(Provider)

_EXAMPLES = "openai:gpt-4o-mini, anthropic:claude-sonnet-4-5, or script:examples/scripts/hello.json"


def parse_model_spec(spec: str) -> tuple[Provider, str]:
    """Split ``provider:name`` and check both parts (no I/O).

    Raises:
        ConfigError: no or unknown provider prefix, or an empty / padded name.
    """
    prefix, sep, name = spec.partition(":")
    if not sep:
        guess = "anthropic" if spec.lower().startswith("claude") else "openai"
        raise ConfigError(
            "model",
            spec,
            f"name the provider before the model, e.g. {guess}:{spec.strip() or 'MODEL'} "
            f"(providers: {', '.join(PROVIDERS)})",
        )
    if prefix not in PROVIDERS:
        close = difflib.get_close_matches(prefix.lower(), PROVIDERS, n=1)
        hint = f"did you mean {close[0]}:{name}? " if close else ""
        raise ConfigError(
            "model",
            spec,
            f"unknown provider {prefix!r}; {hint}use one of {', '.join(PROVIDERS)} (e.g. {_EXAMPLES})",
        )
    what = "script file" if prefix == "script" else "model name"
    if not name.strip():
        raise ConfigError("model", spec, f"the {what} after {prefix + ':'!r} is empty; e.g. {_EXAMPLES}")
    if name != name.strip():
        raise ConfigError("model", spec, f"the {what} {name!r} has leading or trailing spaces; remove them")
    return prefix, name


def _base_url(spec: str, env: Mapping[str, str], var: str, default: str) -> str:
    url = env.get(var) or default
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(
            "model", spec, f"{var}={url!r} is not an http(s) URL; set it like {default!r} or unset it"
        )
    return url


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


def validate_model_spec(spec: str, env: Mapping[str, str]) -> None:
    """Check a model spec and its settings before any side effect (no network I/O).

    ``script:`` reads and validates the file; the HTTP providers check the
    base URL and that the default public endpoints have a key.

    Raises:
        ConfigError: with ``setting="model"``, the spec as value, and the fix.
    """
    provider, name = parse_model_spec(spec)
    if provider == "openai":
        url = _base_url(spec, env, "OPENAI_BASE_URL", _openai.DEFAULT_BASE_URL)
        _check_key(spec, env, "OPENAI_API_KEY", url, _openai.DEFAULT_BASE_URL)
    elif provider == "anthropic":
        url = _base_url(spec, env, "ANTHROPIC_BASE_URL", _anthropic.DEFAULT_BASE_URL)
        _check_key(spec, env, "ANTHROPIC_API_KEY", url, _anthropic.DEFAULT_BASE_URL)
    else:
        load_script(name, spec=spec)


def make_model(
    spec: str,
    *,
    env: Mapping[str, str],
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
        spec: ``openai:MODEL``, ``anthropic:MODEL`` or ``script:FILE``.
        env: where the provider's base URL and key are read from (``os.environ`` in production).
        max_tokens: the output-token limit per call (Anthropic default 8192;
            OpenAI: sent only when given).
        timeout: the deadline of one model call in seconds, retries included
            (``--model-timeout``; HTTP providers only).
        telemetry: receives ``model.retry`` events.
        sleep, rng, wall_clock, max_attempts: retry seams for tests.

    Raises:
        ConfigError: see :func:`validate_model_spec`.
    """
    if max_tokens is not None and max_tokens < 1:
        raise ConfigError("max_tokens", max_tokens, "use a positive number of tokens, or leave it unset")
    provider, name = parse_model_spec(spec)
    if provider == "openai":
        url = _base_url(spec, env, "OPENAI_BASE_URL", _openai.DEFAULT_BASE_URL)
        return _openai.OpenAIModel(
            name,
            base_url=url,
            api_key=_check_key(spec, env, "OPENAI_API_KEY", url, _openai.DEFAULT_BASE_URL),
            max_tokens=max_tokens,
            timeout=timeout,
            sleep=sleep,
            rng=rng,
            wall_clock=wall_clock,
            telemetry=telemetry,
            max_attempts=max_attempts,
        )
    if provider == "anthropic":
        url = _base_url(spec, env, "ANTHROPIC_BASE_URL", _anthropic.DEFAULT_BASE_URL)
        return _anthropic.AnthropicModel(
            name,
            base_url=url,
            api_key=_check_key(spec, env, "ANTHROPIC_API_KEY", url, _anthropic.DEFAULT_BASE_URL),
            max_tokens=max_tokens if max_tokens is not None else _anthropic.DEFAULT_MAX_TOKENS,
            timeout=timeout,
            sleep=sleep,
            rng=rng,
            wall_clock=wall_clock,
            telemetry=telemetry,
            max_attempts=max_attempts,
        )
    return ScriptModel(load_script(name, spec=spec), name=name, sleep=sleep)
