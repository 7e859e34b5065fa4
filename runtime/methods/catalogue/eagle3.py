"""`eagle3`: an EAGLE-3 head fed with auxiliary hidden states from several target layers."""

from specinfer.runtime.methods.accelerators import AcceleratorSupport, everywhere
from specinfer.runtime.methods.registry import MethodSpec, register

# vllm#47854: with ROCm's default ROCM_ATTN backend EAGLE-3 acceptance collapses.
# ROCM_AITER_UNIFIED_ATTN is selectable explicitly even without VLLM_ROCM_USE_AITER
# (vllm/_aiter_ops.py), but needs a CDNA 3 or newer GPU (MI300 series and later).
ROCM_PIN = AcceleratorSupport(
    caveats=(
        "acceptance collapses with ROCm's default ROCM_ATTN attention backend (vllm#47854); "
        "pinned to ROCM_AITER_UNIFIED_ATTN, which needs a CDNA 3 or newer GPU (MI300X and later)",
    ),
    engine_args=("--attention-backend", "ROCM_AITER_UNIFIED_ATTN"),
)

EAGLE3 = register(MethodSpec(
    name="eagle3",
    vllm_method="eagle3",
    draft_model="required",
    drafting="sequential",
    k_min=1,
    k_max=16,
    k_default=3,
    summary="EAGLE-3 head on multi-layer hidden states (draft cost grows with K)",
    accelerators=everywhere(
        amd=ROCM_PIN,
        cpu=AcceleratorSupport(caveats=("runs on CPU in vLLM 0.33 but slowly; use a small target",)),
    ),
))
