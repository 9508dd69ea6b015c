"""Agent definitions (rfcs/0370): ``[agents.NAME]``, ``--agents`` / ``AGENTD_AGENTS`` and Claude Code's files.

Merged by name, highest first: ``--agents`` > ``AGENTD_AGENTS`` > the config
file's ``[agents.NAME]`` > the working directory's ``.claude/agents/*.md`` >
``~/.claude/agents/*.md``; each replacement is kept as a note. What the user
wrote for agentd (the first three) is validated like any setting: a problem
is a :class:`~agentd.core.errors.ConfigError`. Claude Code's files were
written for another program and may sit in a home directory agentd has no
business refusing to start over: a file agentd cannot use is skipped with a
warning, never an error. Claude Code's own vocabulary (its built-in tools,
its other fields, its model aliases) is named in a warning, never silently
dropped.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from agentd.config._problems import ConfigErrors, _join, _problems_of
from agentd.config._sources import _translate
from agentd.config._values import (
    _check_tool_glob,
    _dollars,
    _duration,
    _integer,
    _model_error,
    _read_at_file,
    json_noting_duplicates,
)
from agentd.core.errors import ConfigError, NotAFile
from agentd.state.files import read_regular_file

if TYPE_CHECKING:
    from agentd.config._models import ProviderSpec

AGENT_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
"""An agent definition's name (``agent_start``'s ``type``)."""

#: Largest Claude Code agent file read: the longest real ones are a few KiB of prompt;
#: a file beyond this is not a prompt someone wrote.
MAX_AGENT_FILE_BYTES = 256 * 1024

#: Files read from one ``.claude/agents`` directory (by name order): a directory with more
#: is not a set of agents someone wrote by hand, and start-up must stay quick.
MAX_AGENT_FILES = 256

# fmt: off
#: agentd's own tools, as a model sees them: a definition may name them (the hub defines them).
SELF_TOOLS = frozenset({
    "subscribe", "unsubscribe", "read_resource", "list_resources",
    "watch_start", "watch_stop", "watch_list",
    "agent_start", "agent_wait", "agent_cancel", "agent_list",
})

#: Claude Code's built-in tools: agentd has none of them (its tools are MCP tools, SERVER__TOOL).
CLAUDE_TOOLS = frozenset({
    "Agent", "Bash", "BashOutput", "Edit", "ExitPlanMode", "Glob", "Grep",
    "KillShell", "LS", "MultiEdit", "NotebookEdit", "NotebookRead", "Read", "SlashCommand",
    "Task", "TodoWrite", "WebFetch", "WebSearch", "Write",
})

#: Claude Code's agent fields that mean nothing to agentd (named in a warning, then ignored).
CLAUDE_FIELDS = frozenset({
    "background", "color", "effort", "hooks", "isolation",
    "maxTurns", "mcpServers", "memory", "permissionMode", "skills",
})

#: Claude Code's model aliases: agentd cannot tell which model they mean today.
CLAUDE_MODEL_ALIASES = frozenset({"sonnet", "haiku", "opus"})
# fmt: on

#: The keys of ``[agents.NAME]`` (and of ``--agents``, which also takes Claude Code's).
OWN_KEYS = (
    "description",
    "system",
    "tools",
    "disallowed_tools",
    "model",
    "max_steps",
    "max_tokens",
    "max_usd",
    "deadline",
)

#: ``--agents`` keys in Claude Code's spelling -> agentd's.
_CLAUDE_KEYS = {"prompt": "system", "disallowedTools": "disallowed_tools"}

#: The front matter keys of a Claude Code file that agentd reads -> agentd's field.
_FILE_KEYS = {
    "name": "name",
    "description": "description",
    "tools": "tools",
    "disallowedTools": "disallowed_tools",
    "model": "model",
}

_GLOB_CHARS = frozenset("*?[")

_MODEL_FIX = "name one as PROVIDER:MODEL, e.g. model: anthropic:claude-sonnet-4-5"

Layer = Literal["flag", "env", "file", "project", "user"]
"""Where definitions come from, highest precedence first."""

_LOWEST_FIRST: tuple[Layer, ...] = ("user", "project", "file", "env", "flag")


class AgentDefinition(BaseModel):
    """A kind of agent an agent may start (``agent_start``'s ``type``; rfcs/0370).

    Unset limits and model are the parent's; a child never gets more than its
    parent has left, whatever its definition says.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    """``^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$``."""
    description: str
    """When to use it: the start tool's description lists it."""
    system: str | None = None
    """Its system prompt (``@FILE`` reads a file in agentd's own config)."""
    tools: tuple[str, ...] | None = None
    """Names or fnmatch globs over tool names as the model sees them (``memo__*``,
    ``read_resource``); None: all of the parent's."""
    disallowed_tools: tuple[str, ...] = ()
    """Names or globs never offered to it."""
    model: str | None = None
    """``PROVIDER:MODEL`` (validated like ``--model``); None: the parent's."""
    max_steps: int | None = None
    max_tokens: int | None = None
    max_usd: float | None = None
    deadline: float | None = None
    """Seconds."""
    source: str
    """Where it was defined, as a person reads it (``--agents``, ``.claude/agents/x.md``)."""

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not AGENT_NAME_RE.fullmatch(v):
            raise ValueError(
                "an agent name is 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit"
            )
        return v

    @field_validator("description")
    @classmethod
    def _description(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("say when to use this agent: the model picks agents by their description")
        return v.strip()

    @field_validator("system", mode="before")
    @classmethod
    def _system(cls, v: object) -> object:
        return _read_at_file(v, "system") if isinstance(v, str) else v

    @field_validator("tools", "disallowed_tools")
    @classmethod
    def _globs(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for pattern in v or ():
            _check_tool_glob(pattern)
        return v

    @field_validator("max_steps", "max_tokens", mode="before")
    @classmethod
    def _counts(cls, v: object) -> int | None:
        return None if v is None else _integer(v, minimum=1)

    @field_validator("max_usd", mode="before")
    @classmethod
    def _usd(cls, v: object) -> float | None:
        return None if v is None else _dollars(v)

    @field_validator("deadline", mode="before")
    @classmethod
    def _deadline(cls, v: object) -> float | None:
        return None if v is None else _duration(v, positive=True)

    def offers(self, tool: str) -> bool:
        """Whether a tool the parent holds, named as the model sees it, is offered by this definition."""
        if self.tools is not None and not any(fnmatch.fnmatchcase(tool, g) for g in self.tools):
            return False
        return not any(fnmatch.fnmatchcase(tool, g) for g in self.disallowed_tools)


@dataclass
class _Entry:
    definition: AgentDefinition
    spell: Callable[[str], str] | None
    """How its keys are spelled in an error (None: a Claude Code file, which has warnings only)."""


@dataclass
class _Found:
    """Definitions by layer, and what reading them found: problems (errors), warnings, notes."""

    layers: dict[Layer, dict[str, _Entry]] = field(default_factory=dict)
    problems: list[ConfigError] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# -- tools and models ---------------------------------------------------------------


def _tool_names(value: object) -> list[str] | None:
    """A ``tools`` value as names: a comma-separated string or a list of strings (ValueError otherwise)."""
    if value is None:
        return None
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return [v.strip() for v in value if v.strip()]
    raise ValueError('write tool names or globs as a list (["memo__*", "read_resource"]) or "a, b"')


def _agentd_tools(names: list[str], where: str, field: str) -> tuple[tuple[str, ...], str | None]:
    """``names`` in agentd's spelling (``mcp__S__T`` is ``S__T``), and a warning naming what was dropped.

    Dropped: Claude Code's built-in tools and any plain name that is none of
    agentd's (no ``__``, no glob, not a self-tool): agentd has no such tool.
    """
    kept: list[str] = []
    dropped: list[str] = []
    for name in names:
        if name.startswith("mcp__"):
            rest = name[len("mcp__") :]
            # Claude Code's mcp__SERVER means every tool of SERVER.
            name = rest if "__" in rest else f"{rest}__*"
        base = name.split("(", 1)[0]  # Claude Code's Bash(git:*), Task(worker)
        if base in CLAUDE_TOOLS or (
            "__" not in name and not (_GLOB_CHARS & set(name)) and name not in SELF_TOOLS
        ):
            dropped.append(name)
        else:
            kept.append(name)
    if not dropped:
        return tuple(kept), None
    listed = ", ".join(repr(n) for n in dropped)
    warning = (
        f"{where}: agentd has no tool named {listed} (Claude Code's built-in tools, such as Read and "
        "Bash, are not agentd's); dropped — agentd offers MCP tools as SERVER__TOOL (memo__memo_get, "
        "memo__*; Claude Code's mcp__SERVER__TOOL is read as SERVER__TOOL) and its own by name "
        "(read_resource, subscribe, …)"
    )
    if field == "tools" and not kept:
        warning += "; this agent is offered no tools until you list some"
    return tuple(kept), warning


def _model(value: object, where: str) -> tuple[object, str | None]:
    """``inherit`` is the parent's model (None); Claude Code's aliases are too, with a warning."""
    if value == "inherit":
        return None, None
    if isinstance(value, str) and value in CLAUDE_MODEL_ALIASES:
        return None, (
            f"{where}: {value!r} is a Claude Code alias agentd cannot resolve; the agent runs its "
            f"parent's model — fix: {_MODEL_FIX}"
        )
    return value, None


# -- one definition -----------------------------------------------------------------


def _definition(
    name: str,
    table: Mapping[object, object],
    *,
    source: str,
    at: str,
    spell: Callable[[str], str],
    claude: Literal["no", "flag", "file"],
) -> tuple[AgentDefinition, list[str]]:
    """Validate one definition written as ``table`` (its keys spelled as the user wrote them).

    ``at`` names the definition, ``spell(key)`` one of its keys, in messages.
    ``claude``: which of Claude Code's spellings ``table`` may use: none (a
    TOML table), its ``--agents`` flag's, or its files' front matter (where
    ``name`` is a key, and ``name`` is the file's stem).

    Raises:
        ConfigError: each problem, spelled by ``spell(key)``.
    """
    warnings: list[str] = []
    problems: list[ConfigError] = []
    fields: dict[str, object] = {"name": name}
    written: dict[str, str] = {}
    keys = _FILE_KEYS if claude == "file" else {k: k for k in OWN_KEYS}
    if claude == "flag":
        keys = {**keys, **_CLAUDE_KEYS}
    for key, value in table.items():
        target = keys.get(key) if isinstance(key, str) else None
        if target is None:
            if key == "name" and claude != "file":
                problems.append(
                    ConfigError(spell(key), value, f"the agent's name is its key ({name!r}); remove it")
                )
            elif claude == "no" or (claude == "flag" and key not in CLAUDE_FIELDS):
                close = _CLAUDE_KEYS.get(str(key)) or next(
                    (k for k in keys if str(key).lower().replace("_", "") == k.lower().replace("_", "")), None
                )
                hint = f"did you mean {close!r}? " if close else ""
                fix = f"unknown setting; {hint}remove it or check the spelling (known: {', '.join(keys)})"
                problems.append(ConfigError(spell(str(key)), value, fix))
            elif key in CLAUDE_FIELDS:
                warnings.append(f"{spell(str(key))}: a Claude Code field agentd does not use; ignored")
            else:
                warnings.append(f"{spell(str(key))}: not a field agentd or Claude Code knows; ignored")
            continue
        key = str(key)
        if target in written:
            problems.append(
                ConfigError(spell(key), value, f"{written[target]} and {key} say the same; give one")
            )
            continue
        written[target] = key
        warning = None
        if target in ("tools", "disallowed_tools"):
            try:
                names = _tool_names(value)
            except ValueError as exc:
                problems.append(ConfigError(spell(key), value, str(exc)))
                continue
            if names is not None:
                value, warning = _agentd_tools(names, spell(key), target)
        elif target == "model":
            value, warning = _model(value, spell(key))
        elif key == "prompt" and isinstance(value, str) and value.startswith("@"):
            value = "@" + value  # Claude Code's prompt is text, never @FILE
        if warning is not None:
            warnings.append(warning)
        fields[target] = value
    if "description" not in fields:
        problems.append(
            ConfigError(
                spell("description"),
                None,
                "required: say when to use this agent (the model picks agents by their description)",
            )
        )
    if problems:
        raise problems[0] if len(problems) == 1 else ConfigErrors(problems)
    try:
        return AgentDefinition.model_validate({**fields, "source": source}), warnings
    except ValidationError as exc:

        def spelled(loc: tuple[str | int, ...]) -> str:
            top = str(loc[0]) if loc else "name"
            if top == "name" and "name" not in written:
                return at
            return _join(spell(written.get(top, top)), loc[1:])

        raise _translate(exc, spelled, AgentDefinition) from None


# -- agentd's own sources -----------------------------------------------------------


def _json_object(text: str, where: str, example: str) -> object:
    try:
        doc, duplicates = json_noting_duplicates(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ConfigError(where, text[:80], f"not valid JSON ({exc}); write {example}") from None
    if duplicates:
        raise ConfigError(where, duplicates[0], "this key is given twice; keep one")
    return doc


_JSON_EXAMPLE = '\'{"reviewer": {"description": "reviews a diff", "prompt": "You review code."}}\''
_TOML_EXAMPLE = '[agents.reviewer] with description = "reviews a diff" and system = "You review code."'


def _own_layer(value: object, *, layer: Layer, where: str, file_label: str, found: _Found) -> None:
    """Add the definitions of ``--agents`` / ``AGENTD_AGENTS`` (JSON, or a mapping) or ``[agents]`` to ``found``."""
    example = _TOML_EXAMPLE if layer == "file" else _JSON_EXAMPLE
    if isinstance(value, str) and layer != "file":
        try:
            value = _json_object(value, where, example)
        except ConfigError as exc:
            found.problems.append(exc)
            return
    if not isinstance(value, dict):
        fix = f"expected an object of agent definitions by name, e.g. {example}"
        found.problems.append(ConfigError(where, value, fix))
        return
    out = found.layers.setdefault(layer, {})
    for name, table in value.items():
        if layer == "flag":
            at, source = _join(where, (name,)), where
        elif layer == "env":
            at, source = f"{where} (agents.{name})", where
        else:
            at, source = f"{file_label}: agents.{name}", f"{file_label}: [agents.{name}]"
        if not isinstance(table, dict):
            found.problems.append(ConfigError(at, table, f"a definition is a table/object, e.g. {example}"))
            continue
        if layer == "env":
            spell = functools.partial(_spell_env, where, name)
        else:
            spell = functools.partial(_spell_under, at)
        try:
            definition, warnings = _definition(
                str(name),
                table,
                source=source,
                at=at,
                spell=spell,
                claude="no" if layer == "file" else "flag",
            )
        except ConfigError as exc:
            found.problems.extend(_problems_of(exc))
            continue
        found.warnings.extend(warnings)
        out[name] = _Entry(definition, spell)


def _spell_under(at: str, key: str) -> str:
    return _join(at, (key,))


def _spell_env(variable: str, name: str, key: str) -> str:
    return f"{variable} (agents.{name}.{key})"


def own_definitions(*, flag: object, env: Mapping[str, str], file: object, file_label: str) -> _Found:
    """The definitions the user wrote for agentd: ``--agents``, ``AGENTD_AGENTS``, ``[agents.NAME]``.

    Nothing is raised: the problems are in the result, for the caller to raise with the others.
    """
    found = _Found()
    # As for every AGENTD_ variable, an empty value is unset.
    env_name, env_value = next(
        ((k, v) for k, v in env.items() if k.upper() == "AGENTD_AGENTS" and v), ("AGENTD_AGENTS", None)
    )
    if flag is not None:
        _own_layer(flag, layer="flag", where="--agents", file_label=file_label, found=found)
    if env_value is not None:
        _own_layer(env_value, layer="env", where=env_name, file_label=file_label, found=found)
    if file is not None:
        _own_layer(file, layer="file", where=f"{file_label}: agents", file_label=file_label, found=found)
    return found


# -- Claude Code's files ------------------------------------------------------------


def _front_matter(text: str) -> tuple[str, str] | str:
    """``(front matter, body)`` of an agent file, or what is wrong with it."""
    lines = text.removeprefix("\ufeff").splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        return "it does not start with a '---' line of YAML front matter"
    for i in range(1, len(lines)):
        if lines[i].strip() == "---":
            return "".join(lines[1:i]), "".join(lines[i + 1 :]).strip()
    return "its front matter has no closing '---' line"


def _read_directory(folder: Path, shown: str, found: _Found) -> dict[str, _Entry]:
    """The definitions of one ``.claude/agents`` directory; what cannot be used is skipped with a warning."""
    try:
        with os.scandir(folder) as entries:
            # Hidden files are not definitions: editors keep their backups and locks there.
            names = sorted(e.name for e in entries if e.name.endswith(".md") and not e.name.startswith("."))
    except FileNotFoundError:
        return {}
    except OSError as exc:
        found.warnings.append(f"{shown}: cannot be listed ({exc.strerror or exc}); its agents are not read")
        return {}
    if len(names) > MAX_AGENT_FILES:
        found.warnings.append(
            f"{shown}: {len(names)} .md files; only the first {MAX_AGENT_FILES} by name are read — fix: "
            "move the others elsewhere"
        )
        names = names[:MAX_AGENT_FILES]
    out: dict[str, _Entry] = {}
    for file_name in names:
        label = f"{shown}/{file_name}"
        definition = _read_file(folder / file_name, label, found)
        if definition is None:
            continue
        if definition.name in out:
            found.warnings.append(
                f"{label}: agent {definition.name!r} is already defined by {out[definition.name].definition.source}"
                " in the same directory; this file is skipped — fix: give each file its own name"
            )
            continue
        out[definition.name] = _Entry(definition, None)
    return out


def _read_file(path: Path, label: str, found: _Found) -> AgentDefinition | None:
    """One Claude Code agent file, or None (and a warning saying why it is skipped)."""
    skipped = "; the file is skipped"
    try:
        raw = read_regular_file(path, MAX_AGENT_FILE_BYTES)
    except NotAFile as exc:
        found.warnings.append(f"{label}: it {exc.problem}{skipped}")
        return None
    except OSError as exc:
        found.warnings.append(f"{label}: cannot be read ({exc.strerror or exc}){skipped}")
        return None
    if len(raw) > MAX_AGENT_FILE_BYTES:
        found.warnings.append(
            f"{label}: larger than {MAX_AGENT_FILE_BYTES} bytes, too large for an agent definition{skipped}"
        )
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        found.warnings.append(f"{label}: not UTF-8 text{skipped}")
        return None
    parts = _front_matter(text)
    if isinstance(parts, str):
        found.warnings.append(f"{label}: {parts}{skipped}")
        return None
    front, body = parts
    import yaml  # only when there is a file to read: most runs have none

    try:
        meta = yaml.safe_load(front)
    except (yaml.YAMLError, ValueError, TypeError, OverflowError, RecursionError) as exc:
        # ValueError: a timestamp out of range (YAML reads 2024-13-01 as a date).
        found.warnings.append(f"{label}: its front matter is not valid YAML ({_yaml_problem(exc)}){skipped}")
        return None
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        found.warnings.append(
            f"{label}: its front matter is a YAML {type(meta).__name__}, not a mapping of name, "
            f"description, …{skipped}"
        )
        return None
    stem = path.name.removesuffix(".md")
    if "name" not in meta:
        found.warnings.append(
            f"{label}: name: missing; the agent is named {stem!r} after the file — fix: add name: {stem}"
        )
    try:
        definition, warnings = _definition(
            stem, meta, source=label, at=label, spell=functools.partial(_spell_file, label), claude="file"
        )
    except ConfigError as exc:
        found.warnings.extend(f"{err}{skipped}" for err in _problems_of(exc))
        return None
    found.warnings.extend(warnings)
    # The body is the prompt as written: text, never @FILE.
    return definition.model_copy(update={"system": body or None})


def _yaml_problem(exc: BaseException) -> str:
    """What PyYAML found wrong, and where in the file (the front matter starts on line 2)."""
    problem = getattr(exc, "problem", None)
    mark = getattr(exc, "problem_mark", None)
    if isinstance(problem, str) and mark is not None:
        return f"{problem} at line {mark.line + 2}, column {mark.column + 1}"
    return " ".join(str(exc).split())[:200]


def _spell_file(label: str, key: str) -> str:
    return f"{label}: {key}"


def _home() -> Path | None:
    try:
        return Path.home()
    except RuntimeError:  # no HOME and no passwd entry: there is no user directory to read
        return None


def _cwd() -> Path | None:
    try:
        return Path.cwd()
    except OSError:  # the working directory was removed: there is no project directory to read
        return None


def claude_definitions(found: _Found) -> None:
    """Add the definitions of ``.claude/agents`` (the working directory's) and ``~/.claude/agents`` to ``found``."""
    home, cwd = _home(), _cwd()
    user = home / ".claude" / "agents" if home is not None else None
    project = cwd / ".claude" / "agents" if cwd is not None else None
    if user is not None:
        found.layers["user"] = _read_directory(user, "~/.claude/agents", found)
    # Run in the home directory, the project's files are the user's: read once.
    if project is not None and not (user is not None and _same_directory(project, user)):
        found.layers["project"] = _read_directory(project, ".claude/agents", found)


def _same_directory(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except (OSError, RuntimeError):
        return False


# -- the merge ----------------------------------------------------------------------


def merged(
    found: _Found, env: Mapping[str, str], providers: Mapping[str, ProviderSpec]
) -> dict[str, AgentDefinition]:
    """The definitions by name, the highest layer's of each; replacements noted, models checked.

    A model that cannot be used is a problem in agentd's own config and a
    warning (the parent's model) in a Claude Code file.
    """
    entries: dict[str, _Entry] = {}
    for layer in _LOWEST_FIRST:
        for name, entry in found.layers.get(layer, {}).items():
            if name in entries:
                found.notes.append(
                    f"agent {name!r}: the definition in {entry.definition.source} replaces the one in "
                    f"{entries[name].definition.source}"
                )
            entries[name] = entry
    out: dict[str, AgentDefinition] = {}
    for name in sorted(entries):
        entry = entries[name]
        definition = entry.definition
        if definition.model is not None:
            err = _model_error(definition.model, env, providers)
            if err is not None and entry.spell is not None:
                found.problems.append(ConfigError(entry.spell("model"), err.value, err.fix))
            elif err is not None:
                found.warnings.append(
                    f"{definition.source}: model: {definition.model!r} cannot be used ({err.fix}); the agent "
                    f"runs its parent's model — fix: {_MODEL_FIX}"
                )
                definition = definition.model_copy(update={"model": None})
        out[name] = definition
    return out
