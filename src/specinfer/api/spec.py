"""`SpeculativeInferenceSpec`: the whole desired state a user writes."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic.config import JsonDict

from specinfer.api.adaptive_rules import adaptive_verification_rules
from specinfer.api.base import ApiModel, Rule, no_server_default
from specinfer.api.catalogue_rules import accelerator_rules, cel_method_is_not
from specinfer.api.speculation import DraftModel, PromptLookup, ScheduleRange, Speculation
from specinfer.api.tuning import Tuning
from specinfer.api.workload import Hardware, Model, Runtime
from specinfer.runtime.methods import methods_without_drafts

__all__ = ["DraftModel", "PromptLookup", "ScheduleRange", "Speculation", "SpeculativeInferenceSpec"]

# Objects that default to {} so the API server fills in their own defaults (and CEL can read them).
EMPTY_OBJECT_DEFAULT: JsonDict = {"default": {}}


class SpeculativeInferenceSpec(ApiModel):
    """A vLLM deployment with speculative decoding, validated against the method x hardware catalogue."""

    model: Model
    """Target model to serve."""
    speculation: Speculation
    """Speculative-decoding method, draft model and draft length."""
    hardware: Hardware = Field(default_factory=Hardware, json_schema_extra=EMPTY_OBJECT_DEFAULT)
    """Accelerator family, devices per replica and placement."""
    runtime: Runtime = Field(default_factory=Runtime, json_schema_extra=EMPTY_OBJECT_DEFAULT)
    """Engine (vllm or simulator) and container settings."""
    replicas: int = Field(default=1, ge=0, le=128)
    """Number of engine pods (leave replica autoscaling to an HPA or KEDA)."""
    update_strategy: Literal["Surge", "Replace"] = Field(default="Surge", json_schema_extra=no_server_default)
    """How pods restart on a change. Surge (default): each new pod starts before its old one stops, so
    no capacity is lost while the model reloads; needs room for one extra pod (its accelerators).
    Replace: an old pod stops before its replacement starts, for clusters with no spare accelerator;
    each restart loses one replica's capacity for the model reload (all of it with one replica)."""
    tuning: Tuning = Field(default_factory=Tuning, json_schema_extra=EMPTY_OBJECT_DEFAULT)
    """Automatic draft-length tuning from Prometheus metrics."""

    rules = (
        *accelerator_rules(),
        *adaptive_verification_rules(),
        Rule(
            cel="self.tuning.mode != 'auto' || "
            + cel_method_is_not(methods_without_drafts(), "self.speculation.method"),
            message="spec.tuning.mode auto needs a speculative method: set spec.speculation.method, "
            "or use tuning mode observe or off",
            check=lambda s: s.tuning.mode != "auto" or s.speculation.method not in methods_without_drafts(),
            field="tuning.mode",
        ),
    )
