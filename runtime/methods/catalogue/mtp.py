"""`mtp`: the target's own multi-token-prediction layers (DeepSeek-V3, Qwen3-Next, GLM-4.5, ...).

No draft model: vLLM loads the MTP layers from the target checkpoint. A K above the
model's MTP layer count reuses layers (acceptance drops) and must be a multiple of it.
"""

from specinfer.runtime.methods.accelerators import AcceleratorSupport, everywhere
from specinfer.runtime.methods.registry import MethodSpec, register

MTP = register(MethodSpec(
    name="mtp",
    vllm_method="mtp",
    draft_model="forbidden",
    drafting="sequential",
    k_min=1,
    k_max=8,
    k_default=1,
    summary="target's built-in MTP layers; K above the layer count reuses layers",
    accelerators=everywhere(
        amd=AcceleratorSupport(caveats=("K > 1 fails on some AITER attention paths (vllm#28222); start with K = 1",)),
        cpu=AcceleratorSupport(caveats=("MTP models are large MoE models; CPU serving is impractical",)),
    ),
))
