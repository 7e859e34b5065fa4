"""One tick's outcome -> the status the tuning loop applies, and the Event to post. Pure.

The loop owns `status.tuning`, `status.metrics` and the conditions Tuned / TuningDegraded
(server-side apply with its own field manager). Server-side apply removes owned fields
left out of a patch, so every patch carries the whole tuning status -- above all
`applied`, which the renderer merges over the spec: dropping it would roll the pods back.
The status is built from the `specinfer.api.status` models, never from literal dicts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from specinfer.api import status as api
from specinfer.api.base import MAX_TEXT
from specinfer.api.timestamps import rfc3339
from specinfer.operator.pure.conditions import ConditionUpdate, find, set_conditions
from specinfer.operator.tuner.policy import Decision, DraftConfig, PolicyState, guards
from specinfer.operator.tuner.pure.convert import adaptive_choice, schedule_entries
from specinfer.operator.tuner.pure.target import ResourceTarget

RECOMMEND = "recommend"  # a change the policy chose in observe mode: shown, not applied
HOLD = "keep"


@dataclass(frozen=True)
class Tick:
    """What happened to one resource this tick (inputs of `tick_status`)."""

    mode: str
    now: float
    decision: Decision | None = None  # the policy's decision; None when it was not consulted
    state: PolicyState | None = None  # policy state to keep
    metrics: api.MetricsStatus | None = None  # status.metrics from this tick's observation
    signals: str | None = None
    degraded: tuple[str, str] | None = None  # (reason, message) of TuningDegraded=True
    hold_reason: str | None = None  # why the policy was not consulted (Prometheus down, series missing)
    drop_applied: bool = False  # the applied config no longer fits the spec: render the spec alone
    no_apply_reason: str | None = None  # auto mode, but not to be applied (a rollout with maxRestartsPerHour 0)
    step_cost: api.StepCostSource | None = None  # the cost prior in force (a calibration's table or a roofline)
    in_force: api.LiveScheduleInForce | None = None  # retuned in place: what the engines report running


@dataclass(frozen=True)
class Outcome:
    status: api.SpeculativeInferenceStatus  # only the parts the tuning loop owns
    action: str  # for the decisions-by-action metric
    event: tuple[str, str, str] | None  # (type, reason, message)
    applied_changed: bool

    def patch(self) -> dict[str, Any]:
        return self.status.to_json()


def _text(text: str) -> str:
    return text[:MAX_TEXT]


def _entry(action: str, reason: str, now: float, *, gain: float | None = None,
           config: DraftConfig | None = None) -> api.Decision:
    return api.Decision(time=rfc3339(now), action=action, reason=_text(reason),
                        predicted_gain=None if gain is None else round(float(gain), 4),
                        num_speculative_tokens=config.num_speculative_tokens if config else None,
                        schedule=schedule_entries(config) if config else None)


def _history(previous: list[api.Decision] | None, entry: api.Decision) -> list[api.Decision]:
    """Newest first, bounded; consecutive holds for the same reason collapse into the newest one."""
    history = list(previous or [])
    if history and history[0].action == HOLD and entry.action == HOLD:
        history = history[1:]
    return [entry, *history][:api.MAX_HISTORY]


def _tuned_update(target: ResourceTarget, tick: Tick, action: str, reason: str) -> ConditionUpdate:
    decision = tick.decision
    if decision is None:
        tuned = target.condition("Tuned")
        if tuned is None:
            return ConditionUpdate("Tuned", "Unknown", "Holding", reason)
        return ConditionUpdate("Tuned", tuned.status, tuned.reason or "Holding", tuned.message or reason)
    if action == RECOMMEND:
        return ConditionUpdate("Tuned", "False", "RecommendationNotApplied", reason)
    if decision.is_change:
        return ConditionUpdate("Tuned", "False", "ChangeApplied", reason)
    if decision.guard is None:
        return ConditionUpdate("Tuned", "True", "BestConfigApplied", reason)
    if decision.guard == guards.BELOW_THRESHOLD:  # the best is within the hysteresis: nothing worth a restart
        return ConditionUpdate("Tuned", "True", "WithinThreshold", reason)
    return ConditionUpdate("Tuned", "Unknown", decision.guard[0].upper() + decision.guard[1:], reason)


@dataclass(frozen=True)
class _Entry:
    """What this tick did, as it is recorded: the action and reason shown, the applied config."""

    action: str
    reason: str
    decision: api.Decision
    applied: api.AppliedConfig | None
    event: tuple[str, str, str] | None = None

    @property
    def applied_changed(self) -> bool:
        return self.event is not None


def _recorded_entry(target: ResourceTarget, tick: Tick, method: str | None) -> _Entry:
    """The decision as applied (auto mode), recommended (observe mode, or changes not allowed) or held."""
    applied = target.tuning_status.applied if tick.mode == "auto" and not tick.drop_applied else None
    decision = tick.decision
    if decision is None:
        reason = tick.hold_reason or "holding the current config"
        return _Entry(HOLD, reason, _entry(HOLD, reason, tick.now), applied)
    action: str = decision.action
    reason, config = decision.reason, decision.config
    event = None
    if decision.is_change and config is not None and tick.mode == "auto" and tick.no_apply_reason is None:
        applied = api.AppliedConfig(method=method, num_speculative_tokens=config.num_speculative_tokens,
                                    schedule=schedule_entries(config), since=rfc3339(tick.now), path=decision.path,
                                    adaptive_verification=adaptive_choice(target.spec, config))
        kind = "Warning" if action in ("rollback", "disable") and decision.degraded else "Normal"
        event = (kind, f"Tuning{action[0].upper()}{action[1:]}", reason)
    elif decision.is_change and config is not None:
        action = RECOMMEND
        reason = f"{tick.no_apply_reason or 'observe mode'}, not applied: {reason}"
    entry = _entry(action, reason, tick.now, gain=decision.predicted_gain, config=config)
    if decision.is_change and action != RECOMMEND:
        entry = entry.model_copy(update={"path": decision.path})
    return _Entry(action, reason, entry, applied, event)


def _degraded_update(tick: Tick) -> ConditionUpdate:
    degraded = tick.degraded
    if degraded is None and tick.decision is not None and tick.decision.degraded is not None:
        degraded = (tick.decision.degraded.reason, tick.decision.degraded.message)
    if degraded:
        return ConditionUpdate("TuningDegraded", "True", *degraded)
    return ConditionUpdate("TuningDegraded", "False", "AsExpected", "metrics read and decisions made normally")


def _recommendation(target: ResourceTarget, tick: Tick, method: str | None, reason: str) -> api.Recommendation | None:
    """The best config whatever the guards say; a tick the policy did not decide keeps the last one."""
    decision = tick.decision
    if decision is None:
        return target.tuning_status.recommendation
    if decision.recommendation is None or not method:
        return None
    best = decision.recommendation.config
    return api.Recommendation(method=method, num_speculative_tokens=best.num_speculative_tokens,
                              schedule=schedule_entries(best), predicted_gain=decision.recommendation.predicted_gain,
                              reason=_text(reason), time=rfc3339(tick.now))


def _realised_gain(target: ResourceTarget, tick: Tick) -> float | None:
    realised = tick.decision.realised_gain if tick.decision is not None else None
    if realised is None:
        realised = tick.state.realised_gain if tick.state is not None else target.tuning_status.realised_gain
    return None if realised is None else round(float(realised), 4)


def tick_status(target: ResourceTarget, tick: Tick) -> Outcome:
    """status.{tuning, metrics, conditions[Tuned, TuningDegraded]} after this tick."""
    assert target.spec is not None or tick.decision is None
    previous = target.tuning_status
    method = target.spec.speculation.method if target.spec is not None else None
    recorded = _recorded_entry(target, tick, method)
    state = tick.state
    tuning = api.TuningStatus(
        mode=tick.mode,
        recommendation=_recommendation(target, tick, method, recorded.reason),
        applied=recorded.applied,
        last_decision=recorded.decision,
        realised_gain=_realised_gain(target, tick),
        history=_history(previous.history, recorded.decision),
        restarts_last_hour=_restarts_last_hour(tick, previous.policy_state),
        signals=tick.signals or previous.signals,
        policy_state=json.dumps(state.to_json(), separators=(",", ":")) if state is not None
        else previous.policy_state,
        step_cost=tick.step_cost or previous.step_cost,
        in_force=tick.in_force or previous.in_force,
    )
    updates = [_tuned_update(target, tick, recorded.action, recorded.reason), _degraded_update(tick)]
    status = api.SpeculativeInferenceStatus(
        tuning=tuning,
        conditions=set_conditions(target.status.conditions, updates, generation=target.generation,
                                  now=rfc3339(tick.now)),
        metrics=tick.metrics or target.status.metrics,
    )
    return Outcome(status=status, action=recorded.action, event=recorded.event,
                   applied_changed=recorded.applied_changed)


def _restarts_last_hour(tick: Tick, stored: str | None) -> int:
    """Rollouts in the past hour, from this tick's state -- or the stored one when the tick held
    before the policy ran (series missing while the new pods start, ...): a hold is no restart."""
    if tick.mode != "auto":
        return 0
    state = tick.state
    if state is None and stored:
        try:
            state = PolicyState.from_json(json.loads(stored))
        except ValueError:
            state = None
    return state.restarts_within(tick.now) if state is not None else 0


def same_hold(target: ResourceTarget, outcome: Outcome) -> bool:
    """The status already says this: same held decision and the same conditions (times aside)."""
    before, after = target.tuning_status.last_decision, outcome.status.tuning
    assert after is not None and after.last_decision is not None
    if before is None or (before.action, before.reason) != (after.last_decision.action, after.last_decision.reason):
        return False
    return all(_same_condition(find(target.status.conditions, c.type), c) for c in outcome.status.conditions or ())


def _same_condition(live: api.Condition | None, desired: api.Condition) -> bool:
    return live is not None and (live.status, live.reason, live.message) == (desired.status, desired.reason,
                                                                             desired.message)


def off_status(target: ResourceTarget, now: float) -> api.SpeculativeInferenceStatus | None:
    """Mode off: clear what the loop wrote (applied included: the spec renders alone again) -- once;
    a resource the loop never wrote to gets nothing."""
    tuning = target.status.tuning
    tuned = target.condition("Tuned")
    if tuning is None and tuned is None and target.condition("TuningDegraded") is None:
        return None  # never tuned: nothing to clear, nothing written
    if tuning is not None and tuning.mode == "off" and tuning.applied is None and tuned is not None \
            and tuned.reason == "TuningOff":
        return None
    return api.SpeculativeInferenceStatus(
        tuning=api.TuningStatus(mode="off"),
        conditions=set_conditions(target.status.conditions, [
            ConditionUpdate("Tuned", "False", "TuningOff",
                            "spec.tuning.mode is off: the spec's config runs as written"),
            ConditionUpdate("TuningDegraded", "False", "TuningOff", "not tuning"),
        ], generation=target.generation, now=rfc3339(now)),
    )
