"""`suffix`: suffix-tree decoding over the prompt and past responses (Arctic Inference)."""

from specinfer.runtime.methods.accelerators import AcceleratorSupport, everywhere
from specinfer.runtime.methods.registry import MethodSpec, register

NEEDS_ARCTIC = "needs the arctic-inference package in the image (vLLM raises ImportError without it)"

SUFFIX = register(MethodSpec(
    name="suffix",
    vllm_method="suffix",
    draft_model="forbidden",
    drafting="none",
    k_min=1,
    k_max=32,
    k_default=24,  # vLLM's own default: suffix_decoding_max_tree_depth
    summary="suffix-tree lookup over prompts and past responses; K is an upper bound",
    accelerators=everywhere(
        nvidia=AcceleratorSupport(caveats=(NEEDS_ARCTIC, "runs on Model Runner V1 (vLLM falls back automatically)")),
        amd=AcceleratorSupport(caveats=(NEEDS_ARCTIC,)),
        ascend=AcceleratorSupport(caveats=(NEEDS_ARCTIC,)),
        cpu=AcceleratorSupport(caveats=(NEEDS_ARCTIC,)),
    ),
))
