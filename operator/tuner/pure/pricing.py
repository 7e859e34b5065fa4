"""What a resource's tokens cost, from the prices in the operator configuration. Pure.

Cost per million generated tokens = what the replicas cost per hour / the tokens they generated
per hour (measured by the tuning loop over its window), so idle capacity is part of the price of
a token, as on the bill. The last change's saving comes from the tuner's realised gain: the
measured goodput change of the config in force against the config it replaced, per second of
engine time. At the same utilisation the old config needed (1 + gain) times the engine time for
the same tokens, so it cost (1 + gain) times as much per token. The saving is money only when the
freed capacity is used (more traffic on the same replicas, or fewer replicas); at low load a faster
config buys latency instead. docs/observability.md, "Cost".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specinfer.api.status import CostStatus
from specinfer.operator.pure.config import CostConfig

SECONDS_PER_HOUR = 3600.0
TOKENS_PER_UNIT = 1e6  # prices are per million tokens, as model APIs quote them


@dataclass(frozen=True)
class Cost:
    currency: str
    price_per_hour: float  # all replicas
    per_million_tokens: float | None  # None: no tokens measured (idle, or no metrics yet)
    last_change_saving_per_million_tokens: float | None  # > 0 saved, < 0 the change made tokens dearer

    def to_status(self) -> CostStatus:
        """status.cost (rounded: a millionth of the currency is below any bill's precision)."""
        return CostStatus(currency=self.currency, price_per_hour=round(self.price_per_hour, 6),
                          per_million_tokens=_rounded(self.per_million_tokens),
                          last_change_saving_per_million_tokens=_rounded(self.last_change_saving_per_million_tokens))

    @classmethod
    def from_status(cls, status: CostStatus) -> Cost:
        return cls(status.currency, status.price_per_hour, status.per_million_tokens,
                   status.last_change_saving_per_million_tokens)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _finite(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def price_per_replica_hour(prices: CostConfig, *, accelerator: str, product: str | None, devices: int) -> float | None:
    """The product's price if it has one, else the family's; per device, except cpu: per replica."""
    price = prices.products.get(product) if product else None
    if price is None:
        price = prices.accelerators.get(accelerator)
    if price is None:
        return None
    return price if accelerator == "cpu" else price * max(1, devices)


def cost_per_million_tokens(price_per_hour: float, tokens_per_second: object) -> float | None:
    """Price of all replicas per hour / millions of tokens they generated in that hour."""
    rate = _finite(tokens_per_second)
    if rate is None or rate <= 0:
        return None
    return price_per_hour / (rate * SECONDS_PER_HOUR / TOKENS_PER_UNIT)


def last_change_saving(per_million_tokens: float | None, realised_gain: object) -> float | None:
    """Cost per million tokens at the replaced config's speed minus the cost now."""
    gain = _finite(realised_gain)
    if per_million_tokens is None or gain is None or gain <= -1:
        return None
    return per_million_tokens * gain


def resource_cost(prices: CostConfig, *, accelerator: str, product: str | None, devices: int, replicas: object,
                  tokens_per_second: object, realised_gain: object) -> Cost | None:
    """None when no price applies to this hardware (then status shows no cost at all)."""
    per_replica = price_per_replica_hour(prices, accelerator=accelerator, product=product, devices=devices)
    count = _finite(replicas)
    if per_replica is None or count is None or count < 0:
        return None
    hourly = per_replica * count
    per_million = cost_per_million_tokens(hourly, tokens_per_second)
    return Cost(prices.currency, hourly, per_million, last_change_saving(per_million, realised_gain))
