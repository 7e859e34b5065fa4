"""Between the API's status types (method + K + schedule entries) and the policy's `DraftConfig`. Pure."""

from __future__ import annotations

from specinfer.api.status import ScheduleEntry, SpeculationChoice
from specinfer.operator.tuner.policy import DraftConfig


def config_of(choice: SpeculationChoice) -> DraftConfig:
    """The policy's view of a status choice (an unset K reads as 0: off)."""
    schedule = tuple((e.min_batch_size, e.max_batch_size, e.num_speculative_tokens) for e in choice.schedule or ())
    return DraftConfig(num_speculative_tokens=choice.num_speculative_tokens or 0, schedule=schedule or None)


def schedule_entries(config: DraftConfig) -> list[ScheduleEntry] | None:
    if not config.schedule:
        return None
    return [ScheduleEntry(min_batch_size=s, max_batch_size=e, num_speculative_tokens=k) for s, e, k in config.schedule]
