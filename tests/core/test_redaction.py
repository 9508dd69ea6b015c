"""Fault catalog: credentials never leave agentd, whatever path formats the message.

Hypothesis generates the secrets; each example runs the real ``agentd``
command with them placed where users put credentials: URL userinfo and
``?api-key=`` / ``?token=`` / ``?sig=`` query parameters (``--mcp-http``,
``OPENAI_BASE_URL``), ``-k VALUE`` / ``--api-key VALUE`` / ``--token=VALUE``
server arguments, server ``env`` values (``DATABASE_URL=postgres://u:pw@…``)
and ``Authorization: Bearer`` headers. Then every path that formats an error
or prints the configuration runs:

* ``agentd check`` (the effective configuration);
* configuration errors (exit 2);
* at run time: a stdio server that prints its arguments and environment to
  stderr and exits (its stderr tail is part of ``upstream.connect_failed``),
  an HTTP server that cannot be reached (``upstream.connect_failed``,
  ``server.state``), and a provider that answers 404 and echoes the key and
  the password it was sent (``model.fatal``, the once JSON result).

No secret may appear anywhere on stdout or stderr. Also here: a base URL with
a query string keeps it on the request (``/v1/chat/completions?api-key=…``).
"""

from __future__ import annotations

import json
import os
import string
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentd.core.exitcodes import ExitCode
from tests.fakes.provider_server import (
    RecordedRequest,
    Reply,
    anthropic_reply,
    openai_error,
    openai_reply,
    provider_server,
    provider_server_thread,
    unused_port,
)
from tests.support.agentd_proc import PY, REPO, agentd_cmd, run_agentd, script
from tests.support.leftovers import tagged_env

pytestmark = pytest.mark.fault

#: Examples per path: each runs the real command (about half a second per start).
FAST_EXAMPLES = 5
#: Examples of the full run (zygote, servers, provider: a few seconds each).
RUN_EXAMPLES = 3

_FUZZ = settings(
    max_examples=FAST_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# A letter and a digit in each: a generated secret must not be a word the output holds anyway.
_secret = st.text(alphabet=string.ascii_letters + string.digits, min_size=12, max_size=32).filter(
    lambda s: any(c.isdigit() for c in s) and any(c.isalpha() for c in s)
)


@dataclass(frozen=True)
class Secrets:
    """Eight distinct generated credentials and where they go."""

    values: tuple[str, ...]
    query_name: str
    flag: str
    eq_flag: str
    env_name: str

    def __getitem__(self, i: int) -> str:
        return self.values[i]


secrets_st = st.builds(
    Secrets,
    values=st.lists(_secret, min_size=8, max_size=8, unique_by=str.lower).map(tuple),
    query_name=st.sampled_from(["api-key", "api_key", "token", "access_token", "sig", "key", "password"]),
    flag=st.sampled_from(["-k", "--api-key", "--token", "--password", "--github-token"]),
    eq_flag=st.sampled_from(["--token", "--api-key", "--secret", "--auth-token"]),
    env_name=st.sampled_from(["GITHUB_TOKEN", "API_KEY", "STRIPE_SECRET_KEY", "PGPASSWORD"]),
)


def _leaks(s: Secrets, *texts: str) -> list[str]:
    joined = "\n".join(texts)
    return [v for v in s.values if v in joined]


def _mcp_config(tmp: Path, s: Secrets, *, loud: bool = False) -> Path:
    """An mcpServers file whose server carries secrets in args and env (and prints them all if ``loud``)."""
    code = (
        "import os, sys; print(sys.argv, dict(os.environ), file=sys.stderr); sys.exit(3)" if loud else "pass"
    )
    path = tmp / "mcp.json"
    path.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "db": {
                        "command": PY,
                        "args": ["-c", code, s.flag, s[0], f"{s.eq_flag}={s[1]}", "--verbose"],
                        "env": {
                            "DATABASE_URL": f"postgres://app:{s[2]}@db.internal:5432/app",
                            s.env_name: s[3],
                            "LOG_LEVEL": "debug",
                        },
                    }
                }
            }
        )
    )
    return path


def _http_server(s: Secrets, port: int) -> str:
    return f"web=http://bot:{s[4]}@127.0.0.1:{port}/mcp?{s.query_name}={s[5]}&page=1"


def _agentd(args: list[str], tmp: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        agentd_cmd(*args),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**os.environ, **tagged_env(tmp, **env)},
        check=False,
    )


# ------------------------------------------------------------------ agentd check


@_FUZZ
@given(s=secrets_st)
def test_check_output_shows_keys_never_credentials(tmp_path: Path, s: Secrets) -> None:
    config = tmp_path / "agentd.toml"
    config.write_text(
        f"[servers.api]\nurl = {json.dumps(f'https://api.example/mcp?{s.query_name}={s[6]}')}\n"
        f"headers = {{ Authorization = {json.dumps('Bearer ' + s[7])}, X-Trace = 'on' }}\n"
    )
    result = _agentd(
        [
            "check", "--config", str(config), "--mcp-config", str(_mcp_config(tmp_path, s)),
            "--mcp-http", _http_server(s, 9), "--model", "openai:gpt-fake", "--system", f"the key is {s[3]}",
            "task",
        ],
        tmp_path,
        OPENAI_BASE_URL=f"http://u:{s[4]}@127.0.0.1:9/v1?api-key={s[5]}",
        OPENAI_API_KEY=s[6],
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert _leaks(s, result.stdout, result.stderr) == []
    shown = json.loads(result.stdout)["servers"]
    assert shown["db"]["env"] == {"DATABASE_URL": "***", s.env_name: "***", "LOG_LEVEL": "***"}
    assert shown["db"]["args"][2:] == [s.flag, "***", f"{s.eq_flag}=***", "--verbose"]
    assert shown["api"]["headers"] == {"Authorization": "***", "X-Trace": "***"}
    assert shown["web"]["url"] == f"http://***@127.0.0.1:9/mcp?{s.query_name}=***&page=1"


def test_check_show_secrets_prints_them(tmp_path: Path) -> None:
    s = Secrets(tuple(f"secretvalue{i:04d}" for i in range(8)), "token", "-k", "--token", "API_KEY")
    result = _agentd(
        ["check", "--show-secrets", "--mcp-config", str(_mcp_config(tmp_path, s)), "--model",
         script(tmp_path, [{"text": "x"}]), "task"],
        tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert _leaks(s, result.stdout) == [s[0], s[1], s[2], s[3]]


# ------------------------------------------------------------------ configuration errors


@_FUZZ
@given(s=secrets_st)
def test_configuration_errors_exit_2_without_credentials(tmp_path: Path, s: Secrets) -> None:
    # Server specs are parsed first; each message quotes the value it refuses.
    servers = _agentd(
        [
            "--mcp-http", f"web=ftp://bot:{s[0]}@files.example/mcp?{s.query_name}={s[1]}",
            "--mcp-stdio", f"bad name=server {s.flag} {s[2]} {s.eq_flag}={s[3]}",
            "--model", "openai:gpt-fake", "task",
        ],
        tmp_path,
    )  # fmt: skip
    # Then the settings: a flag and an AGENTD_ variable; last, the provider's base URL.
    settings_ = _agentd(
        ["--health-addr", f"http://u:{s[4]}@0.0.0.0:8080", "--model", "openai:gpt-fake", "task"],
        tmp_path,
        AGENTD_MAX_STEPS=f"token={s[7]}",
    )
    model = _agentd(
        ["--model", "openai:gpt-fake", "task"],
        tmp_path,
        OPENAI_BASE_URL=f"ftp://u:{s[5]}@127.0.0.1/v1?api-key={s[6]}",
    )
    for result, names in [
        (servers, ["--mcp-http web.url", "--mcp-stdio bad name"]),
        (settings_, ["--health-addr", "AGENTD_MAX_STEPS"]),
        (model, ["OPENAI_BASE_URL"]),
    ]:
        assert result.returncode == ExitCode.CONFIG, result.stderr
        assert result.stdout == ""
        assert _leaks(s, result.stderr) == []
        for name in names:
            assert name in result.stderr
        assert "***" in result.stderr


# ------------------------------------------------------------------ run time: servers and provider


@pytest.mark.slow
@settings(
    max_examples=RUN_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(s=secrets_st)
def test_connect_failures_and_provider_errors_never_print_credentials(tmp_path: Path, s: Secrets) -> None:
    def echo_404(req: RecordedRequest) -> Reply:
        # A provider that quotes what it was sent: the key in the query and the userinfo password.
        return openai_error(
            404,
            f"The model `gpt-fake` does not exist (request {req.path}, key {s[5]}, "
            f"auth {req.headers.get('authorization')}, password {s[4]})",
            code="model_not_found",
        )

    with provider_server_thread([echo_404]) as srv:
        result = _agentd(
            [
                "--mcp-config", str(_mcp_config(tmp_path, s, loud=True)),
                "--mcp-http", _http_server(s, unused_port()),
                "--model", "openai:gpt-fake", "--output", "json", "task",
            ],
            tmp_path,
            OPENAI_BASE_URL=f"http://u:{s[4]}@127.0.0.1:{srv.port}/v1?api-key={s[5]}",
            OPENAI_API_KEY=f"sk-{s[6]}",
            AGENTD_RECONNECT_BACKOFF="0.1",
        )  # fmt: skip
    assert result.returncode == ExitCode.FATAL_INFRA, result.stderr[-3000:]
    assert _leaks(s, result.stdout, result.stderr) == []
    events = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    failed = {e["server"]: e["error"] for e in events if e["event"] == "upstream.connect_failed"}
    # The paths ran: the server's own stderr (argv and environment) and the unreachable URL are quoted.
    assert "exited with status 3" in failed["db"]
    assert "its stderr ends with" in failed["db"]
    assert "***" in failed["db"]
    assert "unreachable at http://***@127.0.0.1" in failed["web"]
    (fatal,) = [e for e in events if e["event"] == "model.fatal"]
    assert "HTTP 404" in fatal["error"]
    assert "does not exist" in fatal["error"]
    assert json.loads(result.stdout)["error"]["message"] == fatal["error"]


# ------------------------------------------------------------------ base URL with a query string


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_base_url_query_string_stays_on_the_request(tmp_path: Path, provider: str) -> None:
    if provider == "openai":
        reply, base, path = (
            openai_reply("ok"),
            "/v1?api-version=2024-06-01&api-key=qk-0123456789",
            "/v1/chat/completions",
        )
        model, var = "openai:gpt-fake", "OPENAI_BASE_URL"
    else:
        reply, base, path = anthropic_reply("ok"), "/proxy?key=qk-0123456789", "/proxy/v1/messages"
        model, var = "anthropic:claude-fake", "ANTHROPIC_BASE_URL"
    async with provider_server([reply]) as srv:
        env = tagged_env(tmp_path, **{var: srv.base_url + base, f"{provider.upper()}_API_KEY": "k"})
        async with run_agentd(["--model", model, "question"], env=env) as a:
            assert await a.wait_exit() == ExitCode.OK, a.tail()
    assert a.out.strip() == "ok"
    query = base.split("?", 1)[1]
    assert srv.requests[0].path == f"{path}?{query}"
    assert "qk-0123456789" not in "\n".join(a.raw_stderr)
