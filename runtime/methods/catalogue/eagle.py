"""`eagle`: an EAGLE-1 head drafting autoregressively on the target's last hidden state."""

from specinfer.runtime.methods.accelerators import AcceleratorSupport, everywhere
from specinfer.runtime.methods.registry import MethodSpec, register

EAGLE = register(MethodSpec(
    name="eagle",
    vllm_method="eagle",
    draft_model="required",
    drafting="sequential",
    k_min=1,
    k_max=16,
    k_default=3,
    summary="EAGLE head (draft cost grows with K)",
    accelerators=everywhere(
        cpu=AcceleratorSupport(caveats=("runs on CPU in vLLM 0.33 but slowly; use a small target",)),
    ),
))
