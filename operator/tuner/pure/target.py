"""One resource as the tuning loop sees it: mode, policy input, applied config, rollout state. Pure.

Built from the cached SpeculativeInference object (spec + status). The applied config is
status.tuning.applied when the tuner has applied one, else what the spec renders to; it took
effect when the last rollout finished (the Progressing condition's transition), which the
policy needs so that no window mixes two configs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from specinfer.api import InvalidSpecError, SpeculativeInferenceSpec, effective_spec, effective_speculation, parse_spec
from specinfer.api.adaptive_rules import adaptive_on
from specinfer.api.auto import is_auto, selected_candidate, serving_spec
from specinfer.api.parse import data_parallel_size
from specinfer.api.status import Condition, SpeculationChoice, SpeculativeInferenceStatus, StepCostSource, TuningStatus
from specinfer.api.timestamps import parse_rfc3339
from specinfer.operator.tuner.policy import AppliedConfig, CostPrior, DraftConfig, TuningInput
from specinfer.operator.tuner.pure.calibrated import with_calibration
from specinfer.operator.tuner.pure.convert import config_of
from specinfer.operator.tuner.pure.settings import PolicyDefaults
from specinfer.runtime.contract.live_schedule.envelope import initial_choice, live_envelope
from specinfer.runtime.methods import cost_model, draft_scale, get_method, restart_seconds
from specinfer.runtime.methods.engine_truth import drafting, k_problems, mtp_k_accepted, schedule_support


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
    created: float | None
    mode: str
    interval_seconds: float
    spec: SpeculativeInferenceSpec | None  # None: the spec is invalid (the reconciler reports why)
    status: SpeculativeInferenceStatus
    status_problem: str | None = None  # the stored status does not read as our status model
    auto: bool = False  # spec.speculation.method auto: `spec` is the candidate status.selection names

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def tuning_status(self) -> TuningStatus:
        return self.status.tuning or TuningStatus()

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.status.conditions or () if c.type == type_), None)


def read_target(resource: Mapping[str, Any]) -> ResourceTarget:
    """Mode and interval even when the spec is invalid (then `spec` is None)."""
    meta = resource.get("metadata") or {}
    raw_spec = resource.get("spec") or {}
    try:
        written = parse_spec(raw_spec)
        # method auto: the candidate that serves (status.selection), tuned within its method
        spec: SpeculativeInferenceSpec | None = serving_spec(written, selected_candidate(resource.get("status")))
        auto = is_auto(written)
    except (InvalidSpecError, ValueError):
        spec, auto = None, False
    mode: str
    if spec is not None:
        mode, interval = spec.tuning.mode, float(spec.tuning.interval_seconds)
    else:
        tuning = raw_spec.get("tuning")
        raw_tuning: Mapping[str, Any] = tuning if isinstance(tuning, Mapping) else {}
        mode = str(raw_tuning.get("mode", "observe"))
        raw_interval = raw_tuning.get("intervalSeconds", 30)
        interval = float(raw_interval) if isinstance(raw_interval, (int, float)) and raw_interval >= 5 else 30.0
    problem = None
    try:
        status = SpeculativeInferenceStatus.model_validate(resource.get("status") or {})
    except ValidationError as error:
        status, problem = SpeculativeInferenceStatus(), f"the stored status does not read as a {error.title}: {error}"
    return ResourceTarget(namespace=meta.get("namespace", ""), name=meta.get("name", ""), uid=meta.get("uid"),
                          generation=meta.get("generation"), created=parse_rfc3339(meta.get("creationTimestamp")),
                          mode=mode, interval_seconds=interval, spec=spec, status=status, status_problem=problem,
                          auto=auto)


def tuning_input(spec: SpeculativeInferenceSpec, defaults: PolicyDefaults | None = None) -> TuningInput:
    """The policy's input from spec.tuning, the catalogue and the engine settings (docs/tuner.md).

    minNumSpeculativeTokens 0 or unset lets the policy switch drafting off (K = 0) at some batch
    sizes. Operator-wide `defaults` (operator configuration `tuning.policy`) fill what the spec does
    not say; what the spec decides always wins."""
    tuning = spec.tuning
    method = get_method(spec.speculation.method)
    if method.vllm_method is None:
        raise TargetError("NoSpeculation", "spec.speculation.method is none: there is no draft length to tune")
    accelerator_k_max = method.k_max_on(spec.hardware.accelerator)
    low = tuning.min_num_speculative_tokens
    fields: dict[str, Any] = (defaults.model_dump(exclude_unset=True, exclude={"method"}) if defaults else {})
    fields.update(
        method=method.name,
        cost_shape=method.cost_shape,
        allow_disable=low is None or low == 0,
        k_min=max(1, low or method.k_min),
        k_max=min(tuning.max_num_speculative_tokens or accelerator_k_max, accelerator_k_max),
        # 0: in place only; the policy holds a change that needs a rollout and says why (guards.budget_guard)
        max_restarts_per_hour=tuning.max_restarts_per_hour,
        min_drafts=float(tuning.min_samples),
    )
    # What a restart costs in serving capacity: Surge keeps every replica serving while the new pod
    # loads (0); Replace takes each replica down in turn for restartSeconds (1), and what that costs
    # the fleet depends on the load the other replicas then carry (policy/restart.py). An
    # operator-wide value still wins.
    fields.setdefault("downtime_fraction", downtime_fraction(spec.update_strategy))
    fields["replicas"] = max(1, spec.replicas)
    slo = tuning.slo
    if slo is not None:
        fields["slo"] = {"per_token_p99_seconds": slo.p99_time_per_output_token_seconds,
                         "ttft_p99_seconds": slo.p99_time_to_first_token_seconds}
    simulator = spec.runtime.simulator if spec.runtime.engine == "simulator" else None
    if simulator is not None:
        fields["max_batch_size"] = simulator.max_num_seqs
        fields["restart_seconds"] = restart_seconds(simulator.cost_model) / simulator.time_scale
        fields.setdefault("cost_prior", simulator_cost_prior(simulator.cost_model, method.name))
    if fields["k_min"] > fields["k_max"]:
        raise TargetError("InvalidTuningBounds", f"spec.tuning bounds leave no K for {method.name}: "
                                                 f"kMin {fields['k_min']} > kMax {fields['k_max']}")
    fields.update(engine_truth(spec, fields["k_min"], fields["k_max"]))
    envelope = live_envelope(spec)
    if envelope is not None:  # retuned in place: changes within the engine's startup maximum restart nothing
        fields["in_place_max_k"] = envelope.max_k
    fields["allow_adaptive_verification"] = adaptive_accepted(spec)
    try:
        built = TuningInput(**fields)
    except ValidationError as error:
        raise TargetError("InvalidTuningInput", f"the tuning input is invalid: {error}") from None
    return with_drafting_law(built, spec)


def with_drafting_law(tuning: TuningInput, spec: SpeculativeInferenceSpec) -> TuningInput:
    """`tuning` whose cost prior prices drafting as this config's drafter does (runtime/methods/drafters.py):
    the step's K or the engine's startup K, what a K = 0 step runs, and -- for a drafter that drafts its
    startup K every step -- the envelope an in-place engine runs (`in_place_max_k`), which it pays whatever
    the published schedule."""
    fact = drafting(spec.speculation.method, spec.hardware.accelerator, _advanced(spec),
                    mtp_modules=spec.speculation.mtp_modules)
    if fact is None:
        return tuning
    startup_k = tuning.in_place_max_k if fact.drafts_startup_k else None
    law = {"drafted_k": fact.drafted, "zero_step": fact.zero_step, "startup_k": startup_k}
    prior = tuning.cost_prior
    if all(getattr(prior, name) == value for name, value in law.items()):
        return tuning
    return tuning.model_copy(update={"cost_prior": prior.model_copy(update=law)})


def _advanced(spec: SpeculativeInferenceSpec) -> dict[str, Any]:
    advanced = spec.speculation.advanced
    return advanced.model_dump(exclude_none=True) if advanced else {}


def engine_truth(spec: SpeculativeInferenceSpec, k_min: int, k_max: int) -> dict[str, Any]:
    """What the engine would drop, refuse or run differently, as tuning-input fields (docs/tuner.md,
    "Engine truth"), from the catalogue's rules for this method, accelerator and advanced settings:

    - allowSchedule false where vLLM drops a Dynamic SD schedule (and drafts a static K) or crashes
      on it: data parallelism > 1, or a drafter on Model Runner V1 that takes no per-step K;
    - scheduleStepFactor: on Model Runner V1 with full CUDA graphs a schedule downgrades them to
      PIECEWISE, slowing every step (the simulator has no CUDA graphs: 1 there);
    - kMin..kMax narrowed to the draft lengths vLLM accepts with the advanced settings (FLy needs
      K >= 2 and fly_window_size < K; synthetic_acceptance_rates fixes K to its length), and for MTP
      with spec.speculation.mtpModules to the K up to the first one vLLM refuses (above the module
      count only its multiples start).

    Raises TargetError when no K is left."""
    method, accelerator, advanced = spec.speculation.method, spec.hardware.accelerator, _advanced(spec)
    verdict = schedule_support(method, accelerator, advanced=advanced,
                               data_parallel_size=data_parallel_size(spec.runtime.extra_args))
    fields: dict[str, Any] = {}
    if not verdict.honoured:
        fields["allow_schedule"] = False
    if verdict.piecewise_graphs and spec.runtime.engine == "vllm":
        fields["schedule_step_factor"] = verdict.step_time_factor
    accepted = [k for k in range(k_min, k_max + 1) if not k_problems(accelerator, k, advanced)]
    if not accepted:
        problems = "; ".join(f"spec.speculation.advanced.{p.field} {p.message}"
                             for p in k_problems(accelerator, k_max, advanced))
        raise TargetError("InvalidTuningBounds", f"no draft length in {k_min}..{k_max} runs with these settings: "
                                                 f"{problems}")
    # MTP with a stated module count: above the count only its multiples start
    modules = spec.speculation.mtp_modules
    started = [k for k in accepted if mtp_k_accepted(k, modules)]
    if not started:
        raise TargetError("InvalidTuningBounds", f"no draft length in {k_min}..{k_max} starts with "
                                                 f"spec.speculation.mtpModules {modules}: vLLM needs a K at or below "
                                                 "the module count, or a multiple of it; lower "
                                                 "spec.tuning.minNumSpeculativeTokens")
    # the accepted K form one range (a floor from FLy, or the single K that synthetic rates allow), which stops
    # below the first K vLLM would refuse: the policy moves K by any step within its bounds
    k_high = min(started)
    while k_high + 1 in started:
        k_high += 1
    fields["k_min"], fields["k_max"] = min(started), k_high
    return fields


def engine_problem(spec: SpeculativeInferenceSpec, config: DraftConfig) -> str | None:
    """Why the engine would not run `config` as written (None: it would), with the source line."""
    if config.off:
        return None
    advanced = _advanced(spec)
    if config.schedule:
        verdict = schedule_support(spec.speculation.method, spec.hardware.accelerator, advanced=advanced,
                                   data_parallel_size=data_parallel_size(spec.runtime.extra_args))
        if not verdict.honoured:
            return f"{verdict.reason} ({verdict.source})"
    for problem in k_problems(spec.hardware.accelerator, config.num_speculative_tokens, advanced):
        return f"spec.speculation.advanced.{problem.field} {problem.message} ({problem.source})"
    return None


def downtime_fraction(update_strategy: str) -> float:
    """The policy's downtimeFraction for a spec.updateStrategy (see docs/tuner.md)."""
    return 1.0 if update_strategy == "Replace" else 0.0


def simulator_cost_prior(preset: str, method: str) -> CostPrior:
    """The step-cost prior for a simulated engine: its preset's roofline (the simulated hardware's
    datasheet), as a hardware profile would give it for a real one. The policy still fits the
    observed step times; the prior only decides what it believes about K values never run.
    A pass and a drafted token cost what the method's cost shape says: a parallel drafter's block pass,
    else one sequential pass; a lookup's token, else a model's."""
    preset_model, spec = cost_model(preset), get_method(method)
    scale = draft_scale(method)
    draft_pass = preset_model.parallel_pass_s if spec.cost_shape == "parallel" else preset_model.draft_pass_s
    per_token = preset_model.lookup_per_token_s if spec.cost_shape == "lookup" else preset_model.draft_per_token_s
    return CostPrior(floor=preset_model.floor_s, compute_per_token=preset_model.compute_per_token_s,
                     kv_per_sequence=preset_model.kv_per_seq_s, knee_sharpness=preset_model.knee_sharpness,
                     draft_pass=draft_pass * scale, draft_token=per_token * scale,
                     speculation_step=preset_model.speculation_step_s,
                     speculation_per_sequence=preset_model.speculation_per_seq_s,
                     prefill_per_token=preset_model.prefill_per_token_s)


def spec_config(spec: SpeculativeInferenceSpec) -> DraftConfig:
    """K and schedule the spec alone renders to (no tuning applied; retuned in place, the startup choice)."""
    effective = effective_speculation(spec, initial_choice(spec))
    return DraftConfig(num_speculative_tokens=effective.num_speculative_tokens,
                       schedule=tuple(effective.schedule) if effective.schedule else None,
                       adaptive_verification=adaptive_on(spec))


def adaptive_accepted(spec: SpeculativeInferenceSpec) -> bool:
    """vLLM runs adaptive verification for this resource: admission accepts the spec with
    speculation.advanced.enable_adaptive_verification on (api/adaptive_rules.py: Model Runner V2, full CUDA
    graphs, no LoRA, ...), so the tuner may turn it on or off."""
    try:
        effective_spec(spec, SpeculationChoice(adaptive_verification=True))
    except (ValueError, InvalidSpecError):
        return False
    return True


def applied_config(target: ResourceTarget) -> DraftConfig | None:
    """status.tuning.applied when it still belongs to this spec's method, else None."""
    applied = target.tuning_status.applied
    if applied is None or target.spec is None or applied.num_speculative_tokens is None:
        return None
    if applied.method not in (None, target.spec.speculation.method):
        return None
    return config_of(applied, target.spec)


def switched_method(target: ResourceTarget) -> str | None:
    """Method auto chose another candidate: status.tuning.applied tuned the one before, and goes (no fault)."""
    applied = target.tuning_status.applied
    if not target.auto or applied is None or target.spec is None:
        return None
    if applied.method in (None, target.spec.speculation.method):
        return None
    return (f"method auto now serves {target.spec.speculation.method}: the config tuned for {applied.method} "
            "no longer applies")


def applied_problem(target: ResourceTarget, tuning: TuningInput) -> str | None:
    """Why status.tuning.applied no longer fits the spec (edited since), or None.

    The renderer refuses a tuned config the spec would not allow; the loop drops it instead,
    so the spec renders alone again and tuning restarts from there."""
    applied = target.tuning_status.applied
    if applied is None or target.spec is None:
        return None
    if applied.method not in (None, target.spec.speculation.method):
        return (f"status.tuning.applied is for method {applied.method}, the spec now says "
                f"{target.spec.speculation.method}")
    ks = [applied.num_speculative_tokens or 0] + [entry.num_speculative_tokens for entry in applied.schedule or ()]
    if max(ks) > tuning.k_max:
        return f"status.tuning.applied uses K={max(ks)}, above the spec's bound {tuning.k_max}"
    if not tuning.allow_disable and 0 in ks:
        return "status.tuning.applied turns drafting off, which spec.tuning.minNumSpeculativeTokens now forbids"
    try:
        effective_speculation(target.spec, applied)
    except (ValueError, InvalidSpecError) as error:
        return f"status.tuning.applied does not fit the spec: {error}"
    not_run = engine_problem(target.spec, config_of(applied, target.spec))
    if not_run:
        return f"status.tuning.applied is not what the engine would run: {not_run}"
    return None


def _rollout_finished_at(target: ResourceTarget) -> float | None:
    progressing = target.condition("Progressing")
    if progressing is not None and progressing.status == "False":
        return parse_rfc3339(progressing.last_transition_time)
    return None


def rollout_in_progress(target: ResourceTarget, config: DraftConfig) -> bool:
    """The pods do not (all) run `config` yet: a rollout is under way or about to start."""
    ready, progressing = target.condition("Ready"), target.condition("Progressing")
    if ready is None or ready.status != "True" or (progressing is not None and progressing.status == "True"):
        return True
    effective = target.status.effective
    running = config_of(effective) if effective is not None else DraftConfig(num_speculative_tokens=0)
    # adaptive verification counts only while speculating (DraftConfig.adaptive): K = 0 with the flag set is off
    return (running.num_speculative_tokens, running.schedule, running.adaptive) \
        != (config.num_speculative_tokens, config.schedule, config.adaptive)


def observed_applied(target: ResourceTarget) -> AppliedConfig:
    """The config in force, its method and since when (epoch seconds)."""
    assert target.spec is not None
    choice = applied_config(target)
    applied = target.tuning_status.applied
    applied_at = parse_rfc3339(applied.since) if choice is not None and applied is not None else None
    config = choice if choice is not None else spec_config(target.spec)
    finished = _rollout_finished_at(target)
    since = max([t for t in (applied_at, finished, target.created) if t is not None], default=0.0)
    return AppliedConfig(method=target.spec.speculation.method, config=config, since=since)


def with_engine_envelope(tuning: TuningInput, target: ResourceTarget) -> TuningInput:
    """`tuning` priced for the engine that runs: changes are in place only where the pods were rendered to
    follow a published schedule (status.effective.liveSchedule), whatever the spec would allow now."""
    effective = target.status.effective
    live = effective.live_schedule if effective is not None else None
    max_k = live.max_num_speculative_tokens if live is not None else None
    moved = tuning if tuning.in_place_max_k == max_k else tuning.model_copy(update={"in_place_max_k": max_k})
    return moved if target.spec is None else with_drafting_law(moved, target.spec)


# -- calibration (issue 17; operator/tuner/pure/calibrated.py) ----------------------------------------


def calibrated_tuning_input(target: ResourceTarget, tuning: TuningInput,
                            defaults: PolicyDefaults | None = None) -> tuple[TuningInput, StepCostSource]:
    """`tuning` with the cost prior fitted to status.calibration's measured table when it still describes
    what runs, and what status.tuning.stepCost reports. A measured table wins over any configured prior."""
    assert target.spec is not None
    configured = defaults is not None and "cost_prior" in defaults.model_fields_set
    calibrated, source = with_calibration(tuning, target.spec, target.status.calibration, configured_prior=configured)
    # a measured table fits the prior's terms; how the drafter's work follows K stays the engine's
    return with_drafting_law(calibrated, target.spec), source
