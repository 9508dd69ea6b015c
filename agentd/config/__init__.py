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
file, ``@FILE`` instructions, ``mcpServers`` JSON) and Claude Code's agent
files (``.claude/agents``, unless ``claude_agents = false``) is the only I/O. Every
problem becomes a :class:`~agentd.core.errors.ConfigError` whose ``setting`` is
spelled the way the user wrote it (``--max-steps``, ``AGENTD_MAX_STEPS`` or
``agentd.toml: max_steps``); several problems are raised together as
:class:`ConfigErrors`, one line each.

Agent definitions (:class:`AgentDefinition`, ``Settings.agents``; rfcs/0370)
are merged by name from ``--agents`` / ``AGENTD_AGENTS``, ``[agents.NAME]``
and Claude Code's ``.claude/agents/*.md`` files (the working directory's over
the user's); a Claude Code file agentd cannot use is skipped with a warning,
never an error (:func:`agent_warnings`), and a definition that replaces
another is a note (:func:`agent_notes`).

Entry points: :func:`load_settings` (used by the CLI and by tests) and
:func:`effective_config` (the redacted view ``agentd check`` prints).

The package's private modules, from the bottom up: ``_vocab`` (the closed
value sets and defaults, each defined once), ``_problems`` (collected
problems), ``_values`` (value parsers), ``_models`` (servers, routes,
providers, watches), ``_sources`` (the layers and how a setting is spelled in
a message), ``_agents`` (agent definitions and Claude Code's agent files),
``_rules`` (the rules between settings, per mode),
``_settings`` (:class:`Settings`), ``_clients`` and ``_servers`` (the server
files other MCP clients write, and the union of every server source),
``_flags`` (``--route`` / ``--subscribe``), ``_load`` and ``_redaction``.
This module only re-exports.
"""

from __future__ import annotations

from agentd.config._agents import AGENT_NAME_RE, AgentDefinition
from agentd.config._flags import parse_route_spec, parse_subscription
from agentd.config._load import (
    agent_notes,
    agent_warnings,
    deprecations,
    ignored_keys,
    load_settings,
    run_needs,
)
from agentd.config._models import (
    ModelSettingsConfig,
    OAuthSpec,
    ProviderSpec,
    RouteConfig,
    ServerSpec,
    SubscriptionSpec,
    WatchesConfig,
)
from agentd.config._problems import ConfigErrors
from agentd.config._redaction import effective_config, server_secrets
from agentd.config._rules import route_model_settings
from agentd.config._servers import (
    missing_server_commands,
    parse_codex_toml,
    parse_goose_yaml,
    parse_mcp_servers_json,
    parse_server_file,
)
from agentd.config._settings import Settings, read_status_token
from agentd.config._sources import Deprecation
from agentd.config._vocab import (
    DEFAULT_MAX_AGENTS,
    DEFAULT_MAX_CHILDREN,
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_READ_BYTES,
    DEFAULT_STARTUP_TIMEOUT,
    DEFAULT_TOOL_TIMEOUT,
    SERVER_NAME_RE,
    Disposition,
    Extract,
    LogFormat,
    LogLevel,
    Mode,
    OutputFormat,
    Overflow,
    ProtocolSetting,
    SessionKind,
    ToolScope,
    Transport,
    TransportSetting,
)

__all__ = [
    "AGENT_NAME_RE",
    "DEFAULT_MAX_AGENTS",
    "DEFAULT_MAX_CHILDREN",
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_MAX_READ_BYTES",
    "DEFAULT_STARTUP_TIMEOUT",
    "DEFAULT_TOOL_TIMEOUT",
    "SERVER_NAME_RE",
    "AgentDefinition",
    "ConfigErrors",
    "Deprecation",
    "Disposition",
    "Extract",
    "LogFormat",
    "LogLevel",
    "Mode",
    "ModelSettingsConfig",
    "OAuthSpec",
    "OutputFormat",
    "Overflow",
    "ProtocolSetting",
    "ProviderSpec",
    "RouteConfig",
    "ServerSpec",
    "SessionKind",
    "Settings",
    "SubscriptionSpec",
    "ToolScope",
    "Transport",
    "TransportSetting",
    "WatchesConfig",
    "agent_notes",
    "agent_warnings",
    "deprecations",
    "effective_config",
    "ignored_keys",
    "load_settings",
    "missing_server_commands",
    "parse_codex_toml",
    "parse_goose_yaml",
    "parse_mcp_servers_json",
    "parse_route_spec",
    "parse_server_file",
    "parse_subscription",
    "read_status_token",
    "route_model_settings",
    "run_needs",
    "server_secrets",
]
