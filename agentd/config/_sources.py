"""The layers (flags > environment > file > defaults) and the spelling of a setting as the user wrote it."""

from __future__ import annotations

import contextvars
import difflib
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, get_args

from pydantic import (
    BaseModel,
    ValidationError,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
)
from pydantic_settings.sources.utils import parse_env_vars

from agentd.config._models import ServerSpec
from agentd.config._problems import ConfigErrors, _join, _Problems, _raise_all
from agentd.config._vocab import _FLAG_NAMES, DEPRECATED_SETTINGS, Layer
from agentd.core.errors import ConfigError


@dataclass
class _LoadContext:
    """What one :func:`load_settings` call hands to the settings sources."""

    env: Mapping[str, str]
    file_data: dict[str, object]
    file_label: str
    origins: dict[str, Layer] = field(default_factory=dict)
    """Top-level field -> the highest layer that set it (filled while sources run)."""
    aliases: dict[tuple[Layer, str], str] = field(default_factory=dict)
    """(layer, field) -> the deprecated name the user wrote it with (for messages)."""
    flag_model_settings: frozenset[str] = frozenset()
    """The model settings given as flags (``--temperature`` …)."""
    run_inputs: bool = True
    """Whether a model and an instruction are required (``agentd check`` validates without them)."""


_CONTEXT: contextvars.ContextVar[_LoadContext | None] = contextvars.ContextVar(
    "agentd_config_load", default=None
)


class _MappingEnvSource(EnvSettingsSource):
    """``AGENTD_…`` variables from a given mapping instead of ``os.environ``.

    ``servers`` and ``agents`` are dropped: each is assembled from several
    sources by :func:`load_settings` (``AGENTD_SERVERS`` and ``AGENTD_AGENTS``
    are read there).
    """

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        self._env = env
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(self._env, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str)

    def __call__(self) -> dict[str, object]:
        data: dict[str, object] = super().__call__()
        data.pop("servers", None)
        data.pop("agents", None)
        return data


class _Recording(PydanticBaseSettingsSource):
    """Wraps a source and records which top-level settings it provided."""

    def __init__(self, inner: PydanticBaseSettingsSource, layer: Layer, origins: dict[str, Layer]) -> None:
        super().__init__(inner.settings_cls)
        self._inner = inner
        self._layer = layer
        self._origins = origins

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[object, str, bool]:
        return self._inner.get_field_value(field, field_name)

    def __call__(self) -> dict[str, object]:
        data: dict[str, object] = self._inner()
        for key in data:
            # Sources run highest precedence first: the first layer seen wins.
            self._origins.setdefault(key, self._layer)
        return data


def _spell(loc: tuple[str | int, ...], origins: Mapping[str, Layer], file_label: str) -> str:
    """The setting's name as the user wrote it, from the layer that set it."""
    if not loc:
        return "settings"
    top = str(loc[0])
    rest = loc[1:]
    layer = origins.get(top, "default")
    if layer == "flag":
        return _join(_FLAG_NAMES.get(top, "--" + top.replace("_", "-")), rest)
    if layer == "env":
        name = "AGENTD_" + top.upper()
        if rest and all(isinstance(p, str) for p in rest):
            return name + "".join("__" + str(p).upper() for p in rest)
        return f"{name} ({_join(top, rest)})" if rest else name
    if layer == "file":
        return f"{file_label}: {_join(top, rest)}"
    return _join(top, rest)


def _fix_for(err: Mapping[str, Any], model: type[BaseModel]) -> str:
    kind = err["type"]
    ctx = err.get("ctx") or {}
    if kind == "value_error":
        return str(ctx.get("error", err["msg"]))
    if kind == "literal_error":
        expected = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        return "choose one of " + ", ".join(expected) if expected else err["msg"]
    if kind == "extra_forbidden":
        name = str(err["loc"][-1])
        known = _known_keys(model, err["loc"][:-1])
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return f"unknown setting; {hint}remove it or check the spelling (known: {', '.join(sorted(known))})"
    if kind == "missing":
        return "this is required"
    if kind in ("bool_parsing", "bool_type"):
        return "write true or false"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return "expected a table/object here"
    if kind in ("list_type",):
        return "expected a list here"
    if kind in ("string_type",):
        return "expected text here"
    return str(err["msg"])


def _known_keys(model: type[BaseModel], loc: Sequence[str | int]) -> list[str]:
    """Field names of the model reached by ``loc`` (for 'did you mean' hints)."""
    current: type[BaseModel] | None = model
    for part in loc:
        if isinstance(part, int) or current is None:
            continue
        info = current.model_fields.get(str(part)) if hasattr(current, "model_fields") else None
        if info is None:
            current = None
            break
        current = _model_in(info.annotation)
    if current is None or not hasattr(current, "model_fields"):
        return []
    # A server's name and source come from where it is declared, never from its table.
    hidden = {"name", "source"} if current is ServerSpec else set()
    return [n for n in current.model_fields if n not in hidden]


def _model_in(annotation: object) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _translate(
    exc: ValidationError, spell: Callable[[tuple[str | int, ...]], str], model: type[BaseModel]
) -> ConfigError:
    """pydantic's ValidationError -> ConfigError(s), spelled by ``spell(loc)``; ``model`` was being validated."""
    problems: list[ConfigError] = []
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        ctx = err.get("ctx") or {}
        inner = ctx.get("error")
        if isinstance(inner, _Problems):
            for p in inner.problems:
                problems.append(ConfigError(spell(loc + p.loc), p.value, p.fix))
            continue
        problems.append(ConfigError(spell(loc), err.get("input"), _fix_for(err, model)))
    if len(problems) == 1:
        return problems[0]
    return ConfigErrors(problems)


@contextmanager
def _loading(ctx: _LoadContext) -> Iterator[None]:
    token = _CONTEXT.set(ctx)
    try:
        yield
    finally:
        _CONTEXT.reset(token)


@dataclass(frozen=True)
class Deprecation:
    """A setting given under its old name: ``old`` as the user wrote it, ``new`` to write instead."""

    old: str
    new: str

    def message(self) -> str:
        """The warning line (without the ``agentd:`` prefix)."""
        return (
            f"warning: {self.old} is deprecated and will be removed in the next release; "
            f"use {self.new} (same meaning: a tree-wide ceiling, not a per-reply limit)"
        )


def _renamed_settings(flags: dict[str, object], ctx: _LoadContext) -> list[Deprecation]:
    """Move ``max_tokens`` / ``max_steps`` (every layer) to their new names; one warning each.

    Both names in one layer is an error: the user must say which value they mean.
    """
    found: list[Deprecation] = []
    problems: list[ConfigError] = []
    env = dict(ctx.env)
    for old, new in DEPRECATED_SETTINGS.items():
        flag_old, flag_new = "--" + old.replace("_", "-"), "--" + new.replace("_", "-")
        if old in flags:
            if new in flags:
                problems.append(
                    ConfigError(flag_old, flags[old], f"{flag_old} is the old name of {flag_new}; give one")
                )
            else:
                flags[new] = flags.pop(old)
                ctx.aliases[("flag", new)] = flag_old
                found.append(Deprecation(flag_old, flag_new))
        env_old = next((k for k in env if k.upper() == f"AGENTD_{old.upper()}"), None)
        if env_old is not None:
            if any(k.upper() == f"AGENTD_{new.upper()}" for k in env):
                problems.append(
                    ConfigError(
                        env_old, env[env_old], f"{env_old} is the old name of AGENTD_{new.upper()}; set one"
                    )
                )
            else:
                env[f"AGENTD_{new.upper()}"] = env.pop(env_old)
                ctx.aliases[("env", new)] = env_old
                found.append(Deprecation(env_old, f"AGENTD_{new.upper()}"))
        if old in ctx.file_data:
            where = f"{ctx.file_label}: {old}"
            if new in ctx.file_data:
                problems.append(
                    ConfigError(where, ctx.file_data[old], f"{old} is the old name of {new}; keep one")
                )
            else:
                ctx.file_data[new] = ctx.file_data.pop(old)
                ctx.aliases[("file", new)] = old
                found.append(Deprecation(where, f"{ctx.file_label}: {new}"))
    _raise_all(problems)
    ctx.env = env
    return found


def _spell_in(loc: tuple[str | int, ...], ctx: _LoadContext) -> str:
    """:func:`_spell`, knowing the deprecated names and which model settings came as flags."""
    if not loc:
        return _spell(loc, ctx.origins, ctx.file_label)
    top, rest = str(loc[0]), loc[1:]
    layer = ctx.origins.get(top, "default")
    if top == "model_settings" and rest and layer == "flag":
        key = str(rest[0])
        if key in ctx.flag_model_settings:
            return "--" + key.replace("_", "-")
        # Set below the flags: spelled as the environment or the file wrote it.
        env_name = f"AGENTD_MODEL_SETTINGS__{key.upper()}"
        if any(k.upper() == env_name for k in ctx.env):
            return _spell(loc, {top: "env"}, ctx.file_label)
        return _spell(loc, {top: "file"}, ctx.file_label)
    alias = ctx.aliases.get((layer, top))
    if alias is not None:
        return _join(alias, rest) if layer != "file" else f"{ctx.file_label}: {_join(alias, rest)}"
    return _spell(loc, ctx.origins, ctx.file_label)
