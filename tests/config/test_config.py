"""Settings: precedence per field, cross-field rules, and every message pinned."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pydantic
import pytest

from agentd.config import (
    ConfigErrors,
    RouteConfig,
    Settings,
    SubscriptionSpec,
    load_settings,
    parse_route_spec,
    parse_subscription,
)
from agentd.core.errors import ConfigError
from tests.support.settings import SCRIPT, load, script_model


@pytest.fixture
def script(tmp_path: Path) -> str:
    return script_model(tmp_path)


def test_defaults(tmp_path: Path) -> None:
    s = load(tmp_path)
    assert s.mode == "once"
    assert s.session == "fresh"
    assert s.grace == 25.0
    assert s.max_restarts == 5
    assert s.restart_period == 60.0
    assert s.max_read_bytes == 8 * 1024 * 1024
    assert s.output == "text"
    assert s.verbose is False
    assert s.servers == {}
    assert s.interval is None
    assert s.cron is None
    assert s.deadline is None
    assert s.budget_steps is None
    assert s.budget_tokens is None
    assert s.budget_usd is None
    assert s.model_settings.to_model_settings().given() == {}
    assert s.providers == {}
    w = s.watches
    assert (w.max_watches, w.filter_timeout, w.filter_tool_calls, w.events_per_update) == (5, 2.0, 10, 100)
    assert (w.notice_lines, w.debounce, w.max_wait, w.resubscribe_attempts) == (20, 3.0, 15.0, 5)


def test_settings_are_frozen(tmp_path: Path) -> None:
    s = load(tmp_path)
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        s.mode = "loop"  # type: ignore[misc]


# (field, TOML literal, value from file, env text, value from env, flag text, value from flag, other flags)
PRECEDENCE: list[tuple[str, str, Any, str, Any, Any, Any, dict[str, Any]]] = [
    ("mode", '"loop"', "loop", "reactive", "reactive", "once", "once", {}),
    ("budget_steps", "10", 10, "20", 20, "30", 30, {}),
    ("budget_tokens", "1000", 1000, "2000", 2000, "3000", 3000, {}),
    ("budget_usd", "2.5", 2.5, "3", 3.0, "$4.25", 4.25, {}),
    ("deadline", '"1m"', 60.0, "90s", 90.0, "2h", 7200.0, {}),
    ("grace", "5", 5.0, "6s", 6.0, "700ms", 0.7, {}),
    ("max_restarts", "1", 1, "2", 2, "0", 0, {}),
    ("restart_period", '"10s"', 10.0, "20", 20.0, "1m", 60.0, {}),
    ("spawn_timeout", '"2s"', 2.0, "3", 3.0, "750ms", 0.75, {}),
    ("output", '"json"', "json", "text", "text", "json", "json", {}),
    ("verbose", "true", True, "false", False, True, True, {}),
    ("system", '"sys file"', "sys file", "sys env", "sys env", "sys flag", "sys flag", {}),
    ("instruction", '"i file"', "i file", "i env", "i env", "i flag", "i flag", {}),
    ("max_read_bytes", '"1MiB"', 2**20, "10MB", 10**7, "512KiB", 2**19, {}),
    ("max_self_subscriptions", "10", 10, "20", 20, "30", 30, {}),
    ("max_self_subscriptions_per_session", "1", 1, "2", 2, "3", 3, {}),
    (
        "health_addr",
        '"127.0.0.1:8080"',
        "127.0.0.1:8080",
        "0.0.0.0:8081",
        "0.0.0.0:8081",
        "[::1]:8082",
        "[::1]:8082",
        {},
    ),
    (
        "metrics_addr",
        '":9090"',
        ":9090",
        "127.0.0.1:9091",
        "127.0.0.1:9091",
        "localhost:9092",
        "localhost:9092",
        {},
    ),
    ("interval", '"5m"', 300.0, "30s", 30.0, "0", 0.0, {"mode": "loop"}),
    ("session", '"warm"', "warm", "fresh", "fresh", "warm", "warm", {"mode": "loop"}),
    (
        "cron",
        '"0 * * * *"',
        "0 * * * *",
        "*/5 * * * *",
        "*/5 * * * *",
        "@daily",
        "@daily",
        {"mode": "schedule"},
    ),
]


@pytest.mark.parametrize(
    ("field", "toml", "from_file", "env_text", "from_env", "flag", "from_flag", "others"),
    PRECEDENCE,
    ids=[p[0] for p in PRECEDENCE],
)
def test_each_layer_overrides_the_one_below(
    tmp_path: Path,
    field: str,
    toml: str,
    from_file: Any,
    env_text: str,
    from_env: Any,
    flag: Any,
    from_flag: Any,
    others: dict[str, Any],
) -> None:
    default = Settings.model_fields[field].default
    flags = dict(others)
    if field == "instruction":
        flags["instruction"] = None  # let lower layers show through
    default_settings = None if field == "instruction" or others else load(tmp_path, **flags)
    if default_settings is not None and not others:
        assert getattr(default_settings, field) == default
    env_name = f"AGENTD_{field.upper()}"
    file_line = f"{field} = {toml}\n"
    assert getattr(load(tmp_path, toml=file_line, **flags), field) == from_file
    assert getattr(load(tmp_path, toml=file_line, env={env_name: env_text}, **flags), field) == from_env
    top = load(tmp_path, toml=file_line, env={env_name: env_text}, **{**flags, field: flag})
    assert getattr(top, field) == from_flag


def test_model_precedence(tmp_path: Path) -> None:
    for name in ("file.json", "env.json", "flag.json"):
        (tmp_path / name).write_text(SCRIPT)
    toml = f'model = "script:{tmp_path / "file.json"}"\ninstruction = "x"\n'
    env = {"AGENTD_MODEL": f"script:{tmp_path / 'env.json'}"}
    assert load(tmp_path, toml=toml, base=False).model == f"script:{tmp_path / 'file.json'}"
    assert load(tmp_path, toml=toml, env=env, base=False).model == f"script:{tmp_path / 'env.json'}"
    flag = f"script:{tmp_path / 'flag.json'}"
    assert load(tmp_path, toml=toml, env=env, base=False, model=flag).model == flag


def test_watches_merge_key_by_key_across_layers(tmp_path: Path) -> None:
    toml = '[watches]\ndebounce = "5s"\nmax_watches = 2\n'
    s = load(
        tmp_path, toml=toml, env={"AGENTD_WATCHES__NOTICE_LINES": "7", "AGENTD_WATCHES__MAX_WATCHES": "3"}
    )
    assert s.watches.debounce == 5.0
    assert s.watches.notice_lines == 7
    assert s.watches.max_watches == 3
    assert s.watches.max_wait == 15.0


def test_lists_from_a_higher_layer_replace_lower_ones(tmp_path: Path) -> None:
    toml = 'mode = "reactive"\nsubscribe = ["file:///a"]\n[[routes]]\nmatch = "file:///a"\n'
    s = load(tmp_path, toml=toml)
    assert s.subscriptions == [SubscriptionSpec(server=None, uri="file:///a")]
    assert [r.match for r in s.routes] == ["file:///a"]
    env = {"AGENTD_SUBSCRIPTIONS": '["file:///b"]', "AGENTD_ROUTES": '["file:///b=continue"]'}
    s = load(tmp_path, toml=toml, env=env)
    assert [x.uri for x in s.subscriptions] == ["file:///b"]
    assert [(r.match, r.disposition) for r in s.routes] == [("file:///b", "continue")]
    s = load(tmp_path, toml=toml, env=env, subscriptions=["file:///c"], routes=["file:///c=spawn:2"])
    assert [x.uri for x in s.subscriptions] == ["file:///c"]
    assert [(r.match, r.max_inflight) for r in s.routes] == [("file:///c", 2)]


def test_empty_env_values_are_ignored(tmp_path: Path) -> None:
    assert load(tmp_path, env={"AGENTD_BUDGET_STEPS": ""}).budget_steps is None


def test_agentd_config_env_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "x.toml").write_text("budget_steps = 4\n")
    s = load(tmp_path, env={"AGENTD_CONFIG": str(tmp_path / "x.toml")})
    assert s.budget_steps == 4


def test_session_defaults(tmp_path: Path) -> None:
    assert load(tmp_path, mode="loop", interval="0").session == "warm"
    assert load(tmp_path, mode="loop", interval="30s").session == "fresh"
    assert load(tmp_path, mode="loop").session == "warm"  # unset interval = 0 for the loop driver
    assert load(tmp_path, mode="schedule", interval="1m").session == "fresh"
    assert load(tmp_path, mode="loop", interval="0", session="fresh").session == "fresh"


def test_at_file_instruction_and_system(tmp_path: Path) -> None:
    (tmp_path / "task.md").write_text("task from file")
    (tmp_path / "sys.md").write_text("system from file")
    s = load(tmp_path, instruction=f"@{tmp_path / 'task.md'}", system=f"@{tmp_path / 'sys.md'}")
    assert (s.instruction, s.system) == ("task from file", "system from file")
    assert load(tmp_path, instruction="@@literal").instruction == "@literal"
    s = load(tmp_path, toml=f'instruction = "@{tmp_path / "task.md"}"\n', instruction=None)
    assert s.instruction == "task from file"


def test_routes_and_subscriptions_from_toml(tmp_path: Path) -> None:
    toml = """
mode = "reactive"
interval = "1m"
[servers.memo]
command = "memo-server"
[[subscriptions]]
server = "memo"
uri = "memo://notes"
[[routes]]
name = "notes"
match = "memo://*"
disposition = "continue"
session = "notes"
debounce = "1s"
max_wait = "10s"
queue_cap = 32
overflow = "drop_oldest"
extract = "state"
on_event = "event['type']"
[[routes]]
timer = true
template = "tick"
"""
    s = load(tmp_path, toml=toml)
    notes, tick = s.routes
    assert notes == RouteConfig(
        name="notes",
        match="memo://*",
        disposition="continue",
        session="notes",
        debounce=1.0,
        max_wait=10.0,
        queue_cap=32,
        overflow="drop_oldest",
        extract="state",
        on_event="event['type']",
    )
    assert tick.timer
    assert tick.match is None
    assert tick.max_inflight == 4
    assert s.subscriptions == [SubscriptionSpec(server="memo", uri="memo://notes")]


def test_on_event_implies_auto_extract() -> None:
    assert RouteConfig(match="x://y", on_event="None").extract == "auto"


@pytest.mark.parametrize(
    ("text", "fields"),
    [
        ("file:///inbox/*=spawn", {"match": "file:///inbox/*", "disposition": "spawn"}),
        ("file:///x=spawn:2", {"match": "file:///x", "disposition": "spawn", "max_inflight": 2}),
        ("memo://notes=continue", {"match": "memo://notes", "disposition": "continue"}),
        ("memo://notes=continue:ops", {"match": "memo://notes", "disposition": "continue", "session": "ops"}),
        ("http://h/x?a=b=spawn", {"match": "http://h/x?a=b", "disposition": "spawn"}),
        ("@timer=spawn", {"timer": True, "disposition": "spawn"}),
        (
            "memo://*=spawn:2,debounce=50ms,max_wait=1s,overflow=block",
            {
                "match": "memo://*",
                "disposition": "spawn",
                "max_inflight": 2,
                "debounce": "50ms",
                "max_wait": "1s",
                "overflow": "block",
            },
        ),
        (
            "x://y?a=1,b=2=continue:ops,queue_cap=4,reread_on_start=false,name=ops",
            {
                "match": "x://y?a=1,b=2",
                "disposition": "continue",
                "session": "ops",
                "queue_cap": "4",
                "reread_on_start": "false",
                "name": "ops",
            },
        ),
        (
            "@timer=spawn,template=tick at {kind}",
            {"timer": True, "disposition": "spawn", "template": "tick at {kind}"},
        ),
    ],
)
def test_parse_route_spec(text: str, fields: dict[str, Any]) -> None:
    assert parse_route_spec(text) == fields


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("file:///x", r"--route: 'file:///x' is not valid: write MATCH=spawn\[:MAX_INFLIGHT\]"),
        (
            "file:///x=explode",
            r"unknown disposition 'explode': use spawn\[:MAX_INFLIGHT\] or continue\[:SESSION\]",
        ),
        ("=spawn", "the MATCH before '=' is empty"),
        ("x=spawn:0", "MAX_INFLIGHT after spawn: is a whole number ≥ 1"),
        ("x=spawn:many", "MAX_INFLIGHT after spawn: is a whole number ≥ 1"),
        ("x=continue:bad name", "SESSION after continue: is 1-64 letters"),
        (
            "x=spawn,debounse=1s",
            r"unknown route setting 'debounse'; did you mean 'debounce'\? --route takes name, ",
        ),
        ("x=spawn,on_event=x", r"unknown route setting 'on_event'; .*need a \[\[routes\]\] table"),
        ("x=spawn,debounce=1s,debounce=2s", "debounce is given twice; keep one"),
    ],
)
def test_parse_route_spec_rejects(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_route_spec(text)


def test_parse_subscription() -> None:
    assert parse_subscription("file:///tmp/x") == {"server": None, "uri": "file:///tmp/x"}
    assert parse_subscription("memo:memo://notes", {"memo"}) == {"server": "memo", "uri": "memo://notes"}
    assert parse_subscription("urn:isbn:123") == {"server": None, "uri": "urn:isbn:123"}
    with pytest.raises(ValueError, match="no server named 'memoo'"):
        parse_subscription("memoo:memo://notes", {"memo"})


# -------------------------------------------------------------------- validation errors, pinned


def err(tmp_path: Path, message: str, **kw: Any) -> ConfigError:
    with pytest.raises(ConfigError, match=message) as info:
        load(tmp_path, **kw)
    return info.value


def test_unknown_mode_names_the_flag(tmp_path: Path) -> None:
    e = err(
        tmp_path, r"^--mode: 'foo' is not valid: choose one of once, loop, reactive, schedule$", mode="foo"
    )
    assert (e.setting, e.value) == ("--mode", "foo")


def test_errors_are_spelled_by_the_layer_that_set_them(tmp_path: Path) -> None:
    err(tmp_path, r"^--max-steps: '0' is not valid: must be a whole number ≥ 1$", max_steps="0")
    err(
        tmp_path,
        r"^AGENTD_MAX_STEPS: 'lots' is not valid: must be a whole number ≥ 1$",
        env={"AGENTD_MAX_STEPS": "lots"},
    )
    err(
        tmp_path,
        r"agentd\.toml: max_steps: -3 is not valid: must be a whole number ≥ 1$",
        toml="max_steps = -3\n",
    )
    err(
        tmp_path, r"AGENTD_WATCHES__NOTICE_LINES: '0' is not valid", env={"AGENTD_WATCHES__NOTICE_LINES": "0"}
    )
    err(
        tmp_path,
        r"agentd\.toml: watches\.debounce: 'soon' is not valid: not a duration",
        toml='[watches]\ndebounce = "soon"\n',
    )


def test_unknown_toml_key_suggests_the_right_one(tmp_path: Path) -> None:
    err(
        tmp_path,
        r"budget_step: 4 is not valid: unknown setting; did you mean 'budget_steps'\?",
        toml="budget_step = 4\n",
    )
    err(
        tmp_path,
        r"routes\[0\]\.overflw: .*did you mean 'overflow'",
        toml='[[routes]]\nmatch = "x://y"\noverflw = "block"\n',
    )


def test_bad_duration(tmp_path: Path) -> None:
    err(
        tmp_path,
        r"^--interval: '5x' is not valid: not a duration; write .*250ms, 30s",
        mode="loop",
        interval="5x",
    )
    err(tmp_path, r"^--deadline: '0' is not valid: must be greater than zero", deadline="0")
    err(tmp_path, r"^--grace: '-1s' is not valid: a duration cannot be negative", grace="-1s")
    err(tmp_path, r"^--spawn-timeout: '0' is not valid: must be greater than zero", spawn_timeout="0")
    err(tmp_path, r"^--spawn-timeout: 'soon' is not valid: not a duration", spawn_timeout="soon")


def test_bad_size(tmp_path: Path) -> None:
    err(tmp_path, r"^--max-read-bytes: '10 parsecs' is not valid: not a size", max_read_bytes="10 parsecs")
    err(tmp_path, r"^--max-read-bytes: '0' is not valid: must be at least 1 byte", max_read_bytes="0")


def test_bad_subscription_caps_name_the_setting_and_the_default(tmp_path: Path) -> None:
    err(
        tmp_path,
        r"^--max-self-subscriptions-per-session: '0' is not valid: give a whole number of subscriptions, 1 or "
        r"more \(default 64\); past it a model's subscribe is refused with a tool error$",
        max_self_subscriptions_per_session="0",
    )
    err(
        tmp_path,
        r"^AGENTD_MAX_SELF_SUBSCRIPTIONS: 'many' is not valid: .*\(default 1024\)",
        env={"AGENTD_MAX_SELF_SUBSCRIPTIONS": "many"},
    )
    err(
        tmp_path,
        r"agentd.toml: watches.max_watches_total: 0 is not valid: must be a whole number ≥ 1",
        toml="[watches]\nmax_watches_total = 0\n",
    )


def test_bad_enums(tmp_path: Path) -> None:
    err(tmp_path, r"^--output: 'yaml' is not valid: choose one of text, json, stream-json$", output="yaml")
    err(
        tmp_path,
        r"^--session: 'lukewarm' is not valid: choose one of fresh, warm$",
        session="lukewarm",
        mode="loop",
    )
    err(tmp_path, r"^--verbose: 'loud' is not valid: write true or false$", verbose="loud")


def test_invalid_cron(tmp_path: Path) -> None:
    err(tmp_path, r"^--cron: '61 \* \* \* \*' is not valid: .*61", mode="schedule", cron="61 * * * *")
    err(tmp_path, r"^--cron: '\* \* \* \*' is not valid: .*4 fields", mode="schedule", cron="* * * *")


def test_once_needs_an_instruction(tmp_path: Path) -> None:
    err(
        tmp_path,
        r"^instruction: None is not valid: --mode once needs an instruction: pass it as the argument, "
        r"--instruction TEXT or --instruction @FILE$",
        instruction=None,
    )


def test_reactive_instruction_can_come_from_route_templates(tmp_path: Path) -> None:
    s = load(
        tmp_path, mode="reactive", instruction=None, toml='[[routes]]\nmatch = "x://y"\ntemplate = "react"\n'
    )
    assert s.instruction is None
    err(tmp_path, r"or a template on every route", mode="reactive", instruction=None, routes=["x://y=spawn"])


def test_model_is_required_and_checked(tmp_path: Path) -> None:
    err(tmp_path, r"^--model: 'gpt-4' is not valid: write openai:MODEL", model="gpt-4")
    err(tmp_path, r"^model: None is not valid: choose a model with --model or AGENTD_MODEL", model=None)
    err(
        tmp_path,
        r"^--model: 'script:/nonexistent/s\.json' is not valid: .*does not exist",
        model="script:/nonexistent/s.json",
    )
    err(tmp_path, r"^AGENTD_MODEL: 'llama:7b' is not valid", model=None, env={"AGENTD_MODEL": "llama:7b"})


def test_unreadable_at_file(tmp_path: Path) -> None:
    err(
        tmp_path,
        r"^--instruction: '@/nonexistent/task\.md' is not valid: cannot read the instruction file "
        r"'/nonexistent/task\.md' \(No such file or directory\); fix the path, or write @@",
        instruction="@/nonexistent/task.md",
    )


def test_timers_by_mode(tmp_path: Path) -> None:
    err(tmp_path, r"^--interval: 60\.0 is not valid: --interval does not apply to --mode once", interval="1m")
    err(tmp_path, r"^--cron: '@daily' is not valid: --cron does not apply to --mode once", cron="@daily")
    err(tmp_path, r"^--cron: .*cron fires belong to --mode schedule", mode="loop", cron="@daily")
    err(
        tmp_path,
        r"^--mode: 'schedule' is not valid: --mode schedule needs --interval DURATION or --cron 'EXPR'$",
        mode="schedule",
    )
    err(
        tmp_path,
        r"--mode schedule takes --interval or --cron, not both",
        mode="schedule",
        cron="@daily",
        interval="1m",
    )
    err(tmp_path, r"--mode schedule needs an interval > 0", mode="schedule", interval="0")
    err(tmp_path, r"schedule runs a fresh root per fire", mode="schedule", interval="1m", session="warm")


def test_reactive_timer_routes(tmp_path: Path) -> None:
    err(
        tmp_path,
        r"^--interval: 30\.0 is not valid: in reactive mode a timer needs a route with timer = true",
        mode="reactive",
        interval="30s",
    )
    err(
        tmp_path,
        r"^--route\[1\]\.timer: True is not valid: only one route may take the timer",
        mode="reactive",
        interval="30s",
        routes=["@timer=spawn", "@timer=continue"],
    )
    err(tmp_path, r"a timer route needs --interval or --cron", mode="reactive", routes=["@timer=spawn"])
    s = load(tmp_path, mode="reactive", cron="*/5 * * * *", routes=["@timer=continue:ticks"])
    assert s.routes[0].timer
    assert s.routes[0].session == "ticks"


def test_route_field_rules(tmp_path: Path) -> None:
    def route_err(body: str, message: str) -> None:
        err(tmp_path, message, toml=f"[[routes]]\n{body}\n")

    route_err(
        'match = "x://y"\ndisposition = "teleport"',
        r"routes\[0\]\.disposition: 'teleport' is not valid: choose one of spawn, continue",
    )
    route_err(
        'match = "x://y"\ndisposition = "continue"\nmax_inflight = 2',
        r"routes\[0\]\.max_inflight: 2 is not valid: max_inflight applies to spawn routes",
    )
    route_err(
        'match = "x://y"\nsession = "s"',
        r"routes\[0\]\.session: 's' is not valid: session applies to continue routes",
    )
    route_err(
        'disposition = "spawn"',
        r"routes\[0\]\.match: None is not valid: give the URI or glob this route owns",
    )
    route_err(
        'timer = true\nmatch = "x://y"',
        r"routes\[0\]\.match: 'x://y' is not valid: a timer route matches clock fires only",
    )
    route_err(
        'match = "x://y"\non_event = "def ("',
        r"routes\[0\]\.on_event: 'def \(' is not valid: on_event must be Python source; it does not parse",
    )
    route_err(
        'match = "x://y"\ndebounce = "2s"\nmax_wait = "1s"',
        r"routes\[0\]\.max_wait: 1\.0 is not valid: max_wait must be ≥ debounce \(2\.0s\)",
    )
    route_err(
        'match = "x://y"\noverflow = "explode"',
        r"overflow: 'explode' is not valid: choose one of coalesce, drop_oldest, drop_newest, block",
    )
    route_err(
        'match = "x://y"\nextract = "magic"',
        r"extract: 'magic' is not valid: choose one of auto, state, event-log",
    )
    route_err('match = "x://y"\nqueue_cap = 0', r"queue_cap: 0 is not valid: must be a whole number ≥ 1")


def test_route_flag_errors_are_collected(tmp_path: Path) -> None:
    e = err(tmp_path, r"unknown disposition 'explode'", routes=["x://a=explode", "x://b=spawn:0"])
    assert isinstance(e, ConfigErrors)
    assert [p.setting for p in e.problems] == ["--route", "--route"]
    assert len(str(e).splitlines()) == 2


def test_subscription_to_an_unknown_server(tmp_path: Path) -> None:
    err(
        tmp_path,
        r"^--subscribe\[0\]: 'memoo:memo://notes' is not valid: no server named 'memoo'",
        subscriptions=["memoo:memo://notes"],
    )
    err(
        tmp_path,
        r"subscriptions\[0\]: 'ghost:memo://x' is not valid: no server named 'ghost'",
        toml='[[subscriptions]]\nserver = "ghost"\nuri = "memo://x"\n',
    )
    err(
        tmp_path,
        r"^--subscribe\[0\]\.uri: 'has space' is not valid: a resource URI is non-empty and has no spaces",
        subscriptions=[{"uri": "has space"}],
    )


def test_addresses(tmp_path: Path) -> None:
    err(tmp_path, r"^--health-addr: 'localhost' is not valid: write HOST:PORT", health_addr="localhost")
    err(
        tmp_path,
        r"^--metrics-addr: '1\.2\.3\.4:70000' is not valid: write HOST:PORT",
        metrics_addr="1.2.3.4:70000",
    )
    err(
        tmp_path,
        r"^--metrics-addr: '127\.0\.0\.1:9000' is not valid: health and metrics cannot share one address",
        health_addr="127.0.0.1:9000",
        metrics_addr="127.0.0.1:9000",
    )


def test_watch_state_is_checked_but_never_created(tmp_path: Path) -> None:
    target = tmp_path / "state" / "watches.json"
    err(
        tmp_path,
        r"^--watch-state: .* is not valid: its directory '.*state' does not exist",
        watch_state=str(target),
    )
    err(tmp_path, r"^--watch-state: .* is not valid: is a directory", watch_state=str(tmp_path))
    ok = tmp_path / "watches.json"
    assert load(tmp_path, watch_state=str(ok)).watch_state == ok
    assert not ok.exists()
    assert not target.parent.exists()


def test_several_problems_one_line_each(tmp_path: Path) -> None:
    e = err(tmp_path, r"--max-steps", max_steps="x", output="yaml", mode="loop", interval="-1")
    assert isinstance(e, ConfigErrors)
    lines = str(e).splitlines()
    assert len(lines) == 3
    assert {p.setting for p in e.problems} == {"--max-steps", "--output", "--interval"}


def test_config_file_problems(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError,
        match=r"^--config: '/nonexistent/a\.toml' is not valid: cannot read the config file \(No such file",
    ):
        load_settings({}, config_file=Path("/nonexistent/a.toml"), env={})
    bad = tmp_path / "bad.toml"
    bad.write_text("mode = \n")
    with pytest.raises(ConfigError, match=r"^--config: '.*bad\.toml' is not valid: not valid TOML: "):
        load_settings({}, config_file=bad, env={})
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match="the config file is not UTF-8 text"):
        load_settings({}, config_file=binary, env={})
    both = tmp_path / "both.toml"
    both.write_text('subscribe = ["a://b"]\n[[subscriptions]]\nuri = "c://d"\n')
    with pytest.raises(ConfigError, match="use subscribe or \\[\\[subscriptions\\]\\], not both"):
        load_settings({}, config_file=both, env={})


def test_env_json_errors(tmp_path: Path) -> None:
    err(
        tmp_path,
        r"^AGENTD_ROUTES: '\[oops' is not valid: list and table settings in the environment are JSON",
        env={"AGENTD_ROUTES": "[oops"},
    )


def test_direct_settings_enforce_the_same_rules(tmp_path: Path, script: str) -> None:
    with pytest.raises(pydantic.ValidationError, match="needs --interval DURATION or --cron"):
        Settings(mode="schedule", model=script, instruction="x")
    assert Settings(model=script, instruction="x").mode == "once"


def test_messages_name_setting_value_and_fix(tmp_path: Path) -> None:
    e = err(tmp_path, "max-tokens", max_tokens="1.5")
    assert e.setting == "--max-tokens"
    assert e.value == "1.5"
    assert re.search("whole number", e.fix)


def test_timer_route_refuses_a_watch_stage(tmp_path):
    from agentd.config import load_settings
    from agentd.core.errors import ConfigError

    script = tmp_path / "s.json"
    script.write_text('{"turns": [{"text": "x"}]}')
    cfg = tmp_path / "agentd.toml"
    cfg.write_text(
        f'mode = "reactive"\nmodel = "script:{script}"\ninstruction = "x"\ninterval = "5s"\n'
        '[[routes]]\ntimer = true\non_event = "event"\n'
    )
    with pytest.raises(ConfigError, match=r"routes\[0\]\.extract: .*a timer route has no resource to read"):
        load_settings({}, config_file=cfg, env={})


# -------------------------------------------------------------------- routing, second pass


def test_route_flags_set_every_route_key_and_are_validated(tmp_path: Path) -> None:
    s = load(
        tmp_path,
        mode="reactive",
        routes=[
            "memo://*=spawn,debounce=50ms,max_wait=2s,overflow=drop_oldest,queue_cap=3,reread_on_start=no"
        ],
    )
    [r] = s.routes
    assert (r.debounce, r.max_wait, r.overflow, r.queue_cap, r.reread_on_start) == (
        0.05,
        2.0,
        "drop_oldest",
        3,
        False,
    )
    err(
        tmp_path,
        r"^--route\[0\]\.overflow: 'spill' is not valid: choose one of",
        mode="reactive",
        routes=["x=spawn,overflow=spill"],
    )
    err(
        tmp_path,
        r"^--route\[0\]\.debounce: 'soon' is not valid",
        mode="reactive",
        routes=["x=spawn,debounce=soon"],
    )


def test_settings_that_would_fail_at_run_time_are_refused(tmp_path: Path) -> None:
    err(
        tmp_path,
        r"routes\[0\]\.template: '\{bogus\}' is not valid: template '\{bogus\}': unknown placeholder \{bogus\}",
        mode="reactive",
        toml='[[routes]]\nmatch = "x://*"\ntemplate = "{bogus}"\n',
    )
    err(
        tmp_path,
        r"routes\[0\]\.match: 'x://y\\\\' is not valid: 'x://y\\\\' ends in a lone backslash",
        mode="reactive",
        toml='[[routes]]\nmatch = "x://y\\\\"\n',
    )
    err(
        tmp_path,
        r"^--subscribe\[0\]\.uri: .* ends in a lone backslash",
        mode="reactive",
        subscriptions=["x://y\\"],
    )
    err(
        tmp_path,
        r"^--route\[1\]\.name: 'a' is not valid: route id 'a' is already used by routes\[0\]",
        mode="reactive",
        routes=["x://1=spawn,name=a", "x://2=spawn,name=a"],
    )
    err(
        tmp_path,
        r"names r0, r1, \.\.\. are the ids of unnamed routes",
        mode="reactive",
        routes=["x=spawn,name=r3"],
    )
    err(tmp_path, r"a route name is 1-64 letters", mode="reactive", routes=["x=spawn,name=watch:x"])


def test_settings_that_would_be_ignored_are_refused(tmp_path: Path) -> None:
    err(
        tmp_path,
        r"^--session: 'warm' is not valid: reactive sessions are set per route",
        mode="reactive",
        session="warm",
    )
    err(tmp_path, r"^--session: 'warm' is not valid: a once run has one root", session="warm")
    err(
        tmp_path,
        r"routes\[0\]\.template: 'x' is not valid: template applies to spawn routes",
        mode="reactive",
        toml='[[routes]]\nmatch = "x://*"\ndisposition = "continue"\ntemplate = "x"\n',
    )
    e = err(tmp_path, r"^--cron: .* does not apply to --mode once", cron="*/5 * * * *")
    assert "use --mode schedule" in e.fix
    assert "--mode loop" not in e.fix
    e = err(tmp_path, r"^--interval: .* does not apply to --mode once", interval="5m")
    assert "--mode loop" in e.fix
    # ... and what the hints suggest is accepted:
    load(tmp_path, mode="schedule", cron="*/5 * * * *")
    load(tmp_path, mode="loop", interval="5m")
    load(tmp_path, mode="reactive", interval="5m", routes=["@timer=spawn"])
    # A declared timer route in schedule mode is honoured (its session, template, max_inflight).
    s = load(tmp_path, mode="schedule", interval="1m", routes=["@timer=continue:ticks"])
    assert s.routes[0].session == "ticks"


def test_paths_a_config_file_reads_resolve_against_its_folder(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    (conf / "scripts").mkdir(parents=True)
    (conf / "scripts" / "s.json").write_text(SCRIPT)
    (conf / "task.md").write_text("the task")
    (conf / "mcp.json").write_text('{"mcpServers": {"m": {"command": "true"}}}')
    (conf / "agentd.toml").write_text(
        'model = "script:scripts/s.json"\ninstruction = "@task.md"\nmcp_config = "mcp.json"\n'
        'system = "@@literal"\nwatch_state = "w.json"\n'
    )
    s = load_settings({}, config_file=conf / "agentd.toml", env={})
    assert s.model == f"script:{conf / 'scripts' / 's.json'}"
    assert s.instruction == "the task"
    assert s.system == "@literal"
    assert "m" in s.servers
    assert s.watch_state == Path("w.json")  # where agentd writes: the working directory
    # Flags and the environment still resolve against the working directory.
    err(
        tmp_path,
        r"the script file 'scripts/s.json' does not exist",
        base=False,
        model="script:scripts/s.json",
        instruction="x",
    )


def test_agentd_as_a_server_command_is_this_interpreter(tmp_path: Path) -> None:
    import sys

    s = load(tmp_path, mcp_stdio=["memo=agentd serve memo --file /tmp/x"])
    assert (s.servers["memo"].command, s.servers["memo"].args) == (
        sys.executable,
        ["-m", "agentd", "serve", "memo", "--file", "/tmp/x"],
    )
    s = load(tmp_path, toml='[servers.memo]\ncommand = "agentd"\nargs = ["serve", "memo"]\n')
    assert s.servers["memo"].args == ["-m", "agentd", "serve", "memo"]
    s = load(tmp_path, mcp_stdio=["memo=/opt/agentd serve memo"])
    assert s.servers["memo"].command == "/opt/agentd"  # a path is taken as written


def test_missing_server_commands(tmp_path: Path) -> None:
    from agentd.config import missing_server_commands

    tool = tmp_path / "bin" / "tool"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    plain = tmp_path / "plain"
    plain.write_text("x")
    s = load(
        tmp_path,
        mcp_stdio=["a=tool", "b=nope-not-here", f"c={plain}", f"d={tool}", "e=./bin/tool"],
        mcp_http=["f=http://127.0.0.1:1/mcp"],
        toml=f'[servers.g]\ncommand = "tool"\nenv = {{ PATH = "{tool.parent}" }}\n[servers.h]\ncommand = "./bin/tool"\ncwd = "{tmp_path}"\n',
    )
    found = {spec.name: problem for spec, problem in missing_server_commands(s, {"PATH": "/nonexistent"})}
    assert sorted(found) == ["a", "b", "c", "e"]
    assert str(found["b"]) == (
        "server b (--mcp-stdio b) command: 'nope-not-here' is not valid: it is not on PATH; "
        "install it, or give its full path"
    )
    assert found["c"].fix == "it is not an executable file; fix the path"


def test_model_bounds_defaults_layers_and_validation(tmp_path: Path) -> None:
    s = load(tmp_path)
    assert (s.model_timeout, s.max_turn_steps) == (300.0, 100)
    s = load(
        tmp_path, toml='model_timeout = "90s"\nmax_turn_steps = 20\n', env={"AGENTD_MAX_TURN_STEPS": "7"}
    )
    assert (s.model_timeout, s.max_turn_steps) == (90.0, 7)
    assert load(tmp_path, max_turn_steps="0").max_turn_steps is None  # 0 turns the cap off
    assert load(tmp_path, model_timeout="1h").model_timeout == 3600.0
    err(tmp_path, r"^--model-timeout: '0' is not valid: must be greater than zero", model_timeout="0")
    err(
        tmp_path,
        r"^AGENTD_MODEL_TIMEOUT: 'x' is not valid: not a duration",
        env={"AGENTD_MODEL_TIMEOUT": "x"},
    )
    err(tmp_path, r"^--max-turn-steps: '-3' is not valid: must be a whole number ≥ 0", max_turn_steps="-3")


def test_watch_state_refuses_what_is_not_a_regular_agentd_file(tmp_path: Path) -> None:
    foreign = tmp_path / "notes.txt"
    foreign.write_text("my notes\n")
    err(tmp_path, r"^--watch-state: .* is not valid: exists and is not an agentd watch-state file",
        watch_state=str(foreign))  # fmt: skip
    err(tmp_path, r"^--watch-state: '/dev/zero' is not valid: is a character device", watch_state="/dev/zero")
    assert foreign.read_text() == "my notes\n"


# --- model settings, providers, renamed budgets -------------------------------------------

OPENAI = {"OPENAI_API_KEY": "sk-test"}


def test_model_settings_merge_key_by_key_across_layers(tmp_path: Path) -> None:
    toml = '[model_settings]\ntemperature = 0.1\ntop_p = 0.5\nstop = ["A"]\nextra = { seed = 1 }\n'
    env = {**OPENAI, "AGENTD_MODEL_SETTINGS__TOP_P": "0.6", "AGENTD_MODEL_SETTINGS__EXTRA": '{"user": "u"}'}
    s = load(tmp_path, toml=toml, env=env, model="openai:gpt-4o", temperature="0.2", max_output_tokens="99")
    assert s.model_settings.to_model_settings().given() == {
        "temperature": 0.2,
        "top_p": 0.6,
        "max_output_tokens": 99,
        "stop": ["A"],
        "extra": {"seed": 1, "user": "u"},  # extra merges key by key too
    }


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"top_p": "0"}, r"^--top-p: '0' is not valid: give a number above 0 up to 1$"),
        (
            {"env": {**OPENAI, "AGENTD_MODEL_SETTINGS__TEMPERATURE": "warm"}},
            r"^AGENTD_MODEL_SETTINGS__TEMPERATURE: 'warm' is not valid: give a number from 0 to 2$",
        ),
        (
            {"toml": "[model_settings]\nthinking_budget = 100\n"},
            r"agentd\.toml: model_settings\.thinking_budget: 100 is not valid: Anthropic's smallest",
        ),
        (
            {"toml": "[model_settings]\ntop_k = 5\n"},
            r"agentd\.toml: model_settings\.top_k: 5 is not valid: unknown setting; did you mean 'top_p'",
        ),
        (
            {"toml": '[model_settings]\nprompt_cache = "5m"\n', "temperature": "0.3"},
            r"agentd\.toml: model_settings\.prompt_cache: '5m' is not valid: openai:gpt-4o cannot take prompt_cache",
        ),
        ({"reasoning_effort": "huge"}, r"^--reasoning-effort: 'huge' is not valid: choose one of none"),
        (
            {"budget_usd": "free"},
            r"^--budget-usd: 'free' is not valid: must be an amount in US dollars above 0",
        ),
    ],
)
def test_bad_model_settings_are_spelled_by_their_layer(
    tmp_path: Path, kw: dict[str, Any], message: str
) -> None:
    kw.setdefault("env", OPENAI)
    err(tmp_path, message, model="openai:gpt-4o", **kw)


def test_old_budget_names_still_work_and_are_reported(tmp_path: Path) -> None:
    from agentd.config import deprecations

    s = load(tmp_path, toml="max_steps = 3\n", env={"AGENTD_MAX_TOKENS": "500"})
    assert (s.budget_steps, s.budget_tokens) == (3, 500)
    assert [(d.old, d.new) for d in deprecations(s)] == [
        ("AGENTD_MAX_TOKENS", "AGENTD_BUDGET_TOKENS"),
        (f"{tmp_path / 'agentd.toml'}: max_steps", f"{tmp_path / 'agentd.toml'}: budget_steps"),
    ]
    assert "is deprecated and will be removed in the next release; use" in deprecations(s)[0].message()
    assert deprecations(load(tmp_path, budget_steps="3")) == ()
    err(
        tmp_path,
        r"^--max-tokens: '5' is not valid: --max-tokens is the old name of --budget-tokens; give one$",
        max_tokens="5",
        budget_tokens="6",
    )


def test_providers_tables(tmp_path: Path) -> None:
    toml = (
        '[providers.vllm]\nbase_url = "http://127.0.0.1:8000/v1"\n'
        '[providers.gw]\nbase_url = "https://gw.example/v1"\napi = "responses"\napi_key_env = "GW_KEY"\n'
        'headers = { "X-Org" = "${ORG}" }\nprices = "openai"\n'
    )
    s = load(tmp_path, toml=toml, env={"GW_KEY": "k", "ORG": "team-7"}, model="gw:gpt-5")
    assert s.providers["gw"].headers == {"X-Org": "team-7"}
    assert (s.providers["gw"].api, s.providers["vllm"].api) == ("responses", "chat")


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        (
            '[providers.Local]\nbase_url = "http://h/v1"\n',
            r"providers\.Local: 'Local' is not valid: a provider name is 1-32 lower",
        ),
        (
            '[providers.azure]\nbase_url = "http://h/v1"\n',
            r"providers\.azure: 'azure' is not valid: 'azure' is a built-in provider",
        ),
        (
            '[providers.x]\nbase_url = "h:8000"\n',
            r"providers\.x\.base_url: 'h:8000' is not valid: write an http:// or https:// URL",
        ),
        (
            '[providers.x]\nbase_url = "http://h"\napi_key_env = "sk-123"\n',
            r"providers\.x\.api_key_env: .* the name of an environment variable",
        ),
        (
            '[providers.x]\nbase_url = "http://h"\nprices = "opnai"\n',
            r"providers\.x\.prices: 'opnai' is not valid: not a genai-prices provider; did you mean 'openai'",
        ),
        (
            '[providers.x]\nbase_url = "http://h"\napi = "grpc"\n',
            r"providers\.x\.api: 'grpc' is not valid: choose one of chat, responses, messages",
        ),
        (
            '[providers.x]\nbase_url = "http://h"\nheaders = { A = "${NOPE}" }\n',
            r"environment variable NOPE is not set",
        ),
    ],
)
def test_bad_providers_name_the_fix(tmp_path: Path, toml: str, message: str) -> None:
    err(tmp_path, message, toml=toml)


def test_check_hides_provider_headers(tmp_path: Path) -> None:
    from agentd.config import effective_config, server_secrets

    toml = (
        '[providers.gw]\nbase_url = "https://gw/v1"\nheaders = { Authorization = "Bearer gw-secret-123" }\n'
    )
    s = load(tmp_path, toml=toml)
    shown = effective_config(s, env={})
    assert shown["providers"]["gw"]["headers"] == {"Authorization": "***"}
    assert "gw-secret-123" in server_secrets(s)


# --- per-route model, system prompt and settings ------------------------------------------

KEYS = {"OPENAI_API_KEY": "sk", "ANTHROPIC_API_KEY": "ak"}


def test_route_profiles_merge_over_the_supervisors(tmp_path: Path) -> None:
    from agentd.supervisor.routing.routes import model_profiles

    (tmp_path / "sys.txt").write_text("from a file")
    toml = (
        'mode = "reactive"\nsystem = "top"\n[model_settings]\ntemperature = 0.4\nreasoning_effort = "low"\n'
        '[[routes]]\nname = "a"\nmatch = "x://a"\nmodel = "anthropic:claude-x"\n'
        f'system = "@{tmp_path / "sys.txt"}"\nmodel_settings = {{ max_output_tokens = 99 }}\n'
        '[[routes]]\nname = "b"\nmatch = "x://b"\nmodel_settings = { top_p = 0.5 }\n'
        '[[routes]]\nname = "c"\nmatch = "x://c"\n'
    )
    s = load(tmp_path, toml=toml, env=KEYS, model="openai:gpt-4o")
    default, routes = model_profiles(s)
    assert (default.model, default.system, default.model_settings) == (
        "openai:gpt-4o",
        "top",
        {"temperature": 0.4, "reasoning_effort": "low"},
    )
    assert sorted(routes) == ["a", "b"]
    assert (routes["a"].model, routes["a"].system, routes["a"].model_settings) == (
        "anthropic:claude-x",
        "from a file",
        {"temperature": 0.4, "max_output_tokens": 99},  # reasoning_effort: not for this model
    )
    assert (routes["b"].model, routes["b"].system) == ("openai:gpt-4o", "top")
    assert routes["b"].model_settings == {"temperature": 0.4, "top_p": 0.5, "reasoning_effort": "low"}


@pytest.mark.parametrize(
    ("routes", "message"),
    [
        (
            '[[routes]]\nmatch = "x://a"\nmodel = "antropic:claude-x"\n',
            r"routes\[0\]\.model: 'antropic:claude-x' is not valid: unknown provider 'antropic'; did you mean",
        ),
        (
            '[[routes]]\nmatch = "x://a"\nmodel = "anthropic:claude-x"\nmodel_settings = { thinking_budget = 2048 }\n',
            r"routes\[0\]\.model_settings\.temperature: 0\.4 is not valid: extended thinking .* \(inherited from",
        ),
        (
            '[[routes]]\nmatch = "x://a"\ndisposition = "continue"\nsession = "s"\nmodel = "anthropic:claude-x"\n'
            '[[routes]]\nmatch = "x://b"\ndisposition = "continue"\nsession = "s"\n',
            r"routes\[1\]\.session: 's' is not valid: routes\[0\] delivers into the same session with another model",
        ),
    ],
)
def test_route_models_are_validated(tmp_path: Path, routes: str, message: str) -> None:
    toml = 'mode = "reactive"\n[model_settings]\ntemperature = 0.4\n' + routes
    err(tmp_path, message, toml=toml, env=KEYS, model="openai:gpt-4o")


def test_a_continue_route_into_the_loop_root_cannot_change_its_model(tmp_path: Path) -> None:
    toml = '[[routes]]\nmatch = "x://a"\ndisposition = "continue"\nmodel = "anthropic:claude-x"\n'
    err(
        tmp_path,
        r"routes\[0\]\.model: 'anthropic:claude-x' is not valid: this route delivers into the root session",
        toml=toml,
        env=KEYS,
        model="openai:gpt-4o",
        mode="loop",
    )
