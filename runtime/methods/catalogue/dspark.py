"""`dspark`: DFlash-style parallel drafter with Markov and confidence heads.

The draft model is optional: DeepSeek-V4 checkpoints carry DSpark stages and vLLM then
reuses the target checkpoint. vLLM 0.33 implements DSpark only in Model Runner V2
(vllm/config/vllm.py), which needs Triton; the CPU platform falls back to V1 without it,
so the catalogue does not offer DSpark on CPU.
"""

from specinfer.runtime.methods.accelerators import AcceleratorSupport, everywhere
from specinfer.runtime.methods.registry import MethodSpec, register

DSPARK = register(MethodSpec(
    name="dspark",
    vllm_method="dspark",
    draft_model="optional",
    drafting="parallel",
    k_min=1,
    k_max=31,
    k_default=7,  # block size of the published Qwen3 drafts (deepseek-ai/dspark_qwen3_8b_block7)
    summary="parallel drafter with Markov + confidence heads; pairs with enable_adaptive_verification",
    accelerators={
        name: support
        for name, support in everywhere(
            amd=AcceleratorSupport(caveats=("DFlash-style drafter: if acceptance is low, try --attention-backend TRITON_ATTN",)),
        ).items()
        if name != "cpu"
    },
))
