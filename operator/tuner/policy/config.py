"""What the policy chooses: one draft length K, a Dynamic SD schedule of K per batch-size range, or off.

`DraftConfig` is the one type for a config wherever the tuner holds one (applied, recommended,
pending, rolled back). Its JSON form -- `{"numSpeculativeTokens": K, "schedule": [[start, end, k],
...] | null}` -- is the docs' stable interface (docs/tuner.md) and the shape stored in the policy
state; K = 0 means speculation is off.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator

from specinfer.runtime.methods.schedule import compress, effective_k

ScheduleEntry = tuple[int, int, int]


class DraftConfig(BaseModel):
    """A config the engine runs: K (the maximum when a schedule is set) and the schedule, if any."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

    num_speculative_tokens: int = Field(alias="numSpeculativeTokens", ge=0)
    schedule: tuple[ScheduleEntry, ...] | None = None

    @field_validator("schedule", mode="before")
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        return value or None

    @property
    def off(self) -> bool:
        return self.num_speculative_tokens == 0

    def dense(self, max_batch_size: int) -> list[int]:
        """Index b -> K the engine runs at batch size b (index 0 unused), vLLM semantics. Cached."""
        return list(_dense(self, max_batch_size))

    def same_as(self, other: DraftConfig | None, max_batch_size: int) -> bool:
        """Equal when the engine would run the same K at every batch size."""
        return other is not None and _dense(self, max_batch_size) == _dense(other, max_batch_size)

    def describe(self) -> str:
        if self.off:
            return "speculation off"
        if not self.schedule:
            return f"K={self.num_speculative_tokens}"
        return "schedule " + ", ".join(f"{s}-{e}:K={k}" for s, e, k in self.schedule)

    def to_json(self) -> dict[str, object]:
        return {"numSpeculativeTokens": self.num_speculative_tokens,
                "schedule": [list(entry) for entry in self.schedule] if self.schedule else None}

    @staticmethod
    def from_dense(dense: Sequence[int]) -> DraftConfig:
        """Smallest config that runs `dense`: off, a single K, or K = max plus a schedule."""
        ks = list(dense[1:])
        top = max(ks) if ks else 0
        if top == 0:
            return OFF
        if all(k == top for k in ks):
            return DraftConfig(num_speculative_tokens=top)
        return DraftConfig(num_speculative_tokens=top, schedule=tuple(compress(list(dense))))


OFF = DraftConfig(num_speculative_tokens=0)


@functools.lru_cache(maxsize=1024)
def _dense(config: DraftConfig, max_batch_size: int) -> tuple[int, ...]:
    k, schedule = config.num_speculative_tokens, config.schedule
    return (0, *(effective_k(b, k, schedule) for b in range(1, max_batch_size + 1)))
