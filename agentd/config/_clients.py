"""The MCP server configurations other clients write, translated to agentd's server tables.

agentd reads four formats people already have, so a server list never has
to be rewritten by hand:

* the ``{"mcpServers": {...}}`` JSON of Claude Desktop / Claude Code, Cursor,
  Windsurf, Cline and most others (``type`` ``stdio``, ``http`` /
  ``streamable-http`` / Cline's ``streamableHttp`` (also as ``transportType``)
  or ``sse``; Windsurf's ``serverUrl`` and ``disabledTools``; ``${env:VAR}``
  references, as Windsurf and Cursor write them);
* VS Code's ``{"servers": {...}}`` (``.vscode/mcp.json``, or ``"mcp":
  {"servers": ...}`` inside a settings file), with ``${env:VAR}`` references;
* Codex's ``[mcp_servers.NAME]`` TOML tables (``~/.codex/config.toml``);
* goose's ``extensions:`` YAML mapping (``~/.config/goose/config.yaml``):
  ``stdio``, ``sse`` and ``streamable_http`` extensions; its ``builtin``
  ones (and the other kinds that run inside goose) and disabled ones are
  skipped with a warning that names them.

A document in a format agentd does not read (Zed's ``context_servers``,
opencode's ``mcp``, Continue's YAML ``mcpServers`` list, agentd's own
``agentd.toml``) is named as that format in the error, with the fix.

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

__all__ = [
    "ClientFormat",
    "Translated",
    "detect_json_format",
    "translate_codex",
    "translate_goose",
    "translate_json",
]

ClientFormat = Literal["mcpServers", "vscode", "codex", "goose"]
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
        "serverUrl",  # Windsurf's url
        "transportType",  # Cline's older spelling of type
        "disabledTools",  # Windsurf's and Cline's tools turned off
    }
)

#: ``type`` values of the JSON formats and the agentd transport each means
#: (``streamableHttp``: Cline; ``streamable_http``: goose and others).
_JSON_TYPES: dict[str, str] = {
    "stdio": "stdio",
    "http": "http",
    "streamable-http": "http",
    "streamableHttp": "http",
    "streamable_http": "http",
    "sse": "sse",
}
_JSON_TYPES_SHOWN = "use stdio, http, streamable-http or sse (Cline's streamableHttp is read as http)"

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

#: goose extension types agentd starts, and the transport each means.
_GOOSE_TYPES: dict[str, str] = {"stdio": "stdio", "sse": "sse", "streamable_http": "http"}

#: goose extension types that run inside goose itself: skipped with a warning.
_GOOSE_INSIDE: dict[str, str] = {
    "builtin": "a goose builtin extension: it runs inside goose",
    "platform": "a goose platform extension: it runs inside goose",
    "frontend": "a goose frontend extension: its tools are goose's user interface",
    "inline_python": "a goose inline_python extension: goose runs its code",
}

#: goose's own bookkeeping in an extension: used by nobody else, not reported.
_GOOSE_QUIET = frozenset({"name", "description", "display_name", "bundled", "enabled", "type"})

#: Keys of a goose extension agentd reads, per kind, and the key of agentd's server table each fills
#: (``env_keys`` adds to ``env``); the rest are named as not used.
_GOOSE_STDIO: dict[str, str] = {
    "cmd": "command",
    "args": "args",
    "envs": "env",
    "env_keys": "env",
    "cwd": "cwd",
    "timeout": "timeout",
    "available_tools": "allowed_tools",
}
_GOOSE_REMOTE: dict[str, str] = {
    "uri": "url",
    "headers": "headers",
    "timeout": "timeout",
    "available_tools": "allowed_tools",
}

_VSCODE_ENV_RE = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}")
_VSCODE_OTHER_RE = re.compile(r"\$\{(input|command|config|workspaceFolder[A-Za-z]*|userHome)(?::[^}]*)?\}")
# Windsurf's ${file:PATH}: agentd does no I/O while it translates, and a file is no variable.
_WINDSURF_FILE_RE = re.compile(r"\$\{file:[^}]*\}")


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


#: Formats agentd does not read, told by a key: the key, what the file is, and the fix.
_UNREAD_FORMATS: tuple[tuple[str, str, str], ...] = (
    (
        "context_servers",
        "Zed's settings (context_servers)",
        'write the servers as {"mcpServers": {NAME: {"command": …, "args": […]}}} in a file of their own',
    ),
    (
        "mcp",
        "opencode's config (mcp)",
        'write the servers as {"mcpServers": {NAME: {"command": …, "args": […]}}} '
        '(opencode\'s command list is "command" plus "args")',
    ),
    (
        "extensions",
        "goose's extensions, as JSON",
        "give goose's config.yaml itself (agentd reads its YAML), or write the servers as mcpServers JSON",
    ),
)


def _unread_format(doc: object) -> tuple[str, str] | None:
    """``(what the document is, the fix)`` when it is another client's format agentd does not read."""
    if not isinstance(doc, dict):
        return None
    for key, what, fix in _UNREAD_FORMATS:
        servers = doc.get(key)
        if not isinstance(servers, dict):
            continue
        # VS Code's settings have an "mcp" object too: opencode's holds {"type": "local" | "remote"} entries.
        if key == "mcp" and not any(
            isinstance(e, dict) and e.get("type") in ("local", "remote") for e in servers.values()
        ):
            continue
        return what, fix
    return None


def translate_json(doc: object, *, label: str, duplicates: frozenset[str] = frozenset()) -> Translated:
    """Translate an ``mcpServers`` or VS Code ``servers`` document.

    Cline's ``streamableHttp`` (as ``type`` or its older ``transportType``)
    is Streamable HTTP; Windsurf's ``serverUrl`` is ``url`` and its
    ``disabledTools`` (Cline's too) are ``disallowed_tools``; ``${env:VAR}``
    (Windsurf, Cursor, VS Code) is ``${VAR}``.

    Args:
        doc: the parsed JSON.
        label: how the file is named in messages.
        duplicates: server names the file defines twice (reported, not used).

    Raises:
        ConfigError: the document holds no server object at all (another
            client's format agentd does not read is named as that format).
    """
    found = detect_json_format(doc)
    if found is None:
        unread = _unread_format(doc)
        if unread is not None:
            what, fix = unread
            raise ConfigError(label, str(doc)[:80], f"this is {what}, which agentd does not read; {fix}")
        raise ConfigError(
            label,
            str(doc)[:80],
            'expected a JSON object with an "mcpServers" object (Claude, Cursor, Windsurf, Cline, …) '
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
        table = _json_table(entry, where, out)
        if table is None:
            continue
        try:
            table = {k: _client_refs(v, f"{where}.{k}", vscode=kind == "vscode") for k, v in table.items()}
        except ConfigError as exc:
            out.problems.append(exc)
            continue
        out.add(name, where, table)
    return out


def _json_table(entry: Mapping[str, object], where: str, out: Translated) -> dict[str, object] | None:
    """One JSON entry as agentd's server table; None (a problem added to ``out``) when it cannot be used."""
    table: dict[str, object] = {}
    for key, value in entry.items():
        if key not in _JSON_KEYS:
            out.ignored.append(f"{where}.{key}")
        elif key == "serverUrl":
            if "url" in entry and entry["url"] != value:
                out.problems.append(
                    ConfigError(f"{where}.serverUrl", value, "url and serverUrl differ; keep one")
                )
                return None
            table["url"] = value
        elif key in ("disabledTools", "disallowed_tools"):
            current = table.get("disallowed_tools", [])
            if isinstance(current, list) and isinstance(value, list):
                table["disallowed_tools"] = [*current, *value]
            elif isinstance(current, list):
                table["disallowed_tools"] = value  # not a list: the validation names it
        elif key not in ("type", "transportType", "disabled"):
            table[key] = value
    # Cline reads ``type``, else its older ``transportType``.
    type_key = "type" if entry.get("type") is not None else "transportType"
    kind_value = entry.get(type_key)
    if kind_value is not None:
        transport = _JSON_TYPES.get(kind_value) if isinstance(kind_value, str) else None
        if transport is None:
            out.problems.append(ConfigError(f"{where}.{type_key}", kind_value, _JSON_TYPES_SHOWN))
            return None
        wants = "command" if transport == "stdio" else "url"
        if wants not in table:
            spelled = "'url' (or 'serverUrl')" if wants == "url" else repr(wants)
            out.problems.append(
                ConfigError(f"{where}.{type_key}", kind_value, f"a {kind_value} server needs {spelled}")
            )
            return None
        table["transport"] = transport
    return table


def _client_refs(value: object, where: str, *, vscode: bool) -> object:
    """``${env:VAR}`` -> ``${VAR}``; variables agentd cannot resolve are refused with the fix.

    VS Code's interactive variables (``${input:…}``, ``${workspaceFolder}``, …)
    in a VS Code file, Windsurf's ``${file:PATH}`` in any.
    """
    if isinstance(value, str):
        interactive = _VSCODE_OTHER_RE.search(value) if vscode else None
        if interactive is not None:
            raise ConfigError(
                where,
                interactive.group(0),
                "agentd runs unattended and cannot resolve VS Code variables other than ${env:VAR}; "
                "put the value in an environment variable and write ${env:NAME}",
            )
        read = _WINDSURF_FILE_RE.search(value)
        if read is not None:
            raise ConfigError(
                where,
                read.group(0),
                "agentd does not read files named inside a server file; put the value in an "
                "environment variable and write ${env:NAME}",
            )
        return _VSCODE_ENV_RE.sub(r"${\1}", value)
    if isinstance(value, list):
        return [_client_refs(v, where, vscode=vscode) for v in value]
    if isinstance(value, dict):
        return {k: _client_refs(v, f"{where}.{k}", vscode=vscode) for k, v in value.items()}
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


def translate_goose(doc: object, *, label: str, env: Mapping[str, str]) -> Translated:
    """Translate goose's ``extensions:`` mapping (``~/.config/goose/config.yaml``).

    Each extension is ``{type, enabled, cmd, args, envs, env_keys, uri,
    headers, timeout, available_tools, …}`` and the mapping's key names the
    server. ``stdio`` (``cmd`` -> ``command``, ``args``, ``envs`` -> ``env``,
    ``cwd``), ``sse`` and ``streamable_http`` (``uri`` -> ``url``,
    ``headers``) are read; ``env_keys`` (variables goose fills from its
    keyring) -> ``env`` entries for those that are set; ``timeout``
    (seconds) -> ``timeout``; ``available_tools``, when not empty, ->
    ``allowed_tools``. A ``builtin`` extension (and goose's other kinds that
    run inside goose) and one with ``enabled: false`` are skipped and named
    in :attr:`Translated.ignored`. goose's other settings (provider,
    model, …) are not agentd's and are not reported.

    Raises:
        ConfigError: the document has no ``extensions`` mapping.
    """
    extensions = doc.get("extensions") if isinstance(doc, dict) else None
    if not isinstance(extensions, dict):
        continue_list = isinstance(doc, dict) and isinstance(doc.get("mcpServers"), list)
        raise ConfigError(
            label,
            str(doc)[:80],
            "this is Continue's config.yaml (an mcpServers list), which agentd does not read; write the "
            'servers as {"mcpServers": {NAME: {"command": …, "args": […]}}} JSON'
            if continue_list
            else "expected an extensions: mapping of goose extensions (goose's config.yaml), "
            "or an mcpServers JSON file",
        )
    out = Translated()
    entries = {str(k): v for k, v in extensions.items()}
    for name, where, entry in _server_entries(
        entries, out, at=f"{label}: extensions", entry_noun="a mapping"
    ):
        kind = entry.get("type")
        if entry.get("enabled") is False:
            out.ignored.append(f"{where} (enabled: false in goose)")
            continue
        if isinstance(kind, str) and kind in _GOOSE_INSIDE:
            out.ignored.append(f"{where} ({_GOOSE_INSIDE[kind]}; agentd cannot start it)")
            continue
        transport = _GOOSE_TYPES.get(kind) if isinstance(kind, str) else None
        if transport is None:
            out.problems.append(
                ConfigError(
                    f"{where}.type",
                    kind,
                    "use stdio, sse or streamable_http (goose's builtin, platform, frontend and "
                    "inline_python extensions run inside goose and are skipped)",
                )
            )
            continue
        table = _goose_table(entry, where, transport, env, out)
        if table is not None:
            out.add(name, where, table)
    return out


def _goose_table(
    entry: Mapping[str, object], where: str, transport: str, env: Mapping[str, str], out: Translated
) -> dict[str, object] | None:
    """One goose extension as agentd's server table; None (a problem added to ``out``) when unusable."""
    renames = _GOOSE_STDIO if transport == "stdio" else _GOOSE_REMOTE
    table: dict[str, object] = {"transport": transport}
    for key, value in entry.items():
        if key in _GOOSE_QUIET or value is None:  # goose writes null for a setting it leaves unset
            continue
        if key not in renames:
            # goose writes ``envs: {}`` and ``env_keys: []`` on every extension: only content is news.
            if value or key not in ("envs", "env_keys"):
                out.ignored.append(f"{where}.{key}")
        elif key == "env_keys":
            if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                out.problems.append(ConfigError(f"{where}.env_keys", value, "write a list of variable names"))
                return None
            passed = {v: env[v] for v in value if v in env}
            own = table.get("env", {})
            table["env"] = {**passed, **own} if isinstance(own, dict) else own
        elif key == "envs" and isinstance(value, dict) and isinstance(table.get("env"), dict):
            table["env"] = {**_object(table.get("env")), **value}
        elif key != "available_tools" or value:  # goose: an empty list offers every tool
            table[renames[key]] = value
    needed = "cmd" if transport == "stdio" else "uri"
    if renames[needed] not in table:
        what = "the command" if needed == "cmd" else "its URL"
        out.problems.append(
            ConfigError(f"{where}.{needed}", None, f"a {entry.get('type')} extension needs {needed} ({what})")
        )
        return None
    return table


def _object(value: object) -> dict[str, object]:
    return value if isinstance(value, dict) else {}
