"""The tuning policy: (observation, tuning input, state, now) -> (decision, new state). Pure, no I/O.

Order of reasoning each tick:
  1. distrust: NaN, stale or mixed-config data, or a rollout in progress -> keep;
  2. learn: fold acceptance and step latencies into the model (state);
  3. protect: acceptance collapse -> disable (Degraded); a change being verified -> accumulate
     realised gain and roll back when the new config measures worse than the old one would;
  4. optimise: best K per batch size (0 included) -> config; predicted goodput gain;
  5. hold unless every guard passes (samples, cooldown, budget, threshold, confirmations).
`decide_json` is the same over the JSON forms documented in docs/tuner.md (the stable interface).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from . import guards
from .acceptance import AcceptanceEstimate, blend, estimate_from, expected_tokens, extrapolated_prefix
from .config import OFF, DraftConfig
from .cost import CostModel
from .decision import (
    DEGRADED_COLLAPSE,
    Decision,
    Degradation,
    ModelSummary,
    Recommendation,
    Signals,
    action_for,
    in_place,
    path_of,
)
from .goodput import Distribution, Model, anticipated_sizes, best_dense, coverage_gain, goodput, sequence_speed
from .inputs import TuningInput, tuning_from_json
from .lookahead import LOOKAHEAD, look_ahead
from .observation import Observation, ObservationError, observation_problems, parse_observation, settling_problem
from .probe import Probe, doubted_loss, probe_for, remember
from .restart import restart_cost_seconds
from .state import PendingChange, PolicyState, SpeculationSwitch
from .support import supported_gain
from .verification import calibrate, measured_noise, model_noise, update_noise, verify, window_noise

ACCEPTANCE_FORGET = 0.5  # per window: follows a workload shift within ~3 windows
COST_FORGET = 0.995  # per window: cells not seen again fade over hours (step cost hardly drifts)


def decide(observation: Observation, tuning: TuningInput, state: PolicyState | None,
           now: float) -> tuple[Decision, PolicyState]:
    """One tick of the policy. Never raises on untrustworthy observations: it keeps and says why.

    `state` is not modified; the returned state replaces it."""
    st = state.model_copy(deep=True) if state is not None else PolicyState()
    obs = observation
    problems = observation_problems(obs, now, tuning.max_staleness_seconds)
    if problems:
        guard = guards.STALE_DATA if any("stale" in p for p in problems) else guards.INVALID_DATA
        return _keep("holding: " + "; ".join(problems), guard, obs.signals), st
    held = guards.rollout_guard(obs) or settling_problem(obs)
    if held:
        # the rollout to speculation off after a collapse is still the collapse: TuningDegraded stays
        degraded = (Degradation(reason=DEGRADED_COLLAPSE, message=f"acceptance collapsed: speculation off; {held}")
                    if st.collapsed_at is not None else None)
        return _keep(held, guards.ROLLOUT if obs.rollout_in_progress else guards.SETTLING, obs.signals,
                     degraded=degraded), st
    return _decide_on_valid(obs, tuning, st, now), st


def decide_json(observation: Any, tuning_json: Any, state: Any, now: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """`decide` over the JSON forms of docs/tuner.md; unreadable input is a keep naming the field."""
    st = PolicyState.from_json(state)
    try:
        tuning = tuning_from_json(tuning_json if isinstance(tuning_json, dict) else {})
    except (ValidationError, ValueError, TypeError) as error:
        held = _keep(f"invalid tuning input: {_first_error(error)}", guards.INVALID_TUNING, None)
        return held.to_json(), st.to_json()
    try:
        obs = parse_observation(observation)
    except ObservationError as error:
        return _keep(f"unreadable observation: {error}", guards.INVALID_DATA, None).to_json(), st.to_json()
    decision, new_state = decide(obs, tuning, st, now)
    return decision.to_json(), new_state.to_json()


def _first_error(error: Exception) -> str:
    if isinstance(error, ValidationError):
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        return f"{where}: {first['msg']}" if where else first["msg"].removeprefix("Value error, ")
    return str(error)


def _keep(reason: str, guard: str | None, signals: Signals | str | None, **extra: Any) -> Decision:
    return Decision(action="keep", reason=reason, guard=guard, signals=signals, **extra)


def _learn(obs: Observation, tuning: TuningInput,
           st: PolicyState) -> tuple[CostModel, AcceptanceEstimate | None, AcceptanceEstimate | None]:
    if st.method != tuning.method:  # a different drafter: nothing remembered applies
        st.method, st.cost, st.acceptance, st.switched = tuning.method, None, None, None
    cost = CostModel.from_state(st.cost, tuning.cost_prior, tuning.cost_shape)
    cost.decay(COST_FORGET)
    scheduled = obs.applied.config.schedule or (tuning.in_place_max_k is not None and not obs.applied.config.off)
    slowdown = tuning.schedule_step_factor if scheduled else 1.0
    update_noise(st, cost.learn(obs, slowdown))
    theta = cost.multipliers()
    # only read while drafting, when a schedule's K = 0 steps still run the drafter's first pass
    fresh = estimate_from(obs, lambda size, k: cost.step_time(size, k, theta, speculative=True))
    memory = blend(st.acceptance, fresh, ACCEPTANCE_FORGET)
    st.cost = cost.to_state()
    st.acceptance = memory
    return cost, fresh, memory


def _decide_on_valid(obs: Observation, tuning: TuningInput, st: PolicyState, now: float) -> Decision:
    signals: Signals = "specinfer" if obs.signals == "specinfer" else "vllm"
    previous_window = st.note_window(obs.batch_size_mean, obs.time)  # the load, even from a thin window
    short_of_samples = guards.samples_guard(obs, tuning)
    if short_of_samples:
        return _keep(short_of_samples, guards.INSUFFICIENT_SAMPLES, signals)
    cost, fresh, memory = _learn(obs, tuning, st)
    st.note_load(obs.batch_size_mean, now)
    switched = st.switched
    if (switched is not None and switched.settled_mean is None and obs.applied.config.off != switched.speculative
            and obs.time - obs.applied.since <= 2 * obs.window_seconds):
        # the switched config's first windows: what the switch did to the batch mean, not a new load
        switched.settled_mean = obs.batch_size_mean
    if fresh is not None and fresh.biased:
        signals = "vllm-biased"
    protected = _protect(obs, tuning, st, now, signals, fresh, previous_window)
    if protected is not None:
        return protected
    if memory is None:
        return _keep("no acceptance measured yet for this method: nothing to predict from",
                     guards.NO_ACCEPTANCE_DATA, signals)
    model = Model(extrapolated_prefix(memory, tuning.k_max), cost, cost.multipliers(), tuning.schedule_step_factor,
                  always_scheduled=tuning.in_place_max_k is not None)
    distribution = obs.batch_distribution()
    current_dense = obs.applied.config.dense(tuning.max_batch_size)
    summary = _model_summary(model, tuning, obs, current_dense, distribution)

    # Verification of the last change: realised vs what the previous config would do now.
    if st.pending is not None:
        outcome = verify(obs, tuning, st, model, distribution, now, signals, summary)
        if outcome is not None:
            return outcome
    if st.probe_from is None:  # a probe's one window would reset the baseline the next change is verified by
        calibrate(st, obs, model, obs.applied.config, current_dense, distribution, tuning.max_batch_size)
    return _optimise(obs, tuning, st, now, model, distribution, {"signals": signals, "model": summary})


def _protect(obs: Observation, tuning: TuningInput, st: PolicyState, now: float, signals: Signals,
             fresh: AcceptanceEstimate | None, previous_window: tuple[float, float] | None) -> Decision | None:
    """What comes before optimising: a collapse, its hold and the probe after it, a moving load."""
    # Collapse: acceptance near zero on plenty of drafts -> speculation off, Degraded.
    if fresh is not None and guards.collapse_detected(fresh.prefix[0], obs, tuning):
        return _disable_after_collapse(obs, tuning, st, now, signals, fresh.prefix[0])
    # After a collapse, stay off until the hold ends, then probe the old config once.
    if st.collapsed_at is not None:
        held = guards.collapse_hold_guard(st, tuning, now)
        if held:
            return _keep(held, guards.COLLAPSE_HOLD, signals,
                         degraded=Degradation(reason=DEGRADED_COLLAPSE, message=held))
    # A ramp is not a measurement of the new load: learn from it (done), decide on a steady window.
    moving = guards.load_moving_guard(previous_window, obs)
    if moving:  # confirmations seen on the load before the ramp do not speak for the one after it
        st.confirmations, st.evidence = 0, 0.0
        return _keep(moving, guards.LOAD_MOVING, signals)
    if st.collapsed_at is not None and st.acceptance is None and st.collapsed_config:
        return _probe_after_collapse(tuning, st, now, signals)
    return None


@dataclass(frozen=True)
class _Candidate:
    """The change the optimiser would make and what holds it back (`held_by`, guard `guard`)."""

    dense: list[int]
    gain: float  # predicted at today's batch sizes (0 when a look-ahead change leaves them alone)
    excess: float  # gain beyond what it needed: evidence for the confirmations
    held_by: str | None
    guard: str
    note: str  # what the reason adds: the look-ahead's figures, the prior's part of the gain

    @property
    def config(self) -> DraftConfig:
        return DraftConfig.from_dense(self.dense)


def _optimise(obs: Observation, tuning: TuningInput, st: PolicyState, now: float, model: Model,
              distribution: Distribution, common: dict[str, Any]) -> Decision:
    """The best config per batch size, weighed against the bar a change must clear, then the guards."""
    current = obs.applied.config
    back = _back_from_probe(tuning, st, now, current, common)
    if back is not None:
        return back
    current_dense = current.dense(tuning.max_batch_size)
    best_dense_ks = best_dense(model, tuning, current_dense, distribution,
                               one_k_where_observed=common["signals"] != "specinfer")
    best = DraftConfig.from_dense(best_dense_ks)
    current_goodput = goodput(model, current_dense, distribution)
    gain = goodput(model, best_dense_ks, distribution) / current_goodput - 1 if current_goodput > 0 else 0.0
    ahead_sizes = anticipated_sizes(distribution, tuning.max_batch_size, LOOKAHEAD)
    cover = coverage_gain(model, best_dense_ks, current_dense, ahead_sizes)
    common = {**common, "recommendation": Recommendation(config=best, predicted_gain=round(gain, 4),
                                                         coverage_gain=round(cover, 4))}
    observed = {max(1, min(int(b), tuning.max_batch_size)) for b, _ in distribution}
    if all(best_dense_ks[b] == current_dense[b] for b in observed) and _may_probe(obs, tuning, common["signals"]):
        # Best here by a fit that measured one K here: measure the K a doubted prior would choose (probe.py).
        probe = probe_for(model, tuning, current, distribution, st, now, measured_noise(st))
        if probe is not None and in_place(current, probe.config, tuning.in_place_max_k):
            st.confirmations = 0
            return _issue_probe(tuning, st, now, current, probe, common)
    if best.same_as(current, tuning.max_batch_size):
        st.confirmations = 0
        return Decision(action="keep", reason=f"{current.describe()} is already the best config", **common)

    slo = guards.slo_violated(obs, tuning)
    candidate = _weigh(obs, tuning, st, model, distribution, best_dense_ks, gain, slo)
    if candidate.held_by:
        st.confirmations, st.evidence = 0, 0.0
    else:
        st.confirmations, st.evidence = st.confirmations + 1, st.evidence + candidate.excess
    # A change in place restarts nothing: no cooldown, no restart budget (its settling window and
    # the verification that follows still apply).
    rollout = not in_place(current, candidate.config, tuning.in_place_max_k)
    checks = [
        (candidate.guard, candidate.held_by),
        (guards.RECENTLY_REJECTED, guards.rejected_guard(st, candidate.dense, tuning.max_batch_size, now)),
        (guards.REVERSAL, guards.reversal_guard(st, current, candidate.config, obs.batch_size_mean,
                                                tuning.reject_hold_seconds, now)),
        (guards.DOUBTED, doubted_loss(model, tuning, current, candidate.dense, distribution, st, now)
         if rollout else None),
        (guards.COOLDOWN, guards.cooldown_guard(st, tuning, now) if rollout else None),
        (guards.RESTART_BUDGET, guards.budget_guard(st, tuning, now, reserve=1) if rollout else None),
        # The step times' noise measures predictions at today's batch sizes only, not the look-ahead's.
        (guards.CONFIRMING, guards.confirmation_guard(st, tuning, None if candidate.guard == LOOKING_AHEAD
                                                      else window_noise(st))),
    ]
    for name, why in checks:
        if why:
            if name == guards.REVERSAL:  # evidence gathered at this load must not switch at the next one
                st.confirmations, st.evidence = 0, 0.0
            return Decision(action="keep", reason=f"best is {candidate.config.describe()} ({candidate.gain:+.1%}) "
                            f"but {why}", guard=name, predicted_gain=round(candidate.gain, 4), **common)
    return _issue_change(obs, tuning, st, now, model, distribution, candidate, slo, common)


LOOKING_AHEAD = "lookingAhead"  # a candidate from the look-ahead (never a guard that holds)


def _weigh(obs: Observation, tuning: TuningInput, st: PolicyState, model: Model, distribution: Distribution,
           best_dense_ks: list[int], gain: float, slo: bool) -> _Candidate:
    """The bar a change must clear -- hysteresis, the restart's payback, the model's noise -- on the
    part of the gain the measurements support (support.py); held there, the look-ahead may still
    program the batch sizes to come (lookahead.py)."""
    current = obs.applied.config
    current_dense = current.dense(tuning.max_batch_size)
    noise = model_noise(st)
    # In place the change costs no restart, and needs no look-ahead: it can follow the load when it comes.
    best_in_place = in_place(current, DraftConfig.from_dense(best_dense_ks), tuning.in_place_max_k)
    restart_cost = 0.0 if best_in_place else restart_cost_seconds(model, current_dense, distribution, tuning)
    horizon = st.payback_horizon(tuning.payback_seconds)

    def below_bar(value: float) -> str | None:
        return guards.threshold_guard(value, tuning, slo_violated=slo, noise=noise, restart_cost_seconds=restart_cost,
                                      horizon_seconds=horizon, in_place=best_in_place)

    needed, _ = guards.required_gain(tuning, slo_violated=slo, noise=noise, restart_cost_seconds=restart_cost,
                                     horizon_seconds=horizon, in_place=best_in_place)
    # A gain at batch sizes never measured does not count until a window has measured them.
    support = supported_gain(model, current_dense, best_dense_ks, distribution, tuning.max_batch_size)
    held_by = below_bar(support.gain)
    if held_by is None:
        return _Candidate(best_dense_ks, gain, support.gain - needed, None, guards.BELOW_THRESHOLD,
                          f"; {support.describe()}" if support.unmeasured else "")
    unmeasured = bool(support.unmeasured and below_bar(gain) is None)
    held = _Candidate(best_dense_ks, gain, 0.0, f"{held_by} where measured; {support.describe()}" if unmeasured
                      else held_by, guards.UNMEASURED if unmeasured else guards.BELOW_THRESHOLD, "")
    # Not enough at today's batch sizes, but a restart is cheapest before the load rises: program
    # the batch sizes to come now (docs/tuner.md, "Looking ahead") -- never today's unmeasured ones.
    measured_best = [current_dense[b] if b in support.unmeasured else k for b, k in enumerate(best_dense_ks)]
    plan = None if best_in_place else look_ahead(model, tuning, current_dense, measured_best, support.gain,
                                                 distribution, restart_cost, noise, measured_noise(st))
    if plan is None:
        return held
    here = any(plan.dense[min(b, tuning.max_batch_size)] != current_dense[min(b, tuning.max_batch_size)]
               for b, _ in distribution)
    note = ("; " + ("" if here else "nothing changes at today's batch sizes; ")
            + f"over the batch sizes to come {plan.gain:+.1%} (needed {plan.needed:.1%}, "
            f"restart cost {restart_cost:.0f}s of goodput now)")
    return _Candidate(plan.dense, gain if here else 0.0, plan.gain - plan.needed, None, LOOKING_AHEAD, note)


def _issue_change(obs: Observation, tuning: TuningInput, st: PolicyState, now: float, model: Model,
                  distribution: Distribution, candidate: _Candidate, slo: bool, common: dict[str, Any]) -> Decision:
    """Every guard passed: the change, and what verifying it will need."""
    current, best = obs.applied.config, candidate.config
    current_dense = current.dense(tuning.max_batch_size)
    path = path_of(current, best, tuning.in_place_max_k)
    calibration = st.calibration.value if st.calibration else 1.0
    observed = {min(b, tuning.max_batch_size) for b, _ in distribution}
    changes_here = any(candidate.dense[b] != current_dense[b] for b in observed)
    # Nothing to verify when the change leaves the K of today's batch sizes alone (look-ahead).
    st.pending = PendingChange(at=now, config=best, previous=current, predicted_gain=candidate.gain,
                               calibration=calibration, prefix=[float(p) for p in model.prefix],
                               theta=[float(t) for t in model.theta],
                               batch_mean=obs.batch_size_mean,
                               in_place=path == "inPlace") if changes_here else None
    st.collapsed_at = None
    st.collapsed_config = None
    st.record_change(now, in_place=path == "inPlace")
    if best.off != current.off:  # speculation switched on or off: a rollout back here waits (reversal_guard)
        st.switched = SpeculationSwitch(speculative=not best.off, batch_mean=obs.batch_size_mean, at=now)
    reason = (f"{current.describe()} -> {best.describe()} ({'in place' if path == 'inPlace' else 'rollout'}): "
              f"predicted goodput {candidate.gain:+.1%} at the observed batch sizes (mean {obs.batch_size_mean:.1f})"
              + candidate.note + ("; p99 latency SLO violated" if slo else ""))
    return Decision(action=action_for(current, best), reason=reason, config=best, path=path,
                    predicted_gain=round(candidate.gain, 4), **common)


def _may_probe(obs: Observation, tuning: TuningInput, signals: Signals) -> bool:
    """Probes are on, the window has per-batch-size step times (vLLM's pooled series mix the K of
    every batch size), and the latency SLO holds (a probe may slow its window)."""
    return (tuning.probe_in_place and bool(obs.step_samples) and signals == "specinfer"
            and not guards.slo_violated(obs, tuning))


def _issue_probe(tuning: TuningInput, st: PolicyState, now: float, current: DraftConfig, probe: Probe,
                 common: dict[str, Any]) -> Decision:
    """A window in place at the K a doubted prior would choose: nothing to verify, the optimiser judges
    it after one window, from the config it replaced (`_back_from_probe`)."""
    st.record_change(now, in_place=True)
    remember(st, probe, current, tuning, now)
    return Decision(action=action_for(current, probe.config), reason=f"{current.describe()} -> "
                    f"{probe.config.describe()} (in place): {probe.describe()}", config=probe.config,
                    path="inPlace", predicted_gain=round(probe.predicted_loss, 4), probe=True, **common)


def _back_from_probe(tuning: TuningInput, st: PolicyState, now: float, current: DraftConfig,
                     common: dict[str, Any]) -> Decision | None:
    """A probe's window has measured its K: back in place to what ran before it, so that what follows
    is judged against that config (against the probe, anything would look like a gain)."""
    previous, st.probe_from = st.probe_from, None
    if previous is None or not st.probed:
        return None
    if not current.same_as(st.probed[-1].config, tuning.max_batch_size):
        st.probed.pop()  # never in force (overridden, replaced): it measured nothing, so it holds nothing
        return None
    st.record_change(now, in_place=True)
    return Decision(action=action_for(current, previous), reason=f"{current.describe()} -> {previous.describe()} "
                    "(in place): the probe has measured its window; back to the config it replaced", config=previous,
                    path="inPlace", **common)


def _disable_after_collapse(obs: Observation, tuning: TuningInput, st: PolicyState, now: float, signals: Signals,
                            first_position: float) -> Decision:
    reason = (f"acceptance collapsed: {first_position:.1%} of first draft tokens accepted "
              f"(limit {tuning.collapse_acceptance:.0%}) over {obs.drafts:.0f} drafts")
    degraded = Degradation(reason=DEGRADED_COLLAPSE, message=reason)
    st.pending = None
    held = guards.budget_guard(st, tuning, now, reserve=0)
    if held:
        return _keep(f"{reason}; {held}", guards.RESTART_BUDGET, signals, degraded=degraded)
    # a collapse during a probe's window: what comes back after the hold is what ran before the probe
    st.collapsed_at, st.collapsed_config = now, st.probe_from or obs.applied.config
    st.probe_from = None
    st.switched = None  # measured, not predicted: the collapse hold governs what follows
    st.acceptance = None  # the broken drafter's numbers say nothing about a fixed one
    st.record_change(now)
    return Decision(action="disable", reason=reason + "; speculation off until the hold expires", config=OFF,
                    path="rollout", signals=signals, degraded=degraded)


def _probe_after_collapse(tuning: TuningInput, st: PolicyState, now: float, signals: Signals) -> Decision:
    """The collapse hold is over: turn the old config back on once; collapse detection guards it."""
    for name, why in ((guards.COOLDOWN, guards.cooldown_guard(st, tuning, now)),
                      (guards.RESTART_BUDGET, guards.budget_guard(st, tuning, now, reserve=1))):
        if why:
            return _keep(f"collapse hold over, re-enabling is due but {why}", name, signals)
    config = st.collapsed_config
    assert config is not None
    st.collapsed_at = None
    st.collapsed_config = None
    st.record_change(now)
    return Decision(action="reenable", reason=f"collapse hold over: probing {config.describe()} again (collapse "
                    "detection switches it off if acceptance is still near zero)", config=config, path="rollout",
                    signals=signals)


def _model_summary(model: Model, tuning: TuningInput, obs: Observation, dense: list[int],
                   distribution: Distribution) -> ModelSummary:
    off = goodput(model, [0] * len(dense), distribution)
    return ModelSummary(
        acceptance_prefix=[round(p, 4) for p in model.prefix],
        expected_tokens={str(k): round(expected_tokens(model.prefix, k), 3) for k in range(tuning.k_max + 1)},
        step_cost_multipliers=[round(float(t), 3) for t in model.theta],
        predicted_speed=round(sequence_speed(model, dense, distribution), 3),
        measured_speed=round(obs.measured_speed, 3),
        speedup_vs_no_speculation=round(goodput(model, dense, distribution) / off, 4) if off > 0 else 1.0,
    )
