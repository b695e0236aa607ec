"""What a model call costs by the price table of ``assembly.yaml`` (``platform.models.prices``)."""

from __future__ import annotations

from berth.config.models.assembly import ModelPrice
from berth.models.protocol import Usage

__all__ = ["call_cost", "counted_tokens"]

PER_MILLION = 1_000_000


def counted_tokens(usage: Usage) -> int:
    """The tokens a call counts against a token budget: input + output + cache read + cache write."""
    return usage.input_tokens + usage.output_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens


def call_cost(price: ModelPrice | None, usage: Usage) -> float | None:
    """The call's cost in USD, or None when its model has no price (unknown, not free)."""
    if price is None:
        return None
    micro_dollars = (
        usage.input_tokens * price.input
        + usage.output_tokens * price.output
        + usage.cache_read_input_tokens * price.cache_read_price
        + usage.cache_creation_input_tokens * price.cache_write_price
    )
    return micro_dollars / PER_MILLION
