"""Loading: read the TOML file, assemble the server union, build and validate :class:`Settings`."""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import (
    ValidationError,
)
from pydantic_settings import (
    SettingsError,
)

from agentd.config._agents import claude_definitions, merged, own_definitions
from agentd.config._flags import parse_route_spec
from agentd.config._problems import _problems_of, _raise_all
from agentd.config._servers import _as_path_list, _collect_servers
from agentd.config._settings import Settings
from agentd.config._sources import (
    Deprecation,
    _LoadContext,
    _loading,
    _renamed_settings,
    _spell,
    _spell_in,
    _translate,
)
from agentd.config._values import _expand_user, not_a_file_fix
from agentd.config._vocab import MAX_CONFIG_FILE_BYTES, MODEL_SETTING_FLAGS, SERVER_FLAG_KEYS
from agentd.core.errors import ConfigError, NotAFile
from agentd.state.files import read_regular_file


def _read_toml(path: Path) -> dict[str, object]:
    try:
        if "\x00" in str(path):
            raise OSError(0, "a path cannot contain a NUL character")
        raw = read_regular_file(path, MAX_CONFIG_FILE_BYTES)
        if len(raw) > MAX_CONFIG_FILE_BYTES:
            raise ConfigError(
                "--config", str(path), f"the config file is larger than {MAX_CONFIG_FILE_BYTES} bytes"
            )
    except NotAFile as exc:
        raise ConfigError("--config", str(path), f"it {exc.problem}; {not_a_file_fix(exc.kind)}") from None
    except OSError as exc:
        raise ConfigError(
            "--config",
            str(path),
            f"cannot read the config file ({exc.strerror or exc}); check the path and permissions",
        ) from None
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError("--config", str(path), "the config file is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("--config", str(path), f"not valid TOML: {exc}") from None


def _file_relative(data: dict[str, object], folder: Path) -> dict[str, object]:
    """``data`` (a parsed config file) with the relative input paths it names made relative to ``folder``."""

    def anchor(path: str) -> str:
        expanded = _expand_user(Path(path))
        return str(expanded if expanded.is_absolute() else folder / expanded)

    def anchored(table: dict[str, object], keys: tuple[str, ...]) -> dict[str, object]:
        out = dict(table)
        model = out.get("model")
        if isinstance(model, str) and model.startswith("script:") and model[len("script:") :].strip():
            out["model"] = "script:" + anchor(model[len("script:") :])
        for key in keys:
            value = out.get(key)
            if (
                isinstance(value, str)
                and value.startswith("@")
                and not value.startswith("@@")
                and len(value) > 1
            ):
                out[key] = "@" + anchor(value[1:])
        return out

    out = anchored(data, ("instruction", "system"))
    agents = out.get("agents")
    if isinstance(agents, dict):  # [agents.NAME] model and system read files too
        out["agents"] = {
            name: anchored(table, ("system",)) if isinstance(table, dict) else table
            for name, table in agents.items()
        }
    mcp = out.get("mcp_config")
    if isinstance(mcp, str):
        out["mcp_config"] = anchor(mcp)
    elif isinstance(mcp, list):
        out["mcp_config"] = [anchor(v) if isinstance(v, str) else v for v in mcp]
    return out


def load_settings(
    flags: Mapping[str, Any],
    *,
    config_file: Path | None = None,
    env: Mapping[str, str] | None = None,
    run_inputs: bool = True,
) -> Settings:
    """Build and validate the settings from every layer.

    Args:
        flags: settings given on the command line, keyed by field name
            (``max_steps``, ``interval``, ``routes`` …); only the keys present
            override lower layers. ``routes`` may hold ``--route`` strings and
            ``subscriptions`` ``--subscribe`` strings. The server sources
            ``mcp_stdio``, ``mcp_http`` (lists of ``NAME=…`` strings),
            ``mcp_config`` (list of paths) and ``require`` (server names)
            are also taken from here.
        config_file: the TOML file (``--config``); when None,
            ``AGENTD_CONFIG`` from ``env`` names it, if set.
        env: the environment (``os.environ`` when None).
        run_inputs: require a model and the instruction the mode needs
            (False for ``agentd check``: :func:`run_needs` says what a run
            would still need).

    Returns:
        The frozen, fully validated settings.

    Raises:
        ConfigError: the first problem, or :class:`ConfigErrors` when
            there are several. Nothing has been started or written.
    """
    env = os.environ if env is None else env
    flags = {k: v for k, v in flags.items() if v is not None}
    if config_file is None and env.get("AGENTD_CONFIG"):
        config_file = Path(env["AGENTD_CONFIG"])
    file_label = "config file"
    file_data: dict[str, object] = {}
    file_mcp: list[Path] = []
    problems: list[ConfigError] = []
    if config_file is not None:
        config_file = _expand_user(Path(config_file))
        file_label = str(config_file)
        # Relative paths the file reads (model script:, @FILE, mcp_config)
        # resolve against the file's folder, so a config and its scripts move
        # together; watch_state, where agentd writes, stays relative to the
        # working directory (rfcs/0137).
        file_data = _file_relative(_read_toml(config_file), config_file.parent)
        if "subscribe" in file_data:
            if "subscriptions" in file_data:
                problems.append(
                    ConfigError(
                        f"{file_label}: subscribe",
                        file_data["subscribe"],
                        "use subscribe or [[subscriptions]], not both",
                    )
                )
            else:
                file_data["subscriptions"] = file_data.pop("subscribe")
        if "mcp_config" in file_data:
            try:
                file_mcp = [
                    _expand_user(p)
                    for p in _as_path_list(file_data.pop("mcp_config"), f"{file_label}: mcp_config")
                ]
            except ConfigError as exc:
                problems.append(exc)
    file_servers = file_data.pop("servers", None)
    # Definitions are merged by name from several sources, like servers (rfcs/0370).
    agents = own_definitions(
        flag=flags.get("agents"), env=env, file=file_data.pop("agents", None), file_label=file_label
    )
    problems.extend(agents.problems)

    ignored: list[str] = []
    try:
        servers = _collect_servers(file_servers, file_mcp, flags, env, file_label, ignored)
    except ConfigError as exc:
        problems.extend(_problems_of(exc))
        servers = {}

    settings_flags = {k: v for k, v in flags.items() if k not in (*SERVER_FLAG_KEYS, "servers", "agents")}
    routes = settings_flags.get("routes")
    if isinstance(routes, list):
        parsed: list[object] = []
        for item in routes:
            if isinstance(item, str):
                try:
                    parsed.append(parse_route_spec(item))
                except ConfigError as exc:
                    problems.append(exc)
            else:
                parsed.append(item)
        settings_flags["routes"] = parsed
    _raise_all(problems)

    ctx = _LoadContext(env=env, file_data=file_data, file_label=file_label, run_inputs=run_inputs)
    deprecations = _renamed_settings(settings_flags, ctx)
    given = {k: settings_flags.pop(k) for k in MODEL_SETTING_FLAGS if k in settings_flags}
    if given:
        settings_flags["model_settings"] = {**(settings_flags.get("model_settings") or {}), **given}
        ctx.flag_model_settings = frozenset(given)
    with _loading(ctx):
        try:
            settings = Settings(**settings_flags, servers=servers)
        except ValidationError as exc:
            raise _translate(exc, lambda loc: _spell_in(loc, ctx), Settings) from None
        except SettingsError as exc:
            # pydantic-settings could not decode an AGENTD_… value (bad JSON).
            m = re.search(r'field "([^"]+)"', str(exc))
            name = m.group(1) if m else "settings"
            raw = next((v for k, v in env.items() if k.upper() == f"AGENTD_{name.upper()}"), None)
            raise ConfigError(
                f"AGENTD_{name.upper()}",
                raw,
                'list and table settings in the environment are JSON, e.g. \'["a", "b"]\'',
            ) from None
    if settings.claude_agents:
        claude_definitions(agents)
    definitions = merged(agents, env, settings.providers)
    _raise_all(agents.problems)
    settings = settings.model_copy(update={"agents": definitions})
    settings._deprecations = tuple(deprecations)
    settings._ignored = tuple(ignored)
    settings._agent_warnings = tuple(agents.warnings)
    settings._agent_notes = tuple(agents.notes)
    return settings


def run_needs(settings: Settings) -> list[ConfigError]:
    """What a run with ``settings`` would still need (a model, an instruction), each with its fix.

    Empty for settings :func:`load_settings` validated with ``run_inputs``.
    """
    from agentd.config._rules import run_needs as needs

    return [ConfigError(_spell(p.loc, {}, "config file"), p.value, p.fix) for p in needs(settings)]


def ignored_keys(settings: Settings) -> tuple[str, ...]:
    """Keys of other clients' MCP server files that agentd did not use (to warn about, by name)."""
    return settings._ignored


def agent_warnings(settings: Settings) -> tuple[str, ...]:
    """What agentd did not use of the agent definitions it read, and why (to warn about, each a line).

    Claude Code's built-in tools, fields and model aliases; files it skipped
    (unreadable, too large, no valid front matter). See ``rfcs/0370``.
    """
    return settings._agent_warnings


def agent_notes(settings: Settings) -> tuple[str, ...]:
    """Agent definitions replaced by a higher source's of the same name (info: one line each)."""
    return settings._agent_notes


def deprecations(settings: Settings) -> tuple[Deprecation, ...]:
    """The deprecated setting names ``settings`` was loaded with (to warn about; see ``rfcs/0167``)."""
    return settings._deprecations
