"""Value parsers and checks shared by the settings models (durations, counts, paths, addresses, models)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from agentd.config._vocab import _ADDR_RE, MAX_TEXT_FILE_BYTES, MODEL_FORMS, MODEL_PREFIXES
from agentd.core.durations import ascii_number, parse_duration
from agentd.core.errors import ConfigError, NotAFile
from agentd.state.files import read_regular_file

if TYPE_CHECKING:
    from agentd.config._models import ProviderSpec
    from agentd.models import ProviderConfig


def _duration(value: object, *, positive: bool = False) -> float:
    seconds = parse_duration(value)  # type: ignore[arg-type]  # it rejects non-str/num itself
    if positive and seconds == 0:
        raise ValueError("must be greater than zero; write e.g. 250ms, 30s, 5m or 1h")
    return seconds


def _integer(value: object, *, minimum: int) -> int:
    if isinstance(value, bool):
        raise ValueError(f"must be a whole number ≥ {minimum}, not a boolean")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and re.fullmatch(r"\s*[+-]?[0-9]+\s*", value):
        value = int(value)
    if not isinstance(value, int):
        raise ValueError(f"must be a whole number ≥ {minimum}")
    if value < minimum:
        raise ValueError(f"must be a whole number ≥ {minimum}")
    return value


def _dollars(value: object) -> float:
    """An amount in US dollars above 0 (``2.5``, ``"$2.50"``); ValueError with the fix otherwise."""
    try:  # text is ASCII digits: float() would read "١٢" as 12; other types are refused below
        amount = (
            ascii_number(value.strip().removeprefix("$")) if isinstance(value, str) else float(value)  # type: ignore[arg-type]
        )
    except (TypeError, ValueError):
        amount = float("nan")
    if isinstance(value, bool) or not (amount > 0 and amount != float("inf")):
        raise ValueError("must be an amount in US dollars above 0, e.g. 2.50")
    return amount


def _expand_user(path: Path) -> Path:
    """``~`` and ``~user`` expanded; a path naming an unknown user stays as written."""
    try:
        return path.expanduser()
    except RuntimeError:
        return path


def _read_at_file(value: str, what: str) -> str:
    """``@FILE`` reads the file; ``@@text`` is the literal ``@text``; anything else is itself.

    Only a regular file is read (links are followed): a FIFO would block
    ``agentd check`` and the start on a writer that may never come, a device
    may never end, a directory holds no text. Each is refused with the fix.
    """
    if value.startswith("@@"):
        return value[1:]
    if not value.startswith("@"):
        return value
    if "\x00" in value:
        raise ValueError("a file path cannot contain a NUL character")
    path = _expand_user(Path(value[1:]))
    try:
        data = read_regular_file(path, MAX_TEXT_FILE_BYTES)
        if len(data) > MAX_TEXT_FILE_BYTES:
            raise ValueError(
                f"the {what} file {str(path)!r} is larger than {MAX_TEXT_FILE_BYTES} bytes; shorten it"
            )
        return data.decode("utf-8")
    except NotAFile as exc:
        raise ValueError(
            f"the {what} file {str(path)!r} {exc.problem}; {not_a_file_fix(exc.kind, at_file=True)}"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise ValueError(
            f"cannot read the {what} file {str(path)!r} ({reason}); fix the path, "
            f"or write @@ to start literal text with @"
        ) from None


def not_a_file_fix(kind: str, *, at_file: bool = False) -> str:
    """What to do instead of naming something that is not a regular file (``kind``) as a file to read."""
    if kind == "a directory":
        return "name a file inside it"
    fix = (
        "agentd reads only regular files (a FIFO would wait for a writer, a device may never end): "
        "save the content to a file and name that"
    )
    return fix + ", or write @@ to start literal text with @" if at_file else fix


def _check_addr(value: str) -> str:
    m = _ADDR_RE.fullmatch(value.strip())
    if m is None or int(m.group("port")) > 65535:
        raise ValueError("write HOST:PORT, e.g. 0.0.0.0:8080, 127.0.0.1:9090 or [::1]:9090 (port 0-65535)")
    return value.strip()


def _cron_error(expr: str) -> str | None:
    """The reason ``expr`` is not a valid cron expression, or None.

    Uses :func:`agentd.triggers.timer.validate_cron` when that module exists
    (it is the authority: the same code computes next fires), else croniter
    with a five-field check.
    """
    try:
        from agentd.triggers.timer import validate_cron
    except ImportError as exc:
        if exc.name != "agentd.triggers.timer":
            raise
    else:
        return validate_cron(expr)
    from croniter import croniter

    forms = "write 5 UTC fields: minute hour day-of-month month day-of-week (e.g. '*/15 * * * *')"
    text = expr.strip()
    if text.startswith("@"):
        return (
            None
            if croniter.is_valid(text)
            else f"unknown cron alias; use @hourly, @daily, @weekly or {forms}"
        )
    fields = text.split()
    if len(fields) != 5:
        return f"a cron expression has 5 fields, this one has {len(fields)}; {forms}"
    if not croniter.is_valid(text):
        return f"a field is out of range or malformed; {forms}"
    return None


def _model_error(
    spec: str, env: Mapping[str, str], providers: Mapping[str, ProviderSpec] | None = None
) -> ConfigError | None:
    prefix, sep, rest = spec.partition(":")
    if not sep or not rest.strip():
        return ConfigError("model", spec, f"write {MODEL_FORMS}")
    if prefix not in MODEL_PREFIXES and prefix not in (providers or {}):
        from agentd.models import parse_model_spec

        try:  # its message suggests the closest provider name
            parse_model_spec(spec, _provider_configs(providers or {}))
        except ConfigError as exc:
            return exc
        return ConfigError("model", spec, f"write {MODEL_FORMS}")
    if prefix == "script" and not _expand_user(Path(rest)).is_file():
        script = _expand_user(Path(rest))
        if script.exists():
            from agentd.state.files import kind

            what = kind(script.stat().st_mode)
            return ConfigError(
                "model",
                spec,
                f"the script file {rest!r} is {what}, not a regular file; {not_a_file_fix(what)}",
            )
        return ConfigError(
            "model", spec, f"the script file {rest!r} does not exist; give the path of a model script"
        )
    try:
        from agentd.models import validate_model_spec
    except ImportError as exc:
        if exc.name != "agentd.models":
            raise
        return None
    try:
        validate_model_spec(spec, env=env, providers=_provider_configs(providers or {}))
    except ConfigError as exc:
        return exc
    return None


def _provider_configs(providers: Mapping[str, ProviderSpec]) -> dict[str, ProviderConfig]:
    """The ``[providers.NAME]`` tables as the model factory takes them."""
    return {name: p.config(name) for name, p in providers.items()}


def _check_tool_glob(pattern: str) -> None:
    """Raise ValueError (the fix) if ``pattern`` is not a tool-name glob."""
    if not isinstance(pattern, str) or not re.fullmatch(r"[A-Za-z0-9_./*?\[\]!-]{1,160}", pattern):
        raise ValueError(
            f"{pattern!r} is not a tool glob: write tool names or globs of letters, digits, '_', '-', "
            "'*' and '?', e.g. 'files__read_*' or 'memo__*'"
        )


def _check_tool_globs(patterns: list[str] | None) -> list[str] | None:
    """The ``allowed_tools``/``disallowed_tools`` validator: each pattern checked (ValueError with the fix)."""
    for pattern in patterns or []:
        _check_tool_glob(pattern)
    return patterns


def _check_glob(pattern: str) -> None:
    """Raise ValueError (the fix) if ``pattern`` does not compile as a route/subscription glob."""
    from agentd.triggers.glob import compile_glob

    try:
        compile_glob(pattern)
    except ValueError as exc:
        raise ValueError(str(exc).removeprefix("route match: ")) from None


def json_noting_duplicates(text: str) -> tuple[object, list[str]]:
    """``text`` as JSON, and the keys any of its objects gives twice (JSON keeps the last; agentd names them).

    Raises:
        json.JSONDecodeError, RecursionError: ``text`` is not JSON (the caller names the setting).
    """
    import json

    duplicates: list[str] = []

    def pairs(items: list[tuple[str, object]]) -> dict[str, object]:
        seen: dict[str, object] = {}
        for k, v in items:
            if k in seen:
                duplicates.append(k)
            seen[k] = v
        return seen

    return json.loads(text, object_pairs_hook=pairs), duplicates
