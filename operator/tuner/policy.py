"""The tuning policy: (observation, tuning, state, now) -> (decision, new state). Pure, no I/O.

Order of reasoning each tick:
  1. distrust: unreadable, NaN, stale or mixed-config data, or a rollout in progress -> keep;
  2. learn: fold acceptance and step latencies into the model (state);
  3. protect: acceptance collapse -> disable (Degraded); a change being verified -> accumulate
     realised gain and roll back when the new config measures worse than the old one would;
  4. optimise: best K per batch size (0 included) -> config; predicted goodput gain;
  5. hold unless every guard passes (samples, cooldown, budget, threshold, confirmations).
docs/tuner.md documents the dicts and is the stable interface.
"""

from __future__ import annotations

import math
from typing import Any

from . import guards
from .acceptance import AcceptanceEstimate, blend, estimate_from, expected_tokens, extrapolated_prefix
from .cost import CostModel
from .goodput import (Model, best_dense, config_from_dense, coverage_gain, dense_ks, goodput, same_config,
                      sequence_speed)
from .observation import Observation, ObservationError, observation_problems, parse_observation, settling_problem
from .state import PendingChange, PolicyState
from .tuning import TuningError, TuningSpec, parse_tuning

ACCEPTANCE_FORGET = 0.5  # per window: follows a workload shift within ~3 windows
COST_FORGET = 0.97  # per window: step cost drifts slowly (hardware does not change)
DEGRADED_COLLAPSE = "AcceptanceCollapsed"
CALIBRATION_WEIGHT = 0.3  # per window, for the measured/modelled speed ratio
DEFAULT_NOISE = 0.01  # relative window-to-window noise of measured speed until observed
MAX_VERIFY_WINDOWS = 8
LOW_LOAD_SHARE = 0.25  # mean batch at most this share of maxBatchSize: a restart costs little now
LOOKAHEAD = 4  # judge a schedule up to this many times the largest batch size seen in the window


def _decision(action: str, reason: str, *, config: dict | None = None, gain: float = 0.0,
              guard: str | None = None, signals: str | None = None, **extra: Any) -> dict:
    decision = {"action": action, "config": config, "predictedGain": round(gain, 4), "reason": reason,
                "guard": guard, "signals": signals, "degraded": None, "recommendation": None,
                "realisedGain": None, "model": None}
    decision.update(extra)
    return decision


def _describe(config: dict) -> str:
    k = config["numSpeculativeTokens"]
    if k == 0:
        return "speculation off"
    if not config.get("schedule"):
        return f"K={k}"
    return "schedule " + ", ".join(f"{s}-{e}:K={ks}" for s, e, ks in config["schedule"])


def _action_for(current: dict, best: dict) -> str:
    if best["numSpeculativeTokens"] == 0:
        return "disable"
    if current["numSpeculativeTokens"] == 0:
        return "reenable"
    return "setSchedule" if best.get("schedule") else "setK"


def decide(observation: dict, tuning: dict, state: dict | None, now: float) -> tuple[dict, dict]:
    """One tick of the policy. Never raises on bad observations; returns keep with the reason."""
    st = PolicyState.from_dict(state)
    try:
        spec = parse_tuning(tuning)
    except TuningError as error:
        return _decision("keep", f"invalid tuning input: {error}", guard="invalidTuning"), st.to_dict()
    try:
        obs = parse_observation(observation)
    except ObservationError as error:
        return _decision("keep", f"unreadable observation: {error}", guard=guards.INVALID_DATA), st.to_dict()
    problems = observation_problems(obs, now, spec.max_staleness_seconds)
    if problems:
        guard = guards.STALE_DATA if any("stale" in p for p in problems) else guards.INVALID_DATA
        return _decision("keep", "holding: " + "; ".join(problems), guard=guard, signals=obs.signals), st.to_dict()
    held = guards.rollout_guard(obs)
    if held:
        return _decision("keep", held, guard=guards.ROLLOUT, signals=obs.signals), st.to_dict()
    held = settling_problem(obs)
    if held:
        return _decision("keep", held, guard=guards.SETTLING, signals=obs.signals), st.to_dict()
    return _decide_on_valid(obs, spec, st, now)


def _learn(obs: Observation, spec: TuningSpec, st: PolicyState) -> tuple[CostModel, AcceptanceEstimate | None, AcceptanceEstimate | None]:
    if st.method != spec.method:  # a different drafter: nothing remembered applies
        st.method, st.cost, st.acceptance = spec.method, None, None
    cost = CostModel.from_state(st.cost, spec.cost_prior, spec.drafting)
    cost.decay(COST_FORGET)
    cost.learn(obs)
    theta = cost.multipliers()
    fresh = estimate_from(obs, lambda size, k: cost.step_time(size, k, theta))
    memory = blend(AcceptanceEstimate.from_dict(st.acceptance), fresh, ACCEPTANCE_FORGET)
    st.cost = cost.to_state()
    st.acceptance = memory.to_dict() if memory else None
    return cost, fresh, memory


def _decide_on_valid(obs: Observation, spec: TuningSpec, st: PolicyState, now: float) -> tuple[dict, dict]:
    signals = obs.signals
    short_of_samples = guards.samples_guard(obs, spec)
    cost, fresh, memory = _learn(obs, spec, st) if not short_of_samples else (
        CostModel.from_state(st.cost, spec.cost_prior, spec.drafting), None,
        AcceptanceEstimate.from_dict(st.acceptance))
    if fresh is not None and fresh.biased:
        signals = "vllm-biased"
    current = obs.applied.to_config()
    if short_of_samples:
        return _decision("keep", short_of_samples, guard=guards.INSUFFICIENT_SAMPLES, signals=signals), st.to_dict()

    # Collapse: acceptance near zero on plenty of drafts -> speculation off, Degraded.
    if guards.collapse_detected(fresh.prefix[0] if fresh else None, obs, spec):
        held = guards.budget_guard(st, spec, now, reserve=0)
        reason = (f"acceptance collapsed: {fresh.prefix[0]:.1%} of first draft tokens accepted "
                  f"(limit {spec.collapse_acceptance:.0%}) over {obs.drafts:.0f} drafts")
        degraded = {"reason": DEGRADED_COLLAPSE, "message": reason}
        st.pending = None
        if held:
            return _decision("keep", f"{reason}; {held}", guard=guards.RESTART_BUDGET, signals=signals,
                             degraded=degraded), st.to_dict()
        st.collapsed_at, st.collapsed_config = now, current
        st.acceptance = None  # the broken drafter's numbers say nothing about a fixed one
        st.record_change(now)
        off = {"numSpeculativeTokens": 0, "schedule": None}
        return _decision("disable", reason + "; speculation off until the hold expires", config=off,
                         signals=signals, degraded=degraded), st.to_dict()

    # After a collapse, stay off until the hold ends, then probe the old config once.
    if st.collapsed_at is not None:
        held = guards.collapse_hold_guard(st, spec, now)
        if held:
            return _decision("keep", held, guard=guards.COLLAPSE_HOLD, signals=signals,
                             degraded={"reason": DEGRADED_COLLAPSE, "message": held}), st.to_dict()
        if memory is None and st.collapsed_config:
            return _probe_after_collapse(obs, spec, st, now, signals)
    if memory is None:
        return _decision("keep", "no acceptance measured yet for this method: nothing to predict from",
                         guard=guards.NO_ACCEPTANCE_DATA, signals=signals), st.to_dict()
    model = Model(extrapolated_prefix(memory, spec.k_max), cost, cost.multipliers())
    distribution = obs.batch_distribution()
    current_dense = dense_ks(current, spec.max_batch_size)
    summary = _model_summary(model, spec, obs, current_dense, distribution)

    # Verification of the last change: realised vs what the previous config would do now.
    if st.pending is not None:
        outcome = _verify(obs, spec, st, model, distribution, now, signals, summary)
        if outcome is not None:
            return outcome

    _calibrate(st, obs, model, current, current_dense, distribution, spec.max_batch_size)
    best_dense_ks = best_dense(model, spec, current_dense, distribution)
    best = config_from_dense(best_dense_ks)
    current_goodput = goodput(model, current_dense, distribution)
    gain = goodput(model, best_dense_ks, distribution) / current_goodput - 1 if current_goodput > 0 else 0.0
    cover = coverage_gain(model, best_dense_ks, current_dense, LOOKAHEAD * max(b for b, _ in distribution))
    recommendation = {"config": best, "predictedGain": round(gain, 4),
                      "coverageGain": round(cover, 4)}
    common = {"signals": signals, "recommendation": recommendation, "model": summary}
    if same_config(best, current, spec.max_batch_size):
        st.confirmations = 0
        return _decision("keep", f"{_describe(current)} is already the best config", **common), st.to_dict()

    slo = guards.slo_violated(obs, spec)
    held_by = guards.threshold_guard(gain, spec, slo_violated=slo)
    low_load = obs.batch_size_mean <= spec.max_batch_size * LOW_LOAD_SHARE and gain >= -0.005
    ahead = ""
    if held_by and low_load and not guards.threshold_guard(cover, spec, slo_violated=False):
        # A restart is cheapest while load is low: take a schedule that already fits the batch
        # sizes to come, rather than restart at peak (tuning-theory.md, "guard rails").
        held_by, gain = None, max(gain, 0.0)
        ahead = f"; over all batch sizes {cover:+.1%}, restarting now while load is low"
    st.confirmations = 0 if held_by else st.confirmations + 1
    checks = [
        (guards.BELOW_THRESHOLD, held_by),
        (guards.RECENTLY_REJECTED, guards.rejected_guard(st, best_dense_ks, spec.max_batch_size, now)),
        (guards.COOLDOWN, guards.cooldown_guard(st, spec, now)),
        (guards.RESTART_BUDGET, guards.budget_guard(st, spec, now, reserve=1)),
        (guards.CONFIRMING, guards.confirmation_guard(st, spec)),
    ]
    for name, why in checks:
        if why:
            return _decision("keep", f"best is {_describe(best)} ({gain:+.1%}) but {why}", guard=name,
                             gain=gain, **common), st.to_dict()
    calibration = st.calibration["value"] if st.calibration else 1.0
    observed = {min(b, spec.max_batch_size) for b, _ in distribution}
    changes_here = any(best_dense_ks[b] != current_dense[b] for b in observed)
    # Nothing to verify when the change leaves the K of today's batch sizes alone (look-ahead).
    st.pending = PendingChange(at=now, config=best, previous=current, predicted_gain=gain,
                               calibration=calibration) if changes_here else None
    st.collapsed_at = st.collapsed_config = None
    st.record_change(now)
    reason = (f"{_describe(current)} -> {_describe(best)}: predicted goodput {gain:+.1%} at the observed "
              f"batch sizes (mean {obs.batch_size_mean:.1f})" + ahead + ("; p99 latency SLO violated" if slo else ""))
    return _decision(_action_for(current, best), reason, config=best, gain=gain, **common), st.to_dict()


def _probe_after_collapse(obs: Observation, spec: TuningSpec, st: PolicyState, now: float,
                          signals: str) -> tuple[dict, dict]:
    """The collapse hold is over: turn the old config back on once; collapse detection guards it."""
    for name, why in ((guards.COOLDOWN, guards.cooldown_guard(st, spec, now)),
                      (guards.RESTART_BUDGET, guards.budget_guard(st, spec, now, reserve=1))):
        if why:
            return _decision("keep", f"collapse hold over, re-enabling is due but {why}", guard=name,
                             signals=signals), st.to_dict()
    config = st.collapsed_config
    st.collapsed_at = st.collapsed_config = None
    st.record_change(now)
    return _decision("reenable", f"collapse hold over: probing {_describe(config)} again (collapse detection "
                     "switches it off if acceptance is still near zero)", config=config, signals=signals), st.to_dict()


def _calibrate(st: PolicyState, obs: Observation, model: Model, current: dict, dense, distribution,
               max_batch_size: int) -> None:
    """Smoothed ratio of measured to modelled speed for the applied config: the baseline a change
    is verified against, steadier than one window's noisy step times."""
    ratio = obs.measured_speed / max(sequence_speed(model, dense, distribution), 1e-9)
    if not 0.2 < ratio < 5.0:
        return
    if st.calibration and same_config(st.calibration["config"], current, max_batch_size):
        previous = st.calibration["value"]
        value = (1 - CALIBRATION_WEIGHT) * previous + CALIBRATION_WEIGHT * ratio
        spread = (1 - CALIBRATION_WEIGHT) * st.calibration.get("variance", DEFAULT_NOISE**2) \
            + CALIBRATION_WEIGHT * (ratio / previous - 1) ** 2
    else:
        value, spread = ratio, DEFAULT_NOISE**2
    st.calibration = {"config": current, "value": value, "variance": spread}


def _verify(obs: Observation, spec: TuningSpec, st: PolicyState, model: Model, distribution, now: float,
            signals: str, summary: dict) -> tuple[dict, dict] | None:
    """Accumulate realised gain for the pending change; roll back or accept once enough windows passed."""
    pending = st.pending
    assert pending is not None
    if not same_config(obs.applied.to_config(), pending.config, spec.max_batch_size):
        if now - pending.at > 2 * spec.cooldown_seconds + spec.restart_seconds:
            st.pending = None  # never applied (observe mode, or someone changed the spec): stop waiting
            return None
        return _decision("keep", f"waiting for {_describe(pending.config)} to be applied", guard=guards.VERIFYING,
                         signals=signals, model=summary), st.to_dict()
    previous_dense = dense_ks(pending.previous, spec.max_batch_size)
    busy = obs.sequence_steps * obs.step_mean_seconds
    pending.measured_tokens += obs.generated_tokens
    pending.expected_tokens += busy * sequence_speed(model, previous_dense, distribution) * pending.calibration
    pending.windows += 1
    realised = pending.measured_tokens / pending.expected_tokens - 1 if pending.expected_tokens > 0 else 0.0
    # Noisy step times need more windows and a wider margin before a rollback is justified.
    noise = math.sqrt(st.calibration.get("variance", DEFAULT_NOISE**2)) if st.calibration else DEFAULT_NOISE
    needed = min(MAX_VERIFY_WINDOWS, max(spec.confirmations, math.ceil((2 * noise / spec.rollback_tolerance) ** 2)))
    margin = 2 * noise * math.sqrt(1 / pending.windows + CALIBRATION_WEIGHT / (2 - CALIBRATION_WEIGHT))
    if pending.windows < needed:
        return _decision("keep", f"verifying {_describe(pending.config)}: realised {realised:+.1%} so far "
                         f"(predicted {pending.predicted_gain:+.1%})", guard=guards.VERIFYING, signals=signals,
                         realisedGain=round(realised, 4), model=summary), st.to_dict()
    st.pending = None
    st.realised_gain = realised
    if realised >= -(spec.rollback_tolerance + margin):
        return None  # accepted; carry on optimising from here
    held = guards.budget_guard(st, spec, now, reserve=0)
    reason = (f"{_describe(pending.config)} realised {realised:+.1%} against a predicted "
              f"{pending.predicted_gain:+.1%}: rolling back to {_describe(pending.previous)}")
    if held:
        return _decision("keep", f"{reason} is due but {held}", guard=guards.RESTART_BUDGET, signals=signals,
                         realisedGain=round(realised, 4), model=summary), st.to_dict()
    st.rejected = [r for r in st.rejected if r["until"] > now] + [
        {"config": pending.config, "until": now + spec.reject_hold_seconds,
         "batchSizes": sorted({min(b, spec.max_batch_size) for b, _ in distribution})}]
    st.record_change(now)
    return _decision("rollback", reason, config=pending.previous, gain=-realised, signals=signals,
                     realisedGain=round(realised, 4), model=summary), st.to_dict()


def _model_summary(model: Model, spec: TuningSpec, obs: Observation, dense, distribution) -> dict:
    """What the model believes, for status and for people debugging a decision."""
    return {
        "acceptancePrefix": [round(p, 4) for p in model.prefix],
        "expectedTokens": {str(k): round(expected_tokens(model.prefix, k), 3) for k in range(0, spec.k_max + 1)},
        "stepCostMultipliers": [round(float(t), 3) for t in model.theta],
        "predictedSpeed": round(sequence_speed(model, dense, distribution), 3),
        "measuredSpeed": round(obs.measured_speed, 3),
    }
