"""One tick's outcome -> the status the tuning loop applies, and the Event to post. Pure.

The loop owns `status.tuning`, `status.metrics` and the conditions Tuned / TuningDegraded
(server-side apply with its own field manager). Server-side apply removes owned fields
left out of a patch, so every patch carries the whole tuning status -- above all
`applied`, which the renderer merges over the spec: dropping it would roll the pods back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specinfer.api.status import MAX_HISTORY
from specinfer.operator.conditions import ConditionUpdate, find, set_conditions
from specinfer.operator.tuner.observe import rfc3339
from specinfer.operator.tuner.target import ResourceTarget, schedule_to_status

CHANGES = ("setK", "setSchedule", "disable", "reenable", "rollback")
RECOMMEND = "recommend"  # a change the policy chose in observe mode: shown, not applied
HOLD = "keep"


@dataclass(frozen=True)
class Tick:
    """What happened to one resource this tick (inputs of `tick_status`)."""

    mode: str
    now: float
    decision: Mapping[str, Any] | None = None  # the policy's decision; None when it was not consulted
    state: Mapping[str, Any] | None = None  # policy state to keep
    metrics: Mapping[str, Any] | None = None  # status.metrics from this tick's observation
    signals: str | None = None
    degraded: tuple[str, str] | None = None  # (reason, message) of TuningDegraded=True
    hold_reason: str | None = None  # why the policy was not consulted (Prometheus down, series missing)
    drop_applied: bool = False  # the applied config no longer fits the spec: render the spec alone
    no_apply_reason: str | None = None  # auto mode, but changes may not be applied (maxRestartsPerHour 0)


@dataclass(frozen=True)
class Outcome:
    status: dict[str, Any]
    action: str  # for the decisions-by-action metric
    event: tuple[str, str, str] | None  # (type, reason, message)
    applied_changed: bool


def _camel(guard: str | None, fallback: str) -> str:
    return (guard[0].upper() + guard[1:]) if guard else fallback


def _choice(method: str, config: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"method": method, "numSpeculativeTokens": int(config["numSpeculativeTokens"])}
    schedule = schedule_to_status(config.get("schedule"))
    if schedule:
        out["schedule"] = schedule
    return out


def _decision_entry(action: str, reason: str, now: float, *, gain: float | None = None,
                    config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"time": rfc3339(now), "action": action, "reason": reason[:2000]}
    if gain is not None:
        entry["predictedGain"] = round(float(gain), 4)
    if config is not None:
        entry["numSpeculativeTokens"] = int(config["numSpeculativeTokens"])
        schedule = schedule_to_status(config.get("schedule"))
        if schedule:
            entry["schedule"] = schedule
    return entry


def _history(previous: list[dict[str, Any]] | None, entry: dict[str, Any]) -> list[dict[str, Any]]:
    """Newest first, bounded; consecutive holds for the same reason collapse into the newest one."""
    history = list(previous or [])
    if history and history[0].get("action") == HOLD and entry["action"] == HOLD:
        history = history[1:]
    return [entry, *history][:MAX_HISTORY]


def _restarts_last_hour(state: Mapping[str, Any] | None, now: float) -> int:
    return sum(1 for t in (state or {}).get("changes") or () if now - 3600 < t <= now)


def tick_status(target: ResourceTarget, tick: Tick) -> Outcome:
    """status.{tuning, metrics, conditions[Tuned, TuningDegraded]} after this tick."""
    assert target.spec is not None or tick.decision is None
    previous = dict(target.tuning_status)
    method = target.spec.speculation.method if target.spec is not None else None
    applied = previous.get("applied") if tick.mode == "auto" and not tick.drop_applied else None
    decision = tick.decision
    event = None
    applied_changed = False
    if decision is None:
        action, reason = HOLD, tick.hold_reason or "holding the current config"
        entry = _decision_entry(action, reason, tick.now)
        tuned = find(target.status.get("conditions"), "Tuned")
        tuned_update = ConditionUpdate("Tuned", tuned.get("status", "Unknown"), tuned.get("reason") or "Holding",
                                       tuned.get("message") or reason) if tuned else \
            ConditionUpdate("Tuned", "Unknown", "Holding", reason)
    else:
        action, reason = decision["action"], decision["reason"]
        config = decision.get("config")
        gain = decision.get("predictedGain")
        if action in CHANGES and config is not None and tick.mode == "auto" and tick.no_apply_reason is None:
            applied = {**_choice(method, config), "since": rfc3339(tick.now)}
            applied_changed = True
            kind = "Warning" if action in ("rollback", "disable") and decision.get("degraded") else "Normal"
            event = (kind, f"Tuning{action[0].upper()}{action[1:]}", reason)
            tuned_update = ConditionUpdate("Tuned", "False", "ChangeApplied", reason)
        elif action in CHANGES and config is not None:
            action = RECOMMEND
            reason = f"{tick.no_apply_reason or 'observe mode'}, not applied: {reason}"
            tuned_update = ConditionUpdate("Tuned", "False", "RecommendationNotApplied", reason)
        elif decision.get("guard") is None:
            tuned_update = ConditionUpdate("Tuned", "True", "BestConfigApplied", reason)
        elif decision.get("guard") == "belowThreshold":  # the best is within the hysteresis: nothing worth a restart
            tuned_update = ConditionUpdate("Tuned", "True", "WithinThreshold", reason)
        else:
            tuned_update = ConditionUpdate("Tuned", "Unknown", _camel(decision.get("guard"), "Holding"), reason)
        entry = _decision_entry(action, reason, tick.now, gain=gain, config=config)
    degraded = tick.degraded
    if degraded is None and decision is not None and decision.get("degraded"):
        degraded = (decision["degraded"]["reason"], decision["degraded"]["message"])
    degraded_update = ConditionUpdate("TuningDegraded", "True", *degraded) if degraded else \
        ConditionUpdate("TuningDegraded", "False", "AsExpected", "metrics read and decisions made normally")

    tuning: dict[str, Any] = {"mode": tick.mode}
    recommendation = (decision or {}).get("recommendation")
    if recommendation and recommendation.get("config") and method:
        tuning["recommendation"] = {**_choice(method, recommendation["config"]),
                                    "predictedGain": recommendation.get("predictedGain"),
                                    "reason": reason[:2000], "time": rfc3339(tick.now)}
    elif decision is None and previous.get("recommendation"):
        tuning["recommendation"] = previous["recommendation"]
    if applied:
        tuning["applied"] = applied
    tuning["lastDecision"] = entry
    realised = (decision or {}).get("realisedGain")
    if realised is None:
        realised = (tick.state or {}).get("realised_gain", previous.get("realisedGain"))
    if realised is not None:
        tuning["realisedGain"] = round(float(realised), 4)
    tuning["history"] = _history(previous.get("history"), entry)
    state = tick.state if tick.state is not None else None
    tuning["restartsLastHour"] = _restarts_last_hour(state, tick.now) if tick.mode == "auto" else 0
    signals = tick.signals or previous.get("signals")
    if signals:
        tuning["signals"] = signals
    if state is not None:
        tuning["policyState"] = json.dumps(state, separators=(",", ":"))
    elif previous.get("policyState"):
        tuning["policyState"] = previous["policyState"]
    status: dict[str, Any] = {
        "tuning": tuning,
        "conditions": set_conditions(target.status.get("conditions"), [tuned_update, degraded_update],
                                     generation=target.generation, now=rfc3339(tick.now)),
    }
    metrics = tick.metrics or target.status.get("metrics")
    if metrics:
        status["metrics"] = dict(metrics)
    return Outcome(status=status, action=action, event=event, applied_changed=applied_changed)


def off_status(target: ResourceTarget, now: float) -> dict[str, Any] | None:
    """Mode off: clear what the loop wrote (applied included: the spec renders alone again) -- once;
    a resource the loop never wrote to gets nothing."""
    tuning = target.tuning_status
    tuned = find(target.status.get("conditions"), "Tuned")
    if not tuning and not tuned and not find(target.status.get("conditions"), "TuningDegraded"):
        return None  # never tuned: nothing to clear, nothing written
    if tuning.get("mode") == "off" and not tuning.get("applied") and tuned and tuned.get("reason") == "TuningOff":
        return None
    return {
        "tuning": {"mode": "off"},
        "conditions": set_conditions(target.status.get("conditions"), [
            ConditionUpdate("Tuned", "False", "TuningOff", "spec.tuning.mode is off: the spec's config runs as written"),
            ConditionUpdate("TuningDegraded", "False", "TuningOff", "not tuning"),
        ], generation=target.generation, now=rfc3339(now)),
    }
