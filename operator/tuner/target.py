"""One resource as the tuning loop sees it: mode, policy input, applied config, rollout state. Pure.

Built from the cached SpeculativeInference object (spec + status). The applied config is
status.tuning.applied when the tuner has applied one, else what the spec renders to; it took
effect when the last rollout finished (the Progressing condition's transition), which the
policy needs so that no window mixes two configs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from specinfer.api import InvalidSpecError, SpeculativeInferenceSpec, effective_speculation, parse_spec
from specinfer.operator.conditions import find
from specinfer.runtime.methods import get_method


class TargetError(ValueError):
    """The resource cannot be tuned as it stands (invalid spec, method none); the message says why."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


@dataclass(frozen=True)
class ResourceTarget:
    namespace: str
    name: str
    uid: str | None
    generation: int | None
    mode: str
    interval_seconds: float
    spec: SpeculativeInferenceSpec | None
    status: Mapping[str, Any]

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def tuning_status(self) -> Mapping[str, Any]:
        return self.status.get("tuning") or {}


def parse_time(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def read_target(resource: Mapping[str, Any]) -> ResourceTarget:
    """Mode and interval even when the spec is invalid (then `spec` is None)."""
    meta = resource.get("metadata") or {}
    raw_tuning = (resource.get("spec") or {}).get("tuning") or {}
    try:
        spec = parse_spec(resource.get("spec") or {})
        mode, interval = spec.tuning.mode, float(spec.tuning.interval_seconds)
    except (InvalidSpecError, ValueError):
        spec = None
        mode, interval = str(raw_tuning.get("mode", "observe")), float(raw_tuning.get("intervalSeconds", 30))
    return ResourceTarget(namespace=meta.get("namespace", ""), name=meta.get("name", ""), uid=meta.get("uid"),
                          generation=meta.get("generation"), mode=mode, interval_seconds=interval, spec=spec,
                          status=resource.get("status") or {})


def schedule_to_policy(entries: Any) -> list[list[int]] | None:
    """Status/spec schedule entries (objects or (s, e, k) tuples) -> [[start, end, K], ...]."""
    if not entries:
        return None
    out = []
    for entry in entries:
        if isinstance(entry, Mapping):
            out.append([int(entry["minBatchSize"]), int(entry["maxBatchSize"]), int(entry["numSpeculativeTokens"])])
        else:
            out.append([int(v) for v in entry])
    return out


def schedule_to_status(schedule: Any) -> list[dict[str, int]] | None:
    if not schedule:
        return None
    return [{"minBatchSize": int(s), "maxBatchSize": int(e), "numSpeculativeTokens": int(k)} for s, e, k in schedule]


def tuning_input(spec: SpeculativeInferenceSpec, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The policy's tuning dict (docs/tuner.md) from spec.tuning, the catalogue and the engine settings.

    minNumSpeculativeTokens 0 or unset lets the policy switch drafting off (K = 0) at some batch
    sizes; the operator-wide `overrides` (operator configuration `tuning.policy`) come first so
    that the spec's bounds and SLOs always win.
    """
    tuning = spec.tuning
    method = get_method(spec.speculation.method)
    if method.vllm_method is None:
        raise TargetError("NoSpeculation", "spec.speculation.method is none: there is no draft length to tune")
    data: dict[str, Any] = dict(overrides or {})
    data["method"] = method.name
    low = tuning.min_num_speculative_tokens
    data["allowDisable"] = low is None or low == 0
    data["kMin"] = max(1, low or method.k_min)
    data["kMax"] = min(tuning.max_num_speculative_tokens or method.k_max_on(spec.hardware.accelerator),
                       method.k_max_on(spec.hardware.accelerator))
    # 0 restarts: the loop applies nothing (recommends only), so the policy's own budget must not hide the advice
    data["maxRestartsPerHour"] = tuning.max_restarts_per_hour or 60
    data["minDrafts"] = float(tuning.min_samples)
    # What a restart costs in serving capacity: Surge keeps every replica serving while the new pod
    # loads (0); Replace takes one replica down for restartSeconds, N times over -- restartSeconds of
    # full capacity whatever the replica count (1). An operator-wide value still wins, as before.
    data.setdefault("downtimeFraction", downtime_fraction(spec.update_strategy))
    slo = tuning.slo
    if slo is not None:
        data["slo"] = {"perTokenP99Seconds": slo.p99_time_per_output_token_seconds,
                       "ttftP99Seconds": slo.p99_time_to_first_token_seconds}
    simulator = spec.runtime.simulator if spec.runtime.engine == "simulator" else None
    if simulator is not None:
        data["maxBatchSize"] = simulator.max_num_seqs
        data["restartSeconds"] = _restart_seconds(simulator.cost_model) / simulator.time_scale
        data.setdefault("costPrior", simulator_cost_prior(simulator.cost_model, method.name, method.drafting))
    if data["kMin"] > data["kMax"]:
        raise TargetError("InvalidTuningBounds",
                          f"spec.tuning bounds leave no K for {method.name}: kMin {data['kMin']} > kMax {data['kMax']}")
    return data


def downtime_fraction(update_strategy: str) -> float:
    """The policy's downtimeFraction for a spec.updateStrategy (see docs/tuner.md)."""
    return 1.0 if update_strategy == "Replace" else 0.0


def _restart_seconds(preset: str) -> float:
    from specinfer.runtime.sim.model import restart_seconds

    return restart_seconds(preset)


def simulator_cost_prior(preset: str, method: str, drafting: str) -> dict[str, float]:
    """The step-cost prior for a simulated engine: its preset's roofline (the simulated hardware's
    datasheet), as a hardware profile would give it for a real one. The policy still fits the
    observed step times; the prior only decides what it believes about K values never run."""
    from specinfer.runtime.sim.model import cost_model, draft_scale

    preset_model = cost_model(preset)
    scale = draft_scale(method)
    draft_pass = preset_model.parallel_pass_s if drafting == "parallel" else preset_model.draft_pass_s
    per_token = preset_model.lookup_per_token_s if drafting == "none" else preset_model.draft_per_token_s
    return {"floorSeconds": preset_model.floor_s, "computePerTokenSeconds": preset_model.compute_per_token_s,
            "kvPerSequenceSeconds": preset_model.kv_per_seq_s, "kneeSharpness": preset_model.knee_sharpness,
            "draftPassSeconds": draft_pass * scale, "draftTokenSeconds": per_token * scale}


def spec_config(spec: SpeculativeInferenceSpec) -> dict[str, Any]:
    """K and schedule the spec alone renders to (no tuning applied)."""
    effective = effective_speculation(spec, None)
    return {"numSpeculativeTokens": effective.num_speculative_tokens,
            "schedule": [list(entry) for entry in effective.schedule] if effective.schedule else None}


def applied_choice(target: ResourceTarget) -> dict[str, Any] | None:
    """status.tuning.applied when it still belongs to this spec's method, else None."""
    applied = target.tuning_status.get("applied")
    if not applied or target.spec is None or applied.get("numSpeculativeTokens") is None:
        return None
    if applied.get("method") not in (None, target.spec.speculation.method):
        return None
    return dict(applied)


def applied_problem(target: ResourceTarget, tuning: Mapping[str, Any]) -> str | None:
    """Why status.tuning.applied no longer fits the spec (edited since), or None.

    The renderer refuses a tuned config the spec would not allow; the loop drops it instead,
    so the spec renders alone again and tuning restarts from there."""
    applied = target.tuning_status.get("applied")
    if not applied or target.spec is None:
        return None
    if applied.get("method") not in (None, target.spec.speculation.method):
        return (f"status.tuning.applied is for method {applied.get('method')}, the spec now says "
                f"{target.spec.speculation.method}")
    ks = [int(applied.get("numSpeculativeTokens") or 0)] + [
        int(entry["numSpeculativeTokens"]) for entry in applied.get("schedule") or []]
    if max(ks) > tuning["kMax"]:
        return f"status.tuning.applied uses K={max(ks)}, above the spec's bound {tuning['kMax']}"
    if not tuning.get("allowDisable", True) and 0 in ks:
        return "status.tuning.applied turns drafting off, which spec.tuning.minNumSpeculativeTokens now forbids"
    try:
        effective_speculation(target.spec, applied)
    except (ValueError, InvalidSpecError) as error:
        return f"status.tuning.applied does not fit the spec: {error}"
    return None


def _rollout_finished_at(status: Mapping[str, Any]) -> float | None:
    progressing = find(status.get("conditions"), "Progressing")
    if progressing and progressing.get("status") == "False":
        return parse_time(progressing.get("lastTransitionTime"))
    return None


def rollout_in_progress(target: ResourceTarget, config: Mapping[str, Any]) -> bool:
    """The pods do not (all) run `config` yet: a rollout is under way or about to start."""
    status = target.status
    ready, progressing = find(status.get("conditions"), "Ready"), find(status.get("conditions"), "Progressing")
    if not ready or ready.get("status") != "True" or (progressing and progressing.get("status") == "True"):
        return True
    effective = status.get("effective") or {}
    running_k = int(effective.get("numSpeculativeTokens") or 0)
    return (running_k != int(config["numSpeculativeTokens"] or 0)
            or (schedule_to_policy(effective.get("schedule")) or None) != (config.get("schedule") or None))


def observed_applied(target: ResourceTarget, created: float | None = None) -> dict[str, Any]:
    """The observation's `applied` section: config, method and since (epoch seconds)."""
    assert target.spec is not None
    choice = applied_choice(target)
    if choice is not None:
        config = {"numSpeculativeTokens": int(choice["numSpeculativeTokens"]),
                  "schedule": schedule_to_policy(choice.get("schedule"))}
        applied_at = parse_time(choice.get("since"))
    else:
        config, applied_at = spec_config(target.spec), None
    finished = _rollout_finished_at(target.status)
    since = max([t for t in (applied_at, finished, created) if t is not None], default=0.0)
    return {"method": target.spec.speculation.method, **config, "since": since}
