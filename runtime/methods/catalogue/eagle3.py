"""`eagle3`: an EAGLE-3 head fed with auxiliary hidden states from several target layers."""

from specinfer.runtime.methods.accelerators import AcceleratorSupport
from specinfer.runtime.methods.accelerators.evidence import (
    ASCEND_SOURCE,
    GPU_SOURCE,
    SEED_METHODS_ENGINE_TEST,
    ran_here,
)
from specinfer.runtime.methods.alert_bands import MODEL_DRAFTER
from specinfer.runtime.methods.drafter_fit import eagle3_fit
from specinfer.runtime.methods.drafters import (
    ASCEND_PROPOSER,
    BASE_PROPOSER_CPU,
    BASE_PROPOSER_V1,
    TARGET_DEPENDENT_AR_V2,
)
from specinfer.runtime.methods.drafting import drafting_key
from specinfer.runtime.methods.engines import (
    ASYNC_SCHEDULER_TRIMS_DRAFTS_0_26_0,
    BASE_PROPOSER_TAKES_K_CPU_0_32_0,
    V1_SCHEDULE_GATE_0_33_0,
    VLLM_0_33_0,
    VLLM_ASCEND_0_26_0RC1,
    VLLM_CPU_0_32_0,
    ScheduleOnV1,
)
from specinfer.runtime.methods.registry import MethodSpec, register
from specinfer.runtime.methods.workloads import SimulatorProfile

# vllm#47854: with ROCm's default ROCM_ATTN backend EAGLE-3 acceptance collapses.
# ROCM_AITER_UNIFIED_ATTN is selectable explicitly even without VLLM_ROCM_USE_AITER
# (vllm/_aiter_ops.py), but needs a CDNA 3 or newer GPU (MI300 series and later).
ROCM_PIN = AcceleratorSupport(
    GPU_SOURCE,
    caveats=(
        "acceptance collapses with ROCm's default ROCM_ATTN attention backend (vllm#47854); "
        "pinned to ROCM_AITER_UNIFIED_ATTN, which needs a CDNA 3 or newer GPU (MI300X and later)",
    ),
    engine_args=("--attention-backend", "ROCM_AITER_UNIFIED_ATTN"),
)

EAGLE3 = register(MethodSpec(
    name="eagle3",
    vllm_method="eagle3",
    draft_model="required",
    draft_hint="the EAGLE-3 head (e.g. yuhuili/EAGLE3-LLaMA3.1-Instruct-8B)",
    drafter="model",
    cost_shape="sequential",
    alert_band=MODEL_DRAFTER,
    auto_candidate=False,  # an EAGLE-3 head must match its target
    k_min=1,
    k_max=16,
    k_default=3,
    summary="EAGLE-3 head on multi-layer hidden states (draft cost grows with K)",
    accelerators={
        "nvidia": AcceleratorSupport(GPU_SOURCE),
        "amd": ROCM_PIN,
        "ascend": AcceleratorSupport(ASCEND_SOURCE),
        "cpu": AcceleratorSupport(ran_here(SEED_METHODS_ENGINE_TEST)),
    },
    schedule_on_v1={  # Model Runner V1 with a Dynamic SD schedule: the drafter takes the per-step K
        VLLM_0_33_0.label: ScheduleOnV1("honoured", V1_SCHEDULE_GATE_0_33_0),
        VLLM_CPU_0_32_0.label: ScheduleOnV1("honoured", BASE_PROPOSER_TAKES_K_CPU_0_32_0),
        VLLM_ASCEND_0_26_0RC1.label: ScheduleOnV1("honoured", ASYNC_SCHEDULER_TRIMS_DRAFTS_0_26_0),
    },
    drafting={
        drafting_key(VLLM_0_33_0, "v2"): TARGET_DEPENDENT_AR_V2,
        drafting_key(VLLM_0_33_0, "v1"): BASE_PROPOSER_V1,
        drafting_key(VLLM_CPU_0_32_0, "v1"): BASE_PROPOSER_CPU,
        drafting_key(VLLM_ASCEND_0_26_0RC1, "v1"): ASCEND_PROPOSER,
    },
    advanced_fields=("draft_lm_head_quantization", "parallel_drafting"),
    simulator=SimulatorProfile(acceptance={
        "chat": (0.80, 0.74, 0.71, 0.69, 0.67, 0.65),
        "code": (0.85, 0.80, 0.78, 0.76, 0.74, 0.72),
        "summarization": (0.74, 0.70, 0.67, 0.65, 0.63, 0.61),
        "math": (0.86, 0.82, 0.80, 0.78, 0.76, 0.74),
    }),
    drafter_fit=eagle3_fit,
))
