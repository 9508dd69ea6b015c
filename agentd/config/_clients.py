"""The MCP server configurations other clients write, translated to agentd's server tables.

agentd reads three formats people already have, so a server list never has
to be rewritten by hand:

* the ``{"mcpServers": {...}}`` JSON of Claude Desktop / Claude Code, Cursor,
  Windsurf, Cline and most others (``type`` ``stdio``, ``http`` /
  ``streamable-http`` or ``sse``);
* VS Code's ``{"servers": {...}}`` (``.vscode/mcp.json``, or ``"mcp":
  {"servers": ...}`` inside a settings file), with ``${env:VAR}`` references;
* Codex's ``[mcp_servers.NAME]`` TOML tables (``~/.codex/config.toml``).

Each translator returns agentd's own server tables (the keys of
:class:`agentd.config.ServerSpec`), the keys it did not use (reported by
name and ignored: they belong to the other client, e.g. ``autoApprove``) and
the problems that make one entry unusable. Validation of the tables, ``${VAR}``
expansion and the union with every other server source stay in
:mod:`agentd.config`. Nothing here does I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal

from agentd.core.errors import ConfigError

__all__ = ["ClientFormat", "Translated", "detect_json_format", "translate_codex", "translate_json"]

ClientFormat = Literal["mcpServers", "vscode", "codex"]
"""Which client wrote a server file."""

#: Keys agentd reads from a JSON server entry, with the agentd extensions.
_JSON_KEYS = frozenset(
    {
        "command",
        "args",
        "env",
        "cwd",
        "url",
        "headers",
        "type",
        "disabled",
        "required",
        "timeout",
        "startup_timeout",
        "bearer_token_env",
        "oauth",
        "allowed_tools",
        "disallowed_tools",
        "protocol",
    }
)

#: ``type`` values of the JSON formats and the agentd transport each means.
_JSON_TYPES: dict[str, str] = {"stdio": "stdio", "http": "http", "streamable-http": "http", "sse": "sse"}

#: Codex keys agentd uses (see :func:`translate_codex` for their meaning).
_CODEX_KEYS = frozenset(
    {
        "command",
        "args",
        "env",
        "cwd",
        "url",
        "enabled",
        "required",
        "bearer_token_env_var",
        "http_headers",
        "env_http_headers",
        "env_vars",
        "startup_timeout_sec",
        "startup_timeout_ms",
        "tool_timeout_sec",
        "enabled_tools",
        "disabled_tools",
    }
)

_VSCODE_ENV_RE = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}")
_VSCODE_OTHER_RE = re.compile(r"\$\{(input|command|config|workspaceFolder[A-Za-z]*|userHome)(?::[^}]*)?\}")


@dataclass
class Translated:
    """The outcome of translating one file."""

    servers: dict[str, dict[str, object]] = field(default_factory=dict)
    """Server name -> agentd server table (not yet validated, ``${VAR}`` not yet expanded)."""
    ignored: list[str] = field(default_factory=list)
    """Keys that were not used, spelled ``LABEL: mcpServers.NAME.KEY``."""
    problems: list[ConfigError] = field(default_factory=list)
    """Entries that cannot be used (each names the entry and the fix)."""
    wheres: dict[str, str] = field(default_factory=dict)
    """Server name -> how its keys are spelled in messages (``LABEL: servers.NAME``)."""

    def add(self, name: str, where: str, table: dict[str, object]) -> None:
        """Record server ``name``'s table and how its keys are spelled in messages."""
        self.servers[name] = table
        self.wheres[name] = where


def _server_entries(
    servers: Mapping[str, object],
    out: Translated,
    *,
    at: str,
    entry_noun: str,
    duplicates: frozenset[str] = frozenset(),
) -> Iterator[tuple[str, str, Mapping[str, object]]]:
    """The entries of a server object that can be translated, as ``(name, where, entry)``.

    ``where`` is ``{at}.{name}``, how the entry is named in messages. A name
    in ``duplicates`` (the file defines it twice) and an entry that is not
    ``entry_noun`` (the format's word for it: "an object", "a table")
    are added to ``out.problems`` as the walk meets them, and left out.
    """
    for name, entry in servers.items():
        where = f"{at}.{name}"
        if name in duplicates:
            out.problems.append(ConfigError(where, name, "defined twice in this file; keep one"))
        elif not isinstance(entry, dict):
            out.problems.append(ConfigError(where, entry, f"each server is {entry_noun} with command or url"))
        else:
            yield name, where, entry


def detect_json_format(doc: object) -> tuple[ClientFormat, Mapping[str, object], str] | None:
    """Which JSON format ``doc`` is, its server object and the key path that holds it."""
    if not isinstance(doc, dict):
        return None
    if isinstance(doc.get("mcpServers"), dict):
        return "mcpServers", doc["mcpServers"], "mcpServers"
    if isinstance(doc.get("servers"), dict):
        return "vscode", doc["servers"], "servers"
    mcp = doc.get("mcp")
    if isinstance(mcp, dict) and isinstance(mcp.get("servers"), dict):
        return "vscode", mcp["servers"], "mcp.servers"
    return None


def translate_json(doc: object, *, label: str, duplicates: frozenset[str] = frozenset()) -> Translated:
    """Translate an ``mcpServers`` or VS Code ``servers`` document.

    Args:
        doc: the parsed JSON.
        label: how the file is named in messages.
        duplicates: server names the file defines twice (reported, not used).

    Raises:
        ConfigError: the document holds no server object at all.
    """
    found = detect_json_format(doc)
    if found is None:
        raise ConfigError(
            label,
            str(doc)[:80],
            'expected a JSON object with an "mcpServers" object (Claude, Cursor, …) '
            'or a "servers" object (VS Code)',
        )
    kind, servers, path = found
    out = Translated()
    assert isinstance(doc, dict)
    for key in doc:
        if key not in (path.split(".")[0], "inputs", "$schema"):
            out.ignored.append(f"{label}: {key}")
    if kind == "vscode" and doc.get("inputs"):
        out.ignored.append(
            f"{label}: inputs (agentd cannot prompt; use ${{env:VAR}} instead of ${{input:ID}})"
        )
    for name, where, entry in _server_entries(
        servers, out, at=f"{label}: {path}", entry_noun="an object", duplicates=duplicates
    ):
        if entry.get("disabled") is True:
            continue
        table: dict[str, object] = {}
        for key, value in entry.items():
            if key in _JSON_KEYS and key not in ("type", "disabled"):
                table[key] = value
            elif key not in _JSON_KEYS:
                out.ignored.append(f"{where}.{key}")
        kind_value = entry.get("type")
        if kind_value is not None:
            transport = _JSON_TYPES.get(kind_value) if isinstance(kind_value, str) else None
            if transport is None:
                out.problems.append(
                    ConfigError(f"{where}.type", kind_value, "use stdio, http, streamable-http or sse")
                )
                continue
            wants = "command" if transport == "stdio" else "url"
            if wants not in entry:
                out.problems.append(
                    ConfigError(f"{where}.type", kind_value, f"a {kind_value} server needs {wants!r}")
                )
                continue
            table["transport"] = transport
        if kind == "vscode":
            try:
                table = {k: _vscode_refs(v, f"{where}.{k}") for k, v in table.items()}
            except ConfigError as exc:
                out.problems.append(exc)
                continue
        out.add(name, where, table)
    return out


def _vscode_refs(value: object, where: str) -> object:
    """``${env:VAR}`` -> ``${VAR}``; VS Code's interactive variables are refused with the fix."""
    if isinstance(value, str):
        other = _VSCODE_OTHER_RE.search(value)
        if other is not None:
            raise ConfigError(
                where,
                other.group(0),
                "agentd runs unattended and cannot resolve VS Code variables other than ${env:VAR}; "
                "put the value in an environment variable and write ${env:NAME}",
            )
        return _VSCODE_ENV_RE.sub(r"${\1}", value)
    if isinstance(value, list):
        return [_vscode_refs(v, where) for v in value]
    if isinstance(value, dict):
        return {k: _vscode_refs(v, f"{where}.{k}") for k, v in value.items()}
    return value


def translate_codex(doc: Mapping[str, object], *, label: str, env: Mapping[str, str]) -> Translated:
    """Translate Codex's ``[mcp_servers.NAME]`` tables.

    ``bearer_token_env_var`` -> ``bearer_token_env``; ``http_headers`` ->
    ``headers``; ``env_http_headers`` (header -> variable) -> ``headers`` with
    ``${VAR}``; ``env_vars`` (names passed through) -> ``env`` entries for the
    variables that are set; ``startup_timeout_sec`` / ``startup_timeout_ms``
    -> ``startup_timeout``; ``tool_timeout_sec`` -> ``timeout``;
    ``enabled_tools`` / ``disabled_tools`` -> ``allowed_tools`` /
    ``disallowed_tools``; ``enabled = false`` skips the server. Codex's other
    settings (model, approvals, …) in the same file are not agentd's and are
    not reported.

    Raises:
        ConfigError: the file has no ``[mcp_servers]`` table.
    """
    servers = doc.get("mcp_servers")
    if not isinstance(servers, dict):
        raise ConfigError(
            label, str(servers)[:80], "expected [mcp_servers.NAME] tables (the Codex config.toml format)"
        )
    out = Translated()
    for name, where, entry in _server_entries(servers, out, at=f"{label}: mcp_servers", entry_noun="a table"):
        if entry.get("enabled") is False:
            continue
        table: dict[str, object] = {}
        headers: dict[str, object] = {}
        passed: dict[str, str] = {}
        for key, value in entry.items():
            if key not in _CODEX_KEYS:
                out.ignored.append(f"{where}.{key}")
            elif key in ("command", "args", "env", "cwd", "url", "required"):
                table[key] = value
            elif key == "bearer_token_env_var":
                table["bearer_token_env"] = value
            elif key == "http_headers":
                headers = {**headers, **(value if isinstance(value, dict) else {})}
                table["headers"] = headers
                if not isinstance(value, dict):
                    out.problems.append(
                        ConfigError(f"{where}.{key}", value, "write a table of header = value")
                    )
            elif key == "env_http_headers":
                if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
                    refs = {h: f"${{{var}}}" for h, var in value.items()}
                    headers = {**headers, **refs}
                    table["headers"] = headers
                else:
                    out.problems.append(
                        ConfigError(f"{where}.{key}", value, "write a table of header = ENV_VAR_NAME")
                    )
            elif key == "env_vars":
                if isinstance(value, list) and all(isinstance(v, str) for v in value):
                    passed = {v: env[v] for v in value if v in env}
                else:
                    out.problems.append(
                        ConfigError(f"{where}.{key}", value, "write a list of variable names")
                    )
            elif key == "startup_timeout_sec":
                table["startup_timeout"] = value
            elif key == "startup_timeout_ms":
                table["startup_timeout"] = (
                    value / 1000 if isinstance(value, int | float) and not isinstance(value, bool) else value
                )
            elif key == "tool_timeout_sec":
                table["timeout"] = value
            elif key == "enabled_tools":
                table["allowed_tools"] = value
            elif key == "disabled_tools":
                table["disallowed_tools"] = value
        if passed:
            own = table.get("env")
            table["env"] = {**passed, **own} if isinstance(own, dict) else passed if own is None else own
        out.add(name, where, table)
    return out
