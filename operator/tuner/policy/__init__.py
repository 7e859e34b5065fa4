"""The tuning policy, pure: `decide(Observation, TuningInput, PolicyState | None, now) -> (Decision, PolicyState)`.

No I/O, no clock, no randomness; JSON only at the edges (`decide_json`, `PolicyState.to_json`,
`tuning_from_json`). docs/tuner.md documents the JSON forms, which are the stable interface.
"""

from .config import OFF, DraftConfig
from .decide import decide, decide_json
from .decision import CHANGES, Decision, Degradation, ModelSummary, Recommendation
from .inputs import CostPrior, Slo, TuningInput, tuning_from_json
from .observation import AppliedConfig, Observation, ObservationError, StepSample, parse_observation
from .state import PolicyState

__all__ = [
    "CHANGES", "OFF", "AppliedConfig", "CostPrior", "Decision", "Degradation", "DraftConfig", "ModelSummary",
    "Observation", "ObservationError", "PolicyState", "Recommendation", "Slo", "StepSample", "TuningInput",
    "decide", "decide_json", "parse_observation", "tuning_from_json",
]
