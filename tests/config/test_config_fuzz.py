"""Fuzzing: random TOML documents, environments, route specs and argv yield
Settings or ConfigError, never another exception."""

from __future__ import annotations

import contextlib
import io
import math
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentd import cli
from agentd.config import Settings, WatchesConfig, load_settings, parse_route_spec, parse_subscription
from agentd.core.errors import ConfigError

FIELDS = sorted(Settings.model_fields)
ROUTE_KEYS = [
    "name",
    "match",
    "disposition",
    "max_inflight",
    "session",
    "debounce",
    "max_wait",
    "queue_cap",
    "overflow",
    "template",
    "timer",
    "extract",
    "on_event",
]
SERVER_KEYS = ["command", "args", "env", "cwd", "url", "headers", "required"]
WATCH_KEYS = list(WatchesConfig.model_fields)
SAMPLE_STRINGS = [
    "once",
    "loop",
    "reactive",
    "schedule",
    "fresh",
    "warm",
    "json",
    "spawn",
    "continue",
    "coalesce",
    "block",
    "auto",
    "event-log",
    "30s",
    "250ms",
    "0",
    "-1s",
    "*/5 * * * *",
    "@daily",
    "61 * * * *",
    "127.0.0.1:8080",
    "memo://notes",
    "x=spawn:2",
    "@timer=continue",
    "http://127.0.0.1:1/mcp",
    "8MiB",
    "@@x",
    "${HOME}",
    "${NOPE}",
]

text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
scalars = st.one_of(
    st.sampled_from(SAMPLE_STRINGS),
    text,
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(),
    st.booleans(),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(
            st.sampled_from([*ROUTE_KEYS, *SERVER_KEYS, "uri", "server"]) | text, inner, max_size=3
        ),
    ),
    max_leaves=8,
)


def _toml_str(s: str) -> str:
    out = ['"']
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return _toml_str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{_toml_str(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"


@st.composite
def toml_documents(draw: st.DrawFn) -> str:
    lines = [
        f"{_toml_str(k)} = {_toml_value(v)}"
        for k, v in draw(st.dictionaries(st.sampled_from(FIELDS) | text, values, max_size=6)).items()
        if k not in ("watches", "servers", "routes")
    ]
    if draw(st.booleans()):
        lines.append("[watches]")
        for k, v in draw(st.dictionaries(st.sampled_from(WATCH_KEYS), scalars, max_size=3)).items():
            lines.append(f"{k} = {_toml_value(v)}")
    for name in draw(
        st.lists(st.sampled_from(["memo", "web", "bad name", "x" * 40]), max_size=2, unique=True)
    ):
        lines.append(f"[servers.{_toml_str(name)}]")
        for k, v in draw(st.dictionaries(st.sampled_from(SERVER_KEYS), values, max_size=3)).items():
            lines.append(f"{k} = {_toml_value(v)}")
    for _ in range(draw(st.integers(0, 2))):
        lines.append("[[routes]]")
        for k, v in draw(st.dictionaries(st.sampled_from(ROUTE_KEYS), scalars, max_size=4)).items():
            lines.append(f"{k} = {_toml_value(v)}")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d)
        (path / "model.json").write_text('{"turns": [{"text": "ok"}]}')
        yield path


def _settings_or_config_error(flags: dict[str, Any], config: Path | None, env: dict[str, str]) -> None:
    outcome: Settings | ConfigError
    try:
        outcome = load_settings(flags, config_file=config, env=env)
    except ConfigError as exc:
        outcome = exc
    if isinstance(outcome, ConfigError):
        assert str(outcome)
        assert outcome.fix
    else:
        assert isinstance(outcome, Settings)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=toml_documents(), with_base=st.booleans())
def test_random_toml_documents(workdir: Path, doc: str, with_base: bool) -> None:
    config = workdir / "fuzz.toml"
    config.write_text(doc, encoding="utf-8")
    flags = {"model": f"script:{workdir / 'model.json'}", "instruction": "x"} if with_base else {}
    _settings_or_config_error(flags, config, {})


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=80))
def test_random_bytes_as_config_file(workdir: Path, raw: bytes) -> None:
    config = workdir / "raw.toml"
    config.write_bytes(raw)
    _settings_or_config_error({}, config, {})


ENV_NAMES = [f"AGENTD_{f.upper()}" for f in FIELDS] + [
    "AGENTD_WATCHES__DEBOUNCE",
    "AGENTD_WATCHES__MAX_WATCHES",
    "AGENTD_MCP_CONFIG",
    "AGENTD_SERVERS",
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(env=st.dictionaries(st.sampled_from(ENV_NAMES), st.sampled_from(SAMPLE_STRINGS) | text, max_size=5))
def test_random_environment(workdir: Path, env: dict[str, str]) -> None:
    env = {k: v.replace("\x00", "") for k, v in env.items()}  # a real environment cannot hold NUL
    _settings_or_config_error({"model": f"script:{workdir / 'model.json'}", "instruction": "x"}, None, env)


@given(
    st.text(max_size=40)
    | st.from_regex(r"[a-z:/*]{0,10}=(spawn|continue|x)(:[a-z0-9]{0,4})?", fullmatch=True)
)
def test_random_route_specs(spec: str) -> None:
    outcome: dict[str, Any] | ConfigError
    try:
        outcome = parse_route_spec(spec)
    except ConfigError as exc:
        outcome = exc
    if isinstance(outcome, ConfigError):
        assert outcome.setting == "--route"
    else:
        assert outcome["disposition"] in ("spawn", "continue")


@given(st.text(max_size=40), st.sets(st.sampled_from(["memo", "file", "urn"])))
def test_random_subscriptions(text_: str, servers: set[str]) -> None:
    try:
        out = parse_subscription(text_, servers)
    except ValueError:
        return
    assert out["server"] is None or out["server"] in servers


FLAG_WORDS = [
    "--mode",
    "--interval",
    "--cron",
    "--route",
    "--subscribe",
    "--max-steps",
    "--mcp-stdio",
    "--mcp-http",
    "--require",
    "--session",
    "--max-read-bytes",
    "--verbose",
    "--no-verbose",
    "--instruction",
    "--",
]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(FLAG_WORDS) | st.sampled_from(SAMPLE_STRINGS) | text, max_size=6))
def test_random_argv_for_check(argv: list[str]) -> None:
    argv = [a.replace("\x00", "") for a in argv]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["check", *argv])
    assert code in (0, 2)
    if code == 2:
        assert err.getvalue()
