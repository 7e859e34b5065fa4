"""specinfer.api: the SpeculativeInference resource as pydantic v2 models, one source of truth.

The CRD (crds/specinfer.io_speculativeinferences.yaml) is generated from these models
(`specinfer crd`), CEL rules included; `parse_spec` applies the same rules plus the ones
CEL cannot express.
"""

from specinfer.api.effective import EffectiveSpeculation, effective_spec, effective_speculation, speculation_of
from specinfer.api.parse import InvalidSpecError, parse_resource, parse_spec
from specinfer.api.resource import (
    API_VERSION,
    CRD_NAME,
    GROUP,
    KIND,
    PLURAL,
    SHORT_NAMES,
    VERSION,
    SpeculativeInference,
)
from specinfer.api.spec import DraftModel, PromptLookup, ScheduleRange, Speculation, SpeculativeInferenceSpec
from specinfer.api.status import (
    AppliedConfig,
    Condition,
    Decision,
    EffectiveConfig,
    MetricsStatus,
    Recommendation,
    SpeculationChoice,
    SpeculativeInferenceStatus,
    TuningStatus,
)
from specinfer.api.tuning import DEFAULT_TUNING_MODE, Tuning
from specinfer.api.workload import Hardware, Model, Runtime, Simulator, SimulatorPhase

__all__ = [
    "API_VERSION", "CRD_NAME", "DEFAULT_TUNING_MODE", "GROUP", "KIND", "PLURAL", "SHORT_NAMES", "VERSION",
    "AppliedConfig", "Condition", "Decision", "DraftModel", "EffectiveConfig", "EffectiveSpeculation", "Hardware",
    "InvalidSpecError", "MetricsStatus", "Model", "PromptLookup", "Recommendation", "Runtime",
    "ScheduleRange", "Simulator", "SimulatorPhase", "SpeculationChoice", "Speculation", "SpeculativeInference",
    "SpeculativeInferenceSpec", "SpeculativeInferenceStatus", "Tuning", "TuningStatus",
    "effective_spec", "effective_speculation", "parse_resource", "parse_spec",
    "speculation_of",
]
