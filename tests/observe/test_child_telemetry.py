"""Telemetry a child emits reaches the supervisor's stream (through the real command).

The child's model runs in the agent child; its ``model.retry`` events go to the
supervisor over the child's control channel (``ChildEvent`` frames) and are
written to agentd's stderr with the agent's id, and counted.
"""

from __future__ import annotations

from tests.fakes.provider_server import openai_error, openai_reply, provider_server
from tests.support.agentd_proc import run_agentd


async def test_a_model_retry_in_the_child_appears_in_the_supervisors_telemetry() -> None:
    replies = [
        openai_error(429, "slow down", type_="rate_limit_error", headers={"retry-after-ms": "10"}),
        openai_reply("done after a retry"),
    ]
    async with provider_server(replies) as srv:
        env = {"OPENAI_BASE_URL": srv.url("/v1"), "OPENAI_API_KEY": "sk-test"}
        async with run_agentd(["--model", "openai:gpt-4o-mini", "say hi"], env=env) as a:
            assert await a.wait_exit() == 0, a.tail()
    assert a.out == "done after a retry\n"
    assert len(srv.requests) == 2
    [spawn] = a.find("subagent.spawn")
    [retry] = a.find("model.retry")
    assert retry["agent"] == spawn["agent"]
    assert (retry["provider"], retry["attempt"]) == ("openai", 1)
    assert "HTTP 429" in retry["reason"]
    assert a.find("supervisor.exit")[0]["counters"].get("model_calls") == 1
