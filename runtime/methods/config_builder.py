"""Build the exact JSON object vLLM 0.33 takes as `--speculative-config`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specinfer.api.spec import Speculation
    from specinfer.runtime.methods.registry import MethodSpec


def build_speculative_config(method: MethodSpec, speculation: Speculation, accelerator: str) -> dict[str, Any] | None:
    if method.vllm_method is None:
        return None
    k = speculation.num_speculative_tokens
    if k is None:
        k = method.default_k(accelerator)
    if k <= 0:
        return None  # vLLM needs num_speculative_tokens > 0; "off" is the absence of a config
    config: dict[str, Any] = {"method": method.vllm_method}
    draft = speculation.draft_model
    if draft is not None and method.accepts_draft_model:
        config["model"] = draft.name
        if draft.revision:
            config["revision"] = draft.revision
    config["num_speculative_tokens"] = k
    if speculation.schedule:
        config["num_speculative_tokens_per_batch_size"] = [
            [entry.min_batch_size, entry.max_batch_size, entry.num_speculative_tokens] for entry in speculation.schedule
        ]
    lookup = speculation.prompt_lookup
    if method.name == "ngram" and lookup is not None:
        if lookup.min is not None:
            config["prompt_lookup_min"] = lookup.min
        if lookup.max is not None:
            config["prompt_lookup_max"] = lookup.max
    config.update(method.fixed_config)
    if speculation.advanced is not None:
        config.update(speculation.advanced.model_dump(exclude_none=True))
    return config
