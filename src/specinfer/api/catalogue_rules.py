"""CEL + Python rules generated from the method catalogue, so admission follows the catalogue.

Adding a method or changing its bounds changes these rules and therefore the generated
CRD; tests/unit/test_api_crd.py fails until crds/ is regenerated.
"""

from __future__ import annotations

from specinfer.api.base import Rule
from specinfer.runtime.methods import ACCELERATORS, all_methods
from specinfer.runtime.methods.accelerators import ASCEND_MAX_K

DRAFT_HINTS = {
    "eagle": "the EAGLE head (e.g. yuhuili/EAGLE-LLaMA3.1-Instruct-8B)",
    "eagle3": "the EAGLE-3 head (e.g. yuhuili/EAGLE3-LLaMA3.1-Instruct-8B)",
    "draftModel": "a small model that shares the target's tokenizer",
    "dflash": "the DFlash drafter (e.g. z-lab/Qwen3-8B-DFlash-b16)",
}
NO_DRAFT_REASONS = {
    "none": "method none does not speculate",
    "mtp": "mtp drafts with the target model's own MTP layers",
    "ngram": "ngram drafts by prompt lookup, without a model",
    "suffix": "suffix drafts from a suffix tree, without a model",
}


def _cel_list(values) -> str:
    return "[" + ", ".join(f"'{value}'" for value in values) + "]"


def draft_model_rules() -> list[Rule]:
    rules = []
    for method in all_methods():
        name = method.name
        if method.draft_model == "required":
            rules.append(Rule(
                cel=f"self.method != '{name}' || has(self.draftModel)",
                message=f"spec.speculation.draftModel is required for method {name}: "
                f"set spec.speculation.draftModel.name to {DRAFT_HINTS.get(name, 'the draft weights')}",
                check=lambda s, name=name: s.method != name or s.draft_model is not None,
                field="draftModel",
            ))
        elif method.draft_model == "forbidden":
            rules.append(Rule(
                cel=f"self.method != '{name}' || !has(self.draftModel)",
                message=f"spec.speculation.draftModel must not be set for method {name} "
                f"({NO_DRAFT_REASONS.get(name, 'it uses no draft model')}): remove spec.speculation.draftModel",
                check=lambda s, name=name: s.method != name or s.draft_model is None,
                field="draftModel",
            ))
    return rules


def num_speculative_tokens_rules() -> list[Rule]:
    rules = []
    for method in all_methods():
        name, low, high = method.name, method.k_min, method.k_max
        if high == 0:
            message = (f"spec.speculation.numSpeculativeTokens must be 0 or unset for method {name}: "
                       "choose a speculative method to draft tokens")
        else:
            message = (f"spec.speculation.numSpeculativeTokens must be between {low} and {high} for method {name}: "
                       f"omit it to use the default {method.k_default}")
        rules.append(Rule(
            cel=f"self.method != '{name}' || !has(self.numSpeculativeTokens) || "
            f"(self.numSpeculativeTokens >= {low} && self.numSpeculativeTokens <= {high})",
            message=message,
            check=lambda s, name=name, low=low, high=high: s.method != name
            or s.num_speculative_tokens is None
            or low <= s.num_speculative_tokens <= high,
            field="numSpeculativeTokens",
        ))
    return rules


def advanced_key_rules() -> list[Rule]:
    from specinfer.api.advanced import method_restriction_rules

    return [
        Rule(
            cel="!has(self.advanced) || self.method != 'none'",
            message="spec.speculation.advanced has no effect with method none: remove it or choose a speculative method",
            check=lambda s: s.advanced is None or s.method != "none",
            field="advanced",
        ),
        *method_restriction_rules(),
    ]


def accelerator_rules() -> list[Rule]:
    """Spec-level rules: method x accelerator support and the Ascend draft-length cap."""
    rules = []
    for method in all_methods():
        unsupported = [name for name in ACCELERATORS if not method.supports(name)]
        if not unsupported:
            continue
        supported = ", ".join(name for name in ACCELERATORS if method.supports(name))
        rules.append(Rule(
            cel=f"self.speculation.method != '{method.name}' || !(self.hardware.accelerator in {_cel_list(unsupported)})",
            message=f"spec.speculation.method {method.name} is not supported on spec.hardware.accelerator "
            f"{' or '.join(unsupported)} with vLLM 0.33: choose accelerator {supported} or another method "
            "(specinfer methods lists them)",
            check=lambda s, m=method.name, u=tuple(unsupported): s.speculation.method != m or s.hardware.accelerator not in u,
            field="hardware.accelerator",
        ))
    rules.append(Rule(
        cel="self.hardware.accelerator != 'ascend' || !has(self.speculation.numSpeculativeTokens) || "
        f"self.speculation.numSpeculativeTokens + 1 <= {ASCEND_MAX_K + 1}",
        message=f"spec.speculation.numSpeculativeTokens must be at most {ASCEND_MAX_K} on spec.hardware.accelerator "
        f"ascend (vllm-ascend verifies at most K + 1 = {ASCEND_MAX_K + 1} tokens per step): lower it",
        check=lambda s: s.hardware.accelerator != "ascend"
        or s.speculation.num_speculative_tokens is None
        or s.speculation.num_speculative_tokens + 1 <= ASCEND_MAX_K + 1,
        field="speculation.numSpeculativeTokens",
    ))
    rules.append(Rule(
        cel="self.hardware.accelerator != 'ascend' || !has(self.tuning.maxNumSpeculativeTokens) || "
        f"self.tuning.maxNumSpeculativeTokens + 1 <= {ASCEND_MAX_K + 1}",
        message=f"spec.tuning.maxNumSpeculativeTokens must be at most {ASCEND_MAX_K} on spec.hardware.accelerator "
        f"ascend (K + 1 <= {ASCEND_MAX_K + 1}): lower it",
        check=lambda s: s.hardware.accelerator != "ascend"
        or s.tuning.max_num_speculative_tokens is None
        or s.tuning.max_num_speculative_tokens + 1 <= ASCEND_MAX_K + 1,
        field="tuning.maxNumSpeculativeTokens",
    ))
    for method in all_methods():
        if method.k_max == 0:
            continue
        rules.append(Rule(
            cel=f"self.speculation.method != '{method.name}' || !has(self.tuning.maxNumSpeculativeTokens) || "
            f"self.tuning.maxNumSpeculativeTokens <= {method.k_max}",
            message=f"spec.tuning.maxNumSpeculativeTokens must be at most {method.k_max} for method {method.name}: lower it",
            check=lambda s, m=method.name, high=method.k_max: s.speculation.method != m
            or s.tuning.max_num_speculative_tokens is None
            or s.tuning.max_num_speculative_tokens <= high,
            field="tuning.maxNumSpeculativeTokens",
        ))
    return rules
