"""Every exit code of the table, reached through the real ``agentd`` command."""

from __future__ import annotations

import json
import os
import signal

import psutil
import trio

from agentd.core.exitcodes import ExitCode
from tests.fakes.provider_server import openai_error, provider_server
from tests.support.agentd_proc import Agentd, notes_server, run_agentd, script


def run_failed(a: Agentd, code: ExitCode, kind: str) -> dict[str, object]:
    """The last stderr line of a failed run: ``run.failed``, whose message is the plain error line (rfcs/0321)."""
    last = json.loads([line for line in a.raw_stderr if line][-1])
    assert (last["event"], last["exit_code"], last["kind"]) == ("run.failed", int(code), kind), last
    assert last["error"]
    assert last["fix"]
    assert last["message"] == f"agentd: error: {last['error']} — fix: {last['fix']}"
    return last


async def test_exit_0_once_completed_with_a_real_mcp_tool(tmp_path):
    model = script(
        tmp_path,
        [
            {
                "tool_calls": [
                    {"name": "notes__set_note", "arguments": {"name": "todo", "text": "{instruction}"}}
                ]
            },
            {"tool_calls": [{"name": "read_resource", "arguments": {"uri": "note://todo"}}]},
            {"text": "the note reads: {last_tool_result}"},
        ],
    )
    async with run_agentd(["--model", model, "--mcp-stdio", notes_server(tmp_path), "buy milk"]) as a:
        assert await a.wait_exit() == ExitCode.OK
    assert a.out.strip() == "the note reads: buy milk"
    calls = a.find("tool.call")
    assert [(c["server"], c["tool"], c["error"]) for c in calls] == [
        ("notes", "set_note", None),
        ("agentd", "read_resource", None),
    ]
    assert a.find("supervisor.exit")[0]["exit_code"] == 0
    assert not a.find("run.failed")  # a run that succeeded says no error


async def test_exit_0_json_output_shape(tmp_path):
    model = script(tmp_path, [{"text": "hello", "usage": {"input_tokens": 11, "output_tokens": 3}}])
    async with run_agentd(["--model", model, "--output", "json", "say hello"]) as a:
        assert await a.wait_exit() == 0
    out = json.loads(a.out)
    assert out["status"] == "completed"
    assert out["exit_code"] == 0
    assert out["result"] == "hello"
    assert out["usage"] == {
        "input_tokens": 11,
        "output_tokens": 3,
        "cached_input_tokens": 0,
        "cache_creation_input_tokens": 0,
        "model_calls": 1,
    }
    assert out["cost_usd"] == "unknown"  # a script turn without cost_usd has no price
    assert out["duration_s"] > 0


async def test_exit_1_once_root_crashed_and_is_never_restarted(tmp_path):
    model = script(tmp_path, [{"text": "thinking", "latency_ms": 60000}])
    async with run_agentd(["--model", model, "work"]) as a:
        started = await a.wait_event("subagent.started")
        os.kill(started["pid"], signal.SIGKILL)
        assert await a.wait_exit() == ExitCode.CRASHED
    assert a.find("subagent.exit")[0]["status"] == "crashed"
    assert len(a.find("subagent.spawn")) == 1  # never restarted
    assert "crashed" in str(run_failed(a, ExitCode.CRASHED, "crashed")["error"])


async def test_exit_2_config_error_starts_nothing(tmp_path):
    marker = tmp_path / "started"
    async with run_agentd(
        ["--model", "script:/nonexistent.json", "--mcp-stdio", f"x=touch {marker}", "hi"]
    ) as a:
        assert await a.wait_exit() == ExitCode.CONFIG
    assert not marker.exists()
    assert "nonexistent.json" in "\n".join(a.raw_stderr)
    # Before the run: a plain line, whatever the format (the format may be what is wrong).
    last = [line for line in a.raw_stderr if line][-1]
    assert last.startswith("agentd: error: --model: 'script:/nonexistent.json' is not valid: ")
    assert last.endswith(
        " — fix: correct --model as it says; `agentd check` validates the settings without running anything"
    )


async def test_exit_3_budget_with_partial_result(tmp_path):
    model = script(
        tmp_path,
        [
            {"text": "partial: step one done", "tool_calls": [{"name": "list_resources", "arguments": {}}]},
            {"text": "never reached"},
        ],
    )
    async with run_agentd(["--model", model, "--max-steps", "1", "work"]) as a:
        assert await a.wait_exit() == ExitCode.BUDGET_PARTIAL
    assert a.out.strip() == "partial: step one done"
    assert a.find("budget.exhausted")[0]["kind"] == "steps"
    assert "step" in str(run_failed(a, ExitCode.BUDGET_PARTIAL, "budget")["error"])


async def test_exit_4_provider_auth_failure(tmp_path):
    async with provider_server([openai_error(401, "invalid api key")]) as srv:
        env = {"OPENAI_BASE_URL": srv.base_url + "/v1", "OPENAI_API_KEY": "sk-test-not-a-secret"}
        async with run_agentd(["--model", "openai:gpt-test", "hi"], env=env) as a:
            assert await a.wait_exit() == ExitCode.FATAL_INFRA
    assert len(srv.requests) == 1  # auth failures are not retried
    assert "sk-test-not-a-secret" not in "\n".join(a.raw_stderr)
    failed = run_failed(a, ExitCode.FATAL_INFRA, "provider")
    assert "invalid api key" in str(failed["error"])
    assert "OPENAI_API_KEY" in str(failed["fix"])


async def test_exit_5_refusal(tmp_path):
    model = script(tmp_path, [{"refusal": "I can't help with that."}])
    async with run_agentd(["--model", model, "do harm"]) as a:
        assert await a.wait_exit() == ExitCode.REFUSED
    assert a.find("turn.end")[0]["status"] == "refused"
    run_failed(a, ExitCode.REFUSED, "refused")


async def test_exit_6_required_server_failed(tmp_path):
    toml = tmp_path / "agentd.toml"
    toml.write_text('[servers.broken]\ncommand = "false"\nrequired = true\n')
    model = script(tmp_path, [{"text": "x"}])
    env = {"AGENTD_RECONNECT_BACKOFF": "0.01,0.01,0.01,0.01,0.01"}
    async with run_agentd(
        ["--config", str(toml), "--mode", "reactive", "--model", model, "react"], env=env
    ) as a:
        assert await a.wait_exit() == ExitCode.REQUIRED_SERVER
    failed = a.find("server.state", lambda e: e["state"] == "failed")
    assert failed
    assert failed[0]["server"] == "broken"
    assert "'broken'" in str(run_failed(a, ExitCode.REQUIRED_SERVER, "server")["error"])


async def test_exit_7_token_budget_without_partial(tmp_path):
    model = script(
        tmp_path,
        [
            {
                "tool_calls": [{"name": "list_resources", "arguments": {}}],
                "usage": {"input_tokens": 50, "output_tokens": 50},
            }
        ]
        * 3,
    )
    async with run_agentd(["--model", model, "--max-tokens", "60", "work"]) as a:
        assert await a.wait_exit() == ExitCode.BUDGET
    assert a.find("budget.exhausted")[0]["kind"] == "tokens"
    assert a.out == ""
    assert "token" in str(run_failed(a, ExitCode.BUDGET, "budget")["error"])


async def test_exit_124_deadline(tmp_path):
    model = script(tmp_path, [{"text": "slow", "latency_ms": 60000}])
    async with run_agentd(["--model", model, "--deadline", "1s", "work"]) as a:
        assert await a.wait_exit() == ExitCode.DEADLINE
    assert "--deadline" in str(run_failed(a, ExitCode.DEADLINE, "deadline")["error"])


async def test_sigterm_during_a_turn_lets_it_finish_then_exits_0(tmp_path):
    model = script(tmp_path, [{"text": "finished the turn", "latency_ms": 1500}])
    async with run_agentd(["--model", model, "work"]) as a:
        await a.wait_event("subagent.started")
        a.signal(signal.SIGTERM)
        await a.wait_event("drain.start")
        assert await a.wait_exit() == 0
    assert a.out.strip() == "finished the turn"


async def test_exit_143_grace_runs_out_and_no_child_survives(tmp_path):
    model = script(tmp_path, [{"text": "ignores the boundary", "latency_ms": 60000}])
    async with run_agentd(["--model", model, "--grace", "0.5s", "work"]) as a:
        started = await a.wait_event("subagent.started")
        a.signal(signal.SIGTERM)
        with trio.fail_after(15):
            assert await a.wait_exit() == ExitCode.DRAIN_TIMEOUT
    assert not _alive(started["pid"])
    run_failed(a, ExitCode.DRAIN_TIMEOUT, "drain_timeout")


async def test_exit_143_second_signal_stops_at_once(tmp_path):
    model = script(tmp_path, [{"text": "long", "latency_ms": 60000}])
    async with run_agentd(["--model", model, "--grace", "60s", "work"]) as a:
        started = await a.wait_event("subagent.started")
        a.signal(signal.SIGTERM)
        await a.wait_event("drain.start")
        a.signal(signal.SIGINT)
        with trio.fail_after(10):
            assert await a.wait_exit() == ExitCode.DRAIN_TIMEOUT
    assert a.find("drain.abort")
    assert not _alive(started["pid"])
    run_failed(a, ExitCode.DRAIN_TIMEOUT, "drain_timeout")


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
