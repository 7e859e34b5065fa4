"""`spec.speculation`: method, draft model, draft length and the Dynamic SD schedule."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, TypeAlias

from pydantic import Field

from specinfer.api.advanced import Advanced
from specinfer.api.base import ApiModel, ModelId, Rule, ShortText
from specinfer.api.catalogue_rules import (
    advanced_key_rules,
    draft_model_description,
    draft_model_rules,
    fly_rules,
    num_speculative_tokens_rules,
    only_with_drafts_rule,
    prompt_lookup_rule,
)
from specinfer.runtime.methods import METHOD_NAMES

# The catalogue's method names, read when the module loads: a Literal to pydantic and the CRD, a str to mypy.
if TYPE_CHECKING:
    MethodName: TypeAlias = str
else:
    MethodName = Literal[METHOD_NAMES]

# Hard ceiling on any draft length; per-method bounds are CEL rules from the catalogue.
K_CEILING = 64
MAX_SCHEDULE_RANGES = 32
MAX_BATCH_SIZE = 65536


class DraftModel(ApiModel):
    """The draft weights: an EAGLE/EAGLE-3 head, a DFlash/DSpark drafter or a small draft model."""

    name: ModelId
    """Hugging Face repo id or local path of the draft weights (vLLM `speculative_config.model`)."""
    revision: ShortText | None = None
    """Branch, tag or commit of the draft weights (vLLM `speculative_config.revision`)."""

    rules = (
        Rule(
            cel="!self.name.startsWith('-')",
            message="spec.speculation.draftModel.name must not start with '-': vLLM would read it as a "
            "command-line flag",
            check=lambda d: not d.name.startswith("-"),
            field="name",
        ),
    )


class ScheduleRange(ApiModel):
    """One inclusive batch-size range of vLLM's Dynamic SD schedule and the draft length used in it."""

    min_batch_size: int = Field(ge=1, le=MAX_BATCH_SIZE)
    """First batch size (number of running requests) of the range, inclusive."""
    max_batch_size: int = Field(ge=1, le=MAX_BATCH_SIZE)
    """Last batch size of the range, inclusive. Batch sizes after the last range use its K."""
    num_speculative_tokens: int = Field(ge=0, le=K_CEILING)
    """Draft length in this range; 0 turns drafting off at these batch sizes."""

    rules = (
        Rule(
            cel="self.minBatchSize <= self.maxBatchSize",
            message="spec.speculation.schedule: a range's minBatchSize must be <= its maxBatchSize; swap them",
            check=lambda r: r.min_batch_size <= r.max_batch_size,
        ),
    )


class PromptLookup(ApiModel):
    """n-gram window sizes for method ngram (vLLM defaults both to 5 when unset)."""

    min: int | None = Field(default=None, ge=1, le=64)
    """Smallest n-gram to match in the prompt (vLLM `prompt_lookup_min`)."""
    max: int | None = Field(default=None, ge=1, le=64)
    """Largest n-gram to match in the prompt (vLLM `prompt_lookup_max`)."""

    rules = (
        Rule(
            cel="!has(self.min) || !has(self.max) || self.min <= self.max",
            message="spec.speculation.promptLookup.min must be <= spec.speculation.promptLookup.max",
            check=lambda p: p.min is None or p.max is None or p.min <= p.max,
        ),
    )


def _overlap_free(schedule: list[ScheduleRange]) -> bool:
    return all(
        sum(1 for b in schedule if b.min_batch_size <= a.max_batch_size and a.min_batch_size <= b.max_batch_size) == 1
        for a in schedule
    )


SCHEDULE_RULES = (
    Rule(
        cel="!has(self.schedule) || has(self.numSpeculativeTokens)",
        message="spec.speculation.schedule needs spec.speculation.numSpeculativeTokens: set it to the largest K in "
        "the schedule",
        check=lambda s: s.schedule is None or s.num_speculative_tokens is not None,
        field="schedule",
    ),
    only_with_drafts_rule("schedule"),
    Rule(
        cel="!has(self.schedule) || self.schedule[0].minBatchSize == 1",
        message="spec.speculation.schedule must start at batch size 1: set the first range's minBatchSize to 1",
        check=lambda s: s.schedule is None or s.schedule[0].min_batch_size == 1,
        field="schedule",
    ),
    Rule(
        cel="!has(self.schedule) || self.schedule.map(r, r.minBatchSize).isSorted()",
        message="spec.speculation.schedule ranges must be sorted by minBatchSize: list them from the smallest batch "
        "size up",
        check=lambda s: s.schedule is None
        or [r.min_batch_size for r in s.schedule] == sorted(r.min_batch_size for r in s.schedule),
        field="schedule",
    ),
    Rule(
        cel="!has(self.schedule) || self.schedule.all(a, self.schedule.exists_one(b, "
        "b.minBatchSize <= a.maxBatchSize && a.minBatchSize <= b.maxBatchSize))",
        message="spec.speculation.schedule ranges must not overlap: every batch size may appear in one range only",
        check=lambda s: s.schedule is None or _overlap_free(s.schedule),
        field="schedule",
    ),
    Rule(
        cel="!has(self.schedule) || !has(self.numSpeculativeTokens) || "
        "self.schedule.all(r, r.numSpeculativeTokens <= self.numSpeculativeTokens)",
        message="spec.speculation.schedule must not exceed spec.speculation.numSpeculativeTokens: "
        "raise numSpeculativeTokens or lower the range's numSpeculativeTokens",
        check=lambda s: s.schedule is None
        or s.num_speculative_tokens is None
        or all(r.num_speculative_tokens <= s.num_speculative_tokens for r in s.schedule),
        field="schedule",
    ),
    prompt_lookup_rule(),
)


class Speculation(ApiModel):
    """How tokens are drafted. Every value here is fixed while vLLM runs: changing it restarts the pods."""

    method: MethodName
    """Speculative-decoding method; `specinfer methods` lists them with their hardware support."""
    draft_model: DraftModel | None = Field(default=None, description=draft_model_description())
    # (the description names the methods from the catalogue: which require, allow or refuse a draft model)
    num_speculative_tokens: int | None = Field(default=None, ge=0, le=K_CEILING)
    """Draft length K (maximum when a schedule is set). Unset: the method's default from the catalogue,
    capped for the accelerator. The tuner never writes this field; its choice appears in status.effective."""
    schedule: list[ScheduleRange] | None = Field(default=None, min_length=1, max_length=MAX_SCHEDULE_RANGES)
    """Dynamic SD schedule (vLLM `num_speculative_tokens_per_batch_size`): sorted, non-overlapping batch-size
    ranges starting at 1; gaps inherit the previous range's K; K = 0 turns drafting off under load (a model
    drafter still runs its first pass in those steps: cheaper than drafting, dearer than speculation off)."""
    prompt_lookup: PromptLookup | None = None
    """n-gram window (method ngram only)."""
    advanced: Advanced | None = None
    """Further vLLM SpeculativeConfig fields by their vLLM names, e.g. {draft_tensor_parallel_size: 1};
    fields owned by the typed fields above are refused."""

    rules = (
        *draft_model_rules(),
        *num_speculative_tokens_rules(),
        *SCHEDULE_RULES,
        *advanced_key_rules(),
        *fly_rules(),
    )
