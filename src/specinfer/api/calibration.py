"""`SpeculativeInferenceCalibration`: one measurement run against a SpeculativeInference (docs/calibration.md).

The spec names the target, the candidate methods besides the one it runs (which is always
measured, as is no speculation, the baseline), the batch sizes and draft lengths to measure and
the prompts to measure with. The operator runs each candidate in a Job whose pod starts the
engine exactly as the target's pods would (same image, hardware, model, env), once per draft
length, and drives it with the load generator; the pods never serve the target's Service. The
status holds what was measured: the step time by batch size and K and the acceptance per position
for every candidate, the comparison and the recommendation. The target's `status.calibration`
receives the step-cost table of its own method, which the tuner then uses in place of its
roofline prior.

The spec is immutable: a calibration is one run, like a Job; to measure again, create another.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from specinfer.api.base import ApiModel, Rule, ShortText, StatusModel, Text
from specinfer.api.catalogue_rules import cel_method_is
from specinfer.api.load import ConfigMapKeyRef as ConfigMapKeyRef  # re-exported: part of this API
from specinfer.api.load import Load, Prompts
from specinfer.api.speculation import BASELINE as BASELINE  # re-exported: the calibration names its candidates
from specinfer.api.speculation import CONFIGURED as CONFIGURED
from specinfer.api.speculation import K_CEILING, FixedSpeculation, MethodName
from specinfer.api.speculation import CandidateName as CandidateName
from specinfer.api.status import Condition, Timestamp
from specinfer.runtime.methods import get_method, methods_without_drafts

CALIBRATION_KIND = "SpeculativeInferenceCalibration"
CALIBRATION_PLURAL = "speculativeinferencecalibrations"
CALIBRATION_SINGULAR = "speculativeinferencecalibration"
CALIBRATION_SHORT_NAMES = ("sical",)

# CONFIGURED (the target's own method) and BASELINE (no speculation) name the two candidates every
# calibration measures (src/specinfer/api/speculation.py).
MAX_CANDIDATES = 6  # besides the two above: each is an engine start per K on the target's accelerators
MAX_BATCH_SIZES = 8
MAX_KS = 8
MAX_POINTS = MAX_BATCH_SIZES * MAX_KS  # per candidate: one engine (Job) per K, one point per batch size
MAX_BATCH_SIZE = 4096
DnsLabel = Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]
Phase = Literal["Pending", "Running", "Succeeded", "Failed"]


class TargetRef(ApiModel):
    """The SpeculativeInference to calibrate, in the calibration's namespace."""

    name: DnsLabel
    """Its metadata.name."""


class Candidate(ApiModel):
    """A method to measure besides the target's own: the same model and hardware, another speculation."""

    name: CandidateName | None = None
    """Short name for Jobs, status and the comparison (lowercase letters, digits, '-'); default: the method
    name in lowercase. Two candidates with the same method need names. `configured` is reserved."""
    speculation: FixedSpeculation
    """The speculation to measure, as in a SpeculativeInference's spec.speculation (schedule and K aside:
    the calibration measures every K of numSpeculativeTokens)."""
    num_speculative_tokens: list[Annotated[int, Field(ge=1, le=K_CEILING)]] | None = Field(
        default=None, min_length=1, max_length=MAX_KS)
    """Draft lengths to measure for this candidate; default: spec.numSpeculativeTokens."""

    rules = (
        Rule(
            cel="!has(self.name) || self.name != 'configured'",
            message="spec.candidates[].name configured is reserved for the target's own method: choose another name",
            check=lambda c: c.name != CONFIGURED,
            field="name",
        ),
        Rule(
            cel=f"!has(self.name) || self.name != '{BASELINE}' || "
            + cel_method_is(methods_without_drafts(), "self.speculation.method"),
            message="spec.candidates[].name none is reserved for no speculation: choose another name",
            check=lambda c: c.name != BASELINE or not get_method(c.speculation.method).speculates,
            field="name",
        ),
        Rule(
            cel="!has(self.speculation.schedule)",
            message="spec.candidates[].speculation.schedule: a calibration measures fixed draft lengths "
            "(spec.numSpeculativeTokens); remove the schedule",
            check=lambda c: c.speculation.schedule is None,
            field="speculation.schedule",
        ),
        Rule(
            cel="!has(self.numSpeculativeTokens) || "
            "self.numSpeculativeTokens.all(k, self.numSpeculativeTokens.exists_one(j, j == k))",
            message="spec.candidates[].numSpeculativeTokens must not list a draft length twice",
            check=lambda c: c.num_speculative_tokens is None
            or len(set(c.num_speculative_tokens)) == len(c.num_speculative_tokens),
            field="numSpeculativeTokens",
        ),
    )

    def display_name(self) -> str:
        return self.name or self.speculation.method.lower()


class SpeculativeInferenceCalibrationSpec(ApiModel):
    """Measure step time by batch size and K and acceptance per position, for the target's method and candidates."""

    target_ref: TargetRef
    """The SpeculativeInference whose model, hardware and runtime the candidates run with. Its pods and
    Service are never touched; its status.calibration receives the result."""
    candidates: list[Candidate] = Field(default=[], max_length=MAX_CANDIDATES)
    """Methods to compare with the target's own (always measured, as `configured`) and with no
    speculation (always measured, as `none`)."""
    batch_sizes: list[Annotated[int, Field(ge=1, le=MAX_BATCH_SIZE)]] = Field(
        default=[1, 4, 16], min_length=1, max_length=MAX_BATCH_SIZES)
    """Batch sizes (requests in flight) to measure at, ascending; use the ones your traffic runs at."""
    num_speculative_tokens: list[Annotated[int, Field(ge=1, le=K_CEILING)]] | None = Field(
        default=None, min_length=1, max_length=MAX_KS)
    """Draft lengths to measure for every speculative candidate; default: 1 to 4 within each method's
    limits on the target's accelerator. One engine start per K and candidate."""
    prompts: Prompts | None = None
    """Your prompts; default: the load generator's synthetic prompts of load.promptTokens words."""
    load: Load = Field(default_factory=Load, json_schema_extra={"default": {}})
    """Load per measured point."""
    parallelism: int = Field(default=1, ge=1, le=16)
    """Candidate Jobs that may run at once (each holds the target's accelerators while it runs)."""

    rules = (
        Rule(
            cel="self.batchSizes.all(b, self.batchSizes.exists_one(c, c == b)) && self.batchSizes.isSorted()",
            message="spec.batchSizes must be ascending and list each batch size once",
            check=lambda s: s.batch_sizes == sorted(set(s.batch_sizes)),
            field="batchSizes",
        ),
        Rule(
            cel="!has(self.numSpeculativeTokens) || "
            "self.numSpeculativeTokens.all(k, self.numSpeculativeTokens.exists_one(j, j == k))",
            message="spec.numSpeculativeTokens must not list a draft length twice",
            check=lambda s: s.num_speculative_tokens is None
            or len(set(s.num_speculative_tokens)) == len(s.num_speculative_tokens),
            field="numSpeculativeTokens",
        ),
        Rule(
            cel="self.candidates.all(a, self.candidates.exists_one(b, "
            "(has(b.name) ? b.name : b.speculation.method.lowerAscii()) == "
            "(has(a.name) ? a.name : a.speculation.method.lowerAscii())))",
            message="spec.candidates: two candidates have the same name (a candidate without a name is named "
            "after its method): give them distinct names",
            check=lambda s: len({c.display_name() for c in s.candidates}) == len(s.candidates),
            field="candidates",
        ),
    )


# -- status -------------------------------------------------------------------------------------


class CalibrationPoint(StatusModel):
    """One measured (K, batch size) point of a candidate, from the engine's own counters over the window."""

    num_speculative_tokens: int = Field(ge=0, le=K_CEILING)
    """Draft length the engine ran (0: no speculation)."""
    batch_size: int = Field(ge=1, le=MAX_BATCH_SIZE)
    """Requests kept in flight."""
    mean_batch_size: float = Field(ge=0)
    """Running requests per engine step, measured."""
    step_seconds: float = Field(gt=0)
    """Mean engine step time."""
    tokens_per_second: float = Field(ge=0)
    """Generated tokens per second (goodput)."""
    tokens_per_step: float = Field(ge=0)
    """Tokens generated per request per step (1 + accepted drafts)."""
    steps: int = Field(ge=1)
    """Engine steps in the window."""


class AcceptanceRow(StatusModel):
    """Acceptance per draft position at one K, over all batch sizes."""

    num_speculative_tokens: int = Field(ge=1, le=K_CEILING)
    """Draft length."""
    drafts: int = Field(ge=0)
    """Draft steps counted."""
    per_position: list[float] = Field(max_length=K_CEILING)
    """P(position i accepted), i = 0..K-1."""


class CandidateStatus(StatusModel):
    """What one candidate is and what was measured."""

    name: CandidateName
    """configured (the target's method), none (no speculation) or the candidate's name."""
    method: MethodName
    """Its method."""
    draft_model: ShortText | None = None
    """Its draft weights, if any (cut to 128 characters)."""
    num_speculative_tokens: list[int] = Field(default=[], max_length=MAX_KS)
    """Draft lengths to measure (0 for none): one engine, one Job each."""
    measured: list[int] | None = Field(default=None, max_length=MAX_KS)
    """Draft lengths measured so far."""
    phase: Phase = "Pending"
    """Pending (no Job yet), Running, Succeeded or Failed."""
    message: Text | None = None
    """Why it failed, or a summary once measured."""
    points: list[CalibrationPoint] | None = Field(default=None, max_length=MAX_POINTS)
    """Measured points."""
    acceptance: list[AcceptanceRow] | None = Field(default=None, max_length=MAX_KS)
    """Acceptance per position, by K."""


class BestAtBatchSize(StatusModel):
    """A candidate's best draft length at one batch size."""

    batch_size: int = Field(ge=1, le=MAX_BATCH_SIZE)
    """Requests in flight."""
    num_speculative_tokens: int = Field(ge=0, le=K_CEILING)
    """Its fastest K there."""
    tokens_per_second: float = Field(ge=0)
    """Goodput with that K."""


class CandidateComparison(StatusModel):
    """One candidate against no speculation and against the target's own method, at its best K per batch size."""

    name: CandidateName
    """Candidate name."""
    method: MethodName
    """Its method."""
    best: list[BestAtBatchSize] = Field(default_factory=list, max_length=16)
    """Its best K and goodput per batch size."""
    speedup_vs_none: float = Field(ge=0)
    """Goodput / goodput without speculation (geometric mean over the batch sizes)."""
    gain_vs_configured: float
    """Goodput / goodput of the target's method, minus 1 (geometric mean over the batch sizes)."""


class CalibrationRecommendation(StatusModel):
    """What the comparison says. Never applied automatically: changing the method is your edit of the spec."""

    candidate: CandidateName
    """The fastest candidate over the measured batch sizes."""
    method: MethodName
    """Its method."""
    num_speculative_tokens: int | None = Field(default=None, ge=0, le=K_CEILING)
    """Its best K at the most batch sizes."""
    gain_vs_configured: float
    """Goodput gain over the target's method (0.18 = +18%); 0 when the target's method is the fastest."""
    summary: ShortText
    """One line, e.g. `ngram K=3 +18%` (the printer column)."""
    message: Text
    """The comparison in words, per batch size where the winner changes."""


class SpeculativeInferenceCalibrationStatus(StatusModel):
    """Progress and results, written only by the operator."""

    observed_generation: int | None = Field(default=None, ge=0)
    """metadata.generation the operator last acted on."""
    phase: Phase | None = None
    """Pending (waiting for the target or the prompts), Running, Succeeded or Failed."""
    progress: ShortText | None = None
    """Engines measured / to measure, e.g. 5/9 (one per candidate and K)."""
    running: ShortText | None = None
    """Engines whose Job runs now, e.g. ngram K=2."""
    conditions: list[Condition] | None = Field(
        default=None, max_length=8,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]})
    """Progressing, Complete and Failed (as a Job's): `kubectl wait --for=condition=Complete`."""
    start_time: Timestamp | None = None
    """When the first Job was created."""
    completion_time: Timestamp | None = None
    """When the run succeeded or failed."""
    target_fingerprint: ShortText | None = None
    """Hash of the target's model, hardware and runtime when the run started (a change fails the run)."""
    candidates: list[CandidateStatus] | None = Field(default=None, max_length=MAX_CANDIDATES + 2)
    """Every candidate, with what was measured."""
    comparison: list[CandidateComparison] | None = Field(default=None, max_length=MAX_CANDIDATES + 2)
    """Each candidate against no speculation and the target's method."""
    recommendation: CalibrationRecommendation | None = None
    """The fastest candidate; shown, never applied."""
