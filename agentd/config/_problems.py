"""Configuration problems: collected during validation, raised together (:class:`ConfigErrors`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentd.core.errors import ConfigError


class ConfigErrors(ConfigError):
    """Several invalid settings, reported together (one line each).

    ``setting``/``value``/``fix`` are those of the first problem; ``problems``
    holds all of them in the order found.
    """

    def __init__(self, problems: Sequence[ConfigError]) -> None:
        first = problems[0]
        super().__init__(first.setting, first.value, first.fix)
        self.problems: tuple[ConfigError, ...] = tuple(problems)
        self.args = ("\n".join(str(p) for p in self.problems),)

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.problems)


def _raise_all(problems: Sequence[ConfigError]) -> None:
    if len(problems) == 1:
        raise problems[0]
    if problems:
        raise ConfigErrors(problems)


def _problems_of(exc: ConfigError) -> tuple[ConfigError, ...]:
    return exc.problems if isinstance(exc, ConfigErrors) else (exc,)


@dataclass
class _Problem:
    """One problem found inside validation, spelled later by the layer it came from."""

    loc: tuple[str | int, ...]
    value: object
    fix: str


class _Problems(ValueError):
    """Carries cross-field problems out through pydantic's ValidationError."""

    def __init__(self, problems: list[_Problem]) -> None:
        super().__init__("; ".join(p.fix for p in problems))
        self.problems = problems


def _join(base: str, loc: Sequence[str | int]) -> str:
    out = base
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
