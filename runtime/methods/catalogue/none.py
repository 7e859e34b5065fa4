"""`none`: plain decoding, no speculative config at all (the baseline every method must beat).

It runs on every accelerator, with what each accelerator's module says it rests on there
(`Accelerator.plain_decoding`): calibrations and method auto measure it as their baseline, so an
accelerator brings it along rather than waiting for this module to list it.
"""

from specinfer.runtime.methods.accelerators import plain_decoding_cells
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
    accelerators=plain_decoding_cells(),
    simulator=NO_DRAFTS,
))
