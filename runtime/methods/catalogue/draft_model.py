"""`draftModel`: a separate small model sharing the target's tokenizer (vLLM `draft_model`)."""

from specinfer.runtime.methods.accelerators import AcceleratorSupport, everywhere
from specinfer.runtime.methods.registry import MethodSpec, register

DRAFT_MODEL = register(MethodSpec(
    name="draftModel",
    vllm_method="draft_model",
    draft_model="required",
    drafting="sequential",
    k_min=1,
    k_max=16,
    k_default=4,
    summary="independent small draft model with the same tokenizer (draft cost grows with K)",
    accelerators=everywhere(
        cpu=AcceleratorSupport(caveats=("runs on CPU in vLLM 0.33 but slowly; use tiny models",)),
    ),
))
