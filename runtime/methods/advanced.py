"""`speculation.advanced`: the SpeculativeConfig fields a resource may set verbatim.

Keys are vLLM's own field names (snake_case), so users can paste from vLLM's docs. Fields
that a typed spec field owns are refused with a pointer to that field, so one value
cannot be set two ways. A contract test checks every key here is a field of
`SpeculativeConfig` in vLLM 0.33.0 and that each enum matches vLLM's Literal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

ValueKind = Literal["bool", "int", "number", "string", "enum", "numberList"]


@dataclass(frozen=True)
class AdvancedField:
    kind: ValueKind
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    methods: tuple[str, ...] = ()  # spec method names it applies to; empty = any method with a config


def _f(kind: ValueKind, *, minimum=None, maximum=None, choices=(), methods=()) -> AdvancedField:
    return AdvancedField(kind, minimum, maximum, tuple(choices), tuple(methods))


SUFFIX = ("suffix",)
ADVANCED_FIELDS: Mapping[str, AdvancedField] = MappingProxyType({
    "enforce_eager": _f("bool"),
    "draft_tensor_parallel_size": _f("int", minimum=1),
    "quantization": _f("string"),
    "moe_backend": _f("string"),
    "attention_backend": _f("string"),
    "kv_cache_dtype": _f("string"),
    "max_model_len": _f("int", minimum=1),
    "code_revision": _f("string"),
    "index_share_for_mtp_iteration": _f("bool", methods=("mtp",)),
    "disable_padded_drafter_batch": _f("bool"),
    "disable_eagle_block_drop": _f("bool"),
    "disable_lookahead_block_hashes": _f("bool"),
    "draft_lm_head_quantization": _f("enum", choices=("fp8", "nvfp4"), methods=("eagle", "eagle3", "mtp")),
    "use_local_argmax_reduction": _f("bool"),
    "use_heterogeneous_vocab": _f("bool", methods=("draftModel",)),
    "parallel_drafting": _f("bool", methods=("eagle", "eagle3", "draftModel", "dflash", "dspark")),
    "suffix_decoding_max_tree_depth": _f("int", minimum=1, methods=SUFFIX),
    "suffix_decoding_max_cached_requests": _f("int", minimum=0, methods=SUFFIX),
    "suffix_decoding_max_spec_factor": _f("number", minimum=0, methods=SUFFIX),
    "suffix_decoding_min_token_prob": _f("number", minimum=0, maximum=1, methods=SUFFIX),
    "rejection_sample_method": _f("enum", choices=("standard", "synthetic", "block", "fly")),
    "synthetic_acceptance_rates": _f("numberList", minimum=0, maximum=1),
    "synthetic_acceptance_length": _f("number", minimum=1),
    "draft_sample_method": _f("enum", choices=("greedy", "probabilistic")),
    "enable_adaptive_verification": _f("bool", methods=("dspark",)),
    "dspark_draft_topk": _f("int", minimum=1, methods=("dspark",)),
    "xpress_topc": _f("int", minimum=0, methods=("dflash",)),
    "fly_window_size": _f("int", minimum=1),
    "fly_entropy_threshold": _f("number", minimum=0),
    "fly_entropy_top_k": _f("int", minimum=1),
})

# SpeculativeConfig fields a typed spec field owns -> the spec field to use instead.
RESERVED_FIELDS: Mapping[str, str] = MappingProxyType({
    "method": "speculation.method",
    "model": "speculation.draftModel.name",
    "revision": "speculation.draftModel.revision",
    "num_speculative_tokens": "speculation.numSpeculativeTokens",
    "num_speculative_tokens_per_batch_size": "speculation.schedule",
    "prompt_lookup_min": "speculation.promptLookup.min",
    "prompt_lookup_max": "speculation.promptLookup.max",
})


def advanced_value_problem(key: str, value: Any) -> str | None:
    """Why `value` is not acceptable for advanced field `key`, or None when it is."""
    spec = ADVANCED_FIELDS[key]
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if spec.kind == "bool" and not isinstance(value, bool):
        return "must be true or false"
    if spec.kind == "int" and not (isinstance(value, int) and not isinstance(value, bool)):
        return "must be an integer"
    if spec.kind == "number" and not is_number:
        return "must be a number"
    if spec.kind == "string" and not isinstance(value, str):
        return "must be a string"
    if spec.kind == "enum" and value not in spec.choices:
        return f"must be one of {', '.join(spec.choices)}"
    if spec.kind == "numberList":
        if not isinstance(value, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            return "must be a list of numbers"
        values = value
    else:
        values = [value] if is_number and spec.kind in ("int", "number") else []
    for number in values:
        if spec.minimum is not None and number < spec.minimum:
            return f"must be >= {spec.minimum:g}"
        if spec.maximum is not None and number > spec.maximum:
            return f"must be <= {spec.maximum:g}"
    return None
