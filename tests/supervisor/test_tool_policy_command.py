"""Tool policy through the real ``agentd`` command: what the model provider is offered, and what a call gets.

The provider is the loopback fake speaking Chat Completions
(``tests/fakes/provider_server.py``); the tools come from the bundled memo
server over stdio. The test reads the ``tools`` list off the wire.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from tests.fakes.provider_server import RecordedRequest, openai_reply, provider_server
from tests.support.agentd_proc import PY, run_agentd
from tests.support.routing import memo_server


def _env(url: str) -> dict[str, str]:
    return {
        "OPENAI_BASE_URL": url,
        "OPENAI_API_KEY": "sk-test",
        "ANTHROPIC_API_KEY": "",
        "ANTHROPIC_BASE_URL": "",
    }


def _offered(request: RecordedRequest) -> set[str]:
    return {t["function"]["name"] for t in request.json.get("tools", [])}


async def test_a_disallowed_tool_is_not_offered_and_a_call_to_it_is_unknown(tmp_path: Path) -> None:
    notes = tmp_path / "notes.json"
    notes.write_text("{}")
    replies = [
        # The model names the tool anyway (it may have seen it elsewhere): refused as unknown.
        openai_reply(tool_calls=[("c1", "memo__memo_set", json.dumps({"key": "k", "value": "v"}))]),
        openai_reply("could not write"),
    ]
    async with provider_server(replies) as srv:
        args = ["--model", "openai:gpt-4o-mini", "--mcp-stdio", memo_server(notes)]
        args += ["--disallowed-tools", "memo__memo_set,memo__memo_del*", "write k"]
        async with run_agentd(args, env=_env(srv.url("/v1"))) as a:
            assert await a.wait_exit() == 0, a.tail()
    first, second = srv.requests
    offered = _offered(first)
    assert "memo__memo_get" in offered
    assert not offered & {"memo__memo_set", "memo__memo_delete"}
    assert "read_resource" in offered  # the self-tools stay: the allow/deny globs name upstream tools
    tool_message = second.json["messages"][-1]
    assert tool_message["role"] == "tool"
    assert "unknown tool" in tool_message["content"].lower()
    assert [e["tool"] for e in a.find("tool.refused")] == ["memo__memo_set"]
    assert json.loads(notes.read_text()) == {}  # nothing was written


POLICY_TOML = r"""
mode = "reactive"
subscribe = ["memo:memo://notes"]
disallowed_tools = ["memo__memo_delete"]

[servers.memo]
command = "{py}"
args = ["-m", "agentd", "serve", "memo", "--file", "{notes}"]

[[routes]]
name = "notes"
match = "memo://notes"
disposition = "spawn"
debounce = "0s"
tools = "read-only"
"""


async def test_a_read_only_route_is_offered_read_only_tools_only(tmp_path: Path) -> None:
    notes = tmp_path / "notes.json"
    notes.write_text("{}")
    config = tmp_path / "agentd.toml"
    config.write_text(POLICY_TOML.replace("{py}", PY).replace("{notes}", str(notes)))
    async with provider_server(handler=lambda _r: openai_reply("ok")) as srv:
        args = ["--config", str(config), "--model", "openai:gpt-4o-mini", "--verbose", "watch"]
        async with run_agentd(args, env=_env(srv.url("/v1"))) as a:
            await a.wait_event("subscription.established")
            tmp = notes.with_suffix(".tmp")
            tmp.write_text(json.dumps({"n": 1}))
            os.replace(tmp, notes)
            await a.wait_event("model.call")
            a.signal(signal.SIGTERM)
            assert await a.wait_exit() == 0, a.tail()
    offered = _offered(srv.requests[0])
    assert "memo__memo_get" in offered
    assert not offered & {"memo__memo_set", "memo__memo_delete"}


async def test_bad_tool_globs_exit_2_naming_the_flag(tmp_path: Path) -> None:
    async with run_agentd(["--model", "script:x.json", "--allowed-tools", "memo tools", "x"]) as a:
        assert await a.wait_exit() == 2
    err = "\n".join(a.raw_stderr)
    assert "--allowed-tools" in err
    assert "is not a tool glob" in err
