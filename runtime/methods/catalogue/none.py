"""`none`: plain decoding, no speculative config at all (the baseline every method must beat)."""

from specinfer.runtime.methods.accelerators import AcceleratorSupport
from specinfer.runtime.methods.accelerators.evidence import (
    ASCEND_SOURCE,
    CALIBRATION_ENGINE_TEST,
    GPU_SOURCE,
    TUNING_ENGINE_TEST,
    ran_here,
)
from specinfer.runtime.methods.registry import MethodSpec, register
from specinfer.runtime.methods.workloads import NO_DRAFTS

NONE = register(MethodSpec(
    name="none",
    vllm_method=None,
    draft_model="forbidden",
    no_draft_reason="method none does not speculate",
    drafter=None,
    cost_shape=None,
    k_min=0,
    k_max=0,
    k_default=0,
    summary="no speculation; the baseline",
    accelerators={  # plain decoding runs anywhere
        "nvidia": AcceleratorSupport(GPU_SOURCE),
        "amd": AcceleratorSupport(GPU_SOURCE),
        "ascend": AcceleratorSupport(ASCEND_SOURCE),
        "cpu": AcceleratorSupport(ran_here(TUNING_ENGINE_TEST, CALIBRATION_ENGINE_TEST)),
    },
    simulator=NO_DRAFTS,
))
