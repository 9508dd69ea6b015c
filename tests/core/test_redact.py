"""agentd.core.redact: the one redaction function, fuzzed with generated secrets in every shape it must hide."""

from __future__ import annotations

import json
import string
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentd.core.errors import ConfigError, ModelRequestError
from agentd.core.redact import (
    REDACTED,
    is_secret_flag,
    is_secret_key,
    looks_like_token,
    redact,
    register_secrets,
    registrable,
    secret_values,
    secrets_in,
)
from agentd.events import ServerState
from agentd.models._http import join_url
from agentd.observe.metrics import MetricsSnapshot, render
from agentd.observe.telemetry import Telemetry

SECRET_CHARS = string.ascii_letters + string.digits
# A letter and a digit in each: a generated secret must not be a word the output holds anyway.
secrets = st.text(alphabet=SECRET_CHARS, min_size=12, max_size=40).filter(
    lambda s: any(c.isdigit() for c in s) and any(c.isalpha() for c in s)
)
QUERY_NAMES = ["api-key", "api_key", "apikey", "key", "token", "access_token", "sig", "password", "secret",
               "X-Amz-Signature", "client_secret", "auth"]  # fmt: skip
FLAGS = ["-k", "--api-key", "--token", "--password", "--secret", "--github-token", "--auth-token", "--key"]
ENV_NAMES = ["GITHUB_TOKEN", "API_KEY", "STRIPE_SECRET_KEY", "PGPASSWORD", "OPENAI_API_KEY", "SLACK_BOT_TOKEN",
             "AUTH", "X-Api-Key", "Authorization"]  # fmt: skip
PREFIXES = ["ghp_", "gho_", "github_pat_", "sk-", "sk-ant-", "sk-proj-", "xoxb-", "xoxp-", "glpat-", "hf_"]


@pytest.mark.parametrize(
    "name",
    ["api_key", "X-Api-Key", "GITHUB_TOKEN", "token", "PGPASSWORD", "Authorization", "sig", "apiKey",
     "client_secret", "STRIPE_KEY", "access-key", "refresh_token", "Cookie"],
)  # fmt: skip
def test_credential_names(name: str) -> None:
    assert is_secret_key(name)


@pytest.mark.parametrize(
    "name",
    ["input_tokens", "max_tokens", "keyboard", "key", "monkey", "author", "session", "uri", "path",
     "token_endpoint_auth_method", "token_url", "bearer_token_env", "bearer_token_env_var", "password_file", "auth_type",
     "signature_header", "signature_prefix", "signature_encoding", "token_header", "secret_name"],
)  # fmt: skip
def test_names_that_are_not_credentials(name: str) -> None:
    assert not is_secret_key(name)


def test_flags() -> None:
    assert all(is_secret_flag(f) for f in FLAGS)
    assert not any(is_secret_flag(f) for f in ["--max-tokens", "-v", "--keyboard", "-", "token", "--author"])


@given(secret=secrets, user=secrets, name=st.sampled_from(QUERY_NAMES), prefix=st.sampled_from(PREFIXES))
def test_urls_lose_userinfo_and_secret_query_values(secret: str, user: str, name: str, prefix: str) -> None:
    for url in (
        f"https://{user}:{secret}@example.com:8443/v1?{name}={secret}",
        f"postgres://{user}:{secret}@db.internal/app",
        f"http://127.0.0.1/mcp?page=2&{name}={secret}#frag",
        f"wss://{secret}@host/x",
    ):
        out = redact(f"cannot reach {url}: ConnectError('refused')")
        assert secret not in out, out
        assert REDACTED in out
    kept = redact(f"https://example.com/v1?page={secret}")
    assert kept == f"https://example.com/v1?page={secret}"  # not a credential name: kept


@given(secret=secrets, flag=st.sampled_from(FLAGS), prefix=st.sampled_from(PREFIXES))
def test_arguments_lose_flag_values_and_token_shapes(secret: str, flag: str, prefix: str) -> None:
    args = ["server", flag, secret, f"{flag}={secret}x", "--verbose", f"{prefix}{secret}"]
    out = redact(args)
    assert all(secret not in a for a in out), out
    assert (out[0], out[1], out[-2]) == ("server", flag, "--verbose")
    text = redact(f"could not start 'server {flag} {secret} {flag}={secret}x {prefix}{secret}'")
    assert secret not in text, text


@given(secret=secrets, name=st.sampled_from(ENV_NAMES))
def test_named_values_in_text_json_and_mappings(secret: str, name: str) -> None:
    for text in (
        f"{name}={secret}",
        f"export {name}={secret} and run",
        f"{name}: {secret}",
        json.dumps({name: secret, "other": 1}),
        repr({name: secret}),
        f"Authorization: Bearer {secret}",
        f"headers: Basic {secret}",
    ):
        out = redact(text)
        assert secret not in out, (text, out)
    assert redact({name: secret, "nested": [{"password": secret}], "count": 3}) == {
        name: REDACTED,
        "nested": [{"password": REDACTED}],
        "count": 3,
    }


def test_registered_values_are_hidden_anywhere() -> None:
    # One fixed value: the registry is process-wide and append-only.
    secret = "registered-by-test-redact-0f3a"
    register_secrets([secret, "short"])
    assert redact(f"the server said: {secret}!") == f"the server said: {REDACTED}!"
    assert redact([f"x{secret}y"]) == [f"x{REDACTED}y"]
    assert redact("short stays") == "short stays"  # under MIN_REGISTERED_CHARS


@given(secret=secrets)
def test_extra_values_are_hidden_anywhere(secret: str) -> None:
    assert redact(f"the server said: {secret}!", extra=[secret]) == f"the server said: {REDACTED}!"
    assert redact({"a": [f"x{secret}y"]}, extra=[secret]) == {"a": [f"x{REDACTED}y"]}


@given(secret=secrets, user=secrets)
def test_secrets_in_finds_what_redact_hides(secret: str, user: str) -> None:
    assert secret in secrets_in(f"postgres://{user}:{secret}@db/x")
    assert secret in secrets_in(f"http://h/v1?api-key={secret}&x=1")
    assert secret in secrets_in(["srv", "-k", secret])
    assert secret in secrets_in([f"--token={secret}"])
    assert secret in secrets_in(f"Authorization: Bearer {secret}")
    env = {"DATABASE_URL": f"postgres://{user}:{secret}@db/x", "HOME": "/root"}
    assert secret in secret_values(env)
    assert "/root" not in secret_values(env)


@given(secret=secrets)
def test_errors_and_telemetry_are_redacted(secret: str) -> None:
    url = f"http://u:{secret}@h/v1?token={secret}"
    assert secret not in str(ConfigError("--mcp-http", f"x={url}", f"fix {url}"))
    assert secret not in str(ModelRequestError(f"404 from {url}", status=404, provider_message="m"))
    lines: list[str] = []

    class _Sink:
        def write(self, s: str) -> None:
            lines.append(s)

        def flush(self) -> None:
            pass

    Telemetry(_Sink()).emit("x.y", error=url, nested={"a": [url]}, exc=ValueError(url))  # type: ignore[arg-type]
    assert secret not in "".join(lines)


@given(secret=secrets)
def test_metric_labels_are_redacted(secret: str) -> None:
    uri = f"https://feed.example/items?token={secret}"
    text = render(
        MetricsSnapshot(
            server_state={"web": ServerState.CONNECTED}, subscription_state={("web", uri): "established"}
        )
    )
    assert secret not in text
    assert 'uri="https://feed.example/items?token=***"' in text


def test_ordinary_text_is_unchanged() -> None:
    for text in (
        "subagent.spawn agent a-3 role spawn route notes",
        "memo://notes",
        "server 'memo' did not answer tools/call 'get_note' within 30s (tool_timeout, or the server's timeout)",
        "--max-tokens: 'x' is not valid: must be a whole number ≥ 1",
        "MODIFIED key=todo new=milk",
        "export OPENAI_API_KEY=..., or point the base URL at a server that needs none",
        "file:///tmp/inbox/a.jsonl",
    ):
        assert redact(text) == text


@pytest.mark.parametrize(
    ("base", "path", "expected"),
    [
        ("https://api.openai.com/v1", "/chat/completions", "https://api.openai.com/v1/chat/completions"),
        ("https://h/v1/", "/chat/completions", "https://h/v1/chat/completions"),
        ("https://h/v1?api-key=K", "/chat/completions", "https://h/v1/chat/completions?api-key=K"),
        ("https://h/openai/deployments/d?api-version=2024-06-01", "/chat/completions",
         "https://h/openai/deployments/d/chat/completions?api-version=2024-06-01"),
        ("http://u:p@h:8080?key=K", "/v1/messages", "http://u:p@h:8080/v1/messages?key=K"),
        ("https://h/v1#frag", "/chat/completions", "https://h/v1/chat/completions"),
    ],
)  # fmt: skip
def test_join_url_appends_to_the_path_and_keeps_the_query(base: str, path: str, expected: str) -> None:
    assert join_url(base, path) == expected


# ------------------------------------------------------------------ what is registered (rfcs/0300)


def test_the_working_directory_is_no_credential() -> None:
    assert not is_secret_key("PWD")
    assert not is_secret_key("OLDPWD")
    assert is_secret_key("DB_PWD")
    assert is_secret_key("pwd")  # a field named pwd in data is a password
    assert secret_values({"PWD": "/home/u/src/agentd", "OLDPWD": "/home/u"}) == []
    assert redact("PWD=/home/u/src cwd") == "PWD=/home/u/src cwd"


@pytest.mark.parametrize(
    ("value", "registered"),
    [
        ("cursor", False),  # a plain word: it would mask cursor.py
        ("Bearer", False),
        ("OAUTH", False),
        ("/home/u/.config/gcloud/key.json", False),  # a path names where a secret is kept
        ("~/secrets/token.txt", False),
        ("abc", False),  # short
        ("sk-secret", True),  # the user said it is a key
        ("hunter2hunter", True),
        ("xKqPzLmNaBvC", True),  # mixed case: no word
        ("correcthorsebatterystaple", True),  # too long for a word
        ("/not a path/but text with spaces", True),
    ],
)
def test_only_values_that_can_be_told_from_text_are_registered(value: str, registered: bool) -> None:
    assert registrable(value) is registered


def test_a_generated_looking_value_under_any_name() -> None:
    assert looks_like_token("hcX9e2b1Qm4Rt7Zp0aLs")
    assert not looks_like_token("cursor")
    assert not looks_like_token("claude-code/2.1.3")  # a client and its version
    assert not looks_like_token("application/json; charset=utf-8")
    assert not looks_like_token("/var/lib/agentd/state/2024/file.json")


def test_server_headers_register_credentials_not_client_names(tmp_path: Path) -> None:
    from agentd.config import load_settings, server_secrets

    settings = load_settings(
        {"mcp_http": ["web=http://127.0.0.1:9/mcp"]},
        env={},
        run_inputs=False,
    )
    spec = settings.servers["web"].model_copy(
        update={
            "headers": {
                "X-Client": "cursor-editor",
                "X-Api-Key": "k-1234567",
                "X-Team": "hcX9e2b1Qm4Rt7Zp0aLs",
                "Authorization": "Bearer tok-abcdef12",
            }
        }
    )
    found = server_secrets(settings.model_copy(update={"servers": {"web": spec}}))
    assert "cursor-editor" not in found
    assert {"k-1234567", "hcX9e2b1Qm4Rt7Zp0aLs", "Bearer tok-abcdef12", "tok-abcdef12"} <= set(found)


def test_agent_ids_are_redacted_without_filling_the_cache() -> None:
    """A daemon's agent ids (``a10000`` on: 6 characters, one per agent) leave the cache as it was (rfcs/0355).

    Each id is in every line of its agent and never again: remembered, 4,096 of
    them (about 0.65 MiB) would be kept from agent 10,000 on, inside a long
    soak's measured window.
    """
    import tracemalloc

    from agentd.core import redact as redact_module

    ids = [f"a{n}" for n in range(10_000, 18_192)]
    redact("warm-up: the first call allocates what every call reuses")
    before = redact_module._cached_text.cache_info().currsize
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        for agent in ids:
            assert redact({"agent": agent, "session": agent, "n": 1}) == {
                "agent": agent,
                "session": agent,
                "n": 1,
            }
        grown = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    assert redact_module._cached_text.cache_info().currsize == before
    assert grown < 64 * 1024, f"{grown} bytes kept after {len(ids)} agent ids"


@given(st.text(alphabet=SECRET_CHARS, min_size=6, max_size=11), secrets)
def test_short_plain_strings_still_hide_registered_values(word: str, secret: str) -> None:
    """The short path for letters and digits alone hides what the full scan hides."""
    from agentd.core import redact as redact_module

    register_secrets([secret[:8]])
    for text in (word, secret[:8], word[:3] + secret[:8], "AKIA" + word[:8]):
        assert redact(text) == redact_module._text(text, ())
