"""What ``agentd check`` prints: the effective settings with every credential hidden."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from agentd.core.jsonvalue import JSONObject, as_object, get_object
from agentd.core.redact import (
    REDACTED,
    is_secret_key,
    looks_like_token,
    redact,
    registrable,
    secret_values,
    secrets_in,
)

if TYPE_CHECKING:
    from agentd.config._agents import AgentDefinition
    from agentd.config._settings import Settings


def server_secrets(settings: Settings, env: Mapping[str, str] | None = None) -> list[str]:
    """Values of the servers' settings that are credentials: to hide wherever they appear.

    Each ``headers`` and ``env`` value whose name looks like a credential
    (``Authorization``, ``X-Api-Key``, ``Cookie``, ``GITHUB_TOKEN``), a
    header value that looks generated (:func:`agentd.core.redact.looks_like_token`:
    a key under a name that says nothing), the credentials inside every
    other value (``Bearer …``, ``DATABASE_URL=postgres://u:pw@…``), the
    values of credential flags in ``args`` (``-k VALUE``, ``--token=VALUE``),
    the credentials in a server URL (userinfo, secret query parameters), an
    OAuth client secret, and the values of the variables ``bearer_token_env``
    and ``oauth.client_secret_env`` name (read from ``env``, ``os.environ``
    by default), whatever those variables are called. An ordinary header
    (``X-Client: cursor``) is not a secret: registered, it would mask the
    word wherever it appears (rfcs/0300).
    The CLI registers them (:func:`agentd.core.redact.register_secrets`) so that
    no error or event can print them; ``agentd check`` hides them too.
    """
    env = os.environ if env is None else env
    found: list[str] = []
    for spec in settings.servers.values():
        named = [spec.bearer_token_env]
        if spec.oauth is not None:
            named.append(spec.oauth.client_secret_env)
            if spec.oauth.client_secret:
                found.append(spec.oauth.client_secret)
        found += [env[v] for v in named if v is not None and env.get(v)]
        found += _header_secrets(spec.headers)
        found += secret_values(spec.env)
        found += secrets_in(spec.args)
        if spec.url is not None:
            found += secrets_in(spec.url)
    for provider in settings.providers.values():  # [providers.NAME] headers and URLs, the same way
        found += _header_secrets(provider.headers)
        found += secrets_in(provider.base_url)
    return found


def _header_secrets(headers: Mapping[str, str]) -> list[str]:
    """The credentials among HTTP headers: credential-named values, generated-looking ones, shapes inside any."""
    found: list[str] = []
    for name, value in headers.items():
        if not value:
            continue
        if is_secret_key(name) or looks_like_token(value):
            found.append(value)
        found += secrets_in(value)
    return found


def effective_config(
    settings: Settings, env: Mapping[str, str] | None = None, *, show_secrets: bool = False
) -> JSONObject:
    """The settings as a JSON-ready dict, with every credential replaced by ``***``.

    Agent definitions are summed up (source, description, model, tools), not
    printed whole: a system prompt can be pages long.
    Server ``env`` and ``headers`` show their keys only (every value is
    ``***``); everything else goes through :func:`agentd.core.redact.redact`
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
    data: JSONObject = settings.model_dump(mode="json", exclude={"agents"})
    data["agents"] = {name: _agent_summary(d) for name, d in settings.agents.items()}
    if show_secrets:
        return data
    known = [v for v in secret_values(env) + server_secrets(settings, env) if registrable(v)]
    for section, tables in (("servers", ("env", "headers")), ("providers", ("headers",))):
        for entry in (get_object(data, section) or {}).values():
            table_of = as_object(entry) or {}
            for table in tables:
                table_of[table] = _keys_only(get_object(table_of, table) or {})
    return redact(data, extra=sorted(set(known), key=len, reverse=True))


#: Characters of an agent's description ``agentd check`` shows (Claude Code's run to pages of examples).
SHOWN_DESCRIPTION = 200


def _agent_summary(definition: AgentDefinition) -> JSONObject:
    """An agent definition as ``agentd check`` shows it: where it is from, what it is for, what it runs with."""
    description = definition.description
    if len(description) > SHOWN_DESCRIPTION:
        description = description[: SHOWN_DESCRIPTION - 1] + "…"
    return {
        "source": definition.source,
        "description": description,
        "model": definition.model,
        "tools": list(definition.tools) if definition.tools is not None else None,
        "disallowed_tools": list(definition.disallowed_tools),
    }


def _keys_only(table: JSONObject) -> JSONObject:
    """``table`` with every value hidden (``env`` and ``headers`` show their keys only)."""
    return dict.fromkeys(table, REDACTED)
