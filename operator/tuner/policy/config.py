"""What the policy chooses: one draft length K, a Dynamic SD schedule of K per batch-size range, or off.

`DraftConfig` is the one type for a config wherever the tuner holds one (applied, recommended,
pending, rolled back). Its JSON form -- `{"numSpeculativeTokens": K, "schedule": [[start, end, k],
...] | null}`, and `"adaptiveVerification": true` while vLLM's adaptive verification is on -- is the
docs' stable interface (docs/tuner.md) and the shape stored in the policy state; K = 0 means
speculation is off.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, field_validator, model_serializer

from specinfer.runtime.methods.schedule import compress, effective_k

ScheduleEntry = tuple[int, int, int]


class AdaptiveDense(list[int]):
    """K per batch size (index 0 unused) of an engine with vLLM's adaptive verification on: each step drafts
    the K and verifies only the drafts vLLM's rule admits (policy/adaptive.py). The objective reads it so."""


def differs_at(a: Sequence[int], b: Sequence[int], batch_size: int) -> bool:
    """Two configs' dense forms run differently at `batch_size`: another K, or adaptive verification on in one
    only (the same K verified another way is a change to measure and verify like any other)."""
    return a[batch_size] != b[batch_size] or isinstance(a, AdaptiveDense) != isinstance(b, AdaptiveDense)


class DraftConfig(BaseModel):
    """A config the engine runs: K (the maximum when a schedule is set), the schedule, if any, and whether
    vLLM verifies adaptively (`speculation.advanced.enable_adaptive_verification`)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

    num_speculative_tokens: int = Field(alias="numSpeculativeTokens", ge=0)
    schedule: tuple[ScheduleEntry, ...] | None = None
    adaptive_verification: bool = Field(default=False, alias="adaptiveVerification")

    @field_validator("schedule", mode="before")
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        return value or None

    @model_serializer(mode="wrap")
    def _adaptive_only_when_on(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The JSON forms name adaptive verification only while it is on (stored states and decisions of
        before read the same)."""
        data: dict[str, Any] = handler(self)
        if not self.adaptive_verification:
            data.pop("adaptiveVerification", None)
            data.pop("adaptive_verification", None)
        return data

    @property
    def off(self) -> bool:
        return self.num_speculative_tokens == 0

    def dense(self, max_batch_size: int) -> list[int]:
        """Index b -> K the engine runs at batch size b (index 0 unused), vLLM semantics (an `AdaptiveDense`
        with adaptive verification on). Cached."""
        ks = _dense(self, max_batch_size)
        return AdaptiveDense(ks) if self.adaptive else list(ks)

    @property
    def adaptive(self) -> bool:
        """vLLM verifies adaptively: speculating, with adaptive verification on."""
        return self.adaptive_verification and not self.off

    def same_as(self, other: DraftConfig | None, max_batch_size: int) -> bool:
        """Equal when the engine would run the same K at every batch size, verifying the same way."""
        return (other is not None and self.adaptive == other.adaptive
                and _dense(self, max_batch_size) == _dense(other, max_batch_size))

    def describe(self) -> str:
        if self.off:
            return "speculation off"
        adaptive = " with adaptive verification" if self.adaptive else ""
        if not self.schedule:
            return f"K={self.num_speculative_tokens}{adaptive}"
        return "schedule " + ", ".join(f"{s}-{e}:K={k}" for s, e, k in self.schedule) + adaptive

    def to_json(self) -> dict[str, object]:
        return {"numSpeculativeTokens": self.num_speculative_tokens,
                "schedule": [list(entry) for entry in self.schedule] if self.schedule else None,
                **({"adaptiveVerification": True} if self.adaptive else {})}

    @staticmethod
    def from_dense(dense: Sequence[int]) -> DraftConfig:
        """Smallest config that runs `dense`: off, a single K, or K = max plus a schedule; with adaptive
        verification where `dense` is an `AdaptiveDense`."""
        ks = list(dense[1:])
        top = max(ks) if ks else 0
        if top == 0:
            return OFF
        adaptive = isinstance(dense, AdaptiveDense)
        if all(k == top for k in ks):
            return DraftConfig(num_speculative_tokens=top, adaptive_verification=adaptive)
        return DraftConfig(num_speculative_tokens=top, schedule=tuple(compress(list(dense))),
                           adaptive_verification=adaptive)


OFF = DraftConfig(num_speculative_tokens=0)


@functools.lru_cache(maxsize=1024)
def _dense(config: DraftConfig, max_batch_size: int) -> tuple[int, ...]:
    k, schedule = config.num_speculative_tokens, config.schedule
    return (0, *(effective_k(b, k, schedule) for b in range(1, max_batch_size + 1)))
