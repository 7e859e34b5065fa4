"""Build the exact JSON object vLLM takes as `--speculative-config`.

Reads a speculation through the `SpeculationLike` protocol (the API's `Speculation` model
fits it), so the catalogue does not import the API that sits above it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from specinfer.runtime.methods.accelerators import get_accelerator

if TYPE_CHECKING:
    from specinfer.runtime.methods.registry import MethodSpec


class _DraftModel(Protocol):
    name: str
    revision: str | None


class _ScheduleRange(Protocol):
    min_batch_size: int
    max_batch_size: int
    num_speculative_tokens: int


class _PromptLookup(Protocol):
    min: int | None
    max: int | None


class _Advanced(Protocol):
    def model_dump(self, *, exclude_none: bool) -> dict[str, Any]: ...


class SpeculationLike(Protocol):
    # read-only members: a model whose field is a DraftModel (not the protocol itself) still fits
    @property
    def method(self) -> str: ...
    @property
    def num_speculative_tokens(self) -> int | None: ...
    @property
    def draft_model(self) -> _DraftModel | None: ...
    @property
    def schedule(self) -> Sequence[_ScheduleRange] | None: ...
    @property
    def prompt_lookup(self) -> _PromptLookup | None: ...
    @property
    def advanced(self) -> _Advanced | None: ...


def build_speculative_config(
    method: MethodSpec, speculation: SpeculationLike, accelerator: str
) -> dict[str, Any] | None:
    if method.vllm_method is None:
        return None
    k = speculation.num_speculative_tokens
    if k is None:
        k = method.default_k(accelerator)
    if k <= 0:
        return None  # vLLM needs num_speculative_tokens > 0; "off" is the absence of a config
    config: dict[str, Any] = {"method": method.vllm_method_on(get_accelerator(accelerator).engine)}
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
    if method.takes_prompt_lookup and lookup is not None:
        if lookup.min is not None:
            config["prompt_lookup_min"] = lookup.min
        if lookup.max is not None:
            config["prompt_lookup_max"] = lookup.max
    config.update(method.fixed_config)
    if speculation.advanced is not None:
        config.update(speculation.advanced.model_dump(exclude_none=True))
    return config
