"""Reactive routing, second pass, through the real ``agentd`` command and real MCP servers.

Each test runs ``python -m agentd`` against the bundled memo server (edits of
its file from outside are pushed as ``notifications/resources/updated``), the
SDK-written notes server, or the fault server (storms on demand), and awaits
agentd's NDJSON telemetry, its exit or its HTTP endpoints. Nothing sleeps.

Covered: the start-up re-read (rfcs/0130), declared subscriptions surviving
an agent's ``unsubscribe`` and a reconnect, required servers gating the start
and ``subagent.exit`` for every spawn (rfcs/0135), settings that are refused
or honoured (rfcs/0133, 0132), declared subscriptions that resolve to nothing
(rfcs/0134), one drop vocabulary (rfcs/0136), the loop's idle backoff reset by
a delivery, and what the command line can say (rfcs/0137).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
from pathlib import Path

import pytest
import trio

from agentd.core.exitcodes import ExitCode
from tests.support.agentd_proc import PY, agentd_cmd, drain
from tests.support.files import edit
from tests.support.routing import (
    FAST_BACKOFF,
    FAULT_SERVER,
    START,
    STEP,
    get,
    health_base,
    memo_server,
    metric_total,
    scrape,
    script,
    sdk_server,
    server_process,
    spawn_exit_pairs,
    supervised,
    write,
)

READ_NOTES = [
    {"tool_calls": [{"name": "read_resource", "arguments": {"uri": "memo://notes"}}]},
    {"text": "notes: {last_tool_result}"},
]


def reactive(notes: Path, model: str, *extra: str) -> list[str]:
    """A reactive agentd watching the memo server's notes with one spawn route."""
    return [
        "--mode", "reactive", "--verbose", "--mcp-stdio", memo_server(notes),
        "--subscribe", "memo:memo://notes", "--model", model, *extra, "report the notes",
    ]  # fmt: skip


# --------------------------------------------------------------------------- start-up re-read


async def test_a_change_made_while_agentd_was_down_is_handled_when_it_starts(tmp_path: Path) -> None:
    notes = tmp_path / "notes.json"
    model = script(tmp_path, READ_NOTES)
    args = reactive(notes, model, "--route", "memo://notes=spawn:1,debounce=50ms")
    async with supervised(args) as a:
        await a.wait_event("subscription.established", timeout=START)
        # Even the first start reads what it watches: the notes as they are.
        startup = await a.wait_event("resource.updated", timeout=STEP)
        assert (startup["kind"], startup.get("startup"), startup["route"]) == ("synthetic", True, "r0")
        await a.wait_event("turn.end", timeout=STEP)
        a.proc.send_signal(signal.SIGKILL)  # a crash: no drain
        await a.wait_exit(START)
    assert a.out.splitlines() == ["notes: {}"]

    edit(notes, {"todo": "written while agentd was down"})

    async with supervised(args) as b:
        await b.wait_event("turn.end", timeout=START)
        await drain(b)
    [startup] = b.find("resource.updated")
    assert (startup["uri"], startup["kind"], startup["startup"]) == ("memo://notes", "synthetic", True)
    # The subscription was live before the re-read was routed: nothing in between is lost.
    established = b.find("subscription.established")[0]
    assert b.events.index(established) < b.events.index(startup)
    assert b.out.splitlines() == ['notes: {"todo":"written while agentd was down"}']


async def test_a_route_can_switch_the_start_up_re_read_off(tmp_path: Path) -> None:
    notes = tmp_path / "notes.json"
    model = script(tmp_path, READ_NOTES)
    args = reactive(notes, model, "--route", "memo://notes=spawn,debounce=50ms,reread_on_start=false")
    async with supervised(args) as a:
        skipped = await a.wait_event("resource.reread_skipped", timeout=START)
        assert (skipped["uri"], skipped["route"]) == ("memo://notes", "r0")
        edit(notes, {"v": 1})
        await a.wait_event("turn.end", timeout=STEP)
        await drain(a)
    assert [e["kind"] for e in a.find("resource.updated")] == ["updated"]
    assert len(a.find("subagent.spawn")) == 1
    assert a.out.splitlines() == ['notes: {"v":1}']


# --------------------------------------------------------------------------- declared subscriptions


async def test_an_agent_unsubscribing_a_declared_uri_leaves_the_daemon_listening_across_a_reconnect(
    tmp_path: Path,
) -> None:
    # Each agent subscribes itself to the declared URI, unsubscribes, then reads it.
    notes = tmp_path / "notes.json"
    model = script(
        tmp_path,
        [
            {"tool_calls": [{"name": "subscribe", "arguments": {"uri": "memo://notes"}}]},
            {"tool_calls": [{"name": "unsubscribe", "arguments": {"uri": "memo://notes"}}]},
            *READ_NOTES,
        ],
    )
    args = reactive(
        notes, model, "--route", "memo://notes=spawn:1,debounce=50ms", "--health-addr", "127.0.0.1:0"
    )
    async with supervised(args, env=FAST_BACKOFF) as a:
        base = await health_base(a)
        await a.wait_event("turn.end", timeout=START)  # a1, woken by the start-up re-read
        [unsub] = a.find("self.unsubscribe")
        assert (unsub["uri"], unsub["server"], unsub["kept"]) == ("memo://notes", "memo", True)
        edit(notes, {"v": 1})  # still heard by the declared route
        await a.wait_event("turn.end", count=2, timeout=STEP)
        assert (await get(base + "/readyz")).status_code == 200
        server_process(a, "serve memo").send_signal(signal.SIGKILL)
        await a.wait_event("subscription.established", count=2, timeout=STEP)
        await a.wait_event("turn.end", count=3, timeout=STEP)  # the reconnect's re-read
        edit(notes, {"v": 2})
        await a.wait_event("turn.end", count=4, timeout=STEP)
        ready = await get(base + "/readyz")
        assert ready.status_code == 200, ready.text
        await drain(a)
    assert a.out.splitlines() == ["notes: {}", 'notes: {"v":1}', 'notes: {"v":1}', 'notes: {"v":2}']
    assert all(e["route"] == "r0" for e in a.find("resource.updated"))


# --------------------------------------------------------------------------- required servers, once


@pytest.mark.parametrize(("command", "output"), [("/bin/false", "text"), ("no-such-server-command", "json")])
async def test_once_with_a_required_server_that_never_starts_never_runs_the_root_and_exits_6(
    tmp_path: Path, command: str, output: str
) -> None:
    model = script(tmp_path, [{"text": "ran without its tools"}])
    args = ["--mcp-stdio", f"memo={command}", "--require", "memo", "--output", output]
    async with supervised([*args, "--model", model, "use the memo"], env=FAST_BACKOFF) as a:
        assert await a.wait_exit(START) == ExitCode.REQUIRED_SERVER
    assert a.find("reactor.waiting")[0]["servers"] == ["memo"]
    assert len(a.find("upstream.connect_failed")) == 5  # the whole backoff schedule
    assert a.find("subagent.spawn") == []
    [failed] = a.find("supervisor.required_server_failed")
    message = failed["error"]
    assert message.startswith("required server 'memo' could not be started or reconnected after 5 attempts")
    assert "fix its command or URL" in message
    if output == "json":
        result = json.loads(a.out)
        assert (result["status"], result["exit_code"], result["error"]["message"]) == (None, 6, message)
        assert result["error"]["kind"] == "server"
    else:
        assert a.out == ""


async def test_once_root_starts_only_once_a_late_required_server_connected(tmp_path: Path) -> None:
    # The server's first start fails; the second (after the backoff) works.
    notes = tmp_path / "notes.json"
    marker = tmp_path / "first-start-failed"
    wrapper = write(
        tmp_path,
        "memo.sh",
        f'#!/bin/sh\nif [ -e "{marker}" ]; then exec {PY} -m agentd serve memo --file "{notes}"; fi\n'
        f'touch "{marker}"\necho "not yet" >&2\nexit 1\n',
    )
    os.chmod(wrapper, 0o755)
    model = script(
        tmp_path,
        [
            {"tool_calls": [{"name": "memo__memo_set", "arguments": {"key": "k", "value": "v"}}]},
            {"text": "set: {last_tool_result}"},
        ],
    )
    notes.write_text("{}")
    args = ["--mcp-stdio", f"memo={wrapper}", "--require", "memo", "--model", model, "set k", "--verbose"]
    async with supervised(args, env=FAST_BACKOFF) as a:
        assert await a.wait_exit(START) == ExitCode.OK
    connected = a.find("upstream.connected")[0]
    spawn = a.find("subagent.spawn")[0]
    assert a.events.index(connected) < a.events.index(spawn)
    assert json.loads(a.out.removeprefix("set: ")) == {"key": "k", "value": "v"}
    assert json.loads(notes.read_text()) == {"k": "v"}


# --------------------------------------------------------------------------- subagent.exit per spawn


def _invariant_case(name: str, tmp: Path) -> tuple[list[str], int, list[str]]:
    """(args, expected exit code, events to await before SIGTERM) for one run of the invariant test."""
    slow = [{"text": "slow", "latency_ms": 20000}]
    if name == "once-completed":
        return ["--model", script(tmp, [{"text": "done"}]), "task"], ExitCode.OK, []
    if name == "once-deadline-mid-turn":
        return ["--deadline", "4s", "--model", script(tmp, slow), "task"], ExitCode.DEADLINE, []
    if name == "loop-warm-drain":
        model = script(tmp, [{"text": "shift 1"}, {"text": "shift 2"}])
        return ["--mode", "loop", "--interval", "0", "--model", model, "t"], ExitCode.OK, ["loop.shift"]
    if name == "reactive-drain":
        return reactive(tmp / "notes.json", script(tmp, READ_NOTES)), ExitCode.OK, ["turn.end"]
    assert name == "schedule-second-signal-mid-turn"
    model = script(tmp, slow)
    args = ["--mode", "schedule", "--interval", "1h", "--model", model, "t"]
    return args, ExitCode.DRAIN_TIMEOUT, ["subagent.started"]


@pytest.mark.parametrize(
    "case",
    [
        "once-completed",
        "once-deadline-mid-turn",
        "loop-warm-drain",
        "reactive-drain",
        "schedule-second-signal-mid-turn",
    ],
)
async def test_every_subagent_spawn_has_its_subagent_exit(tmp_path: Path, case: str) -> None:
    args, code, before_signal = _invariant_case(case, tmp_path)
    async with supervised(args) as a:
        for name in before_signal:
            await a.wait_event(name, timeout=START)
        if before_signal:
            a.signal(signal.SIGTERM)
            if code == ExitCode.DRAIN_TIMEOUT:
                await a.wait_event("drain.start", timeout=STEP)
                a.signal(signal.SIGTERM)
        assert await a.wait_exit(START) == code
    spawned, exited = spawn_exit_pairs(a)
    assert spawned
    assert spawned == exited
    exit_line = a.find("supervisor.exit")[0]
    assert all(a.events.index(e) < a.events.index(exit_line) for e in a.find("subagent.exit"))


# --------------------------------------------------------------------------- settings: refused or honoured


def _check(tmp: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        agentd_cmd("check", *args),
        capture_output=True,
        text=True,
        timeout=START,
        # PWD as a shell would set it for this cwd (check's redaction treats PWD's value as a secret).
        env={**os.environ, "PWD": str(tmp), **(env or {})},
        cwd=tmp,
        check=False,
    )


CHECK_REFUSALS = {
    "template-unknown-field": (
        "--mode reactive --config routes.toml",
        '[[routes]]\nmatch = "memo://*"\ntemplate = "{bogus}"\n',
        r"routes\[0\]\.template: '\{bogus\}' is not valid: template '\{bogus\}': unknown placeholder \{bogus\}",
    ),
    "route-glob-lone-backslash": (
        "--mode reactive --config routes.toml",
        '[[routes]]\nmatch = "memo://x\\\\"\n',
        r"routes\[0\]\.match: .* ends in a lone backslash: escape it",
    ),
    "subscribe-glob-lone-backslash": (
        "--mode reactive --subscribe 'memo://x\\'",
        "",
        r"--subscribe\[0\]\.uri: .* ends in a lone backslash",
    ),
    "session-warm-in-reactive": (
        "--mode reactive --session warm",
        "",
        r"--session: 'warm' is not valid: reactive sessions are set per route",
    ),
    "template-on-a-continue-route": (
        "--mode reactive --config routes.toml",
        '[[routes]]\nmatch = "memo://*"\ndisposition = "continue"\ntemplate = "x"\n',
        r"routes\[0\]\.template: 'x' is not valid: template applies to spawn routes",
    ),
    "cron-in-once": (
        "--cron '*/5 * * * *'",
        "",
        r"--cron: .* does not apply to --mode once; use --mode schedule",
    ),
    "duplicate-route-names": (
        "--mode reactive --route a://x=spawn,name=mail --route b://x=spawn,name=mail",
        "",
        r"--route\[1\]\.name: 'mail' is not valid: route id 'mail' is already used by routes\[0\]",
    ),
    "route-setting-typo": (
        "--mode reactive --route 'memo://*=spawn,debounse=5s'",
        "",
        r"unknown route setting 'debounse'; did you mean 'debounce'\?",
    ),
    "required-server-command-missing": (
        "--mcp-stdio 'memo=no-such-server-command --x' --require memo",
        "",
        r"server memo \(--mcp-stdio memo\) command: 'no-such-server-command' is not valid: it is not on PATH",
    ),
}


@pytest.mark.parametrize("case", sorted(CHECK_REFUSALS))
def test_check_refuses_a_setting_that_would_fail_or_be_ignored_later(tmp_path: Path, case: str) -> None:
    command_line, toml, message = CHECK_REFUSALS[case]
    if toml:
        write(tmp_path, "routes.toml", toml)
    model = write(tmp_path, "m.json", json.dumps({"turns": [{"text": "x"}]}))
    done = _check(tmp_path, *shlex.split(command_line), "--model", f"script:{model}", "do it")
    assert done.returncode == ExitCode.CONFIG, done.stdout + done.stderr
    assert done.stdout == ""
    assert re.search(message, done.stderr), done.stderr


def test_the_cron_hint_for_once_works_and_an_optional_missing_command_is_a_warning(tmp_path: Path) -> None:
    model = write(tmp_path, "m.json", json.dumps({"turns": [{"text": "x"}]}))
    done = _check(tmp_path, "--mode", "schedule", "--cron", "*/5 * * * *", "--model", f"script:{model}", "t")
    assert done.returncode == ExitCode.OK, done.stderr
    done = _check(tmp_path, "--mcp-stdio", "memo=no-such-server-command", "--model", f"script:{model}", "t")
    assert done.returncode == ExitCode.OK, done.stderr
    assert done.stderr.startswith("agentd: warning: server memo (--mcp-stdio memo) command")
    assert json.loads(done.stdout)["servers"]["memo"]["command"] == "no-such-server-command"


async def test_a_declared_timer_route_is_honoured_in_schedule_mode(tmp_path: Path) -> None:
    # Clock fires are events: the timer route's continue disposition ticks one warm session.
    model = script(tmp_path, [{"text": "tick 1"}, {"text": "tick 2: {input}"}])
    args = ["--mode", "schedule", "--interval", "1s", "--route", "@timer=continue:ticks,debounce=0"]
    async with supervised([*args, "--verbose", "--model", model, "keep time"]) as a:
        await a.wait_event("turn.end", count=2, timeout=START)
        await drain(a)
    assert [(e["agent"], e["role"], e["session"]) for e in a.find("subagent.spawn")] == [
        ("a1", "session", "ticks")
    ]
    assert [e["route"] for e in a.find("route.deliver")][:2] == ["r0", "r0"]
    assert a.out.splitlines()[0] == "tick 1"
    assert a.out.splitlines()[1].startswith("tick 2: These resources changed")


# --------------------------------------------------------------------------- declared subscriptions that match nothing


async def test_a_declared_glob_matching_nothing_is_reported_counted_and_fails_readiness(
    tmp_path: Path,
) -> None:
    model = script(tmp_path, [{"text": "x"}])
    args = [
        "--mode", "reactive", "--verbose", "--mcp-stdio", sdk_server(tmp_path, "notes"), "--require", "notes",
        "--subscribe", "notes:file:///*", "--health-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0", "--model", model, "react",
    ]  # fmt: skip
    async with supervised(args) as a:
        base = await health_base(a)
        warning = await a.wait_event("subscription.unresolved", timeout=START)
        await a.wait_event("ready.changed", timeout=STEP)
        ready = await get(base + "/readyz")
        metrics = await scrape(base)
        await drain(a)
    assert warning["pattern"] == "notes:file:///*"
    assert warning["required"] is True
    assert "server 'notes' offers resources config://server, note://alpha, note://beta" in warning["error"]
    assert "templates note://{name}" in warning["error"]
    assert ready.status_code == 503
    assert "declared subscription 'notes:file:///*' resolves to nothing" in ready.text
    assert metrics[("agentd_subscriptions_unresolved", ())] == 1


async def test_an_exact_uri_without_a_server_among_several_is_reported(tmp_path: Path) -> None:
    model = script(tmp_path, [{"text": "x"}])
    args = [
        "--mode", "reactive", "--verbose", "--mcp-stdio", sdk_server(tmp_path, "notes"),
        "--mcp-stdio", memo_server(tmp_path / "notes-memo.json"),
        "--subscribe", "todo://today", "--subscribe", "note://alpha", "--model", model, "react",
    ]  # fmt: skip
    async with supervised(args) as a:
        warning = await a.wait_event("subscription.unresolved", timeout=START)
        # note://alpha resolves (the notes server lists it) and is subscribed.
        established = await a.wait_event("subscription.established", timeout=STEP)
        await drain(a)
    assert warning["pattern"] == "todo://today"
    assert "prefix it with the server's name" in warning["error"]
    assert warning["required"] is False
    assert (established["server"], established["uri"]) == ("notes", "note://alpha")


# --------------------------------------------------------------------------- one drop vocabulary


# coalesce defers instead of dropping (rfcs/0372): tests/routing/test_router.py and the webhook burst.
@pytest.mark.parametrize("overflow", ["drop_oldest", "drop_newest"])
async def test_drops_name_the_lost_uri_and_the_routers_reason_everywhere(
    tmp_path: Path, overflow: str
) -> None:
    # One agent at a time (busy), a queue of one: the 2nd change waits, the 3rd overflows.
    model = script(tmp_path, [{"text": "busy", "latency_ms": 1500}])
    route = f"item://*=spawn:1,queue_cap=1,overflow={overflow},debounce=0,reread_on_start=false"
    args = [
        "--mode", "reactive", "--verbose", "--mcp-stdio", sdk_server(tmp_path, "many", "--items", "3", server=FAULT_SERVER),
        "--subscribe", "many:item://*", "--route", route, "--health-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0",
        "--model", model, "work",
    ]  # fmt: skip
    async with supervised(args) as a:
        base = await health_base(a)
        await a.wait_event("subscription.established", count=3, timeout=START)
        (tmp_path / "many.json.storm").write_text(json.dumps({"items": 3, "rounds": 1}))
        server_process(a, "fault_server.py").send_signal(signal.SIGUSR1)
        dropped = await a.wait_event("route.dropped", timeout=STEP)
        # Quiet: the first change's agent and the queued change's ended their turns.
        await a.wait_event("turn.end", count=2, timeout=STEP)
        metrics = await scrape(base)
        await drain(a)
    reason = overflow
    # The 1st change started the one agent, the 2nd waits in the queue, the 3rd overflows.
    first, queued = (e["uri"] for e in a.find("route.enqueued"))
    routed = [e for e in a.find("resource.updated") if e["route"] == "r0"]
    assert [e["uri"] for e in routed[:2]] == [first, queued]
    assert dropped["reason"] == reason
    if overflow == "drop_oldest":
        # The queued URI is the one lost; the newcomer takes its place.
        assert dropped["uri"] == queued
        assert dropped["incoming"] == routed[2]["uri"] != queued
    else:
        assert dropped["uri"] == routed[2]["uri"] != queued
        assert "incoming" not in dropped
    assert routed[2]["reason"] == reason
    assert metrics[("agentd_events_dropped_total", (("reason", reason),))] == 1
    exit_line = a.find("supervisor.exit")[0]
    assert exit_line["dropped"] == {reason: 1}
    assert exit_line["router"][f"dropped_events.{reason}"] == 1
    # One counter set: /metrics and supervisor.exit report the same numbers.
    counters = exit_line["counters"]
    assert counters["routed"] == metric_total(metrics, "agentd_events_routed_total") == 3
    assert counters["unrouted"] == metric_total(metrics, "agentd_events_unrouted_total")
    assert counters["coalesced"] == metric_total(metrics, "agentd_events_coalesced_total")
    assert counters["dropped_events"] == metric_total(metrics, "agentd_events_dropped_total") == 1
    assert counters["restarts"] == metric_total(metrics, "agentd_agent_restarts_total")
    assert counters["model_calls"] == 2
    assert counters["input_tokens"] == metric_total(metrics, "agentd_tokens_total", direction="input") > 0
    assert counters["output_tokens"] == metric_total(metrics, "agentd_tokens_total", direction="output") > 0
    assert counters["cached_input_tokens"] == metric_total(metrics, "agentd_cache_tokens_total", kind="read")
    assert counters["cache_creation_input_tokens"] == metric_total(
        metrics, "agentd_cache_tokens_total", kind="write"
    )
    assert counters["unpriced_calls"] == metric_total(metrics, "agentd_model_calls_unpriced_total")
    assert counters["outputs_lost"] == metric_total(metrics, "agentd_outputs_lost_total")
    assert exit_line["telemetry_dropped"] == metric_total(metrics, "agentd_telemetry_dropped_total") == 0


# --------------------------------------------------------------------------- loop: a delivery is real work


async def test_a_push_delivered_into_a_warm_loop_session_resets_its_idle_backoff(tmp_path: Path) -> None:
    notes = tmp_path / "notes.json"
    model = script(tmp_path, [{"text": "NO_REPLY"}])  # every shift is idle
    args = [
        "--mode", "loop", "--interval", "0", "--session", "warm", "--verbose",
        "--mcp-stdio", memo_server(notes), "--subscribe", "memo:memo://notes",
        "--route", "memo://notes=continue:root,debounce=0,reread_on_start=false", "--model", model, "idle",
    ]  # fmt: skip
    async with supervised(args) as a:
        await a.wait_event("subscription.established", timeout=START)
        second = await a.wait_event("loop.reenter", count=2, timeout=STEP)
        assert second["after_s"] == 2.0  # idle shifts back off: 1 s, 2 s, ...
        edit(notes, {"news": 1})
        deliver = await a.wait_event("session.deliver", timeout=STEP)
        # The first re-entry after the delivered turn (whenever the push landed).
        after = await a.wait_event(
            "loop.reenter", lambda e: a.events.index(e) > a.events.index(deliver), timeout=STEP
        )
        await drain(a)
    assert deliver["agent"] == "a1"
    # A shift with a delivery is not idle (rfcs/0280): the next one comes at once, not after 4 or 8 s.
    assert (after["after_s"], after["idle"]) == (0.0, False)
    assert len(a.find("subagent.spawn")) == 1


# --------------------------------------------------------------------------- the command line


def test_route_flags_take_the_settings_a_config_file_can_set(tmp_path: Path) -> None:
    model = write(tmp_path, "m.json", json.dumps({"turns": [{"text": "x"}]}))
    route = "memo://*=spawn:2,debounce=50ms,max_wait=1s,overflow=block,queue_cap=8,name=mail,reread_on_start=false"
    done = _check(tmp_path, "--mode", "reactive", "--route", route, "--model", f"script:{model}", "t")
    assert done.returncode == 0, done.stderr
    [r] = json.loads(done.stdout)["routes"]
    assert (r["match"], r["max_inflight"], r["debounce"], r["max_wait"]) == ("memo://*", 2, 0.05, 1.0)
    assert (r["overflow"], r["queue_cap"], r["name"], r["reread_on_start"]) == ("block", 8, "mail", False)


async def test_script_paths_in_a_config_file_resolve_against_its_folder(tmp_path: Path) -> None:
    write(tmp_path, "conf/scripts/s.json", json.dumps({"turns": [{"text": "from the config's folder"}]}))
    write(tmp_path, "conf/task.md", "say it")
    toml = write(tmp_path, "conf/agentd.toml", 'model = "script:scripts/s.json"\ninstruction = "@task.md"\n')
    async with supervised(["--config", toml]) as a:  # started from the repository, not conf/
        assert await a.wait_exit(START) == ExitCode.OK
    assert a.out.strip() == "from the config's folder"


async def test_agentd_as_a_server_command_is_this_installation_even_off_path(tmp_path: Path) -> None:
    notes = tmp_path / "notes.json"
    notes.write_text("{}")
    model = script(
        tmp_path,
        [
            {"tool_calls": [{"name": "memo__memo_set", "arguments": {"key": "k", "value": 1}}]},
            {"text": "{last_tool_result}"},
        ],
    )
    env = {"PATH": "/usr/bin:/bin"}  # no agentd on it (a venv's bin/ is not on PATH)
    server = f"memo=agentd serve memo --file {notes}"
    done = await trio.to_thread.run_sync(
        lambda: _check(tmp_path, "--mcp-stdio", server, "--require", "memo", "--model", model, "t", env=env)
    )
    assert done.returncode == ExitCode.OK, done.stderr
    memo = json.loads(done.stdout)["servers"]["memo"]
    assert (memo["command"], memo["args"][:3]) == (PY, ["-m", "agentd", "serve"])
    async with supervised(["--mcp-stdio", server, "--require", "memo", "--model", model, "t"], env=env) as a:
        assert await a.wait_exit(START) == ExitCode.OK
    assert json.loads(a.out) == {"key": "k", "value": 1}
    assert json.loads(notes.read_text()) == {"k": 1}
