"""The pre-fork model rehearsal: each wire API's round trip completes (``rehearse`` itself hides any error)."""

from __future__ import annotations

import pytest

from agentd.models import rehearsal


@pytest.mark.parametrize(
    ("spec", "api", "env_prefix"),
    [("openai:gpt-4o-mini", "chat", "OPENAI"), ("anthropic:claude-sonnet-4-5", "messages", "ANTHROPIC")],
)
async def test_one_rehearsal_round_trip_completes(spec: str, api: str, env_prefix: str) -> None:
    # Raises if the call, its request or the parsing of the loopback answer breaks.
    await rehearsal._one(spec, api, env_prefix)
