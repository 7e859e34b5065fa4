"""`dspark`: DFlash-style parallel drafter with Markov and confidence heads.

The draft model is optional: DeepSeek-V4 checkpoints carry DSpark stages and vLLM then
reuses the target checkpoint. vLLM implements DSpark only in Model Runner V2
(vllm/config/vllm.py, _get_v1_model_runner_unsupported_features), which needs Triton; the
CPU platform has none and runs V1 only, so DSpark is offered where V2 runs (registration
checks that against runs_on).
"""

from specinfer.runtime.methods.accelerators import PLAIN, AcceleratorSupport
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
    k_min=1,
    k_max=31,
    k_default=7,  # block size of the published Qwen3 drafts (deepseek-ai/dspark_qwen3_8b_block7)
    summary="parallel drafter with Markov + confidence heads; pairs with enable_adaptive_verification",
    accelerators={  # the platforms that run Model Runner V2 (not the CPU: registration checks runs_on)
        "nvidia": PLAIN,
        "amd": AcceleratorSupport(
            caveats=("DFlash-style drafter: if acceptance is low, try --attention-backend TRITON_ATTN",)),
        "ascend": PLAIN,
    },
    native_parallel_drafting=True,  # V2 runs its drafter in one pass (vllm/config/vllm.py, parallel_drafting)
    advanced_fields=("parallel_drafting", "enable_adaptive_verification", "dspark_draft_topk"),
    runs_on=("v2",),
    simulator=SimulatorProfile(acceptance={
        "chat": (0.80, 0.76, 0.74, 0.72, 0.71, 0.70, 0.69),
        "code": (0.90, 0.89, 0.88, 0.87, 0.86, 0.85, 0.84),
        "summarization": (0.78, 0.75, 0.73, 0.72, 0.71, 0.70, 0.69),
        "math": (0.94, 0.93, 0.92, 0.92, 0.91, 0.91, 0.90),
    }),
))
