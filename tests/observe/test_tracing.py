"""Traces through the real ``agentd`` command, received by a real OTLP/HTTP receiver on loopback."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import httpx2

from agentd.core.exitcodes import ExitCode
from tests.support.agentd_proc import PY, REPO, run_agentd, script
from tests.support.files import edit
from tests.support.memo import NOTES, memo_toml
from tests.support.otlp import otlp_receiver

TRACED = f"traced={PY} {REPO / 'tests/mcpservers/traced_server.py'}"
CONTENT_KEYS = {
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
}


def _config(tmp_path: Path, model: str, endpoint: str, disposition: str = "spawn") -> tuple[Path, Path]:
    traced = f"""
[servers.traced]
command = {json.dumps(PY)}
args = [{json.dumps(str(REPO / "tests/mcpservers/traced_server.py"))}]
# A stdio server gets a minimal environment: it is told where its own spans go.
env = {{ OTEL_EXPORTER_OTLP_ENDPOINT = {json.dumps(endpoint)} }}
"""
    return memo_toml(tmp_path, model, servers=traced, disposition=disposition)


async def test_a_memo_change_is_one_trace_from_the_update_to_the_upstream_tool(tmp_path: Path) -> None:
    model = script(
        tmp_path,
        [
            {"tool_calls": [{"name": "traced__stamp", "arguments": {"text": "secret words"}}],
             "usage": {"input_tokens": 12, "output_tokens": 3}},
            {"text": "the private answer", "usage": {"input_tokens": 20, "output_tokens": 4}},
        ],
    )  # fmt: skip
    async with otlp_receiver() as rx:
        toml, memo = _config(tmp_path, model, rx.endpoint)
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": rx.endpoint, "OTEL_SERVICE_NAME": "agentd-test"}
        async with run_agentd(["--config", str(toml)], env=env) as a:
            enabled = await a.wait_event("tracing.enabled")
            assert enabled["endpoint"] == rx.endpoint + "/v1/traces"
            await a.wait_event("ready.changed", lambda e: e["ready"])
            edit(memo, {"todo": "milk"})
            # The upstream server's own span: its parent came in the request's _meta.
            upstream = await rx.wait_for(
                lambda s: s.service == "traced-server" and s.name == "tools/call stamp"
            )
            await a.wait_event("subagent.exit")
            a.signal(signal.SIGTERM)
            assert await a.wait_exit() == 0, a.tail()
        # Flushed at exit, within the grace: the whole turn is there.
        tool = await rx.wait_for(lambda s: s.name == "execute_tool traced__stamp", timeout=5)
    assert rx.content_types == {"application/x-protobuf"}
    trace = [s for s in rx.spans if s.trace_id == upstream.trace_id]
    names = {s.name for s in trace}
    assert {
        f"notifications/resources/updated {NOTES}",
        "agentd.route notes",
        "invoke_agent notes",
        "agentd.spawn",
        "chat " + model.removeprefix("script:"),
        "tools/call traced__stamp",  # the supervisor's self-MCP server span, continued from the child
        "execute_tool traced__stamp",
        "MCP send tools/call stamp",  # the MCP SDK's client span in the supervisor
        "tools/call stamp",  # the upstream server's
    } <= names, names
    services = {s.service for s in trace}
    assert services == {"agentd-test", "traced-server"}

    # The chain: upstream server span → SDK client span → execute_tool → … → invoke_agent → route → update.
    chain = [s.name for s in rx.ancestors(upstream)]
    assert chain[0] == "MCP send tools/call stamp"
    assert chain[1] == "execute_tool traced__stamp"
    assert chain[-3:] == [
        "invoke_agent notes",
        "agentd.route notes",
        f"notifications/resources/updated {NOTES}",
    ]
    root = rx.ancestors(upstream)[-1]
    assert root.parent_id == ""
    assert root.attributes["mcp.resource.uri"] == NOTES

    # Semantic-convention attributes.
    (invoke,) = [s for s in trace if s.name == "invoke_agent notes"]
    assert invoke.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert invoke.attributes["gen_ai.agent.name"] == "notes"
    chats = sorted((s for s in trace if s.name.startswith("chat ")), key=lambda s: s.start_ns)
    assert [c.parent_id for c in chats] == [invoke.span_id, invoke.span_id]
    first = chats[0].attributes
    assert first["gen_ai.operation.name"] == "chat"
    assert first["gen_ai.provider.name"] == "script"
    assert first["gen_ai.request.model"] == first["gen_ai.response.model"]
    assert (first["gen_ai.usage.input_tokens"], first["gen_ai.usage.output_tokens"]) == (12, 3)
    assert first["gen_ai.usage.cache_read.input_tokens"] == 0
    assert first["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert chats[1].attributes["gen_ai.response.finish_reasons"] == ["stop"]
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.tool.name"] == "traced__stamp"
    # No content unless asked.
    for span in rx.spans:
        assert not CONTENT_KEYS & span.attributes.keys(), span
        assert "secret words" not in repr(span.attributes)
        assert "the private answer" not in repr(span.attributes)
    # Every span ended after it started; the update is the earliest.
    assert all(s.end_ns >= s.start_ns for s in trace)
    assert root.start_ns == min(s.start_ns for s in trace if s.service == "agentd-test")


async def test_content_is_recorded_only_when_asked(tmp_path: Path) -> None:
    model = script(
        tmp_path,
        [
            {"tool_calls": [{"name": "traced__stamp", "arguments": {"text": "hello"}}]},
            {"text": "all stamped"},
        ],
    )
    async with otlp_receiver() as rx:
        env = {
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": rx.endpoint + "/v1/traces",
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true",
        }
        async with run_agentd(["--model", model, "--mcp-stdio", TRACED, "go"], env=env) as a:
            assert await a.wait_exit() == ExitCode.OK, a.tail()
        tool = await rx.wait_for(lambda s: s.name == "execute_tool traced__stamp", timeout=5)
        chat = await rx.wait_for(
            lambda s: s.name.startswith("chat ") and "gen_ai.output.messages" in s.attributes
        )
    assert json.loads(tool.attributes["gen_ai.tool.call.arguments"]) == {"text": "hello"}
    assert tool.attributes["gen_ai.tool.call.result"] == "stamped: hello"
    (message,) = json.loads(chat.attributes["gen_ai.output.messages"])
    assert message == {"role": "assistant", "parts": [{"type": "text", "content": "all stamped"}]}
    # A once run's trace starts at its root agent.
    (invoke,) = [s for s in rx.spans if s.name.startswith("invoke_agent")]
    assert invoke.parent_id == ""
    assert {s.service for s in rx.spans if s.trace_id == invoke.trace_id} == {"agentd"}
    assert any(s.name == "MCP send tools/call stamp" and s.trace_id == invoke.trace_id for s in rx.spans)


async def test_tracing_is_off_without_the_otel_variables(tmp_path: Path) -> None:
    model = script(tmp_path, [{"text": "hi"}])
    env = {k: "" for k in os.environ if k.startswith("OTEL_")}
    async with run_agentd(["--model", model, "go"], env=env) as a:
        assert await a.wait_exit() == 0
    assert not a.find("tracing.enabled")
    assert not a.find("tracing.unavailable")


async def test_each_turn_of_a_warm_session_is_its_own_trace_across_the_child(tmp_path: Path) -> None:
    step = [{"tool_calls": [{"name": "traced__stamp", "arguments": {"text": "t"}}]}, {"text": "ok"}]
    model = script(tmp_path, step * 2)
    async with otlp_receiver() as rx:
        toml, memo = _config(tmp_path, model, rx.endpoint, disposition="continue")
        async with run_agentd(["--config", str(toml)], env={"OTEL_EXPORTER_OTLP_ENDPOINT": rx.endpoint}) as a:
            await a.wait_event("ready.changed", lambda e: e["ready"])
            edit(memo, {"todo": "one"})
            await a.wait_event("turn.end")
            edit(memo, {"todo": "two"})
            await a.wait_event("turn.end", count=2)
            a.signal(signal.SIGTERM)
            assert await a.wait_exit() == 0, a.tail()
        await rx.wait_for(lambda s: s.name == "execute_tool traced__stamp", timeout=5)
    turns = sorted((s for s in rx.spans if s.name.startswith("invoke_agent")), key=lambda s: s.start_ns)
    assert len(turns) == 2
    assert turns[0].trace_id != turns[1].trace_id  # one trace per cause
    for turn in turns:
        # The self-MCP server span of this turn's tool call continues this turn's context from the child.
        (served,) = [
            s for s in rx.spans if s.name == "tools/call traced__stamp" and s.trace_id == turn.trace_id
        ]
        assert served.parent_id == turn.span_id
        (upstream,) = [s for s in rx.spans if s.service == "traced-server" and s.trace_id == turn.trace_id]
        assert upstream.name == "tools/call stamp"


async def test_the_warm_up_rehearsals_leave_no_span_and_no_count(tmp_path: Path) -> None:
    """The zygote's and the supervisor's rehearsed calls (rfcs/0187) are agentd's own warm-up, not the user's work.

    A reactive daemon that starts (the supervisor rehearses a self-MCP exchange, the
    zygote a model call) and then handles one change: its traces hold only that
    change's spans and the upstream connection's, and /metrics counts one tool call.
    """
    model = script(
        tmp_path,
        [{"tool_calls": [{"name": "memo__memo_get", "arguments": {"key": "todo"}}]}, {"text": "done"}],
    )
    async with otlp_receiver() as rx:
        toml, memo = memo_toml(tmp_path, model, settings='metrics_addr = "127.0.0.1:0"')
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": rx.endpoint}
        async with run_agentd(["--config", str(toml)], env=env) as a:
            port = (await a.wait_event("metrics.listening"))["port"]
            await a.wait_event("ready.changed", lambda e: e["ready"])
            edit(memo, {"todo": "milk"})
            await a.wait_event("subagent.exit")
            async with httpx2.AsyncClient() as client:
                metrics = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
            a.signal(signal.SIGTERM)
            assert await a.wait_exit() == 0, a.tail()
        await rx.wait_for(lambda s: s.name == "execute_tool memo__memo_get", timeout=5)
    rehearsal = [
        s
        for s in rx.spans
        if s.name.endswith(" rehearsal") or s.attributes.get("gen_ai.tool.name") == "rehearsal"
    ]
    assert not rehearsal, [s.name for s in rehearsal]
    # Every self-MCP server span (the children's tool calls) is one of the run's turns.
    (turn,) = [s for s in rx.spans if s.name.startswith("invoke_agent")]
    served = [s for s in rx.spans if s.name.startswith("tools/call") or s.name == "initialize"]
    assert served
    assert all(s.trace_id == turn.trace_id or s.service != "agentd" for s in served), [
        (s.name, s.trace_id == turn.trace_id) for s in served
    ]
    assert 'agentd_tool_call_duration_seconds_count{server="memo"} 1.0' in metrics, metrics
    assert 'agentd_tool_call_duration_seconds_count{server="agentd"}' not in metrics
    calls = [
        line for line in metrics.splitlines() if line.startswith("agentd_model_call_duration_seconds_count")
    ]
    assert [line.rsplit(" ", 1)[1] for line in calls] == ["2.0"], calls


async def test_an_agent_another_started_is_in_its_parents_trace_under_its_agent_start_call(
    tmp_path: Path,
) -> None:
    child = script(tmp_path, [{"text": "the part is done"}], name="child.json")
    root = script(
        tmp_path,
        [
            {"tool_calls": [{"name": "agent_start", "arguments": {"instruction": "do a part", "wait": True,
                                                                   "model": child}}]},
            {"text": "merged: {last_tool_result}"},
        ],
        name="root.json",
    )  # fmt: skip
    config = tmp_path / "agentd.toml"
    config.write_text(
        f'model = {json.dumps(root)}\n[agents.helper]\ndescription = "helps"\nmodel = {json.dumps(child)}\n'
    )
    async with otlp_receiver() as rx:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": rx.endpoint, "OTEL_SERVICE_NAME": "agentd-test"}
        async with run_agentd(["--config", str(config), "split the task"], env=env) as a:
            assert await a.wait_exit() == 0, a.tail()
        start = await rx.wait_for(lambda s: s.name == "execute_tool agent_start", timeout=5)
        kid = await rx.wait_for(
            lambda s: s.name.startswith("invoke_agent") and s.attributes.get("gen_ai.agent.id") == "a2",
            timeout=5,
        )
    # One trace per cause: the child's turn sits under the parent's agent_start call.
    assert kid.trace_id == start.trace_id
    assert kid.parent_id == start.span_id
    assert rx.ancestors(kid)[0].name == "execute_tool agent_start"
