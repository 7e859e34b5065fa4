"""`ngram`: prompt lookup -- drafts by matching the last n tokens earlier in the context."""

from specinfer.runtime.methods.accelerators import everywhere
from specinfer.runtime.methods.registry import MethodSpec, register

NGRAM = register(MethodSpec(
    name="ngram",
    vllm_method="ngram",
    draft_model="forbidden",
    drafting="none",
    k_min=1,
    k_max=16,
    k_default=4,
    summary="prompt lookup; no model, wins on repetitive workloads (code edits, RAG, summaries)",
    accelerators=everywhere(),
))
