"""``bedrock:`` and ``vertex:`` through the official SDK, under trio, against loopback fakes.

The fakes check what the clouds check: Bedrock's request path and body and
an AWS Signature Version 4 over it (verified from the specification with
the test's static credentials), Vertex's path and a bearer token that the
SDK obtained through application default credentials: a service-account key
file whose JWT grant is verified by a loopback token endpoint. No network,
no mocks of the SDK: its own HTTP, signing and token refresh run, in worker
threads where the SDK puts them, under trio.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentd.core.errors import ModelAuthError, ModelRequestError
from agentd.models import Message, ModelSettings, Prompt, ToolSpec, make_model, validate_model_spec
from agentd.models.cloud import CloudAnthropicModel
from tests.fakes.provider_server import (
    GoogleTokenEndpoint,
    RecordedRequest,
    Reply,
    anthropic_reply,
    provider_server,
    sigv4_problem,
)

pytest.importorskip("anthropic")

KEY_ID = "AKIDEXAMPLE0000TEST1"
SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
REGION = "us-west-2"
BEDROCK_MODEL = "anthropic.claude-sonnet-4-5-20250929-v1:0"
VERTEX_MODEL = "claude-sonnet-4-5@20250929"

VERTEX_ENV = {"CLOUD_ML_REGION": "us-east5", "ANTHROPIC_VERTEX_PROJECT_ID": "agentd-test"}

ECHO = ToolSpec(name="memo__get", description="Read a memo.", input_schema={"type": "object"})


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Static test credentials; nothing from the machine's AWS config or instance metadata."""
    for var in ("AWS_PROFILE", "AWS_BEARER_TOKEN_BEDROCK", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def _bedrock_fake(replies: list[Reply], *, secret: str = SECRET) -> object:
    """Bedrock runtime: ``POST /model/{id}/invoke``, SigV4-signed, Anthropic body without ``model``."""

    def handle(request: RecordedRequest) -> Reply:
        problem = sigv4_problem(request, access_key=KEY_ID, secret_key=secret, region=REGION)
        if problem is not None:
            return Reply(403, {"message": f"The request signature we calculated does not match: {problem}"})
        return replies.pop(0)

    return handle


async def test_bedrock_signs_with_sigv4_and_speaks_invoke(
    aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    replies = [
        anthropic_reply("", tool_uses=[("toolu_1", "memo__get", {"key": "k"})], cache=(0, 40)),
        anthropic_reply("done", usage=(3, 2), cache=(40, 0)),
    ]
    async with provider_server(handler=_bedrock_fake(replies)) as server:  # type: ignore[arg-type]
        monkeypatch.setenv("ANTHROPIC_BEDROCK_BASE_URL", server.base_url)
        model = make_model(
            f"bedrock:{BEDROCK_MODEL}",
            env={"AWS_REGION": REGION},
            settings=ModelSettings(temperature=0.2, max_output_tokens=512),
        )
        assert isinstance(model, CloudAnthropicModel)
        transcript = [Message.user("read k")]
        first = await model.complete(Prompt(messages=transcript, system="be brief", tools=[ECHO]))
        transcript += [first.as_message(), Message.tool_result("toolu_1", "v")]
        second = await model.complete(Prompt(messages=transcript, system="be brief", tools=[ECHO]))
        await model.aclose()
    assert [(c.name, c.arguments) for c in first.tool_calls] == [("memo__get", {"key": "k"})]
    assert (second.text, second.stop) == ("done", "end")
    assert (second.usage.input_tokens, second.usage.cached_input_tokens) == (43, 40)
    assert second.cost_usd is not None
    assert second.cost_usd > 0
    first_req, second_req = server.requests
    assert (first_req.method, first_req.path) == ("POST", f"/model/{BEDROCK_MODEL}/invoke")
    assert first_req.headers["authorization"].startswith(f"AWS4-HMAC-SHA256 Credential={KEY_ID}/")
    body = second_req.json
    assert "model" not in body
    assert body["anthropic_version"]
    assert (body["max_tokens"], body["temperature"]) == (512, 0.2)
    assert body["system"] == [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}]
    assert body["messages"][1]["content"] == [
        {"type": "tool_use", "id": "toolu_1", "name": "memo__get", "input": {"key": "k"}}
    ]
    assert body["messages"][2]["content"][-1]["cache_control"] == {"type": "ephemeral"}


async def test_bedrock_wrong_secret_is_an_auth_error(aws_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # The endpoint knows another secret for this key id: the signature cannot match.
    async with provider_server(handler=_bedrock_fake([], secret="another-secret")) as server:  # type: ignore[arg-type]
        monkeypatch.setenv("ANTHROPIC_BEDROCK_BASE_URL", server.base_url)
        model = make_model(f"bedrock:{BEDROCK_MODEL}", env={"AWS_REGION": REGION})
        with pytest.raises(
            ModelAuthError, match=r"bedrock rejected the credentials \(HTTP 403\): The request sig"
        ):
            await model.complete(Prompt(messages=[Message.user("hi")]))
        await model.aclose()
    assert len(server.requests) == 1  # 403 is not retried


async def test_bedrock_unknown_model_is_a_request_error(
    aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    replies = [Reply(404, {"message": "The provided model identifier is invalid."})]
    async with provider_server(handler=_bedrock_fake(replies)) as server:  # type: ignore[arg-type]
        monkeypatch.setenv("ANTHROPIC_BEDROCK_BASE_URL", server.base_url)
        model = make_model("bedrock:anthropic.nope", env={"AWS_REGION": REGION})
        with pytest.raises(
            ModelRequestError,
            match=r"HTTP 404: The provided model identifier is invalid\..*check the model id",
        ):
            await model.complete(Prompt(messages=[Message.user("hi")]))
        await model.aclose()


def test_bedrock_needs_a_region() -> None:
    from agentd.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"bedrock: no AWS region: export AWS_REGION="):
        validate_model_spec(f"bedrock:{BEDROCK_MODEL}", {})
    with pytest.raises(ConfigError, match=r"vertex: no region: export CLOUD_ML_REGION="):
        validate_model_spec(f"vertex:{VERTEX_MODEL}", {})
    with pytest.raises(ConfigError, match=r"vertex: no project: export ANTHROPIC_VERTEX_PROJECT_ID="):
        validate_model_spec(f"vertex:{VERTEX_MODEL}", {"CLOUD_ML_REGION": "global"})


async def test_vertex_gets_a_token_through_adc_and_speaks_raw_predict(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    tokens = GoogleTokenEndpoint()
    replies = [anthropic_reply("hi from vertex", usage=(9, 3)), anthropic_reply("again", usage=(9, 3))]
    async with provider_server(handler=tokens.vertex(replies)) as server:
        key_file = tokens.service_account(tmp_path, server.url("/token"))
        for name, value in tokens.vertex_env(key_file, server.url("/v1"), "us-east5").items():
            monkeypatch.setenv(name, value)
        model = make_model(f"vertex:{VERTEX_MODEL}", env=VERTEX_ENV)
        first = await model.complete(Prompt(messages=[Message.user("hi")]))
        second = await model.complete(Prompt(messages=[Message.user("hi")]))
        await model.aclose()
    assert tokens.problems == []
    assert len(tokens.issued) == 1  # the token is reused until it expires
    assert (first.text, second.text) == ("hi from vertex", "again")
    assert first.cost_usd is not None  # priced as google
    calls = [r for r in server.requests if r.path != "/token"]
    assert calls[0].path == (
        f"/v1/projects/agentd-test/locations/us-east5/publishers/anthropic/models/{VERTEX_MODEL}:rawPredict"
    )
    assert calls[0].headers["authorization"] == f"Bearer {tokens.issued[0]}"
    assert "model" not in calls[0].json
    assert calls[0].json["anthropic_version"]


async def test_vertex_refused_token_is_an_auth_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    tokens = GoogleTokenEndpoint()
    async with provider_server(handler=tokens.vertex([])) as server:
        key_file = tokens.service_account(tmp_path, server.url("/token"))
        tokens.email = "someone-else@example.com"  # the endpoint now refuses this account's JWTs
        for name, value in tokens.vertex_env(key_file, server.url("/v1"), "us-east5").items():
            monkeypatch.setenv(name, value)
        model = make_model(f"vertex:{VERTEX_MODEL}", env=VERTEX_ENV)
        with pytest.raises(ModelAuthError, match=r"vertex: no usable credentials \(RefreshError"):
            await model.complete(Prompt(messages=[Message.user("hi")]))
        await model.aclose()
    assert [r.path for r in server.requests] == ["/token"]
