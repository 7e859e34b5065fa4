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

from . import guards
from .acceptance import AcceptanceEstimate, blend, estimate_from, expected_tokens, extrapolated_prefix
from .cost import CostModel
from .decisions import action_for, describe, make_decision
from .goodput import (Model, best_dense, config_from_dense, coverage_gain, dense_ks, goodput, same_config,
                      sequence_speed)
from .observation import Observation, ObservationError, observation_problems, parse_observation, settling_problem
from .state import PendingChange, PolicyState
from .tuning import TuningError, TuningSpec, parse_tuning
from .verification import calibrate, model_noise, verify

ACCEPTANCE_FORGET = 0.5  # per window: follows a workload shift within ~3 windows
COST_FORGET = 0.995  # per window: cells not seen again fade over hours (step cost hardly drifts)
DEGRADED_COLLAPSE = "AcceptanceCollapsed"
LOW_LOAD_SHARE = 0.25  # mean batch at most this share of maxBatchSize: a restart costs little now
LOOKAHEAD = 4  # judge a schedule up to this many times the largest batch size seen in the window


def decide(observation: dict, tuning: dict, state: dict | None, now: float) -> tuple[dict, dict]:
    """One tick of the policy. Never raises on bad observations; returns keep with the reason."""
    st = PolicyState.from_dict(state)
    try:
        spec = parse_tuning(tuning)
    except TuningError as error:
        return make_decision("keep", f"invalid tuning input: {error}", guard="invalidTuning"), st.to_dict()
    try:
        obs = parse_observation(observation)
    except ObservationError as error:
        return make_decision("keep", f"unreadable observation: {error}", guard=guards.INVALID_DATA), st.to_dict()
    problems = observation_problems(obs, now, spec.max_staleness_seconds)
    if problems:
        guard = guards.STALE_DATA if any("stale" in p for p in problems) else guards.INVALID_DATA
        return make_decision("keep", "holding: " + "; ".join(problems), guard=guard, signals=obs.signals), st.to_dict()
    held = guards.rollout_guard(obs)
    if held:
        return make_decision("keep", held, guard=guards.ROLLOUT, signals=obs.signals), st.to_dict()
    held = settling_problem(obs)
    if held:
        return make_decision("keep", held, guard=guards.SETTLING, signals=obs.signals), st.to_dict()
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
        return make_decision("keep", short_of_samples, guard=guards.INSUFFICIENT_SAMPLES, signals=signals), st.to_dict()

    # Collapse: acceptance near zero on plenty of drafts -> speculation off, Degraded.
    if guards.collapse_detected(fresh.prefix[0] if fresh else None, obs, spec):
        held = guards.budget_guard(st, spec, now, reserve=0)
        reason = (f"acceptance collapsed: {fresh.prefix[0]:.1%} of first draft tokens accepted "
                  f"(limit {spec.collapse_acceptance:.0%}) over {obs.drafts:.0f} drafts")
        degraded = {"reason": DEGRADED_COLLAPSE, "message": reason}
        st.pending = None
        if held:
            return make_decision("keep", f"{reason}; {held}", guard=guards.RESTART_BUDGET, signals=signals,
                             degraded=degraded), st.to_dict()
        st.collapsed_at, st.collapsed_config = now, current
        st.acceptance = None  # the broken drafter's numbers say nothing about a fixed one
        st.record_change(now)
        off = {"numSpeculativeTokens": 0, "schedule": None}
        return make_decision("disable", reason + "; speculation off until the hold expires", config=off,
                         signals=signals, degraded=degraded), st.to_dict()

    # After a collapse, stay off until the hold ends, then probe the old config once.
    if st.collapsed_at is not None:
        held = guards.collapse_hold_guard(st, spec, now)
        if held:
            return make_decision("keep", held, guard=guards.COLLAPSE_HOLD, signals=signals,
                             degraded={"reason": DEGRADED_COLLAPSE, "message": held}), st.to_dict()
        if memory is None and st.collapsed_config:
            return _probe_after_collapse(obs, spec, st, now, signals)
    if memory is None:
        return make_decision("keep", "no acceptance measured yet for this method: nothing to predict from",
                         guard=guards.NO_ACCEPTANCE_DATA, signals=signals), st.to_dict()
    model = Model(extrapolated_prefix(memory, spec.k_max), cost, cost.multipliers())
    distribution = obs.batch_distribution()
    current_dense = dense_ks(current, spec.max_batch_size)
    summary = _model_summary(model, spec, obs, current_dense, distribution)

    # Verification of the last change: realised vs what the previous config would do now.
    if st.pending is not None:
        outcome = verify(obs, spec, st, model, distribution, now, signals, summary)
        if outcome is not None:
            return outcome

    calibrate(st, obs, model, current, current_dense, distribution, spec.max_batch_size)
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
        return make_decision("keep", f"{describe(current)} is already the best config", **common), st.to_dict()

    slo = guards.slo_violated(obs, spec)
    noise = model_noise(st)
    held_by = guards.threshold_guard(gain, spec, slo_violated=slo, noise=noise)
    low_load = obs.batch_size_mean <= spec.max_batch_size * LOW_LOAD_SHARE and gain >= -0.005
    ahead = ""
    if held_by and low_load and not guards.threshold_guard(cover, spec, slo_violated=False, noise=noise):
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
            return make_decision("keep", f"best is {describe(best)} ({gain:+.1%}) but {why}", guard=name,
                             gain=gain, **common), st.to_dict()
    calibration = st.calibration["value"] if st.calibration else 1.0
    observed = {min(b, spec.max_batch_size) for b, _ in distribution}
    changes_here = any(best_dense_ks[b] != current_dense[b] for b in observed)
    # Nothing to verify when the change leaves the K of today's batch sizes alone (look-ahead).
    st.pending = PendingChange(at=now, config=best, previous=current, predicted_gain=gain,
                               calibration=calibration, prefix=[float(p) for p in model.prefix],
                               theta=[float(t) for t in model.theta],
                               batch_mean=obs.batch_size_mean) if changes_here else None
    st.collapsed_at = st.collapsed_config = None
    st.record_change(now)
    reason = (f"{describe(current)} -> {describe(best)}: predicted goodput {gain:+.1%} at the observed "
              f"batch sizes (mean {obs.batch_size_mean:.1f})" + ahead + ("; p99 latency SLO violated" if slo else ""))
    return make_decision(action_for(current, best), reason, config=best, gain=gain, **common), st.to_dict()


def _probe_after_collapse(obs: Observation, spec: TuningSpec, st: PolicyState, now: float,
                          signals: str) -> tuple[dict, dict]:
    """The collapse hold is over: turn the old config back on once; collapse detection guards it."""
    for name, why in ((guards.COOLDOWN, guards.cooldown_guard(st, spec, now)),
                      (guards.RESTART_BUDGET, guards.budget_guard(st, spec, now, reserve=1))):
        if why:
            return make_decision("keep", f"collapse hold over, re-enabling is due but {why}", guard=name,
                             signals=signals), st.to_dict()
    config = st.collapsed_config
    st.collapsed_at = st.collapsed_config = None
    st.record_change(now)
    return make_decision("reenable", f"collapse hold over: probing {describe(config)} again (collapse detection "
                     "switches it off if acceptance is still near zero)", config=config, signals=signals), st.to_dict()


def _model_summary(model: Model, spec: TuningSpec, obs: Observation, dense, distribution) -> dict:
    """What the model believes, for status and for people debugging a decision."""
    return {
        "acceptancePrefix": [round(p, 4) for p in model.prefix],
        "expectedTokens": {str(k): round(expected_tokens(model.prefix, k), 3) for k in range(0, spec.k_max + 1)},
        "stepCostMultipliers": [round(float(t), 3) for t in model.theta],
        "predictedSpeed": round(sequence_speed(model, dense, distribution), 3),
        "measuredSpeed": round(obs.measured_speed, 3),
    }
