"""`dflash`: block-diffusion drafter; one non-causal pass drafts the whole block."""

from specinfer.runtime.methods.accelerators import AcceleratorSupport, everywhere
from specinfer.runtime.methods.registry import MethodSpec, register

# vllm#53323: DFlash acceptance collapses with ROCM_ATTN. The drafter needs non-causal
# attention, which ROCM_AITER_UNIFIED_ATTN lacks (supports_non_causal() is False in
# vLLM 0.33), so the pin is TRITON_ATTN.
ROCM_PIN = AcceleratorSupport(
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
    drafting="parallel",
    k_min=1,
    k_max=31,
    k_default=15,  # the published b16 drafters (e.g. z-lab/Qwen3-8B-DFlash-b16) draft 15 tokens
    summary="block-diffusion drafter; draft cost about flat in K",
    accelerators=everywhere(
        amd=ROCM_PIN,
        cpu=AcceleratorSupport(caveats=("runs on CPU in vLLM 0.33 (CPU_ATTN is non-causal capable) but slowly",)),
    ),
))
