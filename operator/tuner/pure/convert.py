"""Between the API's status types (method + K + schedule entries) and the policy's `DraftConfig`. Pure."""

from __future__ import annotations

from specinfer.api.adaptive_rules import adaptive_on
from specinfer.api.spec import SpeculativeInferenceSpec
from specinfer.api.status import ScheduleEntry, SpeculationChoice
from specinfer.operator.tuner.policy import DraftConfig


def config_of(choice: SpeculationChoice, spec: SpeculativeInferenceSpec | None = None) -> DraftConfig:
    """The policy's view of a status choice (an unset K reads as 0: off). An unset adaptiveVerification is
    what `spec` says (status.tuning.applied leaves it unset where the tuner kept the spec's: adaptive_choice)."""
    schedule = tuple((e.min_batch_size, e.max_batch_size, e.num_speculative_tokens) for e in choice.schedule or ())
    adaptive = choice.adaptive_verification
    if adaptive is None:
        adaptive = spec is not None and adaptive_on(spec)
    return DraftConfig(num_speculative_tokens=choice.num_speculative_tokens or 0, schedule=schedule or None,
                       adaptive_verification=adaptive is True)


def schedule_entries(config: DraftConfig) -> list[ScheduleEntry] | None:
    if not config.schedule:
        return None
    return [ScheduleEntry(min_batch_size=s, max_batch_size=e, num_speculative_tokens=k) for s, e, k in config.schedule]


def adaptive_choice(spec: SpeculativeInferenceSpec | None, config: DraftConfig) -> bool | None:
    """status.tuning.applied's adaptiveVerification for `config`: unset where it is what the spec says (or
    speculation is off), so an applied config reads as before unless the tuner turned it on or off."""
    if config.off or spec is None or config.adaptive == adaptive_on(spec):
        return None
    return config.adaptive
