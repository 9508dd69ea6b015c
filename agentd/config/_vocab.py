"""agentd's settings vocabulary: the closed value sets, name rules and defaults, each defined once."""

from __future__ import annotations

import re
from typing import Literal

from agentd.core.limits import DEFAULT_MAX_AGENTS as DEFAULT_MAX_AGENTS
from agentd.core.limits import DEFAULT_MAX_CHILDREN as DEFAULT_MAX_CHILDREN
from agentd.core.limits import DEFAULT_MAX_DEPTH as DEFAULT_MAX_DEPTH
from agentd.core.limits import DEFAULT_MAX_READ_BYTES as DEFAULT_MAX_READ_BYTES
from agentd.core.limits import DEFAULT_MAX_SELF_SUBSCRIPTIONS as DEFAULT_MAX_SELF_SUBSCRIPTIONS
from agentd.core.limits import (
    DEFAULT_MAX_SELF_SUBSCRIPTIONS_PER_SESSION as DEFAULT_MAX_SELF_SUBSCRIPTIONS_PER_SESSION,
)
from agentd.core.limits import DEFAULT_STARTUP_TIMEOUT as DEFAULT_STARTUP_TIMEOUT
from agentd.core.limits import DEFAULT_TOOL_TIMEOUT as DEFAULT_TOOL_TIMEOUT

# The router and the drivers own these; the settings name them, never redefine them.
from agentd.triggers.mode import SessionMode
from agentd.triggers.router import DEFAULT_DEBOUNCE
from agentd.triggers.router import DEFAULT_MAX_INFLIGHT as DEFAULT_MAX_INFLIGHT
from agentd.triggers.router import Mode as Mode
from agentd.triggers.router import Overflow as Overflow

SessionKind = SessionMode
"""Whether each loop shift / timer fire starts a fresh root or continues a warm one."""
DEFAULT_ROUTE_DEBOUNCE = DEFAULT_DEBOUNCE
"""A declared route's debounce unless it sets one (the router's default)."""

OutputFormat = Literal["text", "json", "stream-json"]
"""The result on stdout: text, one JSON object, or NDJSON of every step (``stream-json``)."""
LogLevel = Literal["debug", "info", "warning", "error"]
"""The least telemetry level written on stderr (``--log-level``)."""
LogFormat = Literal["auto", "json", "text", "human"]
"""Telemetry on stderr: NDJSON, every event as text, progress for a person (``human``), or
``human`` on a terminal and NDJSON otherwise (``auto``; rfcs/0320)."""

Disposition = Literal["spawn", "continue"]
"""A route's action: start a fresh root per event, or deliver into one warm session."""

Extract = Literal["auto", "state", "event-log"]
"""How a watch stage turns a re-read resource into events."""

ToolScope = Literal["all", "read-only"]
"""Which upstream tools a route's agents are offered: all, or those annotated read-only."""

Transport = Literal["stdio", "http", "sse"]
"""How agentd talks to an upstream server: a child process, Streamable HTTP, or legacy HTTP+SSE."""

TransportSetting = Literal["stdio", "http", "sse", "auto"]
"""A server's ``transport`` setting: one of :data:`Transport`, or ``auto`` (a url without a
type: Streamable HTTP, falling back to HTTP+SSE when the server refuses it with a 4xx)."""

ProtocolSetting = Literal["auto", "2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"]
"""A server's ``protocol`` setting: ``auto`` (probe ``server/discover``, fall back to the
``initialize`` handshake when the probe fails in any way) or the MCP version to speak, which
skips the probe (rfcs/0285). The versions are the ``mcp`` SDK's known ones (a unit test keeps
them in step)."""

#: Options a ``--mcp-stdio`` / ``--mcp-http`` value takes after the server (``,KEY=VALUE``).
SERVER_FLAG_OPTIONS: dict[str, tuple[str, ...]] = {
    "--mcp-stdio": ("protocol",),
    "--mcp-http": ("protocol", "transport"),
}

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


#: Largest ``@FILE`` instruction or system prompt: far beyond any useful
#: prompt, and it stops ``@/dev/zero`` from eating memory.
MAX_TEXT_FILE_BYTES = 1024 * 1024

#: Largest ``--config`` TOML or ``mcp_config`` JSON file read: a config with
#: hundreds of servers and routes is a few hundred KiB.
MAX_CONFIG_FILE_BYTES = 16 * 1024 * 1024


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
    "continue_conversation": "--continue",
}

#: The ``api`` values of a ``[providers.NAME]`` table.
ProviderApi = Literal["chat", "responses", "messages"]

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
    "tools",
    "allowed_tools",
    "disallowed_tools",
)

_OPTION_RE = re.compile(r"^\s*([a-z_]+)\s*=(.*)$", re.DOTALL)

#: Keys of ``load_settings(flags)`` that are server sources, not settings.
SERVER_FLAG_KEYS = ("mcp_stdio", "mcp_http", "mcp_config", "require")
