"""Model settings, providers, caching and cost through the real ``agentd`` command.

Every provider is a loopback fake speaking its real wire format
(``tests/fakes/provider_server.py``): Chat Completions, Azure's deployment
URLs, the Responses API, the Messages API with prompt-caching usage, Bedrock
with SigV4 verified, Vertex with a token from a loopback Google token
endpoint. The model client is never mocked: these runs send what agentd
sends in production, and the tests read it off the wire.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import httpx2
import pytest

from agentd.core.exitcodes import ExitCode
from tests.fakes.provider_server import (
    AnthropicCacheSim,
    GoogleTokenEndpoint,
    RecordedRequest,
    Reply,
    anthropic_reply,
    openai_reply,
    provider_server,
    responses_reply,
    sigv4_problem,
)
from tests.support.agentd_proc import PY, run_agentd

MEMO = f"memo={PY} -m agentd serve memo"


def _memo_set(key: str, value: str) -> str:
    return json.dumps({"key": key, "value": value})


def _toml(tmp_path: Path, text: str) -> str:
    path = tmp_path / "agentd.toml"
    path.write_text(text)
    return str(path)


def _clean_env(**extra: str) -> dict[str, str]:
    """Provider variables of the machine removed; the test's own set."""
    env = {
        var: ""
        for var in (
            "OPENAI_API_KEY",
            "OPENAI_BASE_URL",
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_BASE_URL",
            "AZURE_OPENAI_API_KEY",
            "AZURE_OPENAI_AD_TOKEN",
            "OPENAI_API_VERSION",
        )
    }
    env.update(extra)
    return env


# --- settings on the wire -----------------------------------------------------------------


async def test_openai_settings_cached_tokens_and_cost(tmp_path: Path) -> None:
    config = _toml(
        tmp_path,
        "[model_settings]\n"
        'stop = ["END"]\n'
        "parallel_tool_calls = false\n"
        'tool_choice = "auto"\n'
        "extra = { seed = 7 }\n",
    )
    replies = [
        openai_reply(tool_calls=[("c1", "memo__memo_set", _memo_set("k", "v"))], usage=(1200, 30)),
        openai_reply("saved", usage=(1300, 5), cached_tokens=1024, model="gpt-4o-mini-2024-07-18"),
    ]
    async with provider_server(replies) as srv:
        env = _clean_env(OPENAI_BASE_URL=srv.url("/v1"), OPENAI_API_KEY="sk-test")
        args = ["--config", config, "--model", "openai:gpt-4o-mini", "--mcp-stdio", MEMO, "--output", "json"]
        args += ["--temperature", "0.3", "--top-p", "0.9", "--max-output-tokens", "256"]
        args += ["--reasoning-effort", "low", "save k"]
        async with run_agentd(args, env=env) as a:
            assert await a.wait_exit() == 0, a.tail()
    first, second = (r.json for r in srv.requests)
    for body in (first, second):
        assert body["model"] == "gpt-4o-mini"
        assert (body["temperature"], body["top_p"], body["max_completion_tokens"]) == (0.3, 0.9, 256)
        assert (body["reasoning_effort"], body["stop"], body["seed"]) == ("low", ["END"], 7)
        assert (body["parallel_tool_calls"], body["tool_choice"]) == (False, "auto")
    assert second["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": second["messages"][-1]["content"],
    }
    calls = a.find("model.call")
    assert [c["cached_input_tokens"] for c in calls] == [0, 1024]
    assert all(isinstance(c["cost_usd"], float) and c["cost_usd"] > 0 for c in calls)
    # The cached call costs less than it would uncached (OpenAI bills cached input at a discount).
    assert calls[1]["cost_usd"] < calls[0]["cost_usd"] * 1300 / 1200
    out = json.loads(a.out)
    assert out["usage"]["cached_input_tokens"] == 1024
    assert out["usage"]["input_tokens"] == 2500
    assert out["cost_usd"] == pytest.approx(calls[0]["cost_usd"] + calls[1]["cost_usd"], rel=1e-6)
    exit_event = a.find("supervisor.exit")[0]
    assert exit_event["cost_usd"] == out["cost_usd"]
    assert exit_event["counters"]["cached_input_tokens"] == 1024


async def test_anthropic_thinking_settings_and_thinking_blocks_come_back(tmp_path: Path) -> None:
    replies = [
        anthropic_reply(
            None,
            tool_uses=[("toolu_1", "memo__memo_set", {"key": "k", "value": "v"})],
            thinking=[("I should save it.", "sig-1")],
        ),
        anthropic_reply("saved"),
    ]
    async with provider_server(replies) as srv:
        env = _clean_env(
            ANTHROPIC_BASE_URL=srv.base_url,
            AGENTD_MODEL_SETTINGS__STOP='["STOP"]',
            AGENTD_MODEL_SETTINGS__PARALLEL_TOOL_CALLS="false",
            AGENTD_MODEL_SETTINGS__PROMPT_CACHE="1h",
        )
        args = ["--model", "anthropic:claude-sonnet-4-5", "--mcp-stdio", MEMO, "--thinking-budget", "2048"]
        args += ["--max-output-tokens", "8000", "--top-p", "0.95", "--system", "be brief", "save k"]
        async with run_agentd(args, env=env) as a:
            assert await a.wait_exit() == 0, a.tail()
    assert srv.requests[0].headers["anthropic-beta"] == "extended-cache-ttl-2025-04-11"  # the 1 h lifetime
    first, second = (r.json for r in srv.requests)
    hour = {"type": "ephemeral", "ttl": "1h"}
    assert first["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert (first["max_tokens"], first["top_p"], first["stop_sequences"]) == (8000, 0.95, ["STOP"])
    assert "temperature" not in first
    assert first["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    assert first["system"] == [{"type": "text", "text": "be brief", "cache_control": hour}]
    assert first["tools"][-1]["cache_control"] == hour
    # Extended thinking with tools: the thinking block comes back first, signature and all.
    assert second["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "I should save it.", "signature": "sig-1"},
        {"type": "tool_use", "id": "toolu_1", "name": "memo__memo_set", "input": {"key": "k", "value": "v"}},
    ]
    assert a.out.strip() == "saved"


async def test_warm_session_second_turn_reads_its_prefix_from_the_cache(tmp_path: Path) -> None:
    sim = AnthropicCacheSim([anthropic_reply("first answer"), anthropic_reply("second answer")])
    system = "You watch the queue. " * 40  # long enough that a cache read is worth asserting on
    async with provider_server([sim, sim]) as srv:
        env = _clean_env(ANTHROPIC_BASE_URL=srv.base_url)
        args = ["--mode", "loop", "--session", "warm", "--interval", "0", "--budget-steps", "2"]
        args += ["--model", "anthropic:claude-sonnet-4-5", "--system", system, "--mcp-stdio", MEMO, "look"]
        async with run_agentd(args, env=env) as a:
            await a.wait_event("budget.exhausted")
            code = await a.wait_exit()
    assert code in (ExitCode.BUDGET_PARTIAL, ExitCode.BUDGET), a.tail()
    # Call 1 wrote the prefix (tools, system, first turn); call 2 read all of it back.
    assert sim.reads[0] == 0
    assert sim.writes[0] > 0
    assert sim.reads[1] == sim.writes[0]
    calls = a.find("model.call")
    assert [c["cached_input_tokens"] for c in calls] == sim.reads
    assert [c["cache_creation_input_tokens"] for c in calls] == sim.writes
    second = srv.requests[1].json
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]


async def test_budget_usd_ends_the_run_like_the_token_budget(tmp_path: Path) -> None:
    # 2M input tokens of gpt-4o-mini: $0.30, over a $0.10 budget after the first call.
    replies = [
        openai_reply(tool_calls=[("c1", "memo__memo_set", _memo_set("k", "v"))], usage=(2_000_000, 10))
    ]
    async with provider_server(replies) as srv:
        env = _clean_env(OPENAI_BASE_URL=srv.url("/v1"), OPENAI_API_KEY="sk-test")
        args = [
            "--model",
            "openai:gpt-4o-mini",
            "--mcp-stdio",
            MEMO,
            "--budget-usd",
            "0.10",
            "--output",
            "json",
        ]
        async with run_agentd([*args, "--max-steps", "50", "work"], env=env) as a:
            assert await a.wait_exit() == ExitCode.BUDGET, a.tail()
    assert len(srv.requests) == 1  # the tool calls of the call that spent it are not run
    exhausted = a.find("budget.exhausted")[0]
    assert exhausted["kind"] == "usd"
    assert exhausted["budget"]["usd"] == pytest.approx(0.30, rel=0.01)
    out = json.loads(a.out)
    assert (out["status"], out["exit_code"]) == ("exhausted_tokens", ExitCode.BUDGET)
    assert out["cost_usd"] == pytest.approx(0.30, rel=0.01)
    # The deprecated name still works, and says so: on stderr and as telemetry.
    assert a.find("config.deprecated")[0] == {
        **a.find("config.deprecated")[0],
        "setting": "--max-steps",
        "use": "--budget-steps",
    }
    assert any("warning: --max-steps is deprecated" in line for line in a.raw_stderr)


async def test_metrics_show_cost_and_cache_tokens(tmp_path: Path) -> None:
    replies = [openai_reply("done", usage=(4000, 100), cached_tokens=2048)]
    async with provider_server(replies) as srv:
        env = _clean_env(OPENAI_BASE_URL=srv.url("/v1"), OPENAI_API_KEY="sk-test")
        args = ["--mode", "loop", "--interval", "1h", "--model", "openai:gpt-4o-mini"]
        args += ["--metrics-addr", "127.0.0.1:0", "--mcp-stdio", MEMO, "work"]
        async with run_agentd(args, env=env) as a:
            port = (await a.wait_event("metrics.listening"))["port"]
            call = await a.wait_event("model.call")
            await a.wait_event("turn.end")
            async with httpx2.AsyncClient() as client:
                text = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
            a.signal()
            assert await a.wait_exit() == 0
    metrics = dict(line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
    assert float(metrics["agentd_cost_usd_total"]) == pytest.approx(call["cost_usd"])
    assert float(metrics['agentd_cache_tokens_total{kind="read"}']) == 2048
    assert float(metrics["agentd_model_calls_unpriced_total"]) == 0


# --- per-route model, system prompt and settings -----------------------------------------

ROUTES_TOML = r"""
mode = "reactive"
interval = "300ms"
subscribe = ["memo:memo://notes"]
system = "top system"

[model_settings]
temperature = 0.3
reasoning_effort = "low"

[[routes]]
name = "notes"
match = "memo://notes"
disposition = "spawn"
debounce = "0s"
model = "anthropic:claude-sonnet-4-5"
system = "notes system"
model_settings = { max_output_tokens = 700, stop = ["DONE"] }

[[routes]]
name = "tick"
timer = true
disposition = "spawn"
"""


async def test_routes_run_their_own_model_system_and_settings(tmp_path: Path) -> None:
    """A route names another model, system prompt and settings; the timer route runs the supervisor's."""
    notes = tmp_path / "notes.json"
    notes.write_text("{}")
    config = _toml(tmp_path, ROUTES_TOML)
    async with (
        provider_server(handler=lambda _r: openai_reply("tick done")) as oai,
        provider_server(handler=lambda _r: anthropic_reply("notes done")) as anth,
    ):
        env = _clean_env(
            OPENAI_BASE_URL=oai.url("/v1"),
            OPENAI_API_KEY="sk-test",
            ANTHROPIC_BASE_URL=anth.base_url,
            ANTHROPIC_API_KEY="sk-ant-test",
        )
        args = ["--config", config, "--model", "openai:gpt-4o-mini", "--verbose"]
        args += ["--mcp-stdio", f"memo={PY} -m agentd serve memo --file {notes}", "watch"]
        async with run_agentd(args, env=env) as a:
            await a.wait_event("subscription.established")
            tmp = notes.with_suffix(".tmp")
            tmp.write_text(json.dumps({"n": 1}))
            os.replace(tmp, notes)
            await a.wait_event("model.call", lambda e: e["provider"] == "anthropic")
            await a.wait_event("model.call", lambda e: e["provider"] == "openai")
            a.signal(signal.SIGTERM)
            assert await a.wait_exit() == 0, a.tail()
    notes_body = anth.requests[0].json
    assert notes_body["system"][0]["text"] == "notes system"
    assert (notes_body["max_tokens"], notes_body["stop_sequences"]) == (700, ["DONE"])
    assert notes_body["temperature"] == 0.3  # inherited from the supervisor's settings
    assert "reasoning_effort" not in notes_body  # an OpenAI setting: left out for this route
    tick_body = oai.requests[0].json
    assert tick_body["messages"][0] == {"role": "system", "content": "top system"}
    assert (tick_body["temperature"], tick_body["reasoning_effort"]) == (0.3, "low")
    assert "max_completion_tokens" not in tick_body
    routes = {e["agent"]: e["route"] for e in a.find("subagent.spawn")}
    providers = {routes[e["agent"]]: e["provider"] for e in a.find("model.call")}
    assert providers == {"notes": "anthropic", "tick": "openai"}


async def test_a_route_setting_its_model_cannot_take_exits_2(tmp_path: Path) -> None:
    config = _toml(
        tmp_path,
        'mode = "reactive"\n[[routes]]\nmatch = "memo://x"\nmodel = "openai:gpt-4o"\n'
        "model_settings = { thinking_budget = 2048 }\n",
    )
    env = _clean_env(OPENAI_API_KEY="k")
    async with run_agentd(["--config", config, "--model", "openai:gpt-4o", "x"], env=env) as a:
        assert await a.wait_exit() == ExitCode.CONFIG
    stderr = "\n".join(a.raw_stderr)
    assert (
        "agentd.toml: routes[0].model_settings.thinking_budget: 2048 is not valid: openai:gpt-4o cannot"
        in stderr
    )


# --- providers ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("auth_env", "header", "value"),
    [
        ({"AZURE_OPENAI_API_KEY": "azure-key-1"}, "api-key", "azure-key-1"),
        ({"AZURE_OPENAI_AD_TOKEN": "entra-token-1"}, "authorization", "Bearer entra-token-1"),
    ],
)
async def test_azure_deployment_url_api_version_and_credential(
    tmp_path: Path, auth_env: dict[str, str], header: str, value: str
) -> None:
    replies = [openai_reply("from azure", model="gpt-4o-2024-08-06")]
    async with provider_server(replies) as srv:
        env = _clean_env(AZURE_OPENAI_ENDPOINT=srv.base_url, **auth_env)
        args = ["--model", "azure:prod-chat", "--temperature", "0", "--output", "json", "hi"]
        async with run_agentd(args, env=env) as a:
            assert await a.wait_exit() == 0, a.tail()
    [req] = srv.requests
    assert req.path == "/openai/deployments/prod-chat/chat/completions?api-version=2024-10-21"
    assert req.headers[header] == value
    assert req.json["temperature"] == 0
    call = a.find("model.call")[0]
    assert (call["provider"], call["model"]) == ("azure", "prod-chat")
    assert call["cost_usd"] > 0  # priced by the model Azure reported, not the deployment name


async def test_azure_v1_api(tmp_path: Path) -> None:
    async with provider_server([openai_reply("v1")]) as srv:
        env = _clean_env(
            AZURE_OPENAI_ENDPOINT=srv.base_url, AZURE_OPENAI_API_KEY="k", OPENAI_API_VERSION="v1"
        )
        async with run_agentd(["--model", "azure:prod-chat", "hi"], env=env) as a:
            assert await a.wait_exit() == 0, a.tail()
    [req] = srv.requests
    assert (req.path, req.json["model"]) == ("/openai/v1/chat/completions", "prod-chat")


async def test_openai_responses_items_and_reasoning_round_trip(tmp_path: Path) -> None:
    replies = [
        responses_reply(
            function_calls=[("call_1", "memo__memo_set", _memo_set("k", "v"))],
            reasoning=[("rs_1", "ENCRYPTED-1")],
            cached_tokens=0,
            model="gpt-5-mini",
        ),
        responses_reply("saved", usage=(900, 4), cached_tokens=512, model="gpt-5-mini"),
    ]
    async with provider_server(replies) as srv:
        env = _clean_env(OPENAI_BASE_URL=srv.url("/v1"), OPENAI_API_KEY="sk-test")
        args = ["--model", "openai-responses:gpt-5-mini", "--mcp-stdio", MEMO, "--system", "sys"]
        args += ["--reasoning-effort", "medium", "--max-output-tokens", "700", "save k"]
        async with run_agentd(args, env=env) as a:
            assert await a.wait_exit() == 0, a.tail()
    first, second = srv.requests
    assert first.path == "/v1/responses"
    body = first.json
    assert (body["instructions"], body["store"], body["max_output_tokens"]) == ("sys", False, 700)
    assert (body["reasoning"], body["include"]) == ({"effort": "medium"}, ["reasoning.encrypted_content"])
    assert body["input"] == [{"role": "user", "content": "save k"}]
    tool = next(t for t in body["tools"] if t["name"] == "memo__memo_set")
    assert (tool["type"], tool["strict"]) == ("function", False)
    items = second.json["input"]
    assert items[1] == {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "ENCRYPTED-1"}
    assert items[2] == {
        "type": "function_call",
        "call_id": "call_1",
        "name": "memo__memo_set",
        "arguments": _memo_set("k", "v"),
        "id": "fc_call_1",
    }
    assert (items[3]["type"], items[3]["call_id"]) == ("function_call_output", "call_1")
    assert a.out.strip() == "saved"
    assert [c["cached_input_tokens"] for c in a.find("model.call")] == [0, 512]


async def test_named_openai_compatible_providers_side_by_side(tmp_path: Path) -> None:
    async with (
        provider_server([openai_reply("local says hi")]) as local,
        provider_server([openai_reply("hosted says hi", model="gpt-4o-mini")]) as hosted,
    ):
        config = _toml(
            tmp_path,
            f'[providers.local]\nbase_url = "{local.url("/v1")}"\n\n'
            f'[providers.hosted]\nbase_url = "{hosted.url("/v1")}"\napi_key_env = "HOSTED_KEY"\n'
            'headers = { "X-Team" = "${TEAM}" }\nprices = "openai"\n',
        )
        env = _clean_env(HOSTED_KEY="hosted-secret-key", TEAM="search")
        async with run_agentd(["--config", config, "--model", "local:llama3.1:8b", "hi"], env=env) as a:
            assert await a.wait_exit() == 0, a.tail()
        assert a.out.strip() == "local says hi"
        assert a.find("model.call")[0]["cost_usd"] == "unknown"
        async with run_agentd(["--config", config, "--model", "hosted:gpt-4o-mini", "hi"], env=env) as b:
            assert await b.wait_exit() == 0, b.tail()
        assert b.out.strip() == "hosted says hi"
    [lreq], [hreq] = local.requests, hosted.requests
    assert (lreq.path, lreq.json["model"], "authorization" in lreq.headers) == (
        "/v1/chat/completions",
        "llama3.1:8b",
        False,
    )
    assert (hreq.headers["authorization"], hreq.headers["x-team"]) == ("Bearer hosted-secret-key", "search")
    assert b.find("model.call")[0]["provider"] == "hosted"
    assert b.find("model.call")[0]["cost_usd"] > 0
    assert "hosted-secret-key" not in "\n".join(b.raw_stderr)


BEDROCK_MODEL = "anthropic.claude-sonnet-4-5-20250929-v1:0"
AWS = {
    "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE0000TEST1",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
    "AWS_REGION": "eu-central-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


@pytest.mark.slow  # the zygote imports the anthropic SDK and boto (2-4 s here)
async def test_bedrock_through_agentd(tmp_path: Path) -> None:
    pytest.importorskip("boto3")
    replies = [anthropic_reply("hello from bedrock", usage=(20, 4))]

    def bedrock(request: RecordedRequest) -> Reply:
        problem = sigv4_problem(
            request,
            access_key=AWS["AWS_ACCESS_KEY_ID"],
            secret_key=AWS["AWS_SECRET_ACCESS_KEY"],
            region=AWS["AWS_REGION"],
        )
        if problem is not None:
            return Reply(403, {"message": problem})
        return replies.pop(0)

    async with provider_server(handler=bedrock) as srv:
        env = _clean_env(
            ANTHROPIC_BEDROCK_BASE_URL=srv.base_url,
            AWS_CONFIG_FILE=str(tmp_path / "none"),
            AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
            **AWS,
        )
        args = ["--model", f"bedrock:{BEDROCK_MODEL}", "--max-output-tokens", "300", "--output", "json", "hi"]
        async with run_agentd(args, env=env) as a:
            assert await a.wait_exit() == 0, a.tail()
    [req] = srv.requests
    assert req.path == f"/model/{BEDROCK_MODEL}/invoke"
    assert req.json["max_tokens"] == 300
    assert "model" not in req.json
    out = json.loads(a.out)
    assert out["result"] == "hello from bedrock"
    assert out["cost_usd"] > 0  # priced as aws
    assert AWS["AWS_SECRET_ACCESS_KEY"] not in "\n".join(a.raw_stderr)


@pytest.mark.slow  # the zygote imports the anthropic SDK and google-auth (2-4 s here)
async def test_vertex_through_agentd(tmp_path: Path) -> None:
    pytest.importorskip("google.auth")
    tokens = GoogleTokenEndpoint()
    replies = [anthropic_reply("hello from vertex")]

    async with provider_server(handler=tokens.vertex(replies)) as srv:
        key_file = tokens.service_account(tmp_path, srv.url("/token"))
        env = _clean_env(**tokens.vertex_env(key_file, srv.url("/v1"), "europe-west1"))
        async with run_agentd(["--model", "vertex:claude-sonnet-4-5@20250929", "hi"], env=env) as a:
            assert await a.wait_exit() == 0, a.tail()
    assert tokens.problems == []
    call = next(r for r in srv.requests if r.path != "/token")
    assert call.path == (
        "/v1/projects/agentd-test/locations/europe-west1/publishers/anthropic/models/"
        "claude-sonnet-4-5@20250929:rawPredict"
    )
    assert a.out.strip() == "hello from vertex"


# --- bad settings: exit 2 before anything starts --------------------------------------------


@pytest.mark.parametrize(
    ("args", "toml", "message"),
    [
        (["--temperature", "3"], "", r"--temperature: '3' is not valid: give a number from 0 up to 2"),
        (
            ["--model", "anthropic:claude-x", "--temperature", "1.5"],
            "",
            r"--temperature: 1\.5 is not valid: anthropic:claude-x takes a temperature from 0 to 1",
        ),
        (
            ["--thinking-budget", "4096"],
            "",
            r"--thinking-budget: 4096 is not valid: openai:gpt-4o-mini cannot take thinking_budget: use "
            r"reasoning_effort",
        ),
        (
            ["--reasoning-effort", "max"],
            "",
            r"--reasoning-effort: 'max' is not valid: choose one of none, minimal",
        ),
        (
            ["--budget-usd", "-1"],
            "",
            r"--budget-usd: '-1' is not valid: must be an amount in US dollars above 0",
        ),
        (
            [],
            "[model_settings]\nextra = { messages = [] }\n",
            r"agentd\.toml: model_settings\.extra\.messages: \[\] is not valid: agentd writes 'messages' itself",
        ),
        (
            [],
            '[providers.openai]\nbase_url = "http://127.0.0.1:1/v1"\n',
            r"agentd\.toml: providers\.openai: 'openai' is not valid: 'openai' is a built-in provider",
        ),
        (
            ["--model", "openai-responses:gpt-5"],
            '[model_settings]\nstop = ["x"]\n',
            r"agentd\.toml: model_settings\.stop: \['x'\] is not valid: openai-responses:gpt-5 cannot take stop",
        ),
        (
            ["--model", "azure:prod"],
            "",
            r"--model: 'azure:prod' is not valid: azure: AZURE_OPENAI_ENDPOINT is not set",
        ),
    ],
)
async def test_bad_model_settings_exit_2_naming_setting_value_and_fix(
    tmp_path: Path, args: list[str], toml: str, message: str
) -> None:
    import re

    config = _toml(tmp_path, toml)
    base = ["--config", config, "--model", "openai:gpt-4o-mini"]
    env = _clean_env(OPENAI_API_KEY="sk-test", ANTHROPIC_API_KEY="sk-ant-test")
    async with run_agentd([*base, *args, "hi"], env=env) as a:
        assert await a.wait_exit() == ExitCode.CONFIG
    stderr = "\n".join(a.raw_stderr)
    assert re.search(message, stderr), stderr
    assert not a.find("supervisor.start")
