"""Costs from the genai-prices database: known, unknown, cached tokens billed at their own rates."""

from __future__ import annotations

import pytest

from agentd.models.base import Usage
from agentd.models.pricing import (
    PRICE_PROVIDERS,
    has_price,
    known_provider_ids,
    price_call,
    price_provider_for,
    price_usd,
)


def test_a_known_model_has_a_price_and_caching_makes_it_cheaper() -> None:
    plain = price_usd("openai", "gpt-4o-mini", Usage(1_000_000, 0))
    cached = price_usd("openai", "gpt-4o-mini", Usage(1_000_000, 0, cached_input_tokens=1_000_000))
    assert plain is not None
    assert cached is not None
    assert 0 < cached < plain


def test_anthropic_cache_writes_cost_more_than_plain_input() -> None:
    plain = price_usd("anthropic", "claude-sonnet-4-5", Usage(1_000_000, 0))
    written = price_usd(
        "anthropic", "claude-sonnet-4-5", Usage(1_000_000, 0, cache_creation_input_tokens=1_000_000)
    )
    assert plain is not None
    assert written is not None
    assert written > plain


@pytest.mark.parametrize(
    ("provider", "model"),
    [
        ("openai", "no-such-model-xyz"),
        (None, "gpt-4o-mini"),
        ("no-such-provider", "gpt-4o-mini"),
        ("openai", ""),
    ],
)
def test_unknown_is_none(provider: str | None, model: str) -> None:
    assert price_usd(provider, model, Usage(10, 10)) is None
    assert not has_price(provider, model)


def test_price_call_tries_each_name() -> None:
    usage = Usage(1000, 100)
    assert price_call("openai", ("fake-model", "gpt-4o-mini"), usage) == price_usd(
        "openai", "gpt-4o-mini", usage
    )
    assert price_call("openai", (None, "no-such-model-xyz"), usage) is None


def test_every_built_in_provider_is_priced_by_a_known_database_id() -> None:
    known = set(known_provider_ids())
    for prefix, provider_id in PRICE_PROVIDERS.items():
        assert provider_id is None or provider_id in known, prefix
        assert price_provider_for(prefix) == provider_id
    assert price_provider_for("local") is None
