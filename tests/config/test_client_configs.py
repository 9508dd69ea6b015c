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
    parse_goose_yaml,
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


# ----------------------------------------------------------------- Cline, Windsurf, goose (issue 37, item 9)

CLINE = {
    "mcpServers": {
        "remote": {
            "type": "streamableHttp",
            "url": "https://h.example/mcp",
            "headers": {"X-Team": "blue"},
            "autoApprove": [],
            "disabled": False,
            "timeout": 60,
        },
        "older": {"transportType": "sse", "url": "https://h.example/sse"},
        "local": {"type": "stdio", "command": "memo-server", "args": [], "alwaysAllow": ["memo_get"]},
    }
}


def test_cline_streamable_http_and_its_older_transport_type() -> None:
    # Before: "streamableHttp" was an unknown type, and the whole file was refused with it.
    ignored: list[str] = []
    servers = parse_mcp_servers_json(
        json.dumps(CLINE), label="cline_mcp_settings.json", env={}, ignored=ignored
    )
    remote, older, local = servers["remote"], servers["older"], servers["local"]
    assert (remote.transport, remote.url, remote.timeout) == ("http", "https://h.example/mcp", 60)
    assert (older.transport, local.transport) == ("sse", "stdio")
    assert sorted(ignored) == [
        "cline_mcp_settings.json: mcpServers.local.alwaysAllow",
        "cline_mcp_settings.json: mcpServers.remote.autoApprove",
    ]


def test_an_unknown_transport_names_the_name_the_file_and_the_accepted_ones() -> None:
    doc = {"mcpServers": {"a": {"type": "websocket", "url": "http://h/x"}}}
    with pytest.raises(
        ConfigError,
        match=r"^cline\.json: mcpServers\.a\.type: 'websocket' is not valid: use stdio, http, "
        r"streamable-http or sse \(Cline's streamableHttp is read as http\)",
    ):
        parse_mcp_servers_json(json.dumps(doc), label="cline.json", env={})
    doc = {"mcpServers": {"a": {"transportType": "ws", "url": "http://h/x"}}}
    with pytest.raises(ConfigError, match=r"mcpServers\.a\.transportType: 'ws' is not valid: use stdio"):
        parse_mcp_servers_json(json.dumps(doc), label="cline.json", env={})


def test_windsurf_server_url_disabled_tools_and_env_references(tmp_path: Path) -> None:
    # Before: serverUrl was "not used", and the entry was refused naming only command.
    doc = {
        "mcpServers": {
            "remote": {
                "serverUrl": "https://w.example/mcp",
                "headers": {"Authorization": "Bearer ${env:AUTH_TOKEN}"},
                "disabledTools": ["delete_page"],
            },
            "local": {"command": "fs-server", "args": ["${env:ROOT}"], "disabled": False},
        }
    }
    path = tmp_path / "mcp_config.json"
    path.write_text(json.dumps(doc))
    s = load(tmp_path, env={"AUTH_TOKEN": "tok-123456", "ROOT": "/srv"}, mcp_config=[str(path)])
    remote, local = s.servers["remote"], s.servers["local"]
    assert (remote.url, remote.transport) == ("https://w.example/mcp", "auto")
    assert remote.headers == {"Authorization": "Bearer tok-123456"}
    assert remote.disallowed_tools == ["delete_page"]
    assert local.args == ["/srv"]
    assert ignored_keys(s) == ()
    # Windsurf's ${file:PATH} is no variable: refused with the fix, not sent as text.
    doc["mcpServers"]["local"]["args"] = ["--root", "${file:/run/root}"]
    path.write_text(json.dumps(doc))
    with pytest.raises(
        ConfigError,
        match=r"mcpServers\.local\.args: '\$\{file:/run/root\}' is not valid: agentd does "
        r"not read files named inside a server file; .*\$\{env:NAME\}",
    ):
        load(tmp_path, env={"ROOT": "/srv"}, mcp_config=[str(path)])
    doc["mcpServers"]["remote"] = {"serverUrl": "https://a/mcp", "url": "https://b/mcp"}
    path.write_text(json.dumps(doc))
    with pytest.raises(
        ConfigError, match=r"mcpServers\.remote\.serverUrl: .* url and serverUrl differ; keep one"
    ):
        load(tmp_path, env={"ROOT": "/srv"}, mcp_config=[str(path)])


GOOSE = """\
GOOSE_PROVIDER: openai
GOOSE_MODEL: gpt-4o
extensions:
  developer:
    bundled: true
    display_name: Developer
    enabled: true
    name: developer
    timeout: 300
    type: builtin
  memo:
    args:
    - serve
    - memo
    bundled: null
    cmd: agentd
    description: notes
    enabled: true
    env_keys:
    - MEMO_TOKEN
    - NOT_SET_HERE
    envs:
      LEVEL: debug
    name: memo
    timeout: 120
    type: stdio
  github:
    args: [-y, "@modelcontextprotocol/server-github"]
    cmd: npx
    enabled: false
    envs: {}
    env_keys: []
    name: github
    type: stdio
  docs:
    available_tools: [search]
    description: docs
    enabled: true
    env_keys: []
    envs: {}
    headers:
      X-Team: blue
    name: docs
    timeout: 300
    type: streamable_http
    uri: https://docs.example/mcp
  events:
    enabled: true
    name: events
    type: sse
    uri: http://127.0.0.1:9/sse
    socket: /tmp/x.sock
"""


@pytest.mark.parametrize("name", ["config.yaml", "goose-config"])
def test_goose_yaml_extensions(tmp_path: Path, name: str) -> None:
    # Before: "not valid TOML". The content decides, so a copy with no .yaml suffix is read too.
    path = tmp_path / name
    path.write_text(GOOSE)
    s = load(tmp_path, env={"MEMO_TOKEN": "m-token"}, mcp_config=[str(path)])
    assert sorted(s.servers) == ["docs", "events", "memo"]
    memo, docs, events = s.servers["memo"], s.servers["docs"], s.servers["events"]
    assert (memo.transport, memo.args[-2:], memo.timeout) == ("stdio", ["serve", "memo"], 120)
    assert memo.env == {"MEMO_TOKEN": "m-token", "LEVEL": "debug"}  # env_keys that are set, then envs
    assert (docs.transport, docs.url, docs.headers) == (
        "http",
        "https://docs.example/mcp",
        {"X-Team": "blue"},
    )
    assert (docs.allowed_tools, docs.timeout) == (["search"], 300)
    assert (events.transport, events.allowed_tools) == ("sse", None)
    label = f"{path} (--mcp-config)"
    # The builtin and the disabled extension are skipped, each named; so is a key agentd does not use.
    assert ignored_keys(s) == (
        f"{label}: extensions.developer (a goose builtin extension: it runs inside goose; agentd cannot start it)",
        f"{label}: extensions.github (enabled: false in goose)",
        f"{label}: extensions.events.socket",
    )


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        (
            "extensions:\n  x:\n    type: websocket\n    uri: http://h/x\n",
            r"^g\.yaml: extensions\.x\.type: 'websocket' is not valid: use stdio, sse or streamable_http "
            r"\(goose's builtin, platform, frontend and inline_python extensions run inside goose",
        ),
        (
            "extensions:\n  x:\n    type: stdio\n    args: []\n",
            r"extensions\.x\.cmd: None is not valid: a stdio extension needs cmd",
        ),
        (
            "extensions:\n  x:\n    type: streamable_http\n",
            r"extensions\.x\.uri: None is not valid: a streamable_http extension needs uri",
        ),
        ("extensions:\n  x: npx\n", r"extensions\.x: 'npx' is not valid: each server is a mapping"),
        ("GOOSE_MODEL: gpt-4o\n", r"^g\.yaml: .* expected an extensions: mapping of goose extensions"),
        ("extensions: [\n", r"^g\.yaml: .* not valid YAML"),
        (
            "a: &a [x, x, x]\nb: &b [*a, *a, *a]\nextensions:\n  x: [*b, *b, *b]\n",
            r"^g\.yaml: .* YAML aliases \(\*name\) are not read; write each value out where it is used",
        ),
        (
            "extensions:\n  x:\n    type: stdio\n    cmd: x\n    env_keys: TOKEN\n",
            r"extensions\.x\.env_keys: 'TOKEN' is not valid: write a list of variable names",
        ),
    ],
)
def test_goose_errors_name_the_file_the_extension_and_the_fix(yaml_text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_goose_yaml(yaml_text, label="g.yaml", env={})


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        (
            "settings.json",
            '{"context_servers": {"a": {"command": {"path": "x"}}}}',
            r"this is Zed's settings \(context_servers\), which agentd does not read; write the servers as "
            r'\{"mcpServers"',
        ),
        (
            "opencode.json",
            '{"$schema": "https://opencode.ai/config.json", "mcp": {"a": {"type": "local", "command": ["x"]}}}',
            r"this is opencode's config \(mcp\), which agentd does not read",
        ),
        (
            "config.yaml",
            "mcpServers:\n  - name: a\n    command: x\n",
            r"this is Continue's config\.yaml \(an mcpServers list\), which agentd does not read",
        ),
        (
            "agentd.toml",
            '[servers.a]\ncommand = "x"\n',
            r"this is agentd's own config file \(\[servers\.NAME\] tables\), .* give it with --config",
        ),
        ("servers", "just: [unclosed\n", r"it is not JSON, TOML or YAML agentd can parse \(as TOML: "),
    ],
)
def test_a_format_agentd_does_not_read_is_named_as_that_format(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load(tmp_path, mcp_config=[str(path)])


def test_codex_toml_without_a_suffix_that_opens_with_a_table_is_still_read(tmp_path: Path) -> None:
    path = tmp_path / "codex-servers"
    path.write_text('[mcp_servers.docs]\nurl = "https://docs.example/mcp"\n')
    assert load(tmp_path, mcp_config=[str(path)]).servers["docs"].url == "https://docs.example/mcp"


# ----------------------------------------------------------------- redaction masks values, not names or fixes


def test_the_default_fix_of_an_unset_credential_variable_is_shown_whole(tmp_path: Path) -> None:
    # Before: "GITHUB_TOKEN: '***}' … set it or write ${GITHUB_TOKEN:***}": the reference and the
    # fix looked like leaked secrets.
    servers = json.dumps({"gh": {"command": "gh-mcp", "env": {"GITHUB_TOKEN": "${GITHUB_TOKEN}"}}})
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, env={"AGENTD_SERVERS": servers})
    assert str(caught.value) == (
        "AGENTD_SERVERS.gh.env.GITHUB_TOKEN: '${GITHUB_TOKEN}' is not valid: environment variable "
        "GITHUB_TOKEN is not set; set it or write ${GITHUB_TOKEN:-default}"
    )
    # A default written for a credential is still hidden; the variable's name never is.
    text = str(ConfigError("API_PASSWORD", "${PW:-hunter2-hunter2}", "x ${GITHUB_TOKEN:-ghp_real_value_123}"))
    assert "hunter2" not in text
    assert "ghp_real" not in text
    assert "API_PASSWORD: '${PW:-***}'" in text
    assert "${GITHUB_TOKEN:-***}" in text


def test_check_shows_a_generic_webhook_sources_header_names(tmp_path: Path) -> None:
    # Before: signature_header=***, signature_prefix=***: names of headers, no secret, hidden in `agentd check`.
    source = "gh=generic,signature_header=X-Hub-Signature-256,signature_prefix=sha256=,id_header=X-Delivery,secret_env=WH_SECRET"
    s = load(tmp_path, mcp_stdio=[f"hooks=agentd serve webhook --source {source}"])
    env = {"WH_SECRET": "a-very-secret-value-1234"}
    shown = effective_config(s, env)
    assert source in json.dumps(shown)
    assert "a-very-secret-value-1234" not in json.dumps(effective_config(s, env))
