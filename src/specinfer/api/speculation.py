"""`spec.speculation`: method, draft model, draft length and the Dynamic SD schedule -- or `auto`.

`FixedSpeculation` is one catalogue method with its settings (what a calibration candidate and each
candidate of `method: auto` are); `Speculation` is what a SpeculativeInference takes: a fixed method,
or `auto` with the candidates the operator measures and chooses between (docs/selection.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Literal, TypeAlias

from pydantic import Field

from specinfer.api.advanced import Advanced
from specinfer.api.base import ApiModel, ModelId, Rule, ShortText
from specinfer.api.catalogue_rules import (
    advanced_key_rules,
    cel_method_is,
    cel_method_is_not,
    draft_model_description,
    draft_model_rules,
    fly_rules,
    mtp_modules_rules,
    num_speculative_tokens_rules,
    only_with_drafts_rule,
    prompt_lookup_rule,
)
from specinfer.api.load import Load, Prompts
from specinfer.runtime.methods import METHOD_NAMES, methods_without_drafts

# `method: auto`: not a catalogue method but a choice between candidates, made by measurement.
AUTO = "auto"

# The catalogue's method names, read when the module loads: a Literal to pydantic and the CRD, a str to mypy.
if TYPE_CHECKING:
    MethodName: TypeAlias = str
    SpeculationMethod: TypeAlias = str
else:
    MethodName = Literal[METHOD_NAMES]
    SpeculationMethod = Literal[(*METHOD_NAMES, AUTO)]

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


class FixedSpeculation(ApiModel):
    """One catalogue method and its settings. Every value here is fixed while vLLM runs: changing it restarts
    the pods."""

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
    mtp_modules: int | None = Field(default=None, ge=1, le=K_CEILING)
    """Method mtp: how many MTP modules vLLM loads from the target checkpoint -- for most, its config.json
    `num_nextn_predict_layers` (1 for DeepSeek-V3, Qwen3-Next, GLM-4.5 and MiMo; vLLM loads only the first
    of MiMo-V2's). vLLM reads it itself; stating it here tells the operator how the engine drafts. 1: on Model
    Runner V2 the drafter follows the schedule, so the tuner retunes K in place up to its maximum (on amd,
    mind the catalogue's caveat on K > 1). Unset: priced as several modules, which draft the startup K on
    every step, so every K above the one in force rolls out. A K above the count must be a multiple of it;
    with several modules the tuner keeps K at or below the first K vLLM would refuse."""
    advanced: Advanced | None = None
    """Further vLLM SpeculativeConfig fields by their vLLM names, e.g. {draft_tensor_parallel_size: 1};
    fields owned by the typed fields above are refused."""

    rules = (
        *draft_model_rules(),
        *num_speculative_tokens_rules(),
        *SCHEDULE_RULES,
        *mtp_modules_rules(),
        *advanced_key_rules(),
        *fly_rules(),
    )


# -- method: auto --------------------------------------------------------------------------------

MAX_AUTO_CANDIDATES = 6  # each is one engine start (a calibration Job) per comparison
DEFAULT_RESELECT_INTERVAL_SECONDS = 6 * 3600
CandidateName = Annotated[str, Field(min_length=1, max_length=20, pattern=r"^[a-z]([-a-z0-9]*[a-z0-9])?$")]
# Candidate names a comparison reserves: the method in force and no speculation (the baseline).
CONFIGURED = "configured"
BASELINE = "none"
Initial = Literal["none", "first"]
_SILENT = methods_without_drafts()


class AutoCandidate(FixedSpeculation):
    """One method `auto` may choose, with its settings as `method` of a fixed speculation takes them."""

    name: CandidateName | None = None
    """Short name for status, Events and the comparison (lowercase letters, digits, '-'); default: the method
    name in lowercase. Two candidates with the same method need names."""

    rules = (
        *FixedSpeculation.rules,
        Rule(
            cel=f"!has(self.name) || self.name != '{CONFIGURED}'",
            message=f"spec.speculation.candidates[].name {CONFIGURED} is reserved for the method in force: "
            "choose another name",
            check=lambda c: c.name != CONFIGURED,
            field="name",
        ),
        Rule(
            cel=f"!has(self.name) || self.name != '{BASELINE}' || " + cel_method_is(_SILENT),
            message=f"spec.speculation.candidates[].name {BASELINE} is reserved for no speculation: choose another "
            "name",
            check=lambda c: c.name != BASELINE or c.method in _SILENT,
            field="name",
        ),
        Rule(
            cel="!has(self.schedule)",
            message="spec.speculation.candidates[].schedule: candidates are compared at one draft length each "
            "(numSpeculativeTokens); the tuner finds the winner's schedule: remove it",
            check=lambda c: c.schedule is None,
            field="schedule",
        ),
    )

    def display_name(self) -> str:
        return self.name or self.method.lower()


def _auto_fields_unset(s: FixedSpeculation) -> bool:
    return all(getattr(s, key) is None
               for key in ("draft_model", "num_speculative_tokens", "schedule", "prompt_lookup", "mtp_modules",
                           "advanced"))


def _only_with_auto(attr: str) -> Callable[[FixedSpeculation], bool]:
    return lambda s: getattr(s, attr) is None or s.method == AUTO


AUTO_RULES = (
    Rule(
        cel=f"self.method != '{AUTO}' || (!has(self.draftModel) && !has(self.numSpeculativeTokens) && "
        "!has(self.schedule) && !has(self.promptLookup) && !has(self.mtpModules) && !has(self.advanced))",
        message="spec.speculation: with method auto, draftModel, numSpeculativeTokens, schedule, promptLookup, "
        "mtpModules and advanced belong to each of spec.speculation.candidates[]: move them there",
        check=lambda s: s.method != AUTO or _auto_fields_unset(s),
    ),
    *(Rule(
        cel=f"!has(self.{key}) || self.method == '{AUTO}'",
        message=f"spec.speculation.{key} applies only to method auto: remove it or set spec.speculation.method: auto",
        check=_only_with_auto(attr),
        field=key,
    ) for key, attr in (("candidates", "candidates"), ("initial", "initial"),
                        ("reselectIntervalSeconds", "reselect_interval_seconds"), ("comparison", "comparison"))),
    Rule(
        cel="!has(self.candidates) || self.candidates.exists(c, " + cel_method_is_not(_SILENT, "c.method") + ")",
        message="spec.speculation.candidates needs at least one speculative method (no speculation is always "
        "measured as the baseline): add one, or set spec.speculation.method: none",
        check=lambda s: s.candidates is None or any(c.method not in _SILENT for c in s.candidates),
        field="candidates",
    ),
    Rule(
        cel="!has(self.candidates) || self.candidates.all(a, self.candidates.exists_one(b, "
        "(has(b.name) ? b.name : b.method.lowerAscii()) == (has(a.name) ? a.name : a.method.lowerAscii())))",
        message="spec.speculation.candidates: two candidates have the same name (a candidate without a name is "
        "named after its method): give them distinct names",
        check=lambda s: s.candidates is None
        or len({c.display_name() for c in s.candidates}) == len(s.candidates),
        field="candidates",
    ),
)


class Comparison(ApiModel):
    """Method auto: how the candidates are compared -- the SpeculativeInferenceCalibration the operator runs."""

    batch_sizes: list[Annotated[int, Field(ge=1, le=4096)]] | None = Field(default=None, min_length=1, max_length=8)
    """Batch sizes to compare at, ascending; default 1, 4 and 16, plus the power of two at the traffic's mean
    batch size when a new comparison starts because the traffic runs larger batches."""
    prompts: Prompts | None = None
    """Your prompts (a ConfigMap key in this namespace); default: the load generator's synthetic prompts.
    Acceptance -- and so the winner -- depends on them: give prompts like your traffic's."""
    load: Load | None = None
    """Load per measured point (defaults as a calibration's spec.load)."""

    rules = (
        Rule(
            cel="!has(self.batchSizes) || (self.batchSizes.all(b, self.batchSizes.exists_one(c, c == b)) && "
            "self.batchSizes.isSorted())",
            message="spec.speculation.comparison.batchSizes must be ascending and list each batch size once",
            check=lambda c: c.batch_sizes is None or c.batch_sizes == sorted(set(c.batch_sizes)),
            field="batchSizes",
        ),
    )


class Speculation(FixedSpeculation):
    """How tokens are drafted: one method with its settings, or `auto`, which measures candidates on this
    resource's engine and serves the fastest (docs/selection.md). Changing any value restarts the pods."""

    method: SpeculationMethod
    """Speculative-decoding method (`specinfer methods` lists them with their hardware support), or auto: the
    operator compares the candidates by a calibration on this resource's engine and serves the winner."""
    candidates: list[AutoCandidate] | None = Field(default=None, min_length=1, max_length=MAX_AUTO_CANDIDATES)
    """Method auto only: the methods to choose between, each as a fixed speculation (no speculation is always
    compared too). Default: the catalogue's drafters that need no weights (n-gram and suffix where the
    accelerator runs them), because a model drafter must match the target and only you know which does."""
    initial: Initial | None = None
    """Method auto only: what serves until the first comparison has a winner. none (default): no speculation,
    which never slows the server and needs no draft weights; first: the first candidate."""
    comparison: Comparison | None = None
    """Method auto only: the batch sizes, prompts and load the candidates are compared with."""
    reselect_interval_seconds: int | None = Field(default=None, ge=600, le=7 * 24 * 3600)
    """Method auto only: the least time between two comparisons (default 21600, 6 hours); a new one starts
    when the acceptance or the batch sizes move outside what the last one measured."""

    rules = (*FixedSpeculation.rules, *AUTO_RULES)
