"""Fault catalog, cases 23-30: the supervisor, its agents, the model provider, clocks and config.

Each case runs the real ``agentd`` command (``python -m agentd``) with real
children (zygote, agents, the bundled memo server) unless it says otherwise;
case 29 is component-level by design (time logic under ``MockClock``). Every
wait is on NDJSON telemetry or a channel, bounded by a timeout; nothing sleeps
to wait for a condition. Where the daemon should survive a fault, the test
then checks that a fresh change still spawns an agent and, at the end, that no
process of agentd's tree outlived it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from agentd.core.exitcodes import ExitCode
from agentd.events import ResourceChanged
from agentd.supervisor.loop.budget import Budget
from agentd.supervisor.loop.governor import RestartGovernor
from agentd.supervisor.loop.reactor import Agent, Reactor
from agentd.triggers import mode as modes
from agentd.triggers.router import Router, RouteSpec, Spawn
from agentd.triggers.timer import CronSource
from tests.fakes.provider_server import (
    Reply,
    anthropic_error,
    anthropic_reply,
    openai_error,
    openai_reply,
    provider_server,
)
from tests.support.agentd_proc import PY, Agentd, run_agentd, script
from tests.support.files import edit
from tests.support.leftovers import tagged_env
from tests.support.reactor import spawn_hooks
from tests.support.routing import memo_server
from tests.support.supervised import survivors, tree_of
from tests.support.telemetry import RecordingTelemetry

pytestmark = pytest.mark.fault

#: Slack on wall-time assertions for a shared, loaded 2-core machine.
SLACK_S = 3.0

#: A second signal must end agentd within this (kill ladder: 2 s TERM + 2 s KILL, bounded).
SECOND_SIGNAL_EXIT_S = 6.0

#: Bound on one virtual-time await in the component tests (only a hang reaches it).
VIRTUAL_STEP = 10_000.0


# ------------------------------------------------------------------ helpers


def reactive_args(model: str, memo: Path, *extra: str, inflight: int = 1) -> list[str]:
    """A reactive daemon where every memo change spawns an agent."""
    return [
        "--mode", "reactive", "--verbose", "--model", model,
        "--mcp-stdio", memo_server(memo), "--subscribe", "memo:memo://notes",
        "--route", f"memo://notes=spawn:{inflight}", *extra, "react to the memo",
    ]  # fmt: skip


async def change_spawns_an_agent(a: Agentd, memo: Path, value: str) -> dict[str, Any]:
    """A fresh memo change still spawns an agent that finishes its turn; returns its turn end."""
    spawns = len(a.find("subagent.spawn"))
    edit(memo, {"todo": value})
    spawned = await a.wait_event("subagent.spawn", count=spawns + 1)
    return await a.wait_event("turn.end", lambda e: e["agent"] == spawned["agent"])


async def drain_cleanly(a: Agentd) -> None:
    before = tree_of(a)
    a.signal(signal.SIGTERM)
    assert await a.wait_exit() == 0, a.tail()
    assert survivors(before) == []


# ---------------------------------------------------------------------------- case 23


async def test_sigterm_mid_turn_in_reactive_takes_no_new_work_and_exits_0_within_grace(
    tmp_path: Path,
) -> None:
    memo = tmp_path / "notes.json"
    edit(memo, {"todo": "milk"})
    model = script(tmp_path, [{"text": "handled the change", "latency_ms": 1500}])
    async with run_agentd(reactive_args(model, memo, "--grace", "20s"), env=tagged_env(tmp_path)) as a:
        await a.wait_event("subscription.established")
        edit(memo, {"todo": "bread"})
        await a.wait_event("subagent.started")
        before = tree_of(a)
        signalled = trio.current_time()
        a.signal(signal.SIGTERM)
        await a.wait_event("drain.start")
        updates = len(a.find("resource.updated"))
        edit(memo, {"todo": "cheese"})  # arrives while draining: not work any more
        await a.wait_event("resource.updated", count=updates + 1)
        assert await a.wait_exit() == 0, a.tail()
        elapsed = trio.current_time() - signalled
    assert elapsed < 20, "the drain must end when the turn ends, not at the grace"
    assert a.out.strip() == "handled the change"  # the running turn finished and published
    assert len(a.find("subagent.spawn")) == 1
    assert len(a.find("route.deliver")) == 1
    assert [e["status"] for e in a.find("subagent.exit")] == ["completed"]
    assert survivors(before) == []


# ---------------------------------------------------------------------------- case 24


WATCH_WITH_FILTER = {
    "name": "watch_start",
    "arguments": {"name": "todo", "uri": "memo://notes", "on_event": "event['key']"},
}


@pytest.mark.parametrize("second", [signal.SIGTERM, signal.SIGINT], ids=["TERM-TERM", "TERM-INT"])
async def test_second_signal_stops_at_once_with_143_and_no_process_of_the_tree_survives(
    tmp_path: Path, second: signal.Signals
) -> None:
    """Zygote, agent, MCP server and the filter's sandbox worker are all recorded, then all gone."""
    memo = tmp_path / "notes.json"
    edit(memo, {"todo": "milk"})
    model = script(
        tmp_path,
        [{"tool_calls": [WATCH_WITH_FILTER]}, {"text": "still thinking", "latency_ms": 120_000}],
    )
    args = [
        "--mode", "loop", "--session", "warm", "--interval", "1h", "--verbose", "--grace", "60s",
        "--model", model, "--mcp-stdio", memo_server(memo), "watch the memo",
    ]  # fmt: skip
    async with run_agentd(args, env=tagged_env(tmp_path)) as a:
        await a.wait_event("watch.started")
        await a.wait_event("model.call", count=1)  # the 120 s model call is now in flight
        before = tree_of(a)
        cmdlines = " ".join(" ".join(p.cmdline()) for p in before)
        assert "agentd.agent.zygote" in cmdlines
        assert "serve memo" in cmdlines
        assert len(before) >= 4, cmdlines  # + the agent child and the sandbox worker
        a.signal(signal.SIGTERM)
        await a.wait_event("drain.start")
        signalled = trio.current_time()
        a.signal(second)
        assert await a.wait_exit(timeout=SECOND_SIGNAL_EXIT_S + SLACK_S) == ExitCode.DRAIN_TIMEOUT
        assert trio.current_time() - signalled < SECOND_SIGNAL_EXIT_S
    assert a.find("drain.abort")[0]["signal"] == second.name
    assert survivors(before) == []


# ---------------------------------------------------------------------------- case 25

#: Each agent: a slow first step (so all three are up before the budget goes),
#: then quick steps, forever (``repeat``), each costing 100 tokens.
#: The arguments differ per step so the stall detector (same call 3 times) stays out of it.
BUSY_AGENT = [
    {"tool_calls": [{"name": "list_resources", "arguments": {"step": k}}], "latency_ms": 1500 if k == 0 else 100,
     "usage": {"input_tokens": 50, "output_tokens": 50}}
    for k in range(6)
]  # fmt: skip


@pytest.mark.parametrize(
    ("flags", "code", "kind", "status"),
    [
        (["--max-steps", "6"], ExitCode.BUDGET, "steps", "exhausted_steps"),
        (["--max-tokens", "600"], ExitCode.BUDGET, "tokens", "exhausted_tokens"),
        # The deadline counts from the start: it must outlast start-up and three spawns on a
        # busy 2-core box (the agents work forever, so it still ends the run mid-turn).
        (["--deadline", "20s"], ExitCode.DEADLINE, None, None),
    ],
    ids=["steps", "tokens", "deadline"],
)
async def test_budget_hit_with_three_agents_running_stops_each_at_its_next_boundary(
    tmp_path: Path, flags: list[str], code: ExitCode, kind: str | None, status: str | None
) -> None:
    memo = tmp_path / "notes.json"
    edit(memo, {})
    model = script(tmp_path, BUSY_AGENT, then="repeat")
    async with run_agentd(reactive_args(model, memo, *flags, inflight=3), env=tagged_env(tmp_path)) as a:
        await a.wait_event("subscription.established")
        for i in range(3):  # three changes, one debounce apart: three agents at once
            edit(memo, {"n": i})
            await a.wait_event("subagent.started", count=i + 1)
        before = tree_of(a)
        assert await a.wait_exit(timeout=45) == code, a.tail()
    agents = {e["agent"] for e in a.find("subagent.spawn")}
    assert len(agents) == 3, "nothing new starts once the budget is spent"
    assert survivors(before) == []
    if kind is None:
        assert a.find("budget.deadline")
        return
    (spent,) = a.find("budget.exhausted")
    assert spent["kind"] == kind
    after = a.events[a.events.index(spent) + 1 :]
    for agent in agents:
        # At most the model call already in flight, then the turn boundary.
        late_calls = [e for e in after if e["event"] == "model.call" and e["agent"] == agent]
        assert len(late_calls) <= 1, (agent, late_calls)
    assert sorted(e["status"] for e in a.find("turn.end")) == [status] * 3


# ---------------------------------------------------------------------------- case 26


async def test_loop_agent_killed_is_restarted_until_the_breaker_opens_and_exits_1(tmp_path: Path) -> None:
    """SIGKILL (what the OOM killer sends) of each shift: two restarts allowed, the third opens the breaker."""
    model = script(tmp_path, [{"text": "working", "latency_ms": 120_000}])
    args = [
        "--mode", "loop", "--session", "fresh", "--interval", "0", "--max-restarts", "2",
        "--restart-period", "1h", "--verbose", "--model", model, "work",
    ]  # fmt: skip
    async with run_agentd(args, env=tagged_env(tmp_path)) as a:
        for n in range(1, 4):
            started = await a.wait_event("subagent.started", count=n)
            os.kill(started["pid"], signal.SIGKILL)
            await a.wait_event("subagent.exit", count=n)
        before = tree_of(a)
        assert await a.wait_exit() == ExitCode.CRASHED, a.tail()
    assert [e["status"] for e in a.find("subagent.exit")] == ["crashed"] * 3
    assert len(a.find("subagent.restart")) == 2
    assert len(a.find("governor.breaker_open")) == 1
    assert len(a.find("subagent.spawn")) == 3
    assert survivors(before) == []
    # The last line says the breaker opened, and what to do (rfcs/0321).
    (failed,) = a.find("run.failed")
    assert a.events[-1] is failed
    assert "the restart breaker opened" in failed["error"]
    assert "--max-restarts" in failed["fix"]


async def test_reactive_agent_killed_mid_turn_the_daemon_survives_and_the_next_change_spawns_afresh(
    tmp_path: Path,
) -> None:
    memo = tmp_path / "notes.json"
    edit(memo, {})
    model = script(tmp_path, [{"text": "done: {instruction}", "latency_ms": 1000}])
    async with run_agentd(reactive_args(model, memo), env=tagged_env(tmp_path)) as a:
        await a.wait_event("subscription.established")
        edit(memo, {"todo": "milk"})
        victim = await a.wait_event("subagent.started")
        os.kill(victim["pid"], signal.SIGKILL)
        crashed = await a.wait_event("subagent.exit")
        assert crashed["status"] == "crashed"
        end = await change_spawns_an_agent(a, memo, "bread")
        assert end["status"] == "completed"
        await drain_cleanly(a)
    assert a.out.count("done: ") == 1


async def test_reactive_crash_loop_opens_the_breaker_and_exits_1(tmp_path: Path) -> None:
    memo = tmp_path / "notes.json"
    edit(memo, {})
    model = script(tmp_path, [{"text": "never finishes", "latency_ms": 120_000}])
    async with run_agentd(
        reactive_args(model, memo, "--max-restarts", "1", "--restart-period", "1h"), env=tagged_env(tmp_path)
    ) as a:
        await a.wait_event("subscription.established")
        for n in range(1, 3):
            edit(memo, {"n": n})
            started = await a.wait_event("subagent.started", count=n)
            os.kill(started["pid"], signal.SIGKILL)
            await a.wait_event("subagent.exit", count=n)
        # Two crashes within the period, intensity 1: the breaker must open now.
        assert await a.wait_exit(timeout=5) == ExitCode.CRASHED


# ---------------------------------------------------------------------------- case 27


def _timed(reply: Reply, times: list[float]) -> Any:
    def respond(_request: Any) -> Reply:
        times.append(time.monotonic())
        return reply

    return respond


PROVIDERS = {
    "openai": {
        "model": "openai:gpt-fake",
        "env": lambda url: {"OPENAI_BASE_URL": url + "/v1", "OPENAI_API_KEY": "sk-fault-test"},
        "error": openai_error,
        "ok": lambda text: openai_reply(text),
    },
    "anthropic": {
        "model": "anthropic:claude-fake",
        "env": lambda url: {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-ant-fault-test"},
        "error": anthropic_error,
        "ok": lambda text: anthropic_reply(text),
    },
}


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_429_with_retry_after_then_500s_then_success_is_retried_with_backoff(
    tmp_path: Path, provider: str
) -> None:
    p = PROVIDERS[provider]
    times: list[float] = []
    replies = [
        _timed(p["error"](429, "slow down", type_="rate_limit_error", headers={"Retry-After": "1"}), times),
        _timed(p["error"](500, "upstream hiccup", type_="api_error"), times),
        _timed(p["error"](500, "upstream hiccup", type_="api_error"), times),
        _timed(p["ok"]("the answer"), times),
    ]
    if (
        provider == "anthropic"
    ):  # one 5xx is enough here: the openai run covers several (keeps the suite short)
        del replies[2]
    async with provider_server(replies) as srv:
        env = tagged_env(tmp_path, **p["env"](srv.base_url))
        async with run_agentd(["--model", p["model"], "question"], env=env) as a:
            assert await a.wait_exit() == ExitCode.OK, a.tail()
    assert a.out.strip() == "the answer"
    assert len(srv.requests) == len(times) == (4 if provider == "openai" else 3)
    assert times[1] - times[0] >= 1.0, "Retry-After: 1 was not honoured"
    # The 500s carry no Retry-After: jittered exponential backoff (windows of 2 s and 4 s).
    assert times[-1] - times[1] < 2 + 4 + SLACK_S
    assert len({r.body for r in srv.requests}) == 1, "every retry sends the same request"


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_401_is_fatal_at_once_with_exit_4(tmp_path: Path, provider: str) -> None:
    p = PROVIDERS[provider]
    async with provider_server([p["error"](401, "invalid x-api-key", type_="authentication_error")]) as srv:
        env = tagged_env(tmp_path, **p["env"](srv.base_url))
        async with run_agentd(["--model", p["model"], "question"], env=env) as a:
            assert await a.wait_exit() == ExitCode.FATAL_INFRA, a.tail()
    assert len(srv.requests) == 1  # never retried: fatal at the first answer, whatever the machine's speed
    fatal = a.find("model.fatal")
    assert fatal
    assert "rejected the credentials (HTTP 401" in fatal[0]["error"]
    assert "sk-" not in "\n".join(a.raw_stderr)


# ---------------------------------------------------------------------------- case 28


def _tool_results_openai(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def _tool_results_anthropic(body: dict[str, Any]) -> list[str]:
    out = []
    for m in body["messages"]:
        if m["role"] == "user" and isinstance(m["content"], list):
            for block in m["content"]:
                if block.get("type") == "tool_result":
                    content = block["content"]
                    out.append(content if isinstance(content, str) else json.dumps(content))
    return out


async def _recovers(tmp_path: Path, provider: str, model: str, replies: list[Reply]) -> tuple[Agentd, Any]:
    """Run once against ``provider``'s fake answering ``replies``: exit 0 with "recovered" on stdout."""
    async with provider_server(replies) as srv:
        env = tagged_env(tmp_path, **PROVIDERS[provider]["env"](srv.base_url))
        async with run_agentd(["--model", model, "go"], env=env) as a:
            assert await a.wait_exit() == ExitCode.OK, a.tail()
    assert a.out.strip() == "recovered"
    return a, srv


async def test_malformed_tool_calls_go_back_to_the_model_as_tool_errors_openai(tmp_path: Path) -> None:
    replies = [
        openai_reply(tool_calls=[("c1", "list_resources", '{"uri": ')]),
        openai_reply(tool_calls=[("c2", "no_such_tool", "{}")]),
        openai_reply("recovered"),
    ]
    a, srv = await _recovers(tmp_path, "openai", "openai:gpt-fake", replies)
    second, third = (r.json for r in srv.requests[1:])
    (bad_json,) = _tool_results_openai(second)
    assert "the arguments for tool 'list_resources' are not valid JSON" in bad_json
    assert "Call the tool again with the arguments as one JSON object" in bad_json
    unknown = _tool_results_openai(third)[-1]
    assert "unknown tool 'no_such_tool'; the tools you can call are: read_resource" in unknown
    # Neither reached the supervisor's tools: the agent refused the unknown name itself
    # (and reported it), the bad JSON never left the loop.
    assert a.find("tool.call") == []
    assert [(e["tool"], e["agent"]) for e in a.find("tool.refused")] == [("no_such_tool", "a1")]


async def test_unknown_tool_goes_back_to_the_model_as_a_tool_result_anthropic(tmp_path: Path) -> None:
    replies = [
        anthropic_reply(tool_uses=[("t1", "no_such_tool", {"x": 1})]),
        anthropic_reply("recovered"),
    ]
    _, srv = await _recovers(tmp_path, "anthropic", "anthropic:claude-fake", replies)
    (result,) = _tool_results_anthropic(srv.requests[1].json)
    assert "unknown tool 'no_such_tool'" in result


async def test_the_same_malformed_call_repeated_is_stalled(tmp_path: Path) -> None:
    bad = openai_reply(tool_calls=[("c1", "list_resources", "{not json")])
    async with provider_server([bad, bad, bad, openai_reply("never asked")]) as srv:
        env = tagged_env(tmp_path, **PROVIDERS["openai"]["env"](srv.base_url))
        async with run_agentd(["--model", "openai:gpt-fake", "go"], env=env) as a:
            assert await a.wait_exit() == ExitCode.CRASHED, a.tail()
    assert len(srv.requests) == 3
    assert [e["status"] for e in a.find("turn.end")] == ["stalled"]
    for request in srv.requests[1:]:
        assert "are not valid JSON" in _tool_results_openai(request.json)[-1]


# ---------------------------------------------------------------------------- case 29

T0 = dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=dt.UTC)
HOUR = dt.timedelta(hours=1)


def drive_cron(source: CronSource, wall_at: Any, until: float) -> list[float]:
    """Fire ``source`` exactly as the reactor does (at next_fire, with the wall clock then); return fire times."""
    fires = []
    while (now := source.next_fire()) <= until:
        fires.append(now)
        source.fire(now, wall_at(now))
    return fires


def test_cron_wall_jump_forward_one_hour_fires_once_not_sixty_times() -> None:
    """Case 29: the wall clock jumps +1 h at 90 s of monotonic time; an every-minute cron fires on."""
    source = CronSource("* * * * *", now_mono=0.0, now_wall=T0)

    def wall(now: float) -> dt.datetime:
        return T0 + dt.timedelta(seconds=now) + (HOUR if now >= 90 else dt.timedelta(0))

    fires = drive_cron(source, wall, until=300.0)
    # 60, 120 (wall 13:02 after the jump: its next slot 13:03 is 60 s away), 180, 240, 300: no burst.
    assert fires == [60.0, 120.0, 180.0, 240.0, 300.0]


def test_cron_wall_jump_back_one_hour_never_refires_a_slot_and_waits_for_the_wall_clock() -> None:
    """A backwards step: no slot fires twice; the next fire waits until the wall clock reaches a new slot.

    At-most-once per cron slot is the contract (rfcs/0108-clock-jumps.md): after the clock steps
    back an hour, an every-minute cron is quiet until the wall clock passes the last slot fired.
    """
    source = CronSource("* * * * *", now_mono=0.0, now_wall=T0)

    def wall(now: float) -> dt.datetime:
        return T0 + dt.timedelta(seconds=now) - (HOUR if now >= 90 else dt.timedelta(0))

    fires = drive_cron(source, wall, until=4000.0)
    # 12:01 at 60 s, 12:02 at 120 s (wall reads 11:02), then 12:03 when the wall reaches it: 3660 s later.
    assert fires == [60.0, 120.0, 3780.0, 3840.0, 3900.0, 3960.0]


async def test_debounce_and_deadline_ignore_wall_clock_jumps(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Case 29 in the reactor: debounce fires at exactly +0.25 s and the deadline at exactly 10 s (virtual)."""
    real_time = time.time
    jump = {"by": 0.0}
    monkeypatch.setattr(time, "time", lambda: real_time() + jump["by"])
    spawned: list[tuple[float, Agent]] = []
    router = Router()
    router.add_route(RouteSpec(match="memo://notes", disposition=Spawn(max_inflight=5), debounce=0.25))
    telemetry = RecordingTelemetry()
    reactor = Reactor(
        driver=modes.Reactive(), router=router, budget=Budget(deadline_at=10.0),
        governor=RestartGovernor(intensity=3, period=60.0),
        hooks=spawn_hooks(lambda agent: spawned.append((trio.current_time(), agent))),
        telemetry=telemetry, instruction="react", grace=5.0, mode="reactive", session="fresh",
    )  # fmt: skip
    result: list[tuple[float, ExitCode]] = []
    finished = trio.Event()

    async def run() -> None:
        code = await reactor.run()
        result.append((trio.current_time(), code))
        finished.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await trio.sleep(1.0)
        await reactor.send.send(ResourceChanged(server="memo", uri="memo://notes"))
        jump["by"] = 3600.0  # the wall clock leaps forward an hour mid-debounce
        await trio.sleep(2.0)
        jump["by"] = -3600.0  # ... and back an hour before the next change
        await reactor.send.send(ResourceChanged(server="memo", uri="memo://notes"))
        with trio.fail_after(VIRTUAL_STEP):
            await finished.wait()
    assert [t for t, _ in spawned] == [1.25, 3.25]
    assert result == [(10.0, ExitCode.DEADLINE)]


# ---------------------------------------------------------------------------- case 30


@pytest.fixture
def marker_server(tmp_path: Path) -> tuple[str, Path]:
    """An ``--mcp-stdio`` value that leaves a marker file if it ever starts."""
    marker = tmp_path / "started.marker"
    code = f"import pathlib; pathlib.Path({str(marker)!r}).write_text('started')"
    return f"probe={shlex.join([PY, '-c', code])}", marker


CONFIG_CASES = [
    pytest.param(
        'mode = "schedule"\ncron = "*/0 * * * *"\n', [], "cron", id="invalid-cron-in-toml",
    ),
    pytest.param(
        'mode = "reactive"\n[[routes]]\nmatch = "memo://*"\ndisposition = "fork"\n', [],
        "disposition", id="unknown-disposition-in-toml",
    ),
    pytest.param(
        '[servers.probe]\ncommand = "true"\n', [], "defined twice", id="duplicate-server-toml-and-flag",
    ),
    pytest.param("mode = [unclosed\n", [], "agentd.toml", id="unparseable-toml"),
]  # fmt: skip


@pytest.mark.parametrize(("toml", "extra", "message"), CONFIG_CASES)
async def test_config_file_errors_exit_2_before_any_process_starts(
    tmp_path: Path, marker_server: tuple[str, Path], toml: str, extra: list[str], message: str
) -> None:
    server, marker = marker_server
    config = tmp_path / "agentd.toml"
    config.write_text(toml)
    model = script(tmp_path, [{"text": "never"}])
    args = ["--config", str(config), "--model", model, "--mcp-stdio", server, *extra, "task"]
    async with run_agentd(args, env=tagged_env(tmp_path)) as a:
        assert await a.wait_exit(timeout=15) == ExitCode.CONFIG, a.tail()
    stderr = "\n".join(a.raw_stderr)
    assert message in stderr
    assert stderr.startswith("agentd: ")
    assert a.out == ""
    assert not marker.exists(), "a server process started before the config error"
    assert a.find("supervisor.start") == []


async def test_duplicate_server_between_mcp_config_json_and_flag_exits_2(
    tmp_path: Path, marker_server: tuple[str, Path]
) -> None:
    server, marker = marker_server
    mcp_json = tmp_path / "mcp.json"
    mcp_json.write_text(
        json.dumps({"mcpServers": {"probe": {"command": sys.executable, "args": ["-c", "0"]}}})
    )
    model = script(tmp_path, [{"text": "never"}])
    args = ["--model", model, "--mcp-config", str(mcp_json), "--mcp-stdio", server, "task"]
    async with run_agentd(args, env=tagged_env(tmp_path)) as a:
        assert await a.wait_exit(timeout=15) == ExitCode.CONFIG, a.tail()
    assert "defined twice" in "\n".join(a.raw_stderr)
    assert not marker.exists()
