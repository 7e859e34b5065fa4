"""The tuning input: method constraints, the spec's bounds, SLOs and guard settings.

The tuning loop merges the resource's `spec.tuning` and the method catalogue into one plain
dict; everything but `method` has a default. The method's K limits come from the catalogue
(`specinfer.runtime.methods.get_method`) when it knows the method; explicit `kMin`/`kMax` in
the input are the spec's bounds and are intersected with the method's, never widened.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

DRAFTING_STYLES = ("sequential", "parallel", "none")


class TuningError(ValueError):
    """The tuning input is inconsistent; the message names the field and the fix."""


@dataclass(frozen=True)
class CostPrior:
    """A roofline prior for the step time T(B, K) (seconds), before any latency is observed.

    T = roof(B*(K+1)) + kvPerSequence*B + draftPass*P + draftToken*B*K, where
    roof(n) = (floor^p + (computePerToken*n)^p)^(1/p) is the smooth knee between the memory-bound
    floor and the compute-bound slope, and P the draft passes per step (K sequential, 1 parallel,
    0 for n-gram/suffix). Defaults: an 8B model in bf16 on one H100 with an EAGLE head. The online
    fit scales each term; the prior only decides what is believed about never-observed K.
    """

    floor: float = 0.007
    compute_per_token: float = 5.5e-5
    knee_sharpness: float = 3.0
    kv_per_sequence: float = 3e-5
    draft_pass: float = 0.00085
    draft_token: float = 6e-6
    strength: float = 0.05  # weight of the prior against the data (per term, relative)

@dataclass(frozen=True)
class TuningSpec:
    method: str
    drafting: str = "sequential"
    k_min: int = 1
    k_max: int = 8
    max_batch_size: int = 256
    allow_schedule: bool = True
    allow_disable: bool = True
    per_token_p99_slo: float | None = None
    ttft_p99_slo: float | None = None
    # The floor of the hysteresis: model error beyond the measured noise. Restart cost and noise have
    # their own terms (guards.required_gain), so with surge rollouts (no capacity lost) 2% is enough;
    # 5% left 2-3% of goodput unclaimed at high load in `specinfer bench tuner`.
    min_gain: float = 0.02
    cooldown_seconds: float = 600.0
    max_restarts_per_hour: int = 6
    min_drafts: float = 2000.0
    min_steps: float = 500.0
    max_staleness_seconds: float = 180.0
    collapse_acceptance: float = 0.05
    collapse_hold_seconds: float = 3600.0
    rollback_tolerance: float = 0.03
    restart_seconds: float = 60.0
    downtime_fraction: float = 1.0
    payback_seconds: float = 1800.0
    confirmations: int = 2
    reject_hold_seconds: float = 3600.0
    cost_prior: CostPrior = CostPrior()

    def allowed_ks(self) -> list[int]:
        """Candidate K per batch size: 0 (no drafting) when allowed, then kMin..kMax."""
        ks = list(range(self.k_min, self.k_max + 1))
        return ([0] + ks) if self.allow_disable else ks


_KEYS = {
    "method": "method", "drafting": "drafting", "kMin": "k_min", "kMax": "k_max",
    "maxBatchSize": "max_batch_size", "allowSchedule": "allow_schedule", "allowDisable": "allow_disable",
    "minGain": "min_gain", "cooldownSeconds": "cooldown_seconds", "maxRestartsPerHour": "max_restarts_per_hour",
    "minDrafts": "min_drafts", "minSteps": "min_steps", "maxStalenessSeconds": "max_staleness_seconds",
    "collapseAcceptance": "collapse_acceptance", "collapseHoldSeconds": "collapse_hold_seconds",
    "rollbackTolerance": "rollback_tolerance", "restartSeconds": "restart_seconds",
    "downtimeFraction": "downtime_fraction", "paybackSeconds": "payback_seconds",
    "confirmations": "confirmations", "rejectHoldSeconds": "reject_hold_seconds",
}
_PRIOR_KEYS = {"floorSeconds": "floor", "computePerTokenSeconds": "compute_per_token",
               "kneeSharpness": "knee_sharpness", "kvPerSequenceSeconds": "kv_per_sequence",
               "draftPassSeconds": "draft_pass", "draftTokenSeconds": "draft_token", "strength": "strength"}


def _catalogue_limits(method: str) -> tuple[str, int, int] | None:
    """(drafting, k_min, k_max) from the method catalogue, or None while it does not know the method."""
    try:
        from specinfer.runtime.methods import get_method  # written by the API engineer
    except ImportError:
        return None
    try:
        spec = get_method(method)
    except Exception:  # unknown to the catalogue: the input must then carry the limits itself
        return None
    return spec.drafting, int(spec.k_min), int(spec.k_max)


def parse_tuning(data: dict) -> TuningSpec:
    """Typed tuning input; unknown keys and impossible bounds raise TuningError naming the field."""
    if not isinstance(data, dict) or not data.get("method"):
        raise TuningError("tuning.method is required (the spec's speculation method, e.g. 'eagle3')")
    unknown = sorted(set(data) - set(_KEYS) - {"slo", "costPrior"})
    if unknown:
        raise TuningError(f"tuning has unknown keys {unknown}; known: {sorted([*_KEYS, 'slo', 'costPrior'])}")
    values: dict[str, Any] = {_KEYS[key]: value for key, value in data.items() if key in _KEYS}
    slo = data.get("slo") or {}
    values["per_token_p99_slo"] = slo.get("perTokenP99Seconds")
    values["ttft_p99_slo"] = slo.get("ttftP99Seconds")
    if data.get("costPrior"):
        prior = data["costPrior"]
        bad = sorted(set(prior) - set(_PRIOR_KEYS))
        if bad:
            raise TuningError(f"tuning.costPrior has unknown keys {bad}; known: {sorted(_PRIOR_KEYS)}")
        values["cost_prior"] = CostPrior(**{_PRIOR_KEYS[k]: float(v) for k, v in prior.items()})
    catalogue = _catalogue_limits(str(data["method"]))
    if catalogue is not None:
        drafting, method_min, method_max = catalogue
        values.setdefault("drafting", drafting)
        values["k_min"] = max(int(values.get("k_min", method_min)), method_min)
        values["k_max"] = min(int(values.get("k_max", method_max)), method_max)
    spec = TuningSpec(**values)
    if spec.drafting not in DRAFTING_STYLES:
        raise TuningError(f"tuning.drafting must be one of {DRAFTING_STYLES}, got {spec.drafting!r}")
    if not 1 <= spec.k_min <= spec.k_max:
        raise TuningError(
            f"tuning.kMin={spec.k_min} and kMax={spec.k_max} leave no K for method {spec.method!r}; "
            "the bounds must satisfy 1 <= kMin <= kMax within the method's limits"
        )
    if spec.max_batch_size < 1 or spec.max_restarts_per_hour < 1 or spec.confirmations < 1:
        raise TuningError("tuning.maxBatchSize, maxRestartsPerHour and confirmations must be >= 1")
    return spec


def tuning_to_dict(spec: TuningSpec) -> dict[str, Any]:
    """The camelCase dict form (for the benchmark's JSON and for tests)."""
    reverse = {snake: camel for camel, snake in _KEYS.items()}
    out: dict[str, Any] = {reverse[f.name]: getattr(spec, f.name) for f in fields(spec) if f.name in reverse}
    out["slo"] = {"perTokenP99Seconds": spec.per_token_p99_slo, "ttftP99Seconds": spec.ttft_p99_slo}
    out["costPrior"] = {camel: getattr(spec.cost_prior, snake) for camel, snake in _PRIOR_KEYS.items()}
    return out
