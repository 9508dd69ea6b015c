"""MCP servers from every source, their union and duplicates, and `agentd check` redaction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentd import cli
from agentd.config import ConfigErrors, ServerSpec, effective_config, load_settings, parse_mcp_servers_json
from agentd.core.errors import ConfigError
from tests.support.settings import load, script_model

MCP_JSON = {
    "mcpServers": {
        "memo": {"command": "memo-server", "args": ["--db", "/tmp/m"], "env": {"OPENAI_API_KEY": "sk-json"}},
        "docs": {
            "type": "streamable-http",
            "url": "https://docs.example/mcp",
            "headers": {"Authorization": "Bearer j"},
        },
        "plain": {"type": "stdio", "command": "plain", "autoApprove": ["x"], "timeout": 30},
        "off": {"command": "never", "disabled": True},
        "must": {"url": "http://127.0.0.1:9/mcp", "type": "http", "required": True},
    }
}


def test_mcp_servers_json_import() -> None:
    servers = parse_mcp_servers_json(json.dumps(MCP_JSON), label="mcp.json", env={})
    assert sorted(servers) == ["docs", "memo", "must", "plain"]
    memo = servers["memo"]
    assert (memo.transport, memo.command, memo.args) == ("stdio", "memo-server", ["--db", "/tmp/m"])
    assert memo.env == {"OPENAI_API_KEY": "sk-json"}
    docs = servers["docs"]
    assert (docs.transport, docs.url, docs.headers) == (
        "http",
        "https://docs.example/mcp",
        {"Authorization": "Bearer j"},
    )
    assert servers["must"].required
    assert not servers["plain"].required
    assert memo.source == "mcp.json"
    # Credentials stay out of repr (logs, tracebacks).
    assert "sk-json" not in repr(memo)
    assert "Bearer" not in repr(docs)


def test_mcp_json_expands_env_references() -> None:
    doc = {
        "mcpServers": {
            "gh": {
                "command": "gh-mcp",
                "args": ["--org", "${ORG:-acme}"],
                "env": {"GITHUB_TOKEN": "${GH_TOKEN}"},
            }
        }
    }
    gh = parse_mcp_servers_json(json.dumps(doc), label="m.json", env={"GH_TOKEN": "ghp_1"})["gh"]
    assert gh.args == ["--org", "acme"]
    assert gh.env == {"GITHUB_TOKEN": "ghp_1"}
    with pytest.raises(
        ConfigError,
        match=r"m\.json: mcpServers\.gh\.env\.GITHUB_TOKEN: '\$\{GH_TOKEN\}' is not valid: environment variable GH_TOKEN is not set",
    ):
        parse_mcp_servers_json(json.dumps(doc), label="m.json", env={})


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("{not json", r"^m\.json: '\{not json' is not valid: not valid JSON"),
        ('{"other": {}}', r'expected a JSON object with an "mcpServers" object .* or a "servers" object'),
        (
            '{"mcpServers": {"a": {"command": "x"}, "a": {"command": "y"}}}',
            r"mcpServers\.a: 'a' is not valid: defined twice in this file",
        ),
        ('{"mcpServers": {"a": "x"}}', r"mcpServers\.a: 'x' is not valid: each server is an object"),
        (
            '{"mcpServers": {"a": {"type": "websocket", "url": "http://h/x"}}}',
            r"mcpServers\.a\.type: 'websocket' is not valid: use stdio, http, streamable-http or sse",
        ),
        ('{"mcpServers": {"a": {"type": "http", "command": "x"}}}', r"a http server needs 'url'"),
        (
            '{"mcpServers": {"a": {}}}',
            r"mcpServers\.a\.command: .* is not valid: a server needs exactly one of command \(stdio\) or url \(HTTP\)",
        ),
        ('{"mcpServers": {"a": {"command": "x", "url": "http://h/"}}}', r"needs exactly one of command"),
        (
            '{"mcpServers": {"a": {"url": "ftp://h/x"}}}',
            r"mcpServers\.a\.url: 'ftp://h/x' is not valid: write an http:// or https:// URL",
        ),
        (
            '{"mcpServers": {"a": {"command": "x", "headers": {"A": "b"}}}}',
            r"headers is for url servers only",
        ),
        (
            '{"mcpServers": {"a": {"url": "http://h/x", "args": ["y"]}}}',
            r"args, env and cwd apply to command servers only",
        ),
        (
            '{"mcpServers": {"bad name!": {"command": "x"}}}',
            r"mcpServers\.bad name!: 'bad name!' is not valid: a server name is 1-32 letters",
        ),
        (
            '{"mcpServers": {"a": {"command": "x", "args": "y"}}}',
            r"mcpServers\.a\.args: 'y' is not valid: expected a list",
        ),
    ],
)
def test_mcp_json_errors(doc: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_mcp_servers_json(doc, label="m.json", env={})


def test_servers_from_every_source_are_unioned(tmp_path: Path) -> None:
    (tmp_path / "mcp.json").write_text(json.dumps(MCP_JSON))
    (tmp_path / "env.json").write_text('{"mcpServers": {"fromenv": {"command": "e"}}}')
    toml = f'mcp_config = "{tmp_path / "mcp.json"}"\n[servers.local]\ncommand = "local-server"\nargs = ["-v"]\ncwd = "/tmp"\nrequired = true\n'
    env = {
        "AGENTD_MCP_CONFIG": str(tmp_path / "env.json"),
        "AGENTD_SERVERS": '{"envtable": {"url": "http://127.0.0.1:1/mcp"}}',
    }
    s = load(
        tmp_path,
        toml=toml,
        env=env,
        mcp_stdio=["fs=fs-server --root '/srv/my files'"],
        mcp_http=["web=http://127.0.0.1:8000/mcp"],
        require=["fs"],
    )
    assert sorted(s.servers) == ["docs", "envtable", "fromenv", "fs", "local", "memo", "must", "plain", "web"]
    assert s.servers["fs"] == ServerSpec(
        name="fs",
        command="fs-server",
        args=["--root", "/srv/my files"],
        required=True,
        source="--mcp-stdio fs",
    )
    assert s.servers["local"].required
    assert s.servers["local"].cwd == "/tmp"
    # A url without a transport is detected at connect time (rfcs/0286).
    assert s.servers["web"].transport == "auto"
    assert not s.servers["web"].required


def test_duplicate_server_names_name_both_sources(tmp_path: Path) -> None:
    (tmp_path / "mcp.json").write_text('{"mcpServers": {"memo": {"command": "other"}}}')
    toml = '[servers.memo]\ncommand = "memo-server"\n'
    with pytest.raises(
        ConfigError,
        match=r"^server memo: 'memo' is not valid: defined twice: in .*agentd\.toml \[servers\.memo\] "
        r"and in .*mcp\.json \(--mcp-config\); rename or remove one",
    ):
        load(tmp_path, toml=toml, mcp_config=[str(tmp_path / "mcp.json")])
    with pytest.raises(ConfigError, match=r"defined twice: in --mcp-stdio a and in --mcp-http a"):
        load(tmp_path, mcp_stdio=["a=x"], mcp_http=["a=http://h/mcp"])


def test_server_flag_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^--mcp-stdio: 'memo' is not valid: write NAME=COMMAND ARGS…"):
        load(tmp_path, mcp_stdio=["memo"])
    with pytest.raises(
        ConfigError, match=r"the command does not split like a shell line \(No closing quotation\)"
    ):
        load(tmp_path, mcp_stdio=["memo=server 'open"])
    with pytest.raises(ConfigError, match=r"^--mcp-http: 'docs' is not valid: write NAME=URL"):
        load(tmp_path, mcp_http=["docs"])
    with pytest.raises(
        ConfigError,
        match=r"^--mcp-http docs\.url: 'localhost:8000' is not valid: write an http:// or https:// URL",
    ):
        load(tmp_path, mcp_http=["docs=localhost:8000"])
    with pytest.raises(
        ConfigError, match=r"^--mcp-stdio x\.y: 'x\.y' is not valid: a server name is 1-32 letters"
    ):
        load(tmp_path, mcp_stdio=["x.y=cmd"])
    with pytest.raises(
        ConfigError, match=r"^--require: 'ghost' is not valid: no server named 'ghost' \(known: \['a'\]\)"
    ):
        load(tmp_path, mcp_stdio=["a=cmd"], require=["ghost"])
    with pytest.raises(
        ConfigError,
        match=r"^--mcp-config: '/nonexistent\.json' is not valid: cannot read the MCP server file",
    ):
        load(tmp_path, mcp_config=["/nonexistent.json"])
    with pytest.raises(ConfigError, match=r"^AGENTD_SERVERS: '\{' is not valid: not valid JSON"):
        load(tmp_path, env={"AGENTD_SERVERS": "{"})


def test_toml_server_errors_are_collected(tmp_path: Path) -> None:
    toml = '[servers.a]\nurl = "nope"\n[servers.b]\ncommand = "x"\nheaders = { A = "b" }\n[servers.c]\ncomand = "x"\n'
    with pytest.raises(ConfigErrors) as info:
        load(tmp_path, toml=toml)
    lines = str(info.value).splitlines()
    assert len(lines) == 3, lines
    assert "servers.a.url: 'nope' is not valid: write an http:// or https:// URL" in lines[0]
    assert "servers.b.headers" in lines[1]
    assert any(
        "servers.c.comand: 'x' is not valid: unknown setting; did you mean 'command'?" in line
        for line in lines
    )


def test_subscription_server_prefix_resolves_against_known_servers(tmp_path: Path) -> None:
    s = load(tmp_path, mcp_stdio=["memo=memo-server"], subscriptions=["memo:memo://notes", "file:///tmp/x"])
    assert [(x.server, x.uri) for x in s.subscriptions] == [("memo", "memo://notes"), (None, "file:///tmp/x")]


# -------------------------------------------------------------------- agentd check


def test_check_prints_effective_config_with_secrets_redacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    model = script_model(tmp_path)
    config = tmp_path / "agentd.toml"
    config.write_text(
        "budget_steps = 3\n"
        '[servers.api]\ncommand = "api-server"\nargs = ["--api-key", "sk-arg-secret", "--token=tok-secret"]\n'
        'env = { OPENAI_API_KEY = "sk-server-secret", LOG_LEVEL = "debug" }\n'
        '[servers.web]\nurl = "https://user:pw-secret@example.com/mcp?api_key=q-secret&page=1"\n'
        'headers = { Authorization = "Bearer hdr-secret", X-Trace = "on" }\n'
    )
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("AGENTD_BUDGET_TOKENS", "5000")
    code = cli.main(
        [
            "check",
            "--config",
            str(config),
            "--model",
            model,
            "--system",
            "key is sk-secret",
            "task",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    # An optional server whose command is not installed is a warning, not an error.
    assert err.splitlines() == [
        f"agentd: warning: server api ({config} [servers.api]) command: 'api-server' is not valid: "
        "it is not on PATH; install it, or give its full path"
    ]
    for secret in (
        "sk-secret",
        "sk-server-secret",
        "sk-arg-secret",
        "tok-secret",
        "pw-secret",
        "q-secret",
        "hdr-secret",
    ):
        assert secret not in out
    data = json.loads(out)
    assert list(data) == sorted(data)
    assert data["budget_steps"] == 3
    assert data["budget_tokens"] == 5000
    assert data["instruction"] == "task"
    assert data["system"] == "key is ***"
    api, web = data["servers"]["api"], data["servers"]["web"]
    # env and headers show their keys only, every value hidden (they are where credentials live).
    assert api["env"] == {"OPENAI_API_KEY": "***", "LOG_LEVEL": "***"}
    assert api["args"] == ["--api-key", "***", "--token=***"]
    assert web["headers"] == {"Authorization": "***", "X-Trace": "***"}
    assert web["url"] == "https://***@example.com/mcp?api_key=***&page=1"
    assert web["transport"] == "auto"


def test_check_show_secrets_prints_everything_as_configured(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = script_model(tmp_path)
    config = tmp_path / "agentd.toml"
    config.write_text(
        '[servers.db]\ncommand = "db-mcp"\nargs = ["--token", "tok-secret"]\n'
        'env = { DATABASE_URL = "postgres://u:pw-secret@db/x" }\n'
    )
    code = cli.main(["check", "--config", str(config), "--model", model, "--show-secrets", "t"])
    out, err = capsys.readouterr()
    assert code == 0, err
    db = json.loads(out)["servers"]["db"]
    assert db["env"] == {"DATABASE_URL": "postgres://u:pw-secret@db/x"}
    assert db["args"] == ["--token", "tok-secret"]


def test_effective_config_does_not_touch_settings(tmp_path: Path) -> None:
    s = load(tmp_path, mcp_stdio=["a=cmd --password hunter2"])
    assert effective_config(s, {})["servers"]["a"]["args"] == ["--password", "***"]
    assert s.servers["a"].args == ["--password", "hunter2"]


def test_check_exits_2_with_one_line_per_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("AGENTD_CONFIG", raising=False)
    code = cli.main(["check", "--mode", "foo", "--max-steps", "x", "--model", "nope"])
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    lines = err.splitlines()
    assert "agentd: --mode: 'foo' is not valid: choose one of once, loop, reactive, schedule" in lines
    assert "agentd: --max-steps: 'x' is not valid: must be a whole number ≥ 1" in lines
    # cross-field rules run once the fields are valid; the final line counts the two (rfcs/0321)
    assert len(lines) == 3
    assert lines[-1].startswith("agentd: error: 2 settings are not valid (each is named above) — fix: ")


def test_instruction_given_twice(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", "--instruction", "a", "b"]) == 2
    assert "INSTRUCTION: 'b' is not valid: give the instruction once" in capsys.readouterr().err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--no-such-flag"]) == 2
    # One line naming the flag (issue 27: no 24-line usage dump).
    assert capsys.readouterr().err == (
        "agentd: error: unknown option --no-such-flag — fix: agentd --help lists the options\n"
    )
    assert cli.main(["--help"]) == 0
    assert "--mcp-stdio" in capsys.readouterr().out


def test_examples_validate(monkeypatch: pytest.MonkeyPatch) -> None:
    repo = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(repo.parent)  # the paths the example reads resolve against its own folder
    s = load_settings({}, config_file=repo / "examples" / "agentd.toml", env={})
    assert s.mode == "reactive"
    assert sorted(s.servers) == ["docs", "inbox", "memo", "search"]  # "github" is disabled in mcp.json
    assert [r.name for r in s.routes] == ["notes", "inbox", "tick"]
    assert s.servers["docs"].headers == {"Authorization": "Bearer dev-token"}
    assert s.watch_state is not None
    assert not s.watch_state.exists() or s.watch_state.is_file()
