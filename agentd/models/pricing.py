"""The USD cost of one model call, from the ``genai-prices`` database.

agentd keeps no price table of its own: :func:`price_usd` asks ``genai-prices``
(a maintained database of model prices) for the price of the tokens a call
used, by the price database's provider id (``openai``, ``anthropic``,
``azure``, ``aws``, ``google``, …) and the model name (the name the provider
reported in its answer when there is one, since it is the most precise, e.g. a
dated snapshot). ``None`` means the price is unknown: a local model, a
deployment name the database does not know, or a provider agentd was told not
to price.

Token kinds (see :class:`agentd.models.base.Usage`): ``input_tokens`` is every
input token, read from the cache or written to it included;
``cached_input_tokens`` and ``cache_creation_input_tokens`` are billed at
their own rates (a cache read costs a fraction of an input token, a cache
write more than one).

Importing the database costs about 0.2 s, so it happens on first use, or in
the zygote before it forks (:func:`prewarm`).
"""

from __future__ import annotations

import warnings
from functools import lru_cache
from typing import Protocol

from agentd.models.base import Usage

#: Decimal places kept of a USD figure (a millionth of a cent).
COST_DECIMALS = 8


def price_usd(provider_id: str | None, model_ref: str, usage: Usage) -> float | None:
    """The cost of one call in USD, or ``None`` when ``genai-prices`` has no price for it.

    Args:
        provider_id: the price database's provider id; ``None``: do not price.
        model_ref: the model name to look up.
        usage: the tokens the call used.
    """
    if provider_id is None or not model_ref:
        return None
    try:
        from genai_prices import Usage as PriceUsage
        from genai_prices import calc_price
    except ImportError:  # not installed: every price is unknown
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = calc_price(
                PriceUsage(
                    input_tokens=usage.input_tokens,
                    output_tokens=usage.output_tokens,
                    cache_read_tokens=usage.cached_input_tokens or None,
                    cache_write_tokens=usage.cache_creation_input_tokens or None,
                ),
                model_ref,
                provider_id=provider_id,
            )
    except (LookupError, ValueError):
        return None
    return round(float(result.total_price), COST_DECIMALS)


def price_call(provider_id: str | None, models: tuple[str | None, ...], usage: Usage) -> float | None:
    """:func:`price_usd` by the first of ``models`` the database knows (e.g. the reported name, then the configured one)."""
    for model in models:
        if model:
            cost = price_usd(provider_id, model, usage)
            if cost is not None:
                return cost
    return None


@lru_cache(maxsize=256)
def has_price(provider_id: str | None, model_ref: str) -> bool:
    """Whether ``genai-prices`` knows a price for this model (no I/O; imports the database)."""
    if provider_id is None:
        return False
    return price_usd(provider_id, model_ref, Usage(1000, 1000)) is not None


#: The ``genai-prices`` provider id of each built-in provider (None: never priced).
PRICE_PROVIDERS: dict[str, str | None] = {
    "openai": "openai",
    "openai-responses": "openai",
    "azure": "azure",
    "anthropic": "anthropic",
    "bedrock": "aws",
    "vertex": "google",
    "script": None,
}


class PricedEndpoint(Protocol):
    """A ``[providers.NAME]`` table, as far as pricing reads it."""

    @property
    def prices(self) -> str | None:
        """The ``genai-prices`` provider id its calls are priced as (None: unknown)."""
        ...


def price_provider_for(prefix: str, named: PricedEndpoint | None = None) -> str | None:
    """The ``genai-prices`` provider id a model spec's calls are priced as (``named``: its ``[providers.NAME]``)."""
    if prefix in PRICE_PROVIDERS:
        return PRICE_PROVIDERS[prefix]
    return named.prices if named is not None else None


def known_provider_ids() -> tuple[str, ...]:
    """The price database's provider ids (for messages)."""
    try:
        from genai_prices import data_snapshot
    except ImportError:
        return ()
    return tuple(p.id for p in data_snapshot.get_snapshot().providers)


def prewarm() -> None:
    """Import the price database and build its lookup tables (done once, in the zygote)."""
    price_usd("openai", "gpt-4o-mini", Usage(1, 1))
