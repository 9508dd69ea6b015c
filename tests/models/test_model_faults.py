"""Model providers misbehaving, through the real ``agentd`` command (cases M1-M5 in README.md).

Loopback fakes speak each provider's real wire format and then break it:
absurd usage figures, refused signatures and tokens, a zygote killed while it
imports a cloud SDK. agentd must end clearly (exit 4 with the reason) or carry
on with bounded figures; it never hangs, never crashes with a traceback, and
never prints a credential.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import psutil
import pytest
import trio

from agentd.core.exitcodes import ExitCode
from agentd.selfmcp.protocol import MAX_TOKENS_PER_CALL
from tests.fakes import provider_server as fake
from tests.support.agentd_proc import run_agentd

pytestmark = pytest.mark.fault

KEY_ID = "AKIDEXAMPLE0000FAULT"
SECRET = "fault-secret-wJalrXUtnFEMI-K7MDENG"
BEDROCK = "bedrock:anthropic.claude-sonnet-4-5-20250929-v1:0"


def _env(**extra: str) -> dict[str, str]:
    return {"OPENAI_API_KEY": "", "ANTHROPIC_API_KEY": "", **extra}


def _aws(tmp_path: Path, base_url: str) -> dict[str, str]:
    return _env(
        AWS_ACCESS_KEY_ID=KEY_ID,
        AWS_SECRET_ACCESS_KEY=SECRET,
        AWS_REGION="us-east-1",
        AWS_EC2_METADATA_DISABLED="true",
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
        ANTHROPIC_BEDROCK_BASE_URL=base_url,
    )


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_m1_absurd_usage_figures_are_bounded_and_the_run_goes_on(provider: str) -> None:
    if provider == "openai":
        hostile = fake.openai_reply("ok", usage=(10**15, -5), cached_tokens=10**18)
        env = {"OPENAI_API_KEY": "sk-test"}
        spec = "openai:gpt-4o-mini"
    else:
        hostile = fake.anthropic_reply("ok", usage=(-3, 10**16), cache=(10**14, -7))
        env = {"ANTHROPIC_API_KEY": "sk-ant-test"}
        spec = "anthropic:claude-sonnet-4-5"
    async with fake.provider_server([hostile]) as srv:
        base = {
            "openai": {"OPENAI_BASE_URL": srv.url("/v1")},
            "anthropic": {"ANTHROPIC_BASE_URL": srv.base_url},
        }
        async with run_agentd(["--model", spec, "hi"], env=_env(**env, **base[provider])) as a:
            assert await a.wait_exit() == 0, a.tail()
    [call] = a.find("model.call")
    assert 0 <= call["cached_input_tokens"] + call["cache_creation_input_tokens"] <= call["input_tokens"]
    assert call["input_tokens"] <= MAX_TOKENS_PER_CALL
    assert 0 <= call["output_tokens"] <= MAX_TOKENS_PER_CALL
    assert not a.find("subagent.exit", lambda e: e.get("reason"))  # no protocol violation
    assert a.out.strip() == "ok"


@pytest.mark.slow  # the zygote imports the SDK first (2-4 s)
async def test_m2_bedrock_refusing_the_signature_is_exit_4_without_the_secret(tmp_path: Path) -> None:
    def refuse(request: fake.RecordedRequest) -> fake.Reply:
        # The endpoint knows another secret for this key id.
        problem = fake.sigv4_problem(
            request, access_key=KEY_ID, secret_key="another-secret", region="us-east-1"
        )
        return fake.Reply(
            403, {"message": f"The request signature we calculated does not match ({problem})."}
        )

    async with (
        fake.provider_server(handler=refuse) as srv,
        run_agentd(["--model", BEDROCK, "--output", "json", "hi"], env=_aws(tmp_path, srv.base_url)) as a,
    ):
        assert await a.wait_exit(60) == ExitCode.FATAL_INFRA, a.tail()
    assert len(srv.requests) == 1  # refused credentials are not retried
    fatal = a.find("model.fatal")[0]["error"]
    assert "bedrock rejected the credentials (HTTP 403): The request signature we calculated" in fatal
    assert "check the AWS credentials" in fatal
    everything = "\n".join(a.raw_stderr) + a.out
    assert SECRET not in everything
    assert "Traceback" not in everything


async def test_m3_vertex_token_refused_is_exit_4_naming_the_credentials(tmp_path: Path) -> None:
    tokens = fake.GoogleTokenEndpoint()
    async with fake.provider_server(handler=tokens) as srv:
        key_file = tokens.service_account(tmp_path, srv.url("/token"))
        tokens.email = "not-this-account@example.com"  # every grant is now refused (invalid_grant)
        env = _env(**tokens.vertex_env(key_file, srv.url("/v1"), "us-east5"))
        async with run_agentd(["--model", "vertex:claude-sonnet-4-5@20250929", "hi"], env=env) as a:
            assert await a.wait_exit(60) == ExitCode.FATAL_INFRA, a.tail()
    fatal = a.find("model.fatal")[0]["error"]
    assert fatal.startswith("vertex: no usable credentials (RefreshError")
    assert "GOOGLE_APPLICATION_CREDENTIALS" in fatal
    assert {r.path for r in srv.requests} == {"/token"}  # no model request without a token
    assert "PRIVATE KEY" not in "\n".join(a.raw_stderr)


@pytest.mark.slow  # the zygote imports the SDK first (2-4 s)
async def test_m4_empty_aws_profile_is_an_auth_error_not_a_crash(tmp_path: Path) -> None:
    async with fake.provider_server(handler=lambda _r: fake.anthropic_reply("unreachable")) as srv:
        env = {**_aws(tmp_path, srv.base_url), "AWS_PROFILE": "no-such-profile"}
        async with run_agentd(["--model", BEDROCK, "hi"], env=env) as a:
            assert await a.wait_exit(60) == ExitCode.FATAL_INFRA, a.tail()
    assert srv.requests == []
    assert "bedrock: no usable credentials (ProfileNotFound" in a.find("model.fatal")[0]["error"]


@pytest.mark.slow  # the replacement zygote and the fresh child each import the SDK (seconds)
async def test_m5_zygote_sigkilled_while_importing_the_sdk_the_run_still_completes(tmp_path: Path) -> None:
    replies = [fake.anthropic_reply("signed and answered")]

    def bedrock(request: fake.RecordedRequest) -> fake.Reply:
        problem = fake.sigv4_problem(request, access_key=KEY_ID, secret_key=SECRET, region="us-east-1")
        return fake.Reply(403, {"message": problem}) if problem else replies.pop(0)

    async with fake.provider_server(handler=bedrock) as srv:
        await _kill_the_zygote_at_start(srv.base_url, tmp_path)
    assert len(srv.requests) == 1


async def _kill_the_zygote_at_start(base_url: str, tmp_path: Path) -> None:
    # A once root is forked from the supervisor (rfcs/0185): this case needs the zygote path.
    env = {**_aws(tmp_path, base_url), "AGENTD_ONCE_PREFORK": "0"}
    async with run_agentd(["--model", BEDROCK, "hi"], env=env) as a:
        await a.wait_event("supervisor.start")
        killed = None
        with trio.fail_after(30):
            while killed is None:  # the zygote appears right after start; its SDK import takes seconds
                for proc in psutil.Process(a.proc.pid).children(recursive=True):
                    with contextlib.suppress(psutil.Error):  # a helper that just exited
                        if "agentd.agent.zygote" in " ".join(proc.cmdline()):
                            os.kill(proc.pid, signal.SIGKILL)
                            killed = proc.pid
                            break
                else:
                    await a._changed.wait()
        assert await a.wait_exit(90) == 0, a.tail()
    assert a.out.strip() == "signed and answered"
    assert a.find("zygote.degraded") or a.find("subagent.spawn_fallback")
