"""The tuning input: method constraints, the spec's bounds, SLOs and guard settings.

The tuning loop builds it from the resource's typed spec (`operator/tuner/pure/target.py`); the JSON
form (camelCase keys, docs/tuner.md) is read only at the edges -- the operator-wide defaults in
the operator configuration and `decide_json` -- where `tuning_from_json` also intersects the
bounds with the method catalogue's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from specinfer.runtime.methods import CostShape, UnknownMethodError, get_method
from specinfer.runtime.methods.drafting import DraftedK, ZeroStep

# The JSON key `drafting` names the cost shape; `none` is its former spelling of `lookup` (n-gram, suffix).
FORMER_COST_SHAPES: Mapping[str, CostShape] = {"none": "lookup"}


class _Input(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)


class CostPrior(_Input):
    """A roofline prior for the step time T(B, K) (seconds), before any latency is observed.

    T = roof(B*(K+1)) + kvPerSequence*B + draftPass*P + draftToken*B*K [+ speculationStep +
    speculationPerSequence*B when K > 0], where roof(n) = (floor^p + (computePerToken*n)^p)^(1/p) is
    the smooth knee between the memory-bound floor and the compute-bound slope, and P the draft
    passes per step (K sequential, 1 parallel, 0 for a lookup: n-gram/suffix). The speculation terms are a
    speculative step's bookkeeping whatever its K (rejection sampling, draft-state preparation): ~0
    next to a GPU step, a fifth of a decode step (~0.6 ms) on the real vLLM CPU engine with a tiny
    model (docs/simulator.md); left out, the fit charges it to the draft passes and sees every extra
    K as costing more than it does. Defaults: an 8B model in bf16 on one H100 with an EAGLE head. The online
    fit scales each term; the prior only decides what is believed about never-observed K.

    How the drafter's work follows K is the engine's, per drafter (runtime/methods/drafting.py, from
    target.py): `draftedK` scheduled -- P and the drafted tokens follow the step's K; startup -- every
    speculative step drafts the engine's startup K, the larger of `startupK` (the envelope an in-place
    engine runs) and the config's own K (vLLM 0.33.0's draft-model, multi-module MTP and block drafters
    on Model Runner V2). `zeroStep` is what a schedule's K = 0 step runs: the drafter's first pass, the
    context store only, the full startup drafts, or nothing.
    """

    floor: float = Field(default=0.007, gt=0, alias="floorSeconds")
    compute_per_token: float = Field(default=5.5e-5, ge=0, alias="computePerTokenSeconds")
    knee_sharpness: float = Field(default=3.0, gt=0)
    kv_per_sequence: float = Field(default=3e-5, ge=0, alias="kvPerSequenceSeconds")
    draft_pass: float = Field(default=0.00085, ge=0, alias="draftPassSeconds")
    draft_token: float = Field(default=6e-6, ge=0, alias="draftTokenSeconds")
    speculation_step: float = Field(default=0.0, ge=0, alias="speculationStepSeconds")
    speculation_per_sequence: float = Field(default=0.0, ge=0, alias="speculationPerSequenceSeconds")
    # A prompt token prefilled in a decode step (vLLM's chunked prefill); None: computePerTokenSeconds, as
    # it runs through the same forward pass as a verified token.
    prefill_per_token: float | None = Field(default=None, ge=0, alias="prefillPerTokenSeconds")
    drafted_k: DraftedK = Field(default="scheduled", alias="draftedK")
    zero_step: ZeroStep = Field(default="first_pass", alias="zeroStep")
    startup_k: int | None = Field(default=None, ge=1, alias="startupK")
    strength: float = Field(default=0.05, gt=0)  # weight of the prior against the data (per term, relative)

    @property
    def prefill_seconds(self) -> float:
        """Seconds a step spends per prompt token it prefills."""
        return self.compute_per_token if self.prefill_per_token is None else self.prefill_per_token


class Slo(_Input):
    per_token_p99_seconds: float | None = Field(default=None, gt=0)
    ttft_p99_seconds: float | None = Field(default=None, gt=0, alias="ttftP99Seconds")


class TuningInput(_Input):
    method: str = Field(min_length=1)
    # How a step's draft cost grows with K (the method's cost shape): the JSON key `drafting`.
    cost_shape: CostShape = Field(default="sequential", alias="drafting")
    k_min: int = Field(default=1, ge=1)
    k_max: int = Field(default=8, ge=1)
    max_batch_size: int = Field(default=256, ge=1)
    allow_schedule: bool = True
    allow_disable: bool = True
    # vLLM runs its adaptive verification for this resource (the admission rules accept
    # speculation.advanced.enable_adaptive_verification here: Model Runner V2, full CUDA graphs, ...):
    # the tuner may turn it on or off, a rollout (policy/adaptive.py)
    allow_adaptive_verification: bool = False
    slo: Slo = Slo()
    # The floor of the hysteresis: model error beyond the measured noise. Restart cost and noise have
    # their own terms (guards.required_gain), so with surge rollouts (no capacity lost) 2% is enough;
    # 5% left 2-3% of goodput unclaimed at high load in `specinfer bench tuner`.
    min_gain: float = Field(default=0.02, ge=0)
    # The floor for a change applied in place: no restart to repay, and a wrong one is rolled back in
    # place after one verification, so it covers model error only. In the bench's quiet-peak-day with
    # vLLM's pooled series, 2% held the quiet hour's first schedule (+1.9%) a window longer, and on that
    # path the peak's +5.4% change came only at minute 119: 0.951 of the oracle; 0.998 at 1%.
    min_gain_in_place: float = Field(default=0.01, ge=0)
    cooldown_seconds: float = Field(default=600.0, ge=0)
    # 0: in place only -- a change that needs a rollout is held (guards.budget_guard says so) and recommended
    max_restarts_per_hour: int = Field(default=6, ge=0)
    min_drafts: float = Field(default=2000.0, ge=0)
    min_steps: float = Field(default=500.0, ge=0)
    max_staleness_seconds: float = Field(default=180.0, gt=0)
    collapse_acceptance: float = Field(default=0.05, ge=0, le=1)
    collapse_hold_seconds: float = Field(default=3600.0, ge=0)
    rollback_tolerance: float = Field(default=0.03, ge=0)
    restart_seconds: float = Field(default=60.0, ge=0)  # model reload of one pod
    # Share of a reloading replica's capacity that is lost: 0 with Surge (the old pod serves meanwhile),
    # 1 with Replace. What that costs the fleet depends on the load and the replicas (restart.py).
    downtime_fraction: float = Field(default=1.0, ge=0, le=1)
    replicas: int = Field(default=1, ge=1)  # engine pods, rolled one at a time
    # Engine truth, from the catalogue for the resource's method and accelerator (target.py): the
    # step-time factor on every step while a schedule is configured (vLLM's Model Runner V1 with full
    # CUDA graphs downgrades them to PIECEWISE). A schedule the engine would drop or crash on comes as
    # allowSchedule false, K values it would refuse as narrower kMin..kMax.
    schedule_step_factor: float = Field(default=1.0, ge=1.0)
    # Retuning in place (docs/live-schedule.md): the engine started with this maximum K and follows a
    # published schedule, so a change of K or schedule within it costs no restart -- only its settling
    # window. None: every change rolls out. Speculation off entirely (no drafter) still rolls out.
    in_place_max_k: int | None = Field(default=None, ge=1)
    payback_seconds: float = Field(default=1800.0, gt=0)
    confirmations: int = Field(default=2, ge=1)
    reject_hold_seconds: float = Field(default=3600.0, ge=0)
    # Probe in place the K a doubted prior would choose (probe.py): on by default (issue 43), so a
    # prior wrong about the drafter is measured away in a few windows instead of held for good.
    probe_in_place: bool = True
    cost_prior: CostPrior = CostPrior()

    @field_validator("cost_shape", mode="before")
    @classmethod
    def _former_spelling(cls, value: Any) -> Any:
        return FORMER_COST_SHAPES.get(value, value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _bounds(self) -> TuningInput:
        if self.k_min > self.k_max:
            raise ValueError(f"kMin={self.k_min} and kMax={self.k_max} leave no K for method {self.method!r}; "
                             "the bounds must satisfy 1 <= kMin <= kMax within the method's limits")
        return self

    def drafts_startup_k(self) -> bool:
        """The drafter drafts its startup K every step (a lookup that fills it costs next to nothing): its
        envelope is the config's largest K, so in place keeps that K and another one rolls out
        (runtime/contract/live_schedule/envelope.py)."""
        return self.cost_prior.drafted_k == "startup" and self.cost_shape != "lookup"

    def allowed_ks(self) -> list[int]:
        """Candidate K per batch size: 0 (no drafting) when allowed, then kMin..kMax."""
        ks = list(range(self.k_min, self.k_max + 1))
        return ([0] + ks) if self.allow_disable else ks


def tuning_from_json(data: Mapping[str, Any]) -> TuningInput:
    """The JSON edge: camelCase keys (docs/tuner.md); the method's cost shape and K limits come
    from the catalogue when it knows the method, and the given bounds are intersected with them,
    never widened. Raises pydantic's ValidationError naming the field."""
    values = dict(data)
    try:
        method = get_method(str(values.get("method")))
    except UnknownMethodError:
        return TuningInput.model_validate(values)  # an unknown method must carry its own limits
    if method.cost_shape is not None:
        values.setdefault("drafting", method.cost_shape)
    values["kMin"] = max(int(values.get("kMin", method.k_min)), method.k_min, 1)
    values["kMax"] = min(int(values.get("kMax", method.k_max)), method.k_max)
    return TuningInput.model_validate(values)
