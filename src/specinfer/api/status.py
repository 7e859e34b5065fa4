"""`status`: what the reconciler and the tuning loop report.

Both writers build these models and apply their JSON (`status_patch`), so a misspelt key cannot
reach the API server (which would prune it in silence). Status models ignore unknown fields when
reading (an older operator may read a status written by a newer one); the CRD still prunes
anything not declared here.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from specinfer.api.base import MAX_TEXT, Name, ShortText, StatusModel, Text
from specinfer.api.speculation import K_CEILING, MAX_SCHEDULE_RANGES, CandidateName, MethodName

ConditionType = Literal["Ready", "Progressing", "Degraded", "Tuned", "TuningDegraded", "Complete", "Failed"]
ConditionStatus = Literal["True", "False", "Unknown"]
# keep: nothing to do or a guard held; recommend: a change the policy chose but did not apply
# (observe mode); the others change the running config.
DecisionAction = Literal["keep", "recommend", "setK", "setSchedule", "disable", "reenable", "rollback"]
Timestamp = Annotated[str, Field(max_length=64)]  # RFC 3339
MAX_HISTORY = 20
MAX_STEP_COST_CELLS = 72  # (up to 8 K + K = 0) x up to 8 batch sizes


class Condition(StatusModel):
    """A kstatus condition (metav1.Condition shape)."""

    MAX_MESSAGE: ClassVar[int] = MAX_TEXT

    type: ShortText
    """Ready, Progressing, Degraded, Tuned or TuningDegraded."""
    status: ConditionStatus
    """Condition status."""
    reason: ShortText | None = None
    """CamelCase reason, e.g. InvalidSpec, RolloutInProgress, PrometheusUnreachable."""
    message: Text | None = None
    """Human-readable detail."""
    last_transition_time: Timestamp | None = None
    """When status last changed."""
    observed_generation: int | None = Field(default=None, ge=0)
    """metadata.generation this condition was computed from."""


class ScheduleEntry(StatusModel):
    """One Dynamic SD range as applied (same meaning as spec.speculation.schedule[])."""

    min_batch_size: int = Field(ge=1)
    """First batch size, inclusive."""
    max_batch_size: int = Field(ge=1)
    """Last batch size, inclusive."""
    num_speculative_tokens: int = Field(ge=0, le=K_CEILING)
    """Draft length in the range (0: no drafting)."""


class SpeculationChoice(StatusModel):
    """A method + K + schedule: what runs, what is recommended or what was applied."""

    method: MethodName | None = None
    """Speculative-decoding method."""
    num_speculative_tokens: int | None = Field(default=None, ge=0, le=K_CEILING)
    """Draft length K (the maximum when a schedule is set; 0: speculation off)."""
    schedule: list[ScheduleEntry] | None = Field(default=None, max_length=MAX_SCHEDULE_RANGES)
    """Dynamic SD schedule, if any."""
    adaptive_verification: bool | None = None
    """vLLM's adaptive verification on (true) or off (false) whatever spec.speculation.advanced says; unset:
    as the spec says. The tuner sets it where vLLM runs it for this resource (a rollout)."""


RetunePath = Literal["inPlace", "rollout"]


class LiveScheduleStatus(StatusModel):
    """An engine retuned in place: what it was started with and the schedule published to it."""

    max_num_speculative_tokens: int = Field(ge=1, le=K_CEILING)
    """The engine's startup maximum K: a choice within it is applied in place, a larger one rolls out."""
    digest: ShortText
    """Digest of the published schedule; the engine exports the digest in force (specinfer:live_schedule_info)."""
    config_map: ShortText
    """The ConfigMap holding the published schedule (mounted into the engine pods as a directory)."""


class EffectiveConfig(SpeculationChoice):
    """The configuration the pods run now: spec merged with the applied tuning."""

    config_hash: ShortText | None = None
    """Hash of the rendered engine configuration; changes exactly when a rollout is needed."""
    model_runner: Literal["v1", "v2"] | None = None
    """The vLLM model runner this config runs on (from the catalogue's engine facts for the accelerator's
    engine release): V1 keeps a schedule only for some drafters, V2 for all."""
    piecewise_cuda_graphs: bool | None = None
    """True when the schedule makes vLLM capture PIECEWISE instead of full CUDA graphs (Model Runner V1 on
    GPUs; about 19% per step at small batch sizes, vllm#49548); the tuner prices it."""
    live_schedule: LiveScheduleStatus | None = None
    """Set when the engine is retuned in place: K and schedule above are the published schedule."""
    adaptive_verification: bool | None = None
    """True when vLLM verifies adaptively (spec.speculation.advanced.enable_adaptive_verification): every step
    verifies only the drafted tokens worth verifying, so K above is what is drafted, at most what is verified."""
    evidence: Literal["engine", "source", "docs"] | None = None
    """What the catalogue's facts about this method on this accelerator rest on: engine (served by the real
    engine in specinfer's tests), source (read from the pinned release's source only, never run: every GPU
    and Ascend cell today; docs/engine-truth.md) or docs (the platform's documentation)."""


class Recommendation(SpeculationChoice):
    """The tuner's current best configuration."""

    reason: Text | None = None
    """Why this configuration."""
    predicted_gain: float | None = None
    """Predicted relative goodput change versus the applied configuration (0.12 = +12%)."""
    time: Timestamp | None = None
    """When it was computed."""


class AppliedConfig(SpeculationChoice):
    """The tuned configuration in force (in auto mode), which rendering merges over the spec."""

    since: Timestamp | None = None
    """When it was applied."""
    path: RetunePath | None = None
    """How it reaches the engine: inPlace (a new published schedule, no restart) or rollout (new pods)."""


class Decision(StatusModel):
    """One tuning decision."""

    time: Timestamp | None = None
    """When it was taken."""
    action: DecisionAction
    """keep (nothing to do, or a guard held: see reason), recommend (a change chosen but not applied:
    observe mode), setK, setSchedule, disable, reenable or rollback."""
    reason: Text | None = None
    """Why."""
    predicted_gain: float | None = None
    """Predicted relative goodput change."""
    num_speculative_tokens: int | None = Field(default=None, ge=0, le=K_CEILING)
    """K chosen by this decision, if any."""
    schedule: list[ScheduleEntry] | None = Field(default=None, max_length=MAX_SCHEDULE_RANGES)
    """Schedule chosen by this decision, if any."""
    path: RetunePath | None = None
    """For a change: applied in place (no restart) or by a rollout."""


class StepCostSource(StatusModel):
    """What the tuner's step-cost model T(B, K) starts from, before live step times refine it."""

    source: Literal["calibration", "roofline", "simulatorPreset", "operatorConfig"]
    """calibration: the measured table of status.calibration; roofline: the policy's default prior (an 8B
    model on one H100); simulatorPreset: the simulated hardware's preset; operatorConfig: the operator
    configuration's tuning.policy.costPrior."""
    calibration: Name | None = None
    """The SpeculativeInferenceCalibration that measured the table."""
    measured_at: Timestamp | None = None
    """When it finished."""
    cells: int | None = Field(default=None, ge=0)
    """Measured (batch size, K) cells the prior was fitted to."""
    fit_error: float | None = Field(default=None, ge=0)
    """Largest relative error of the fitted prior on those cells (0.05 = 5%)."""
    message: Text | None = None
    """Why a calibration is not used (stale, another method), when one exists."""


class LiveScheduleInForce(StatusModel):
    """What the engines of an in-place resource report running (specinfer:live_schedule_info)."""

    digest: ShortText | None = None
    """The schedule digest every engine pod reports; unset while they disagree or report nothing."""
    pods: int = Field(default=0, ge=0)
    """Engine pods reporting the published digest."""
    reporting: int = Field(default=0, ge=0)
    """Engine pods reporting any schedule."""
    since: Timestamp | None = None
    """When the last of them took it (the engine's own clock)."""
    errors: int = Field(default=0, ge=0)
    """Published schedules the engines refused so far (specinfer:live_schedule_errors_total)."""


class TuningStatus(StatusModel):
    """What the tuner sees, recommends and did."""

    mode: Literal["off", "observe", "auto"] | None = None
    """The mode in force."""
    recommendation: Recommendation | None = None
    """Current recommendation."""
    applied: AppliedConfig | None = None
    """Tuned configuration applied to the pods (auto mode)."""
    last_decision: Decision | None = None
    """Most recent decision."""
    realised_gain: float | None = None
    """Measured relative goodput change since the last applied change."""
    history: list[Decision] | None = Field(default=None, max_length=MAX_HISTORY)
    """Recent decisions, newest first (bounded)."""
    restarts_last_hour: int | None = Field(default=None, ge=0)
    """Rollouts triggered by the tuner in the last hour."""
    signals: Literal["specinfer", "vllm", "vllm-biased"] | None = None
    """Telemetry the decisions use: specinfer (the stat-logger plugin's unbiased series), vllm (vLLM's
    standard series only) or vllm-biased (vLLM's series under a schedule, per-position acceptance biased low)."""
    in_force: LiveScheduleInForce | None = None
    """In-place resources: the schedule the engines report running, read from their metrics."""
    policy_state: str | None = Field(default=None, max_length=65536)
    """The policy's memory between decisions (JSON: learnt step cost and acceptance, restart times,
    the change being verified); kept here so an operator restart or failover forgets nothing."""
    step_cost: StepCostSource | None = None
    """Where the step-cost model the decisions start from comes from: a calibration's measured table, or a
    roofline prior (docs/calibration.md)."""


class MetricsStatus(StatusModel):
    """Latest metrics summary from Prometheus."""

    acceptance_rate: float | None = Field(default=None, ge=0, le=1)
    """accepted / drafted tokens."""
    mean_accepted_length: float | None = Field(default=None, ge=0)
    """Tokens emitted per draft step, including the bonus token."""
    per_position_acceptance: list[float] | None = Field(default=None, max_length=K_CEILING)
    """P(position i accepted) for i = 0..K-1."""
    p99_time_per_output_token_seconds: float | None = Field(default=None, ge=0)
    """p99 per-token decode time."""
    p99_time_to_first_token_seconds: float | None = Field(default=None, ge=0)
    """p99 time to first token."""
    mean_batch_size: float | None = Field(default=None, ge=0)
    """Mean running requests."""
    tokens_per_second: float | None = Field(default=None, ge=0)
    """Generated tokens per second across replicas."""
    tokens_per_request_second: float | None = Field(default=None, ge=0)
    """Tokens each running request got per second of its decoding (generated tokens / the sum of their
    inter-token times): the engine's speed at the load it ran, whatever the method."""
    sampled_at: Timestamp | None = None
    """When the metrics were read."""


class CostStatus(StatusModel):
    """Cost of the running configuration, from the operator's prices (per device-hour; cpu: per replica-hour)."""

    currency: ShortText
    """ISO 4217 code of the prices, e.g. USD."""
    price_per_hour: float = Field(ge=0)
    """What the replicas cost per hour (price x devices per replica x replicas)."""
    per_million_tokens: float | None = Field(default=None, ge=0)
    """Price per hour / millions of tokens generated per hour, at the measured load (unset while nothing is
    generated)."""
    last_change_saving_per_million_tokens: float | None = None
    """What the tuner's last change saves per million tokens at the same utilisation, from its realised gain
    (negative: the change made tokens dearer)."""


class StepCostCell(StatusModel):
    """One measured step time."""

    batch_size: float = Field(gt=0, le=65536)
    """Running requests per step, measured."""
    num_speculative_tokens: int = Field(ge=0, le=K_CEILING)
    """Draft length (0: no speculation)."""
    seconds: float = Field(gt=0, le=3600)
    """Mean engine step time."""


class CalibrationSummary(StatusModel):
    """The latest successful calibration of this resource (written by the calibration controller)."""

    name: Name
    """The SpeculativeInferenceCalibration."""
    completed_at: Timestamp
    """When it finished."""
    fingerprint: ShortText
    """Hash of the model, hardware and runtime it measured; the tuner ignores the table once they change."""
    method: MethodName
    """The method the step-cost table is for (the one this resource ran when measured)."""
    step_cost: list[StepCostCell] = Field(default_factory=list, max_length=MAX_STEP_COST_CELLS)
    """Measured step time by batch size and K, K = 0 (no speculation) included: the tuner fits its step-cost
    prior to this instead of assuming a roofline."""
    recommendation: Text | None = None
    """The method comparison, e.g. `ngram beats the configured draftModel by 18% at your batch sizes`.
    Never applied automatically."""


SelectionPhase = Literal["Measuring", "Chosen", "Failed"]
SwitchVerdict = Literal["Verified", "RolledBack", "Unverified"]
MAX_SELECTION_HISTORY = 10
MAX_ATTEMPTS = 10_000  # read back from the API server: bounded, so no arithmetic on it can blow up


class SelectionChoice(StatusModel):
    """One comparison's outcome for method auto."""

    time: Timestamp
    """When it was decided."""
    candidate: CandidateName
    """The candidate chosen."""
    method: ShortText
    """Its method (plain text: a history entry outlives a method leaving the catalogue)."""
    num_speculative_tokens: int | None = Field(default=None, ge=0, le=K_CEILING)
    """The draft length it was measured and starts at (0: no speculation)."""
    calibration: Name | None = None
    """The SpeculativeInferenceCalibration that compared the candidates."""
    reason: Text
    """Why, e.g. `ngram beat none by 21% at batch sizes 1-8 on the measured prompts`."""
    predicted_gain: float | None = Field(default=None, ge=-1, le=1000)
    """A switch: its goodput over the candidate that served, as the comparison measured it (0.21 = +21%)."""
    realised_gain: float | None = Field(default=None, ge=-1, le=1000)
    """A switch: the same, measured on the live traffic once it served (unset until verified)."""
    verdict: SwitchVerdict | None = None
    """A switch: Verified (kept), RolledBack (it measured worse than what served before), or Unverified (no
    live measurement could judge it)."""


class ExcludedCandidate(StatusModel):
    """A candidate left out of comparisons: its engine failed there or serving (until the spec changes), or it
    measured worse on the live traffic than what it replaced (until `until`)."""

    name: CandidateName
    """The candidate."""
    reason: Text
    """Why."""
    until: Timestamp | None = None
    """Left out until then; unset: until the spec changes."""


class LiveSpeed(StatusModel):
    """The serving candidate's speed on the live traffic (status.metrics windows, averaged)."""

    tokens_per_request_second: float = Field(gt=0)
    """status.metrics.tokensPerRequestSecond, averaged over the windows."""
    mean_batch_size: float = Field(ge=0)
    """The load it was measured at."""
    windows: int = Field(ge=1, le=MAX_ATTEMPTS)
    """Tuner windows averaged."""
    sampled_at: Timestamp
    """The last window's time (a window is counted once)."""


class SwitchVerification(StatusModel):
    """A method switch being verified: the live speed of the candidate switched to against what served before."""

    candidate: CandidateName
    """The candidate switched to."""
    previous: CandidateName
    """The candidate it replaced: what a rollback returns to."""
    predicted_gain: float | None = Field(default=None, ge=-1, le=1000)
    """What the comparison measured: goodput over the previous candidate, minus 1 (unset: it was not measured)."""
    predicted_accepted_length: float | None = Field(default=None, ge=1, le=K_CEILING + 1)
    """Tokens per step the comparison measured for the candidate (speculating candidates)."""
    baseline: LiveSpeed | None = None
    """The previous candidate's live speed before the switch (unset: it served no traffic meanwhile)."""
    chosen_at: Timestamp
    """When the switch was chosen."""
    serving_since: Timestamp | None = None
    """When the pods first ran the candidate alone (no rollout in progress)."""
    speeds: list[Annotated[float, Field(ge=0)]] = Field(default_factory=list, max_length=8)
    """status.metrics.tokensPerRequestSecond of each window since it served alone."""
    batch_sizes: list[Annotated[float, Field(ge=0)]] = Field(default_factory=list, max_length=8)
    """status.metrics.meanBatchSize of the same windows."""
    accepted_lengths: list[Annotated[float, Field(ge=0)]] = Field(default_factory=list, max_length=8)
    """status.metrics.meanAcceptedLength of the same windows (speculating candidates)."""
    last_sampled_at: Timestamp | None = None
    """The last window counted."""


class SelectionStatus(StatusModel):
    """Method auto: which candidate serves, why, and the comparison behind it (docs/selection.md)."""

    candidate: CandidateName | None = None
    """The candidate that serves; unset: spec.speculation.initial serves until a comparison has a winner."""
    method: MethodName | None = None
    """Its method (also status.effective.method and the printer's Method column once the pods run it)."""
    phase: SelectionPhase | None = None
    """Measuring (a comparison runs), Chosen (a winner serves) or Failed (the last comparison failed; what
    serves keeps serving and the comparison is retried with backoff)."""
    calibration: Name | None = None
    """The comparison running, or the last one."""
    compared_with: CandidateName | None = None
    """The candidate that served when the comparison started: the one it measured as `configured`."""
    fingerprint: ShortText | None = None
    """Digest of what the comparison compared (candidates, comparison settings, model, hardware, runtime): a
    spec edit that changes it starts a new comparison."""
    message: Text | None = None
    """What happens now, or why the last comparison failed (which candidate, and why)."""
    attempts: int = Field(default=0, ge=0, le=MAX_ATTEMPTS)
    """Comparisons that failed in a row (sets the backoff; 0 after a success)."""
    not_before: Timestamp | None = None
    """No new comparison starts before this time (spec.speculation.reselectIntervalSeconds, or the backoff)."""
    comparisons: int = Field(default=0, ge=0)
    """Comparisons started so far (numbers their SpeculativeInferenceCalibrations: <name>-select-<n>)."""
    excluded: list[ExcludedCandidate] | None = Field(default=None, max_length=8)
    """Candidates left out until the spec changes (their engine failed in a comparison, or serving)."""
    measured_batch_sizes: list[Annotated[int, Field(ge=1)]] | None = Field(default=None, max_length=16)
    """The batch sizes the last comparison measured: traffic well outside them starts a new one."""
    measured_acceptance: float | None = Field(default=None, ge=0, le=1)
    """First-position acceptance of the serving candidate on the live traffic once it served (status.metrics,
    which does not depend on K): a sustained relative move away from it starts a new comparison."""
    shift_since: Timestamp | None = None
    """Since when the traffic looks unlike what the last comparison measured (a new one starts once it
    has lasted five minutes and the interval allows)."""
    history: list[SelectionChoice] | None = Field(default=None, max_length=MAX_SELECTION_HISTORY)
    """Recent choices, newest first."""
    baseline: LiveSpeed | None = None
    """While a comparison runs: the serving candidate's live speed, what a switch is verified against."""
    verification: SwitchVerification | None = None
    """The last switch, while it is verified on the live traffic (no comparison starts meanwhile)."""


class SpeculativeInferenceStatus(StatusModel):
    """Observed state, written only by the operator."""

    observed_generation: int | None = Field(default=None, ge=0)
    """metadata.generation the operator last reconciled."""
    conditions: list[Condition] | None = Field(
        default=None,
        max_length=16,
        # keyed by type: the reconciler (Ready/Progressing/Degraded) and the tuning loop
        # (Tuned/TuningDegraded) can each server-side-apply their own conditions
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    """kstatus conditions: Ready, Progressing, Degraded, Tuned, TuningDegraded (one per type)."""
    replicas: int | None = Field(default=None, ge=0)
    """Engine pods that exist."""
    ready_replicas: int | None = Field(default=None, ge=0)
    """Engine pods that are ready."""
    effective: EffectiveConfig | None = None
    """Configuration the pods run now."""
    tuning: TuningStatus | None = None
    """Tuner state."""
    metrics: MetricsStatus | None = None
    """Latest metrics summary."""
    selector: Name | None = None
    """Label selector of the engine pods (for the scale subresource and tooling)."""
    cost: CostStatus | None = None
    """What the running configuration costs; only when the operator configuration prices this hardware."""
    calibration: CalibrationSummary | None = None
    """The latest successful SpeculativeInferenceCalibration: the measured step-cost table and the method
    comparison (docs/calibration.md)."""
    selection: SelectionStatus | None = None
    """Method auto: the candidate that serves and the comparisons that chose it (docs/selection.md)."""

