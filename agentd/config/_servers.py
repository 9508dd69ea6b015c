"""MCP servers from every source (tables, files other clients write, flags) and their union."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import (
    ValidationError,
)

from agentd.config._clients import Translated, translate_codex, translate_goose, translate_json
from agentd.config._models import ServerSpec
from agentd.config._problems import _join, _problems_of, _raise_all
from agentd.config._sources import _translate
from agentd.config._values import _expand_user, json_noting_duplicates, not_a_file_fix
from agentd.config._vocab import _ENV_REF_RE, _OPTION_RE, MAX_CONFIG_FILE_BYTES, SERVER_FLAG_OPTIONS
from agentd.core.errors import ConfigError, NotAFile
from agentd.state.files import read_regular_file

if TYPE_CHECKING:
    from agentd.config._settings import Settings

_T = TypeVar("_T")


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


def _expand_server(table: Mapping[str, object], env: Mapping[str, str], where: str) -> dict[str, object]:
    out = dict(table)
    for key in ("command", "url", "cwd"):
        value = out.get(key)
        if isinstance(value, str):
            out[key] = _expand_env_refs(value, env, f"{where}.{key}")
    args = out.get("args")
    if isinstance(args, list):
        out["args"] = [_expand_env_refs(a, env, f"{where}.args") if isinstance(a, str) else a for a in args]
    for key in ("oauth", "env", "headers"):
        table_of = out.get(key)
        if isinstance(table_of, dict):
            out[key] = {
                k: _expand_env_refs(v, env, f"{where}.{key}.{k}") if isinstance(v, str) else v
                for k, v in table_of.items()
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


def parse_mcp_servers_json(
    text: str, *, label: str, env: Mapping[str, str] | None = None, ignored: list[str] | None = None
) -> dict[str, ServerSpec]:
    """Servers from the ``mcpServers`` JSON (Claude, Cursor, …) or VS Code's ``servers`` JSON.

    Each entry is ``{"command", "args"?, "env"?, "cwd"?}`` (stdio) or
    ``{"url" (Windsurf: "serverUrl"), "headers"?}`` (HTTP), optionally with
    ``"type": "stdio" | "http" | "streamable-http" | "streamableHttp" (Cline) |
    "sse"`` (Cline's older ``transportType`` too; checked against the keys present),
    ``timeout`` (seconds per tool call) and the agentd extensions
    (``required``, ``startup_timeout``, ``bearer_token_env``, ``oauth``,
    ``allowed_tools``, ``disallowed_tools``, ``protocol``). A ``url`` with
    no ``type`` is ``auto``: Streamable HTTP, else HTTP+SSE. Entries with ``"disabled":
    true`` are skipped. ``${VAR}`` / ``${VAR:-default}`` (and VS Code's
    ``${env:VAR}``) in strings are expanded from ``env``. Keys agentd does not
    use are appended to ``ignored`` (spelled ``LABEL: mcpServers.NAME.KEY``).

    Raises:
        ConfigError: naming ``{label}: mcpServers.NAME.FIELD``.
    """
    env = os.environ if env is None else env
    try:
        doc, duplicates = json_noting_duplicates(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ConfigError(
            label, text[:80], f'not valid JSON ({exc}); write {{"mcpServers": {{...}}}}'
        ) from None
    translated = translate_json(doc, label=label, duplicates=frozenset(duplicates))
    return _validated(translated, env, label, ignored)


def parse_codex_toml(
    text: str, *, label: str, env: Mapping[str, str] | None = None, ignored: list[str] | None = None
) -> dict[str, ServerSpec]:
    """Servers from Codex's ``[mcp_servers.NAME]`` TOML (see ``agentd.config._clients.translate_codex``).

    Raises:
        ConfigError: naming ``{label}: mcp_servers.NAME.FIELD``.
    """
    env = os.environ if env is None else env
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(label, text[:80], f"not valid TOML ({exc}); fix the syntax") from None
    if "mcp_servers" not in doc and isinstance(doc.get("servers"), dict):
        raise ConfigError(
            label,
            text[:80],
            "this is agentd's own config file ([servers.NAME] tables), not another client's server file; "
            "give it with --config (or AGENTD_CONFIG)",
        )
    return _validated(translate_codex(doc, label=label, env=env), env, label, ignored)


def parse_goose_yaml(
    text: str, *, label: str, env: Mapping[str, str] | None = None, ignored: list[str] | None = None
) -> dict[str, ServerSpec]:
    """Servers from goose's ``config.yaml`` ``extensions:`` (see ``agentd.config._clients.translate_goose``).

    Skipped extensions (``builtin``, ``enabled: false``) and keys agentd
    does not use are appended to ``ignored``.

    Raises:
        ConfigError: naming ``{label}: extensions.NAME.FIELD``.
    """
    import yaml  # only when a YAML file is given: it costs an import every other start would pay

    env = os.environ if env is None else env
    try:
        # An alias (*name) repeats a node by reference: a few lines can stand for a value whose
        # text, shown in an error, would not fit in memory. goose never writes one.
        if any(isinstance(event, yaml.AliasEvent) for event in yaml.parse(text, Loader=yaml.SafeLoader)):
            raise ConfigError(
                label, text[:80], "YAML aliases (*name) are not read; write each value out where it is used"
            )
        doc = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError) as exc:
        raise ConfigError(label, text[:80], f"not valid YAML ({exc}); fix the syntax") from None
    return _validated(translate_goose(doc, label=label, env=env), env, label, ignored)


def _validated(
    translated: Translated, env: Mapping[str, str], label: str, ignored: list[str] | None
) -> dict[str, ServerSpec]:
    problems: list[ConfigError] = list(translated.problems)
    out: dict[str, ServerSpec] = {}
    for name, table in translated.servers.items():
        where = translated.wheres[name]
        try:
            out[name] = _server_spec(name, _expand_server(table, env, where), where=where, source=label)
        except ConfigError as exc:
            problems.extend(_problems_of(exc))
    _raise_all(problems)
    if ignored is not None:
        ignored.extend(translated.ignored)
    return out


def parse_server_file(
    text: str, *, label: str, path: Path, env: Mapping[str, str], ignored: list[str] | None = None
) -> dict[str, ServerSpec]:
    """Servers from a file another MCP client wrote: JSON (``mcpServers`` / VS Code), Codex TOML or goose YAML.

    What the text is decides (:func:`server_file_format`), so a goose
    ``config.yaml`` is read as YAML, never reported as "not valid TOML".
    """
    kind = server_file_format(text, path)
    if kind == "toml":
        if path.suffix.lower() != ".toml":
            try:
                tomllib.loads(text)
            except tomllib.TOMLDecodeError as exc:
                raise ConfigError(
                    label,
                    text[:80],
                    f"it is not JSON, TOML or YAML agentd can parse (as TOML: {exc}); give an mcpServers "
                    "JSON file, Codex's config.toml or goose's config.yaml",
                ) from None
        return parse_codex_toml(text, label=label, env=env, ignored=ignored)
    if kind == "yaml":
        return parse_goose_yaml(text, label=label, env=env, ignored=ignored)
    return parse_mcp_servers_json(text, label=label, env=env, ignored=ignored)


ServerFileFormat = Literal["json", "toml", "yaml"]

_SUFFIX_FORMATS: dict[str, ServerFileFormat] = {
    ".json": "json",
    ".toml": "toml",
    ".yaml": "yaml",
    ".yml": "yaml",
}


def server_file_format(text: str, path: Path) -> ServerFileFormat:
    """The format of a server file: its suffix (``.json``, ``.toml``, ``.yaml``/``.yml``) when it has
    one of those, else what the text parses as: JSON (it opens with ``{``, or is a JSON ``[``),
    TOML, or a YAML mapping (goose's ``config.yaml`` under another name); else TOML, whose error
    names the syntax (JSON's for text that opens with ``[``)."""
    by_suffix = _SUFFIX_FORMATS.get(path.suffix.lower())
    if by_suffix is not None:
        return by_suffix
    head = text.lstrip()[:1]
    if head == "{":
        return "json"
    if head == "[":  # a JSON list, or a TOML table header such as [mcp_servers.docs]
        try:
            json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            pass
        else:
            return "json"
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        pass
    else:
        return "toml"
    import yaml

    try:
        doc = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError):
        doc = None
    if isinstance(doc, dict):
        return "yaml"
    return "json" if head == "[" else "toml"


def _flag_options(text: str, where: str) -> tuple[str, dict[str, str]]:
    """Split the trailing ``,KEY=VALUE`` options (:data:`SERVER_FLAG_OPTIONS`) off a server flag.

    Only pieces whose key is one of the flag's options are taken, from the
    end, so a comma inside a command line or a URL stays where it is.
    """
    keys = SERVER_FLAG_OPTIONS[where]
    options: dict[str, str] = {}
    head = text
    while True:
        rest, sep, piece = head.rpartition(",")
        match = _OPTION_RE.match(piece) if sep else None
        if match is None or match.group(1) not in keys:
            return head, options
        key, value = match.group(1), match.group(2).strip()
        if key in options:
            raise ConfigError(where, text, f"{key} is given twice; keep one")
        options[key] = value
        head = rest


def _stdio_flag(text: str, env: Mapping[str, str]) -> ServerSpec:
    where = "--mcp-stdio"
    text, options = _flag_options(text, where)
    name, sep, command = text.partition("=")
    if not sep or not command.strip():
        raise ConfigError(
            where,
            text,
            "write NAME=COMMAND ARGS…[,protocol=VERSION], e.g. --mcp-stdio 'memo=memo-server --db /tmp/m'",
        )
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ConfigError(
            where, text, f"the command does not split like a shell line ({exc}); fix the quoting"
        ) from None
    return _server_spec(
        name.strip(),
        {"command": argv[0], "args": argv[1:], **options},
        where=f"{where} {name.strip()}",
        source=f"--mcp-stdio {name.strip()}",
    )


def _http_flag(text: str) -> ServerSpec:
    where = "--mcp-http"
    text, options = _flag_options(text, where)
    name, sep, url = text.partition("=")
    if not sep or not url.strip():
        raise ConfigError(
            where,
            text,
            "write NAME=URL[,transport=http|sse|auto][,protocol=VERSION], "
            "e.g. --mcp-http 'docs=http://127.0.0.1:8000/mcp'",
        )
    return _server_spec(
        name.strip(),
        {"url": url.strip(), **options},
        where=f"{where} {name.strip()}",
        source=f"--mcp-http {name.strip()}",
    )


def _as_path_list(value: object, where: str) -> list[Path]:
    if isinstance(value, str | Path):
        return [Path(value)]
    if isinstance(value, list) and all(isinstance(v, str | Path) for v in value):
        return [Path(v) for v in value]
    raise ConfigError(
        where,
        value,
        "give a path (or a list of paths) to a server file (mcpServers JSON, Codex TOML, goose YAML)",
    )


def _collect_servers(
    file_servers: object,
    file_mcp: list[Path],
    flags: Mapping[str, Any],
    env: Mapping[str, str],
    file_label: str,
    ignored: list[str] | None = None,
) -> dict[str, ServerSpec]:
    """The union of every server source; a name defined twice is an error naming both.

    Keys of other clients' files that agentd does not use are appended to ``ignored``.
    """
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

    def attempt(fn: Callable[..., _T], *a: object) -> _T | None:
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

                def one(name: str = name, table: object = table, where: str = where) -> ServerSpec:
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
            raw = read_regular_file(path, MAX_CONFIG_FILE_BYTES)
            if len(raw) > MAX_CONFIG_FILE_BYTES:
                problems.append(
                    ConfigError(
                        how, str(path), f"the MCP server file is larger than {MAX_CONFIG_FILE_BYTES} bytes"
                    )
                )
                return
            text = raw.decode("utf-8")
        except NotAFile as exc:
            problems.append(ConfigError(how, str(path), f"it {exc.problem}; {not_a_file_fix(exc.kind)}"))
            return
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
            problems.append(
                ConfigError(how, str(path), f"cannot read the MCP server file ({reason}); check the path")
            )
            return
        specs = attempt(lambda: parse_server_file(text, label=label, path=path, env=env, ignored=ignored))
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
    for spec in out.values():
        problems += _missing_credentials(spec, env)
    _raise_all(problems)
    return out


def _missing_credentials(spec: ServerSpec, env: Mapping[str, str]) -> list[ConfigError]:
    """A credential named by environment variable that is not set: found now, not at the first request."""
    named = [("bearer_token_env", spec.bearer_token_env)]
    if spec.oauth is not None:
        named.append(("oauth.client_secret_env", spec.oauth.client_secret_env))
    return [
        ConfigError(
            f"server {spec.name} ({spec.source}) {key}",
            var,
            f"environment variable {var} is not set; export it (the server's credential) or remove {key}",
        )
        for key, var in named
        if var is not None and not env.get(var)
    ]


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
