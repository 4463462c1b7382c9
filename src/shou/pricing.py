"""What model calls cost: a price table per model, in US dollars per million tokens.

The presets' default models have list prices here (as published when this table was written; providers
change them, so `[models."NAME"]` in shou.toml sets or overrides any model's: `input_price`,
`cached_input_price`, `output_price`; the same table's `context_window` is read by shou.context.tokens).
NAME is the model name sent to the provider. A model with no
price has an unknown cost, shown as unknown: never as zero, which would make a budget meaningless.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from .setting_tables import PRICE_KEYS
from .usage import Usage

__all__ = ["DEFAULT_PRICES", "PRICE_KEYS", "Price", "PriceTable"]



@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens. Without `cached_input`, cached prompt tokens are charged as input (an upper
    bound)."""

    input: float
    output: float
    cached_input: float | None = None

    def cost(self, usage: Usage) -> float:
        """The cost of `usage` at this price."""
        cached = min(usage.cached_tokens, usage.input_tokens)
        cached_price = self.input if self.cached_input is None else self.cached_input
        return ((usage.input_tokens - cached) * self.input + cached * cached_price
                + usage.output_tokens * self.output) / 1_000_000

    def worst_case(self, prompt_tokens: int, reply_tokens: int) -> float:
        """The most a call with this prompt and reply limit can cost (no prompt-cache discount)."""
        return (prompt_tokens * self.input + reply_tokens * self.output) / 1_000_000


# Standard (non-batch) list prices, USD per million tokens, of the provider presets' default models.
DEFAULT_PRICES: dict[str, Price] = {
    "gpt-4o-mini": Price(0.15, 0.60, 0.075),
    "gpt-4o": Price(2.50, 10.00, 1.25),
    "gpt-4.1-mini": Price(0.40, 1.60, 0.10),
    "deepseek-chat": Price(0.28, 0.42, 0.028),
    "deepseek-reasoner": Price(0.28, 0.42, 0.028),
    "qwen-plus": Price(0.40, 1.20),
}
# The bundled offline model runs on this machine: it costs nothing per token.
_FREE_PREFIXES = ("local:", "local")


class PriceTable:
    """The built-in prices with the user's `[models."NAME"]` entries over them."""

    def __init__(self, overrides: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.prices: dict[str, Price] = dict(DEFAULT_PRICES)
        for name, entry in (overrides or {}).items():
            if any(k in entry for k in PRICE_KEYS):  # a table may set only the model's context_window
                self.prices[name] = _merge(self.prices.get(name), entry, name)
        self._found: dict[str, Price | None] = {}  # every call is priced: look each name up once

    def lookup(self, model: str) -> Price | None:
        """The price of `model` (as sent to the provider): an exact entry, else the entry it is a dated
        version of (`gpt-4o-mini-2024-07-18`), else None (unknown)."""
        try:
            return self._found[model]
        except KeyError:
            price = self._found[model] = self._lookup(model)
            return price

    def _lookup(self, model: str) -> Price | None:
        price = self.prices.get(model)
        if price is not None:
            return price
        if model == "local" or model.startswith(_FREE_PREFIXES[0]):
            return Price(0.0, 0.0, 0.0)
        best = ""
        for name in self.prices:
            if len(name) > len(best) and model.startswith(name + "-") and model[len(name) + 1:][:1].isdigit():
                best = name
        return self.prices[best] if best else None

    def cost(self, model: str, usage: Usage) -> float | None:
        """What `usage` on `model` cost, or None when its price is unknown."""
        price = self.lookup(model)
        return None if price is None else price.cost(usage)


def _merge(base: Price | None, entry: Mapping[str, Any], name: str) -> Price:
    values = {k: float(v) for k, v in entry.items() if k in PRICE_KEYS}
    for key, value in values.items():
        if not 0 <= value < math.inf:  # a NaN price would turn every budget off, a negative one lower it
            raise ValueError(f'[models."{name}"] {key} must be a finite number of US dollars per million tokens, '
                             f"not {value}")
    if base is None:
        if "input_price" not in values or "output_price" not in values:
            raise ValueError(f'[models."{name}"] needs input_price and output_price (USD per million tokens)')
        return Price(values["input_price"], values["output_price"], values.get("cached_input_price"))
    changes: dict[str, float] = {}
    for key, field in zip(PRICE_KEYS, ("input", "cached_input", "output"), strict=True):
        if key in values:
            changes[field] = values[key]
    return replace(base, **changes)
