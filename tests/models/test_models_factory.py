"""Model specs: parsing, validation without I/O, construction, and the public surface."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import agentd.models
from agentd.core.errors import ConfigError
from agentd.models import Model, ScriptModel, make_model, parse_model_spec, validate_model_spec
from agentd.models.anthropic import AnthropicModel
from agentd.models.openai import OpenAIModel


def test_public_surface_is_explicit() -> None:
    assert len(set(agentd.models.__all__)) == len(agentd.models.__all__)
    for name in agentd.models.__all__:
        assert hasattr(agentd.models, name), name


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("openai:gpt-4o-mini", ("openai", "gpt-4o-mini")),
        ("openai:llama3.1:8b", ("openai", "llama3.1:8b")),
        ("anthropic:claude-sonnet-4-5", ("anthropic", "claude-sonnet-4-5")),
        ("script:examples/scripts/hello.json", ("script", "examples/scripts/hello.json")),
    ],
)
def test_parse_good_specs(spec: str, expected: tuple[str, str]) -> None:
    assert parse_model_spec(spec) == expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("gpt-4o", r"^model: 'gpt-4o' is not valid: name the provider before the model, e.g\. openai:gpt-4o"),
        (
            "claude-3-haiku",
            r"e\.g\. anthropic:claude-3-haiku \(providers: openai, openai-responses, anthropic, azure, bedrock, "
            r"vertex, script\)",
        ),
        ("", r"^model: '' is not valid: name the provider before the model, e\.g\. openai:MODEL"),
        (
            "opneai:gpt-4o",
            r"unknown provider 'opneai'; did you mean openai:gpt-4o\? use one of openai, openai-responses, "
            r"anthropic, azure, bedrock, vertex, script",
        ),
        ("bedrok:x", r"unknown provider 'bedrok'; did you mean bedrock:x\? use one of openai"),
        ("local:x", r"unknown provider 'local'; use one of .* or declare it as \[providers\.NAME\]"),
        ("openai:", r"the model name after 'openai:' is empty"),
        ("anthropic:  ", r"the model name after 'anthropic:' is empty"),
        ("script:", r"the script file after 'script:' is empty"),
        ("openai: gpt-4o", r"the model name ' gpt-4o' has leading or trailing spaces; remove them"),
    ],
)
def test_bad_specs_name_the_fix(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        validate_model_spec(spec, {})
    assert (info.value.setting, info.value.value) == ("model", spec)


def test_default_public_endpoints_need_a_key() -> None:
    with pytest.raises(
        ConfigError, match=r"OPENAI_API_KEY is not set and https://api\.openai\.com/v1 needs a key"
    ):
        validate_model_spec("openai:gpt-4o", {})
    with pytest.raises(
        ConfigError, match=r"ANTHROPIC_API_KEY is not set and https://api\.anthropic\.com needs a key"
    ):
        validate_model_spec("anthropic:claude-x", {"ANTHROPIC_API_KEY": ""})
    validate_model_spec("openai:gpt-4o", {"OPENAI_API_KEY": "sk-1"})
    validate_model_spec("anthropic:claude-x", {"ANTHROPIC_API_KEY": "k"})


def test_local_servers_need_no_key() -> None:
    validate_model_spec("openai:qwen", {"OPENAI_BASE_URL": "http://localhost:11434/v1"})
    validate_model_spec("anthropic:claude-x", {"ANTHROPIC_BASE_URL": "http://127.0.0.1:8080"})


@pytest.mark.parametrize("url", ["localhost:11434/v1", "ftp://x/v1", "http://"])
def test_bad_base_url(url: str) -> None:
    with pytest.raises(ConfigError, match=rf"OPENAI_BASE_URL='{url}' is not an http\(s\) URL; set it like"):
        validate_model_spec("openai:m", {"OPENAI_BASE_URL": url})


def test_validate_script_reads_the_file(tmp_path: Path) -> None:
    good = tmp_path / "ok.json"
    good.write_text(json.dumps({"turns": [{"text": "hi"}]}))
    validate_model_spec(f"script:{good}", {})
    with pytest.raises(ConfigError, match=r"script file '.*missing\.json' does not exist"):
        validate_model_spec(f"script:{tmp_path / 'missing.json'}", {})


async def test_make_model_builds_each_provider(tmp_path: Path) -> None:
    script = tmp_path / "s.json"
    script.write_text('{"turns": []}')
    env = {"OPENAI_API_KEY": "sk", "ANTHROPIC_API_KEY": "ak", "OPENAI_BASE_URL": "http://h:1/v1/"}
    o = make_model("openai:m1", env=env)
    a = make_model("anthropic:m2", env=env)
    s = make_model(f"script:{script}", env=env)
    assert isinstance(o, OpenAIModel)
    assert (o.provider, o.name, o.url) == ("openai", "m1", "http://h:1/v1/chat/completions")
    assert isinstance(a, AnthropicModel)
    assert (a.provider, a.name, a.url, a.max_tokens) == (
        "anthropic",
        "m2",
        "https://api.anthropic.com/v1/messages",
        16384,
    )
    assert isinstance(s, ScriptModel)
    for m in (o, a, s):
        assert isinstance(m, Model)
        await m.aclose()


def test_make_model_rejects_bad_max_tokens() -> None:
    with pytest.raises(ConfigError, match=r"max_tokens: 0 is not valid: use a positive number of tokens"):
        make_model("openai:m", env={"OPENAI_API_KEY": "k"}, max_tokens=0)


def test_errors_never_echo_the_key() -> None:
    with pytest.raises(ConfigError) as info:
        validate_model_spec("openai:m", {"OPENAI_API_KEY": "sk-secret", "OPENAI_BASE_URL": "nope"})
    assert "sk-secret" not in str(info.value)


# --- azure, named providers, settings ---------------------------------------------------

AZ = {"AZURE_OPENAI_ENDPOINT": "https://res.openai.azure.com/", "AZURE_OPENAI_API_KEY": "az-key"}


@pytest.mark.parametrize(
    ("env", "url", "headers"),
    [
        (
            AZ,
            "https://res.openai.azure.com/openai/deployments/chat%2Fprod/chat/completions?api-version=2024-10-21",
            {"api-key": "az-key"},
        ),
        (
            {**AZ, "AZURE_OPENAI_AD_TOKEN": "entra", "OPENAI_API_VERSION": "2025-01-01-preview"},
            "https://res.openai.azure.com/openai/deployments/chat%2Fprod/chat/completions?api-version=2025-01-01-preview",
            {"authorization": "Bearer entra"},
        ),
        (
            {**AZ, "OPENAI_API_VERSION": "v1"},
            "https://res.openai.azure.com/openai/v1/chat/completions",
            {"api-key": "az-key"},
        ),
    ],
)
async def test_azure_urls_and_credentials(env: dict[str, str], url: str, headers: dict[str, str]) -> None:
    model = make_model("azure:chat/prod", env=env)
    assert isinstance(model, OpenAIModel)
    assert (model.provider, model.price_provider, model.url) == ("azure", "azure", url)
    assert model._headers == headers
    await model.aclose()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, r"azure: AZURE_OPENAI_ENDPOINT is not set"),
        (
            {"AZURE_OPENAI_ENDPOINT": "res.openai.azure.com"},
            r"AZURE_OPENAI_ENDPOINT='res\.openai\.azure\.com' is not an http\(s\) URL",
        ),
        (
            {"AZURE_OPENAI_ENDPOINT": "https://r"},
            r"azure: neither a key nor a token is set: export AZURE_OPENAI_API_KEY=\.\.\. .* or AZURE_OPENAI_AD_TOKEN",
        ),
    ],
)
def test_azure_configuration_errors(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        validate_model_spec("azure:prod", env)


async def test_named_providers_pick_their_wire_and_key() -> None:
    from agentd.models import ProviderConfig
    from agentd.models.responses import ResponsesModel

    providers = {
        "local": ProviderConfig(name="local", base_url="http://127.0.0.1:8000/v1"),
        "proxy": ProviderConfig(
            name="proxy",
            base_url="https://p/v1",
            api="responses",
            api_key_env="PROXY_KEY",
            headers={"X-A": "1"},
            prices="openai",
        ),
        "claude": ProviderConfig(name="claude", base_url="https://c", api="messages", api_key_env="C_KEY"),
    }
    env = {"PROXY_KEY": "pk", "C_KEY": "ck"}
    local = make_model("local:qwen2.5:7b", env=env, providers=providers)
    proxy = make_model("proxy:gpt-5", env=env, providers=providers)
    claude = make_model("claude:claude-x", env=env, providers=providers)
    assert isinstance(local, OpenAIModel)
    assert (local.name, local.provider, local.price_provider, local._headers) == (
        "qwen2.5:7b",
        "local",
        None,
        {},
    )
    assert isinstance(proxy, ResponsesModel)
    assert (proxy.url, proxy._headers) == (
        "https://p/v1/responses",
        {"authorization": "Bearer pk", "X-A": "1"},
    )
    assert isinstance(claude, AnthropicModel)
    assert claude._headers["x-api-key"] == "ck"
    for m in (local, proxy, claude):
        await m.aclose()
    with pytest.raises(
        ConfigError,
        match=r"\[providers\.proxy\] takes its key from PROXY_KEY, which is not set: export PROXY_KEY=\.\.\.",
    ):
        validate_model_spec("proxy:gpt-5", {}, providers=providers)
    round_trip = ProviderConfig.from_payload(providers["proxy"].to_payload())
    assert round_trip == providers["proxy"]


def test_settings_the_model_cannot_take_are_refused() -> None:
    from agentd.models import ModelSettings

    with pytest.raises(
        ConfigError, match=r"model_settings\.thinking_budget: 2048 is not valid: openai:m cannot take"
    ):
        make_model("openai:m", env={"OPENAI_API_KEY": "k"}, settings=ModelSettings(thinking_budget=2048))


def test_a_cloud_provider_without_its_extra_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name.startswith("anthropic") else real(name, *a)
    )
    with pytest.raises(
        ConfigError,
        match=r"bedrock: needs the optional SDK \(anthropic not installed\); install agentd's bedrock extra: "
        r"\S+ -m pip install 'anthropic\[bedrock\][<>=0-9.,]+' 'boto3[<>=0-9.,]+' 'botocore[<>=0-9.,]+'; "
        r"or from a clone, pipx install --force '\.\[bedrock\]' \(or pip install '\.\[bedrock\]'\)",
    ):
        validate_model_spec("bedrock:anthropic.claude-x", {"AWS_REGION": "us-east-1"})
