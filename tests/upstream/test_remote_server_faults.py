"""Remote MCP servers with credentials, and hostile tool calls, through the real ``agentd`` command (cases R1-R3).

The OAuth servers are ``tests/mcpservers/oauth_server.py`` (the SDK's auth parts
on loopback sockets). agentd must end clearly (exit 6 with the reason for a
required server), never print a credential, and leave a usable token cache.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from agentd.core.exitcodes import ExitCode
from tests.fakes.provider_server import openai_reply, provider_server
from tests.support.agentd_proc import run_agentd
from tests.support.oauth import CLIENT_ID, CLIENT_SECRET, oauth_servers
from tests.support.routing import memo_server

pytestmark = pytest.mark.fault


def _config(tmp_path: Path, url: str, issuer: str, *, secret_env: str = "SECURE_SECRET") -> str:
    path = tmp_path / "agentd.toml"
    path.write_text(
        f'state_dir = "{tmp_path / "state"}"\n'
        f"[servers.secure]\n"
        f'url = "{url}"\n'
        f"required = true\n"
        f'oauth = {{ client_id = "{CLIENT_ID}", client_secret_env = "{secret_env}", issuer = "{issuer}" }}\n'
    )
    return str(path)


def _env(url: str, **extra: str) -> dict[str, str]:
    return {"OPENAI_BASE_URL": url, "OPENAI_API_KEY": "sk-test", "ANTHROPIC_API_KEY": "", **extra}


async def test_r1_refused_credentials_end_a_required_server_with_exit_6_and_no_secret(
    tmp_path: Path, allow_files: object
) -> None:
    allow_files("oauth.log", "state/.agentd.lock")  # type: ignore[operator]
    wrong = "wrong-secret-value-7f3a"
    async with oauth_servers(tmp_path) as servers, provider_server([]) as srv:
        config = _config(tmp_path, servers.url, servers.issuer)
        args = ["--config", config, "--model", "openai:gpt-4o-mini", "hi"]
        async with run_agentd(
            args, env=_env(srv.url("/v1"), SECURE_SECRET=wrong, AGENTD_RECONNECT_BACKOFF="0.1")
        ) as a:
            assert await a.wait_exit(timeout=90) == ExitCode.REQUIRED_SERVER, a.tail()
    everything = "\n".join(a.raw_stderr) + a.stdout.decode()
    assert wrong not in everything
    assert any(e.get("server") == "secure" for e in a.find("upstream.connect_failed"))
    assert "invalid_client" in everything or "401" in everything
    assert not srv.requests  # the model was never called: the required server never came up


async def test_r2_agentd_sigkilled_after_caching_a_token_restarts_without_a_new_one(
    tmp_path: Path, allow_files: object
) -> None:
    allow_files("state/oauth/*.json", "state/.agentd.lock", "oauth.log")  # type: ignore[operator]
    async with (
        oauth_servers(tmp_path) as servers,
        provider_server(handler=lambda _r: openai_reply("ok")) as srv,
    ):
        config = _config(tmp_path, servers.url, servers.issuer)
        args = ["--config", config, "--model", "openai:gpt-4o-mini", "--mode", "loop", "--interval", "1h"]
        env = _env(srv.url("/v1"), SECURE_SECRET=CLIENT_SECRET)
        async with run_agentd([*args, "wait"], env=env) as a:
            await a.wait_event("upstream.connected", lambda e: e["server"] == "secure")
            a.signal(signal.SIGKILL)
            await a.wait_exit()
        (cache,) = (tmp_path / "state" / "oauth").iterdir()
        assert json.loads(cache.read_text())["token"]["access_token"]
        assert oct(cache.stat().st_mode & 0o777) == "0o600"
        assert servers.lines().count("issued 1") == 1
        async with run_agentd([*args, "wait"], env=env) as b:
            await b.wait_event("upstream.connected", lambda e: e["server"] == "secure")
            b.signal(signal.SIGTERM)
            assert await b.wait_exit() == 0, b.tail()
        assert [line for line in servers.lines() if line.startswith("issued")] == ["issued 1"]
        assert "unauthorized" not in servers.lines()[servers.lines().index("issued 1") + 1 :]


async def test_r3_a_model_naming_a_disallowed_tool_gets_unknown_tool(tmp_path: Path) -> None:
    notes = tmp_path / "notes.json"
    notes.write_text("{}")
    replies = [
        openai_reply(tool_calls=[("c1", "memo__memo_set", json.dumps({"key": "k", "value": "x" * 100_000}))]),
        openai_reply(tool_calls=[("c2", "memo__memo_set\u0000", "{}"), ("c3", "MEMO__MEMO_SET", "{}")]),
        openai_reply("gave up"),
    ]
    async with provider_server(replies) as srv:
        args = ["--model", "openai:gpt-4o-mini", "--mcp-stdio", memo_server(notes)]
        args += ["--disallowed-tools", "memo__memo_set", "--output", "json", "try"]
        async with run_agentd(args, env=_env(srv.url("/v1"))) as a:
            assert await a.wait_exit() == 0, a.tail()
    assert json.loads(notes.read_text()) == {}
    assert len(a.find("tool.refused")) == 3
    assert json.loads(a.stdout)["status"] == "completed"
