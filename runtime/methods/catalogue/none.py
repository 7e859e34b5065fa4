"""`none`: plain decoding, no speculative config at all (the baseline every method must beat)."""

from specinfer.runtime.methods.accelerators import PLAIN
from specinfer.runtime.methods.registry import MethodSpec, register
from specinfer.runtime.methods.workloads import NO_DRAFTS

NONE = register(MethodSpec(
    name="none",
    vllm_method=None,
    draft_model="forbidden",
    no_draft_reason="method none does not speculate",
    drafter=None,
    cost_shape=None,
    k_min=0,
    k_max=0,
    k_default=0,
    summary="no speculation; the baseline",
    accelerators={"nvidia": PLAIN, "amd": PLAIN, "ascend": PLAIN, "cpu": PLAIN},  # plain decoding runs anywhere
    simulator=NO_DRAFTS,
))
