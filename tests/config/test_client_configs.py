"""The MCP server files other clients write (mcpServers, VS Code, Codex) and the per-server settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentd.config import (
    ConfigErrors,
    effective_config,
    ignored_keys,
    parse_codex_toml,
    parse_mcp_servers_json,
    server_secrets,
)
from agentd.core.errors import ConfigError
from agentd.upstream.stdio import server_environment
from tests.support.settings import load


def test_mcp_servers_types_including_sse_and_unknown_keys_reported() -> None:
    doc = {
        "mcpServers": {
            "old": {"type": "sse", "url": "http://127.0.0.1:9/sse", "autoApprove": ["x"]},
            "new": {"type": "streamable-http", "url": "http://127.0.0.1:9/mcp", "timeout": 120},
            "local": {"type": "stdio", "command": "memo", "alwaysAllow": [], "startup_timeout": "40s"},
        },
        "globalShortcut": "Ctrl+Space",
    }
    ignored: list[str] = []
    servers = parse_mcp_servers_json(json.dumps(doc), label="m.json", env={}, ignored=ignored)
    assert servers["old"].transport == "sse"
    assert servers["new"].transport == "http"
    assert servers["new"].timeout == 120
    assert servers["local"].transport == "stdio"
    assert servers["local"].startup_timeout == 40
    assert servers["local"].timeout is None
    assert sorted(ignored) == [
        "m.json: globalShortcut",
        "m.json: mcpServers.local.alwaysAllow",
        "m.json: mcpServers.old.autoApprove",
    ]


def test_vscode_servers_file(tmp_path: Path) -> None:
    doc = {
        "inputs": [{"type": "promptString", "id": "tok", "password": True}],
        "servers": {
            "gh": {
                "type": "http",
                "url": "https://api.example/mcp",
                "headers": {"Authorization": "Bearer ${env:GH_TOKEN}"},
            },
            "fs": {"type": "stdio", "command": "fs-server", "args": ["${env:ROOT}"], "envFile": ".env"},
            "events": {"type": "sse", "url": "http://127.0.0.1:9/sse"},
        },
    }
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(doc))
    s = load(tmp_path, env={"GH_TOKEN": "ghp_x", "ROOT": "/srv"}, mcp_config=[str(path)])
    assert s.servers["gh"].headers == {"Authorization": "Bearer ghp_x"}
    assert s.servers["fs"].args == ["/srv"]
    assert s.servers["events"].transport == "sse"
    notes = ignored_keys(s)
    assert any(n.endswith("servers.fs.envFile") for n in notes)
    assert any("inputs" in n for n in notes)
    # VS Code's interactive variables cannot be resolved unattended: named, with the fix.
    doc["servers"]["gh"]["headers"] = {"Authorization": "Bearer ${input:tok}"}
    path.write_text(json.dumps(doc))
    with pytest.raises(
        ConfigError,
        match=r"servers\.gh\.headers\.Authorization: .* cannot resolve VS Code variables .*\$\{env:NAME\}",
    ):
        load(tmp_path, env={"ROOT": "/srv"}, mcp_config=[str(path)])


def test_vscode_settings_nesting() -> None:
    text = json.dumps({"mcp": {"servers": {"a": {"command": "x"}}}, "editor.fontSize": 12})
    ignored: list[str] = []
    servers = parse_mcp_servers_json(text, label="settings.json", env={}, ignored=ignored)
    assert list(servers) == ["a"]
    assert ignored == ["settings.json: editor.fontSize"]


CODEX = """
model = "o4-mini"

[mcp_servers.docs]
url = "https://docs.example/mcp"
bearer_token_env_var = "DOCS_TOKEN"
tool_timeout_sec = 90
startup_timeout_sec = 20
enabled_tools = ["search", "fetch_*"]

[mcp_servers.files]
command = "files-server"
args = ["--root", "/srv"]
env_vars = ["HOME_DIR", "UNSET_ONE"]
disabled_tools = ["delete"]
startup_timeout_ms = 2500
trust_level = "high"

[mcp_servers.gh]
url = "https://gh.example/mcp"
http_headers = { "X-Org" = "acme" }
env_http_headers = { "Authorization" = "GH_AUTH" }

[mcp_servers.off]
command = "never"
enabled = false
"""


def test_codex_toml(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(CODEX)
    env = {"DOCS_TOKEN": "t0k", "HOME_DIR": "/home/a", "GH_AUTH": "Bearer gh"}
    s = load(tmp_path, env=env, mcp_config=[str(path)])
    assert sorted(s.servers) == ["docs", "files", "gh"]
    docs, files, gh = s.servers["docs"], s.servers["files"], s.servers["gh"]
    assert (docs.bearer_token_env, docs.timeout, docs.startup_timeout) == ("DOCS_TOKEN", 90, 20)
    assert docs.allowed_tools == ["search", "fetch_*"]
    assert files.env == {"HOME_DIR": "/home/a"}
    assert files.disallowed_tools == ["delete"]
    assert files.startup_timeout == 2.5
    assert gh.headers == {"X-Org": "acme", "Authorization": "Bearer gh"}
    assert ignored_keys(s) == (f"{path} (--mcp-config): mcp_servers.files.trust_level",)
    # The bearer token's variable must be set: found at load, before anything starts.
    with pytest.raises(
        ConfigError, match=r"server docs .* bearer_token_env: .* environment variable DOCS_TOKEN is not set"
    ):
        load(tmp_path, env={"GH_AUTH": "x"}, mcp_config=[str(path)])


def test_codex_errors() -> None:
    with pytest.raises(ConfigError, match=r"c\.toml: .* expected \[mcp_servers\.NAME\] tables"):
        parse_codex_toml('model = "x"\n', label="c.toml", env={})
    with pytest.raises(ConfigError, match=r"c\.toml: .* not valid TOML"):
        parse_codex_toml("[mcp_servers\n", label="c.toml", env={})
    with pytest.raises(ConfigError, match=r"c\.toml: mcp_servers\.a: 1 is not valid: each server is a table"):
        parse_codex_toml("[mcp_servers]\na = 1\n", label="c.toml", env={})
    with pytest.raises(
        ConfigError,
        match=r"c\.toml: mcp_servers\.a\.tool_timeout_sec: 'soon' is not valid: .*duration|seconds",
    ):
        parse_codex_toml(
            '[mcp_servers.a]\ncommand = "x"\ntool_timeout_sec = "soon"\n', label="c.toml", env={}
        )


def test_per_server_settings_in_agentd_toml(tmp_path: Path) -> None:
    toml = """
tool_timeout = "45s"
state_dir = "state"

[servers.api]
url = "https://api.example/mcp"
transport = "sse"
timeout = "2m"

[servers.api.oauth]
client_id = "agentd"
client_secret = "${API_SECRET}"
issuer = "https://auth.example"
scope = "tools"
"""
    (tmp_path / "state").mkdir()
    s = load(tmp_path, toml=toml, env={"API_SECRET": "s3cret"})
    api = s.servers["api"]
    assert (api.transport, api.timeout, s.tool_timeout) == ("sse", 120, 45)
    assert api.oauth is not None
    assert api.oauth.client_secret == "s3cret"
    assert "s3cret" not in repr(api)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            'command = "x"\ntransport = "sse"',
            r"servers\.a\.transport: 'sse' is not valid: a command server's transport is stdio",
        ),
        (
            'url = "http://h/x"\ntransport = "stdio"',
            r"servers\.a\.transport: 'stdio' .* a url server's transport is http, sse or auto",
        ),
        (
            'command = "x"\nbearer_token_env = "T"',
            r"servers\.a\.bearer_token_env: .* is for url servers only",
        ),
        ('url = "http://h/x"\nbearer_token_env = "sk-123 abc"', r"give the name of an environment variable"),
        ('url = "http://h/x"\ntimeout = "0s"', r"servers\.a\.timeout: .* must be greater than zero"),
        (
            'url = "http://h/x"\noauth = { client_id = "c", issuer = "https://i" }',
            r"servers\.a\.oauth\.client_secret: .* give exactly one of client_secret",
        ),
        (
            'url = "http://h/x"\noauth = { client_id = "c", client_secret = "s", issuer = "auth.example" }',
            r"servers\.a\.oauth\.issuer: 'auth\.example' .* issuer as an http:// or https:// URL",
        ),
        (
            'url = "http://h/x"\nbearer_token_env = "T"\noauth = { client_id = "c", client_secret = "s", issuer = "https://i" }',
            r"use one of bearer_token_env or oauth, not both",
        ),
        ('url = "http://h/x"\ndisallowed_tools = ["bad glob!"]', r"is not a tool glob"),
    ],
)
def test_server_setting_errors(tmp_path: Path, table: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(tmp_path, toml=f"[servers.a]\n{table}\n", env={"T": "x"})


def test_oauth_secret_env_must_be_set(tmp_path: Path) -> None:
    toml = '[servers.a]\nurl = "http://h/x"\noauth = { client_id = "c", client_secret_env = "A_SECRET", issuer = "https://i" }\n'
    with pytest.raises(ConfigError, match=r"oauth\.client_secret_env: .* variable A_SECRET is not set"):
        load(tmp_path, toml=toml)
    assert load(tmp_path, toml=toml, env={"A_SECRET": "x"}).servers["a"].oauth is not None


def test_tool_policy_settings_from_every_layer(tmp_path: Path) -> None:
    s = load(tmp_path, env={"AGENTD_DISALLOWED_TOOLS": "memo__delete, files__write_*"})
    assert s.disallowed_tools == ["memo__delete", "files__write_*"]
    s = load(tmp_path, env={"AGENTD_ALLOWED_TOOLS": '["memo__*"]'}, disallowed_tools="x__y")
    assert (s.allowed_tools, s.disallowed_tools) == (["memo__*"], ["x__y"])
    s = load(tmp_path, toml='allowed_tools = ["a__*"]\n[[routes]]\nmatch = "m://*"\ntools = "read-only"\n')
    assert s.allowed_tools == ["a__*"]
    assert s.routes[0].tools == "read-only"
    s = load(tmp_path, routes=["m://*=spawn,tools=read-only,disallowed_tools=a__x;b__*"])
    assert (s.routes[0].tools, s.routes[0].disallowed_tools) == ("read-only", ["a__x", "b__*"])
    with pytest.raises(ConfigError, match=r"--disallowed-tools: .* is not a tool glob"):
        load(tmp_path, disallowed_tools="a b")
    with pytest.raises(ConfigError, match=r"tools: 'write' is not valid: choose one of all, read-only"):
        load(tmp_path, toml='[[routes]]\nmatch = "m://*"\ntools = "write"\n')
    with pytest.raises((ConfigError, ConfigErrors), match=r"AGENTD_TOOL_TIMEOUT: '0' .* greater than zero"):
        load(tmp_path, env={"AGENTD_TOOL_TIMEOUT": "0"})


def test_stdio_servers_get_proxy_and_ca_settings() -> None:
    parent = {
        "HTTPS_PROXY": "http://proxy:3128",
        "no_proxy": "localhost",
        "SSL_CERT_FILE": "/etc/ca.pem",
        "NODE_EXTRA_CA_CERTS": "/etc/ca.pem",
        "OPENAI_API_KEY": "sk-not-for-servers",
        "AGENTD_MODEL": "x",
    }
    env = server_environment({"SSL_CERT_FILE": "/own.pem"}, parent)
    assert env["HTTPS_PROXY"] == "http://proxy:3128"
    assert env["no_proxy"] == "localhost"
    assert env["NODE_EXTRA_CA_CERTS"] == "/etc/ca.pem"
    assert env["SSL_CERT_FILE"] == "/own.pem"  # the server's own env wins
    assert "OPENAI_API_KEY" not in env
    assert "AGENTD_MODEL" not in env


def test_remote_credentials_are_registered_as_secrets(tmp_path: Path) -> None:
    toml = (
        '[servers.a]\nurl = "http://h/x"\nbearer_token_env = "PLAIN_NAME"\n'
        '[servers.b]\nurl = "http://h/y"\n'
        'oauth = { client_id = "c", client_secret = "inline-secret-1", issuer = "https://i" }\n'
        '[servers.c]\nurl = "http://h/z"\n'
        'oauth = { client_id = "c", client_secret_env = "OTHER", issuer = "https://i" }\n'
    )
    env = {"PLAIN_NAME": "bearer-value-2", "OTHER": "env-secret-3"}
    s = load(tmp_path, toml=toml, env=env)
    found = server_secrets(s, env)
    assert {"bearer-value-2", "inline-secret-1", "env-secret-3"} <= set(found)
    shown = json.dumps(effective_config(s, env))
    assert not any(v in shown for v in ("bearer-value-2", "inline-secret-1", "env-secret-3"))
