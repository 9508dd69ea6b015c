"""Once mode's start-up and teardown through the real ``agentd`` command.

The provider is the loopback fake speaking the real Chat Completions wire
format: the tools a run offers its model are read off the request agentd
sends. Teardown: the result and the exit code come first, every upstream
server still gets its close and the time to act on it, and ``supervisor.exit``
is the last telemetry line.
"""

from __future__ import annotations

import json
from pathlib import Path

from agentd.core.exitcodes import ExitCode
from agentd.supervisor.hub import WAKEUP_TOOLS
from tests.fakes.provider_server import openai_reply, provider_server
from tests.support.agentd_proc import notes_server, run_agentd


def _env(url: str) -> dict[str, str]:
    return {"OPENAI_BASE_URL": url, "OPENAI_API_KEY": "sk-test"}


def _offered(body: dict[str, object]) -> set[str]:
    tools = body.get("tools") or []
    assert isinstance(tools, list)
    return {t["function"]["name"] for t in tools}


async def test_once_offers_no_wakeup_tools_and_loop_does(tmp_path: Path) -> None:
    async with provider_server([openai_reply("done")]) as srv:
        args = ["--model", "openai:m", "--mcp-stdio", notes_server(tmp_path), "do it"]
        async with run_agentd(args, env=_env(srv.url("/v1"))) as a:
            assert await a.wait_exit() == ExitCode.OK, a.tail()
    once = _offered(srv.requests[0].json)
    assert "notes__add_note" in once
    assert once >= {"read_resource", "list_resources"}
    assert not once & WAKEUP_TOOLS

    async with provider_server([openai_reply("done")]) as srv:
        args = ["--mode", "loop", "--session", "fresh", "--interval", "0", "--budget-steps", "1"]
        args += ["--model", "openai:m", "--mcp-stdio", notes_server(tmp_path), "do it"]
        async with run_agentd(args, env=_env(srv.url("/v1"))) as a:
            await a.wait_exit()
    loop = _offered(srv.requests[0].json)
    assert loop >= WAKEUP_TOOLS
    assert "notes__add_note" in loop


async def test_once_teardown_keeps_the_servers_close_and_ends_telemetry_with_exit(tmp_path: Path) -> None:
    # The server needs 0.3 s after its stdin closes to finish its work (a flush).
    server = notes_server(tmp_path, "--close-work", "0.3")
    call = ("c1", "notes__add_note", json.dumps({"name": "k", "text": "v"}))
    async with provider_server([openai_reply(tool_calls=[call]), openai_reply("saved")]) as srv:
        args = ["--model", "openai:m", "--mcp-stdio", server, "--output", "json", "save"]
        async with run_agentd(args, env=_env(srv.url("/v1"))) as a:
            assert await a.wait_exit() == ExitCode.OK, a.tail()
    assert json.loads(a.out)["result"] == "saved"
    assert (tmp_path / "notes.json.closed").read_text() == "closed"
    assert a.events[-1]["event"] == "supervisor.exit", a.tail()
    assert a.events[-1]["exit_code"] == 0
    assert [e["event"] for e in a.events].count("subagent.exit") == 1
