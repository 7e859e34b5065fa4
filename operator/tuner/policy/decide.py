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

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from . import guards
from .acceptance import (
    AcceptanceEstimate,
    blend,
    estimate_from,
    expected_tokens,
    extrapolated_prefix,
    measured_positions,
)
from .config import OFF, AdaptiveDense, DraftConfig, differs_at
from .cost import PREFILL_TERM, CostModel
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
from .envelope import EnvelopeChoice, choose_envelope
from .goodput import (
    KEEP_TOLERANCE,
    MAX_RANGES,
    Distribution,
    Model,
    anticipated_sizes,
    best_dense,
    coverage_gain,
    goodput,
    is_speculative,
    limit_ranges,
    prefill_per_token,
    reach_note,
    sequence_speed,
)
from .hedge import Hedge, unvisited_sizes
from .inputs import TuningInput, tuning_from_json
from .lever import adaptive_instead
from .lookahead import LOOKAHEAD, look_ahead
from .observation import (
    DRAIN_LIMIT_SECONDS,
    Observation,
    ObservationError,
    foreign_series_problem,
    observation_problems,
    parse_observation,
    settling_problem,
)
from .probe import (
    Probe,
    acceptance_probe_for,
    doubted_loss,
    plain_probe_for,
    probe_for,
    remember,
    settling_probe_for,
)
from .ramp import Ramp
from .recurring import COST_SHARE, RECURRENCES, back_on_now, memory_seconds, recurrence
from .restart import payback, restart_cost_seconds, rollout_seconds
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
    guard = guards.ROLLOUT if obs.rollout_in_progress else guards.SETTLING
    if not held and (foreign := foreign_series_problem(obs)):  # after those: mid-rollout `since` is not its end
        held, past_drain = foreign
        if past_drain:
            held, guard = f"holding: {held}", guards.INVALID_DATA
    if held:
        # the rollout to speculation off after a collapse is still the collapse: TuningDegraded stays
        degraded = (Degradation(reason=DEGRADED_COLLAPSE, message=f"acceptance collapsed: speculation off; {held}")
                    if st.collapsed_at is not None else None)
        return _keep(held, guard, obs.signals, degraded=degraded), st
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


def _forget_another_drafter(st: PolicyState, tuning: TuningInput) -> None:
    if st.method != tuning.method:  # a different drafter: nothing remembered applies
        st.method, st.cost, st.acceptance, st.switched = tuning.method, None, None, None


def _learn(obs: Observation, tuning: TuningInput,
           st: PolicyState) -> tuple[CostModel, AcceptanceEstimate | None, AcceptanceEstimate | None]:
    _forget_another_drafter(st, tuning)
    cost = CostModel.from_state(st.cost, tuning.cost_prior, tuning.cost_shape, st.prompt_per_generated)
    if obs.applied.config.adaptive:
        # Nothing is learnt while vLLM verifies adaptively: it counts a draft it did not verify as rejected
        # (vllm/v1/core/sched/scheduler.py, num_rejected = drafts - accepted), so the acceptance reads low, and
        # a step verifies fewer tokens than its K, which the step-cost terms would misprice. The model from
        # before it was turned on decides whether to keep it.
        return cost, None, st.acceptance
    cost.decay(COST_FORGET)
    scheduled = obs.applied.config.schedule or (tuning.in_place_max_k is not None and not obs.applied.config.off)
    slowdown = tuning.schedule_step_factor if scheduled else 1.0
    update_noise(st, cost.learn(obs, slowdown))
    theta = cost.multipliers()
    # only read while drafting, when a schedule's K = 0 steps still run the drafter's first pass
    prefill = prefill_per_token(cost, theta)
    fresh = estimate_from(obs, lambda size, k: cost.step_time(size, k, theta, speculative=True)
                          + prefill * size * obs.expected_tokens_at(k))
    if fresh is not None and obs.drafts < tuning.min_drafts:
        # a window short of drafts is used for its steps (guards.samples_guard): blended, its few drafts
        # would still halve the memory's weight, and a run of such windows would forget the acceptance
        fresh = None
    memory = blend(st.acceptance, fresh, ACCEPTANCE_FORGET)
    st.cost = cost.to_state()
    st.prompt_per_generated = float(f"{cost.prompt_per_generated:.6g}")
    st.acceptance = memory
    return cost, fresh, memory


def _decide_on_valid(obs: Observation, tuning: TuningInput, st: PolicyState, now: float) -> Decision:
    signals: Signals = "specinfer" if obs.signals == "specinfer" else "vllm"
    previous_window = st.note_window(obs.batch_size_mean, obs.time)  # the load, even from a thin window
    st.remember_load(obs.batch_size_mean, now, memory_seconds(tuning.payback_seconds) + obs.window_seconds)
    _forget_another_drafter(st, tuning)
    remembered = st.acceptance.weights[0] if st.acceptance is not None and st.acceptance.weights else 0.0
    short_of_samples = guards.samples_guard(obs, tuning, remembered)
    if short_of_samples:
        # short of drafts, not of steps: measure the acceptance where nothing drafts (its cost is priced on the
        # windows before this one)
        on_a_ramp = bool(guards.load_moving_guard(previous_window, obs))
        measuring = _measure_acceptance(obs, tuning, st, now, signals, on_a_ramp) \
            if obs.sequence_steps >= tuning.min_steps else None
        return measuring or _keep(short_of_samples, guards.INSUFFICIENT_SAMPLES, signals)
    cost, fresh, memory = _learn(obs, tuning, st)
    st.note_load(obs.batch_size_mean, now)
    switched = st.switched
    if (switched is not None and switched.settled_mean is None and obs.applied.config.off != switched.speculative
            and (obs.time - obs.applied.since <= 2 * obs.window_seconds + DRAIN_LIMIT_SECONDS
                 or switched.batch_mean <= 0) and switched.moved_it(obs.throughput, obs.batch_size_mean)):
        # the switched config's first windows past the holds (a replaced engine's drain may hold them): what the
        # switch did to the batch mean, not a new load (one at a throughput the switch cannot explain, `moved_it`)
        # -- for a switch decided on a ramp, which recorded no load of its own, whenever that window comes
        switched.settled_mean = obs.batch_size_mean
    if fresh is not None and fresh.biased:
        signals = "vllm-biased"
    protected, moving = _protect(obs, tuning, st, now, signals, fresh, previous_window)
    if protected is not None:
        return protected
    if memory is None:
        measuring = _measure_acceptance(obs, tuning, st, now, signals, bool(moving))
        if measuring is not None:
            return measuring
        why = ("adaptive verification is on, and vLLM counts the drafts it does not verify as rejected: the "
               "acceptance it reports says nothing of the drafter, and none was measured before it was on"
               if obs.applied.config.adaptive else "no acceptance measured yet for this method")
        return _keep(f"{why}: nothing to predict from", guards.NO_ACCEPTANCE_DATA, signals)
    model = Model(extrapolated_prefix(memory, tuning.k_max), cost, cost.multipliers(), tuning.schedule_step_factor,
                  always_scheduled=tuning.in_place_max_k is not None, measured_positions=measured_positions(memory))
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
    ramp = Ramp(moving, previous_window[0], obs.batch_size_mean, after_rest=not _was_moving(st, obs.window_seconds)) \
        if moving and previous_window else None
    return _optimise(obs, tuning, st, now, model, distribution, {"signals": signals, "model": summary}, ramp)


def _was_moving(st: PolicyState, window_seconds: float) -> bool:
    """The window before this one was on a ramp too (st.loads: this window's load last, each window's once)."""
    if len(st.loads) < 3:
        return False
    (at_before, mean_before), (at, mean) = st.loads[-3], st.loads[-2]
    return guards.load_moved(mean_before, at_before, mean, at, window_seconds)


def _protect(obs: Observation, tuning: TuningInput, st: PolicyState, now: float, signals: Signals,
             fresh: AcceptanceEstimate | None,
             previous_window: tuple[float, float] | None) -> tuple[Decision | None, str | None]:
    """What comes before optimising: a collapse, its hold and the probe after it; and whether the load
    is moving (a ramp), which holds only the choices that depend on the load mix (`_optimise`)."""
    # Collapse: acceptance near zero on plenty of drafts -> speculation off, Degraded.
    if fresh is not None and guards.collapse_detected(fresh.prefix[0], obs, tuning):
        return _disable_after_collapse(obs, tuning, st, now, signals, fresh.prefix[0]), None
    # After a collapse, stay off until the hold ends, then probe the old config once.
    if st.collapsed_at is not None:
        held = guards.collapse_hold_guard(st, tuning, now)
        if held:
            return _keep(held, guards.COLLAPSE_HOLD, signals,
                         degraded=Degradation(reason=DEGRADED_COLLAPSE, message=held)), None
    # A ramp is not a measurement of one load: learn from it (done); decide only what does not depend on the mix.
    moving = guards.load_moving_guard(previous_window, obs)
    if st.collapsed_at is not None and st.acceptance is None and st.collapsed_config:
        if moving:
            return _keep(moving, guards.LOAD_MOVING, signals), moving
        return _probe_after_collapse(tuning, st, now, signals), None
    return None, moving


@dataclass(frozen=True)
class _Candidate:
    """A change the optimiser would make and what holds it back (`held_by`, guard `guard`)."""

    dense: list[int]
    gain: float  # predicted at today's batch sizes (0 when a look-ahead change leaves them alone)
    excess: float  # gain beyond what it needed: evidence for the confirmations
    held_by: str | None
    guard: str
    note: str  # what the reason adds: the look-ahead's figures, the prior's part of the gain
    hedged: bool = False  # an envelope taken for the risk it removes, not for today's gain (envelope.py)

    @property
    def config(self) -> DraftConfig:
        return DraftConfig.from_dense(self.dense)


@dataclass(frozen=True)
class _Verdict:
    """A candidate and the first guard that refuses it (None: only the confirmations are left)."""

    candidate: _Candidate
    refused: str | None
    guard: str | None
    rollout: bool


def _optimise(obs: Observation, tuning: TuningInput, st: PolicyState, now: float, model: Model,
              distribution: Distribution, common: dict[str, Any], ramp: Ramp | None) -> Decision:
    """The best config per batch size, weighed against the bar a change must clear, then the guards.
    Where the best is a rollout a guard refuses, the best change in place is taken instead."""
    current = obs.applied.config
    back = _back_from_probe(tuning, st, now, current, common)
    if back is not None:
        return back
    top = tuning.max_batch_size
    current_dense = current.dense(top)
    # vLLM's pooled series: one K across today's batch sizes -- a choice of the load mix, not made on a ramp, but
    # for speculation back on from off (ramp.py): the windows after it measure one K, as at rest
    one_k = common["signals"] != "specinfer" and (ramp is None or current.off)
    hedge = Hedge.of(model, tuning) if _retuned_in_place(tuning, current) else None
    live = hedge.dense(current_dense, distribution, one_k_where_observed=one_k) if hedge is not None else None
    # in place every K up to the envelope is reached and only speculation off is a rollout -- unless the
    # drafter drafts its startup K, where a smaller largest K drafts less on every step and is a rollout too
    envelope: EnvelopeChoice | None = None

    def pick_envelope(options: list[list[int]]) -> list[int]:
        """The largest K for the load to come as well as today's (envelope.py); kept for the decision."""
        nonlocal envelope
        envelope = choose_envelope(model, tuning, options, distribution)
        return envelope.chosen

    pick = pick_envelope if tuning.drafts_startup_k() else None
    if live is None or tuning.k_max > (tuning.in_place_max_k or 0) or tuning.drafts_startup_k():
        fit_best = best_dense(model, tuning, current_dense, distribution, one_k_where_observed=one_k,
                              pick_envelope=pick)
    else:
        fit_best = [0] * (top + 1) if tuning.allow_disable else live
    # the best drafts less than today's best envelope (unless best_dense replaced the pick: off, a single K)
    hedged_top = max(fit_best[1:]) if envelope is not None and envelope.hedged and is_speculative(fit_best) \
        and max(fit_best[1:]) == max(envelope.chosen[1:]) else None
    best_ks = _best_of(model, tuning, current, fit_best, live, distribution, hedged_top)
    # where two futures were weighed, adaptive verification drafts within the envelope they chose
    weighed_top = max(envelope.chosen[1:]) if envelope is not None and envelope.risk is not None else None
    best_ks = adaptive_instead(model, tuning, current, best_ks, distribution, max_k=weighed_top)
    best = DraftConfig.from_dense(best_ks)
    # the envelope choice that weighed two futures, where the best moves to it from another largest K: its bar
    # (`_weigh_rollout`); and, where it drafts less than today's best, what it gave up
    weighed = envelope if envelope is not None and envelope.risk is not None and is_speculative(best_ks) \
        and max(best_ks[1:]) == max(envelope.chosen[1:]) else None
    # (from speculation off, or at the same largest K -- a schedule, adaptive verification -- no envelope changes)
    moving = weighed if is_speculative(current_dense) and max(current_dense[1:]) != max(best_ks[1:]) else None
    hedged = weighed if weighed is not None and weighed.hedged else None
    gain = _gain(model, best_ks, current_dense, distribution)
    ahead_sizes = anticipated_sizes(distribution, top, LOOKAHEAD)
    cover = coverage_gain(model, best_ks, current_dense, ahead_sizes)
    common = {**common, "recommendation": Recommendation(config=best, predicted_gain=round(gain, 4),
                                                         coverage_gain=round(cover, 4))}
    observed = {max(1, min(int(b), top)) for b, _ in distribution}

    probes_may_run = ramp is None and _may_probe(obs, tuning, common["signals"])
    per_batch_size = common["signals"] == "specinfer"  # the plugin's series: step times per batch size and K

    def may_probe(dense: Sequence[int]) -> bool:
        """Probes may run (not on a ramp, `_may_probe`) and nothing `dense` changes at today's batch sizes."""
        return probes_may_run and not any(differs_at(dense, current_dense, b) for b in observed)

    def issued(probe: Probe | None) -> Decision | None:
        if probe is None or not in_place(current, probe.config, tuning.in_place_max_k, exact=tuning.drafts_startup_k()):
            return None
        st.confirmations, st.evidence = 0, 0.0  # what windows before it saw does not confirm what follows it
        return _issue_probe(tuning, st, now, current, probe, common)

    def probed(dense: Sequence[int]) -> Decision | None:
        """Best here by a fit that measured one K here: measure the K a doubted prior would choose (probe.py)."""
        if not may_probe(dense):
            return None
        return issued(probe_for(model, tuning, current, distribution, st, now, measured_noise(st),
                                per_batch_size=per_batch_size))

    def settling(refused: _Candidate) -> Decision | None:
        """A rollout the doubted prior still calls a loss after a probe: measure the K that settles it -- unless
        the cooldown or the restart budget would hold the rollout anyway (the window would buy nothing)."""
        if live is None or not may_probe(live) or guards.cooldown_guard(st, tuning, now) \
                or guards.budget_guard(st, tuning, now, reserve=1):
            return None
        return issued(settling_probe_for(model, tuning, current, refused.dense, refused.gain, distribution, st, now,
                                         measured_noise(st), per_batch_size=per_batch_size))

    def measuring_plain(verdict: _Verdict) -> Decision | None:
        """A rollout to speculation off that every guard but the confirmations lets through, whose plain step
        no window measured here: K = 0 in place for a window first (probe.py) -- the rollout restarts every
        replica on that step. Not on a ramp, nor where probes may not run: there the rollout goes on the fit."""
        if not verdict.rollout or verdict.refused is not None or not probes_may_run:
            return None
        return issued(plain_probe_for(model, tuning, current, verdict.candidate.dense, verdict.candidate.gain,
                                      distribution, st, now))

    probe = probed(best_ks)
    if probe is not None:
        return probe
    recurring = _recurring_switch(obs, tuning, st, now, model, distribution, best_ks, common,
                                  guards.slo_violated(obs, tuning), ramp)
    if recurring is not None:
        return recurring
    if best.same_as(current, top):
        st.confirmations = 0
        return Decision(action="keep", reason=f"{current.describe()} is already the best config"
                        + (hedged.describe() if hedged else ""), **common)

    slo = guards.slo_violated(obs, tuning)
    first = _consider(obs, tuning, st, now, model, distribution, best_ks, gain, slo, ramp, hedge, moving)
    probe = measuring_plain(first)
    if probe is not None:
        return probe
    chosen: _Verdict | None = first if first.refused is None else None
    fallback: _Verdict | None = None
    if first.refused is not None and hedged is not None and hedged.best_today != current_dense:
        # the hedged envelope is refused (its bar, or a guard): today's best envelope, by the usual bar, if it adds no
        # risk
        today = hedged.best_today
        fallback = _consider(obs, tuning, st, now, model, distribution, today,
                             _gain(model, today, current_dense, distribution), slo, ramp, hedge, hedged,
                             instead_of_hedge=True)
        chosen = fallback if fallback.refused is None else None
    if chosen is None and first.refused is not None and first.rollout and live is not None and live != current_dense:
        # Never hold the worse config because the best one is refused: the best change in place instead.
        fallback = _consider(obs, tuning, st, now, model, distribution, live,
                             _gain(model, live, current_dense, distribution), slo, ramp, hedge)
        chosen = fallback if fallback.refused is None else None
    if first.guard == guards.LOAD_MOVING or (ramp is not None and ramp.after_rest):
        # a choice of the mix, or the ramp's first window: what windows before the ramp saw does not speak for it
        st.confirmations, st.evidence = 0, 0.0
    if first.candidate.held_by is None or chosen is not None:
        st.confirmations += 1
        st.evidence += (chosen or first).candidate.excess
    else:
        st.confirmations, st.evidence = 0, 0.0
    if first.guard == guards.REVERSAL:  # evidence gathered at this load must not switch at the next one
        st.confirmations, st.evidence = 0, 0.0
    refused_best = (f"best is {best.describe()} ({gain:+.1%}) but {first.refused}"
                    if first.refused is not None else None)
    if chosen is None:
        # The best is refused and nothing in place changes today's K: what the rollout rests on may be measured.
        probe = probed(live) if first.rollout and live is not None else None
        if probe is None and first.guard == guards.DOUBTED:
            probe = settling(first.candidate)
        if probe is not None:
            return probe
        tail = "" if fallback is None else (f"; in place, {fallback.candidate.config.describe()} "
                                            f"({fallback.candidate.gain:+.1%}) but {fallback.refused}")
        return Decision(action="keep", reason=f"{refused_best}{tail}", guard=first.guard,
                        predicted_gain=round(gain, 4), **common)
    # On a ramp a change in place follows each batch size's own best, which no load mix decides.
    skip_confirming = ramp is not None and not chosen.rollout
    # The step times' noise measures predictions at today's batch sizes only, not the look-ahead's.
    confirming = None if skip_confirming else guards.confirmation_guard(
        st, tuning, None if chosen.candidate.guard == LOOKING_AHEAD else window_noise(st))
    if confirming:
        shown = chosen.candidate
        prefix = f"{refused_best}; in place instead, " if refused_best else ""
        return Decision(action="keep", reason=f"{prefix}best is {shown.config.describe()} ({shown.gain:+.1%}) but "
                        f"{confirming}", guard=guards.CONFIRMING, predicted_gain=round(shown.gain, 4), **common)
    return _issue_change(obs, tuning, st, now, model, distribution, chosen.candidate, slo, common,
                         refused_best=refused_best, ramp=ramp)


LOOKING_AHEAD = "lookingAhead"  # a candidate from the look-ahead (never a guard that holds)


def _recurring_switch(obs: Observation, tuning: TuningInput, st: PolicyState, now: float, model: Model,
                      distribution: Distribution, best_ks: list[int], common: dict[str, Any], slo: bool,
                      ramp: Ramp | None) -> Decision | None:
    """Speculation off, or held off, for a load that keeps coming back (recurring.py): judged over the recent
    windows' loads where they came back at least twice to where off wins. None: today's load decides."""
    if not tuning.allow_disable or 0 not in tuning.allowed_ks():
        return None
    if obs.applied.config.off:
        return _held_off(obs, tuning, st, now, model, distribution, best_ks, common, slo)
    if tuning.downtime_fraction <= 0:
        return None  # with Surge a rollout costs no goodput: each peak's switch off repays itself (the payback's call)
    decision = _off_for_the_pattern(obs, tuning, st, now, model, distribution, best_ks, common, slo, ramp)
    if decision is None or decision.is_change:
        st.recurring_windows = 0  # a window short of the bar, or the switch: the next one counts afresh
    return decision


def _held_off(obs: Observation, tuning: TuningInput, st: PolicyState, now: float, model: Model,
              distribution: Distribution, best_ks: list[int], common: dict[str, Any], slo: bool) -> Decision | None:
    """Back on wins today: held while off wins over the load that keeps coming back -- a switch taken for that load
    while one stay of the load where off wins is left in the recent windows (hysteresis), any other once the load
    recurs. Not while the latency SLO is violated: today's load comes first.

    With Surge a rollout costs no goodput, and back on is held where it costs the next peak more tokens than it
    gains in the quiet still to come (recurring.back_on_now): it lands after a rollout, and the peak runs it until
    a switch off is decided and rolled out, or the cooldown's rest where that is longer."""
    if not is_speculative(best_ks) or slo:
        return None
    off = OFF.dense(tuning.max_batch_size)
    seen = recurrence(model, best_ks, off, st.loads, now, tuning.max_batch_size, obs.window_seconds)
    taken_for_it = st.switched is not None and st.switched.recurring and not st.switched.speculative
    if seen is None or seen.stays < (1 if taken_for_it else RECURRENCES):
        return None
    today = _gain(model, best_ks, off, distribution)
    if tuning.downtime_fraction <= 0:
        back_on = back_on_now(model, best_ks, off, distribution, seen, rollout_seconds=rollout_seconds(tuning),
                              cooldown_seconds=tuning.cooldown_seconds,
                              decision_seconds=_decision_seconds(obs, tuning, st))
        if back_on is None or back_on.pays:
            return None
        why = back_on.describe()
    else:
        off_gain = _gain(model, off, best_ks, seen.distribution)
        if off_gain <= 0:
            return None
        why = seen.describe(off_gain)
    st.confirmations, st.evidence = 0, 0.0
    return Decision(action="keep", reason=f"best is {DraftConfig.from_dense(best_ks).describe()} ({today:+.1%}) "
                    f"but {why}: kept off for the load that keeps coming back",
                    guard=guards.RECURRING, predicted_gain=round(today, 4), **common)


def _decision_seconds(obs: Observation, tuning: TuningInput, st: PolicyState) -> float:
    """How long a switch takes to be decided once a load has come: a window of it, then a decision for each further
    confirmation, one a tick of the loop (the median spacing of the windows recorded lately: a rollout's gap is
    one of them, not the loop's pace)."""
    times = [float(at) for at, _ in st.loads[-6:]]
    spacings = sorted(later - earlier for earlier, later in itertools.pairwise(times) if later > earlier)
    tick = spacings[len(spacings) // 2] if spacings else obs.window_seconds
    return obs.window_seconds + (tuning.confirmations - 1) * tick


def _off_for_the_pattern(obs: Observation, tuning: TuningInput, st: PolicyState, now: float, model: Model,
                         distribution: Distribution, best_ks: list[int], common: dict[str, Any], slo: bool,
                         ramp: Ramp | None) -> Decision | None:
    """Speculation off where, over the recent windows' loads, it clears the floor and repays its rollout at today's
    load COST_SHARE over; in `confirmations` windows of their own, past the rejection, reversal, cooldown and budget
    guards. None where it does not (or a guard holds it: today's load decides, and changes in place go on)."""
    current = obs.applied.config
    top = tuning.max_batch_size
    off = OFF.dense(top)
    if ramp is not None:
        return None  # a ramp is no window of one load
    current_dense = current.dense(top)
    seen = recurrence(model, current_dense, off, st.loads, now, top, obs.window_seconds)
    if seen is None or not seen.recurs:
        return None
    today = _gain(model, off, current_dense, distribution)
    if slo and today < 0:
        return None  # the SLO is violated at today's load, which this switch would serve worse
    # the floor without the SLO's relief (that is today's load's), on the gain over the recent loads without what it
    # would gain at batch sizes never measured (support.py)
    floor, floor_name = guards.required_gain(tuning, slo_violated=False, noise=model_noise(st))
    gain = supported_gain(model, current_dense, off, seen.distribution, top).gain
    gained = gain * goodput(model, current_dense, seen.distribution) * seen.span_seconds
    cost = restart_cost_seconds(model, current_dense, distribution, tuning) * goodput(model, current_dense,
                                                                                      distribution)
    if gain < floor or cost > COST_SHARE * gained:
        return None
    for why in (guards.rejected_guard(st, off, top, now),
                guards.reversal_guard(st, current, OFF, obs.batch_size_mean, tuning.reject_hold_seconds, now),
                guards.cooldown_guard(st, tuning, now), guards.budget_guard(st, tuning, now, reserve=1)):
        if why:
            return None
    st.recurring_windows += 1
    if st.recurring_windows < tuning.confirmations:
        # (no early confirmation on the measured noise: that is the noise at today's batch sizes, not over these)
        return Decision(action="keep", reason=f"best for the load that keeps coming back is speculation off: "
                        f"{seen.describe(gain)}, but gain seen in {st.recurring_windows} of {tuning.confirmations} "
                        "consecutive windows needed", guard=guards.CONFIRMING, predicted_gain=round(today, 4),
                        **common)
    note = (f"; {seen.describe(gain)} (needed {floor:.1%}, the {floor_name}): {gained:,.0f} tokens a replica over "
            f"them, against the {cost:,.0f} the rollout costs at this load; kept off for the load that keeps coming "
            "back")
    candidate = _Candidate(off, today, gain - floor, None, guards.RECURRING, note, hedged=True)
    decision = _issue_change(obs, tuning, st, now, model, distribution, candidate, slo, common)
    if st.switched is not None:
        st.switched.recurring = True
    return decision


def _retuned_in_place(tuning: TuningInput, current: DraftConfig) -> bool:
    """The engine takes a per-batch-size schedule in place: it follows a published one and drafts now (with
    adaptive verification on, vLLM's rule decides what is verified: the tuner only keeps it or turns it off)."""
    return tuning.in_place_max_k is not None and not current.off and tuning.allow_schedule and not current.adaptive


def _gain(model: Model, dense: Sequence[int], current: Sequence[int], distribution: Distribution) -> float:
    before = goodput(model, current, distribution)
    return goodput(model, dense, distribution) / before - 1 if before > 0 else 0.0


def _best_of(model: Model, tuning: TuningInput, current: DraftConfig, fit_best: list[int], live: list[int] | None,
             distribution: Distribution, hedged_top: int | None = None) -> list[int]:
    """The best config: the in-place schedule, unless a rollout (speculation off, a K above the engine's
    maximum, a smaller largest K for a drafter that drafts its startup K) beats it by more than KEEP_TOLERANCE
    at today's batch sizes -- or is the envelope chosen for the load to come (`hedged_top`, envelope.py), which
    its own bar judges."""
    if live is None:
        return fit_best
    if in_place(current, DraftConfig.from_dense(fit_best), tuning.in_place_max_k, exact=tuning.drafts_startup_k()):
        return live
    if hedged_top is not None and is_speculative(fit_best) and max(fit_best[1:]) == hedged_top:
        return fit_best
    if goodput(model, fit_best, distribution) > goodput(model, live, distribution) * (1 + KEEP_TOLERANCE):
        return fit_best
    return live


def _consider(obs: Observation, tuning: TuningInput, st: PolicyState, now: float, model: Model,
              distribution: Distribution, dense: list[int], gain: float, slo: bool, ramp: Ramp | None,
              hedge: Hedge | None, envelope: EnvelopeChoice | None = None,
              instead_of_hedge: bool = False) -> _Verdict:
    """`dense` weighed against its bar, then every guard but the confirmations (`envelope`: the envelope choice
    that weighed two futures, where `dense` moves to its largest K from another one; `instead_of_hedge`: `dense`
    is today's best envelope, weighed because the hedged one was refused)."""
    current = obs.applied.config
    config = DraftConfig.from_dense(dense)
    rollout = not in_place(current, config, tuning.in_place_max_k, exact=tuning.drafts_startup_k())
    if rollout:
        candidate = _weigh_rollout(obs, tuning, st, now, model, distribution, dense, gain, slo, hedge is None,
                                   envelope, instead_of_hedge)
    else:
        assert hedge is not None or tuning.in_place_max_k is not None
        candidate = _weigh_in_place(obs, tuning, st, model, distribution, dense, gain, slo, hedge)
    # a choice of the load mix decided on a moving load would price neither load; a change in place follows the
    # load, and so does one that wins wherever the ramp goes (ramp.py) -- not with vLLM's pooled series, whose
    # window runs one K across today's batch sizes: a choice of the mix whatever it wins. From speculation off no
    # window mixes K, so there speculation back on wins wherever the ramp goes with either series.
    mix_bound = ramp is not None and (rollout or not tuning.allow_schedule) and not (
        (obs.signals == "specinfer" or current.off)
        and ramp.followed_by(model, current.dense(tuning.max_batch_size), candidate.dense, distribution,
                             tuning.max_batch_size))
    checks = [
        (guards.LOAD_MOVING, ramp.why if mix_bound and ramp is not None else None),
        (candidate.guard, candidate.held_by),
        (guards.RECENTLY_REJECTED, guards.rejected_guard(st, candidate.dense, tuning.max_batch_size, now)),
        (guards.REVERSAL, guards.reversal_guard(st, current, candidate.config, obs.batch_size_mean,
                                                tuning.reject_hold_seconds, now)),
        # (a hedged envelope loses at today's batch sizes by design: the doubt is about today's gain)
        (guards.DOUBTED, doubted_loss(model, tuning, current, candidate.dense, distribution, st, now)
         if rollout and not candidate.hedged else None),
        # A change in place restarts nothing: no cooldown, no restart budget (its settling window and
        # the verification that follows still apply).
        (guards.COOLDOWN, guards.cooldown_guard(st, tuning, now) if rollout else None),
        (guards.RESTART_BUDGET, guards.budget_guard(st, tuning, now, reserve=1) if rollout else None),
    ]
    for name, why in checks:
        if why:
            return _Verdict(candidate, why, name, rollout)
    return _Verdict(candidate, None, None, rollout)


def _weigh_rollout(obs: Observation, tuning: TuningInput, st: PolicyState, now: float, model: Model,
                   distribution: Distribution, best_dense_ks: list[int], gain: float, slo: bool,
                   may_look_ahead: bool, envelope: EnvelopeChoice | None = None,
                   instead_of_hedge: bool = False) -> _Candidate:
    """The bar a rollout must clear -- between two largest K where two futures are weighed, first the regret it
    removes (envelope.py); then hysteresis, the model's noise, the payback over the time the load has stayed
    where it wins (restart.py) -- on the part of the gain the measurements support (support.py); held there, an
    envelope that drafts less for the load to come may clear it on the risk it removes alone, and the look-ahead
    may still program the batch sizes to come (lookahead.py)."""
    current_dense = obs.applied.config.dense(tuning.max_batch_size)
    noise = model_noise(st)
    pay = payback(model, current_dense, best_dense_ks, distribution, tuning, st.loads, now, obs.window_seconds,
                  typical_seconds=st.load_persistence)
    floor, floor_name = guards.required_gain(tuning, slo_violated=slo, noise=noise)

    def below_bar(value: float) -> str | None:
        if value < floor:
            return f"predicted gain {value:+.1%} is below the {floor_name} of {floor:.1%}"
        return pay.describe(value) if value < pay.needed() else None

    # Between the largest K of a drafter that drafts its startup K, where two futures are weighed (envelope.py): a
    # rollout must also remove enough of the worse future's regret, as a gain sustained over paybackSeconds would
    # repay the restart now -- both futures last that long, not how long today's load has lasted -- and clear the
    # floor (the hysteresis and the model's noise, or the noise alone while the SLO is violated), so that a close
    # call between envelopes does not roll out each way as the fit moves. Today's best envelope taken instead of a
    # refused hedge need only add no risk.
    removed = risk_needed = None
    if envelope is not None and envelope.risk is not None:
        removed = envelope.risk.reduction(current_dense, best_dense_ks)
        risk_needed = 0.0 if instead_of_hedge else floor + pay.cost_seconds / tuning.payback_seconds
        if removed < risk_needed:
            return _Candidate(best_dense_ks, gain, 0.0, (
                f"it removes {removed:+.1%} of the worse future's regret (today's goodput over "
                f"{tuning.payback_seconds / 60:.0f} min), less than the {risk_needed:.1%} a rollout between largest "
                f"K needs{envelope.describe()}"), guards.BELOW_THRESHOLD, "")
    # A gain at batch sizes never measured does not count until a window has measured them.
    support = supported_gain(model, current_dense, best_dense_ks, distribution, tuning.max_batch_size)
    held_by = below_bar(support.gain)
    if held_by is None:
        pick = (lambda options: choose_envelope(model, tuning, options, distribution).chosen) \
            if tuning.drafts_startup_k() else None
        reach = "" if isinstance(best_dense_ks, AdaptiveDense) else reach_note(
            model, tuning, current_dense, distribution, best_dense_ks, one_k_where_observed=obs.signals != "specinfer",
            pick_envelope=pick)
        return _Candidate(best_dense_ks, gain, support.gain - max(floor, pay.needed()), None, guards.BELOW_THRESHOLD,
                          f"; {pay.describe(support.gain)}" + (f"; {support.describe()}" if support.unmeasured else "")
                          + reach + (envelope.describe() if envelope is not None and not instead_of_hedge else ""))
    unmeasured = bool(support.unmeasured and below_bar(gain) is None)
    held = _Candidate(best_dense_ks, gain, 0.0, f"{held_by} where measured; {support.describe()}" if unmeasured
                      else held_by, guards.UNMEASURED if unmeasured else guards.BELOW_THRESHOLD, "")
    if envelope is not None and envelope.hedged and removed is not None and risk_needed is not None \
            and not instead_of_hedge:
        # drafting less on every step for the load to come: it serves less today, and the risk it removes repays it
        return _Candidate(best_dense_ks, gain, removed - risk_needed, None, guards.BELOW_THRESHOLD,
                          f"{envelope.describe()}; that risk is worth {removed:+.1%} of today's goodput over "
                          f"{tuning.payback_seconds / 60:.0f} min (needed {risk_needed:.1%})", hedged=True)
    if not may_look_ahead:
        return held
    # Not enough at today's batch sizes, but a restart is cheapest before the load rises: program
    # the batch sizes to come now (docs/tuner.md, "Looking ahead"), today's K left as it is.
    plan = look_ahead(model, tuning, current_dense, best_dense_ks, distribution, pay.cost_seconds, noise,
                      measured_noise(st))
    if plan is None:
        return held
    note = (f"; nothing changes at today's batch sizes; over the batch sizes to come {plan.gain:+.1%} (needed "
            f"{plan.needed:.1%}, restart cost {pay.cost_seconds:.0f}s of goodput now)")
    return _Candidate(plan.dense, 0.0, plan.gain - plan.needed, None, LOOKING_AHEAD, note)


def _weigh_in_place(obs: Observation, tuning: TuningInput, st: PolicyState, model: Model,
                    distribution: Distribution, dense: list[int], gain: float, slo: bool,
                    hedge: Hedge | None) -> _Candidate:
    """The bar a change in place must clear at today's batch sizes: the in-place hysteresis and the
    model's noise, on the part of the gain the measurements support -- a lower K where nothing is
    measured counts (support.py). Held there, the schedule at the batch sizes not served now is
    published when it matters (`_published_ahead`)."""
    current_dense = obs.applied.config.dense(tuning.max_batch_size)
    needed, name = guards.required_gain(tuning, slo_violated=slo, noise=model_noise(st), in_place=True)
    support = supported_gain(model, current_dense, dense, distribution, tuning.max_batch_size, lowering_counts=True)
    if support.gain >= needed:
        return _Candidate(dense, gain, support.gain - needed, None, guards.BELOW_THRESHOLD,
                          f"; {support.describe()}" if support.unmeasured else "")
    ahead, short = _published_ahead(model, tuning, current_dense, dense, distribution, hedge) if hedge else (None, None)
    if ahead is not None:
        return ahead
    observed = {max(1, min(int(b), tuning.max_batch_size)) for b, _ in distribution}
    if short and not any(differs_at(dense, current_dense, b) for b in observed):
        return _Candidate(dense, gain, 0.0, f"nothing changes at today's batch sizes, and {short}",
                          guards.BELOW_THRESHOLD, "")
    held_by = f"predicted gain {support.gain:+.1%} is below the {name} of {needed:.1%}"
    unmeasured = bool(support.unmeasured and gain >= needed)
    return _Candidate(dense, gain, 0.0, f"{held_by} where measured; {support.describe()}" if unmeasured else held_by,
                      guards.UNMEASURED if unmeasured else guards.BELOW_THRESHOLD, "")


# The worst-case loss a schedule must avoid at the batch sizes not served now (and minGainInPlace): a
# boundary that moves by a few batch sizes from one window's fit to the next avoids a fraction of that.
AHEAD_MIN_GAIN = 0.02


def _published_ahead(model: Model, tuning: TuningInput, current: Sequence[int], live: Sequence[int],
                     distribution: Distribution, hedge: Hedge) -> tuple[_Candidate | None, str | None]:
    """Today's K at today's batch sizes, the in-place schedule at every other: published as soon as it
    avoids AHEAD_MIN_GAIN (or minGainInPlace) of the worst-case loss over the batch sizes not served
    now (hedge.py) -- a schedule costs nothing to publish in place, and the peak's batch sizes are then
    right when it comes. Otherwise None, and what it would avoid when that is too little."""
    top = tuning.max_batch_size
    low = max(1, min(int(size) for size, _ in distribution))
    high = min(top, max(int(size) for size, _ in distribution))
    dense = limit_ranges(model, [*live[:low], *current[low : high + 1], *live[high + 1 :]], MAX_RANGES)
    if any(dense[b] != current[b] for b in range(low, high + 1)) or not is_speculative(dense):
        return None, None  # the other batch sizes cannot be programmed without touching today's
    if dense == list(current):
        return None, None
    sizes = unvisited_sizes(distribution, top)
    avoided = hedge.avoided(current, dense, sizes)
    needed = max(AHEAD_MIN_GAIN, tuning.min_gain_in_place)
    outside = f"the batch sizes outside today's {low}-{high}" if low < high else f"batch sizes other than {low}"
    if avoided < needed:
        return None, (f"over {outside} the schedule would avoid {avoided:.1%} of the worst-case loss, "
                      f"less than the {needed:.0%} a schedule published ahead needs")
    fit = coverage_gain(model, dense, current, [(b, 1.0 / len(sizes)) for b in sizes])
    note = (f"; nothing changes at today's batch sizes; over {outside} it avoids {avoided:.1%} of the "
            f"worst-case loss (the fit alone: {fit:+.1%})")
    return _Candidate(dense, 0.0, avoided - needed, None, LOOKING_AHEAD, note), None


def _issue_change(obs: Observation, tuning: TuningInput, st: PolicyState, now: float, model: Model,
                  distribution: Distribution, candidate: _Candidate, slo: bool, common: dict[str, Any], *,
                  refused_best: str | None = None, ramp: Ramp | None = None) -> Decision:
    """Every guard passed: the change, and what verifying it will need. A switch on or off decided on a ramp
    (ramp.py) is remembered at the load its first window settles at where the ramp went, not at the one it passed
    through (and until then at the one it was decided at)."""
    current, best = obs.applied.config, candidate.config
    current_dense = current.dense(tuning.max_batch_size)
    path = path_of(current, best, tuning.in_place_max_k, exact=tuning.drafts_startup_k())
    calibration = st.calibration.value if st.calibration else 1.0
    observed = {min(b, tuning.max_batch_size) for b, _ in distribution}
    changes_here = any(differs_at(candidate.dense, current_dense, b) for b in observed)
    # Nothing to verify when the change leaves the K of today's batch sizes alone (look-ahead).
    st.pending = PendingChange(at=now, config=best, previous=current, predicted_gain=candidate.gain,
                               calibration=calibration, prefix=[float(p) for p in model.prefix],
                               theta=[float(t) for t in model.theta[:PREFILL_TERM]],
                               prefill_theta=float(model.theta[PREFILL_TERM]),
                               batch_mean=obs.batch_size_mean,
                               tolerated_loss=max(0.0, -candidate.gain) if candidate.hedged else 0.0,
                               in_place=path == "inPlace") if changes_here else None
    st.collapsed_at = None
    st.collapsed_config = None
    st.record_change(now, in_place=path == "inPlace")
    if best.off != current.off:  # speculation switched on or off: a rollout back here waits (reversal_guard)
        on_ramp = ramp is not None
        st.switched = SpeculationSwitch(speculative=not best.off, batch_mean=0.0 if on_ramp else obs.batch_size_mean,
                                        at=now, predicted_gain=candidate.gain, throughput=obs.throughput,
                                        ramp_mean=obs.batch_size_mean if on_ramp else 0.0,
                                        ramp_rising=ramp.rising if ramp is not None else None)
    reason = (f"{current.describe()} -> {best.describe()} ({'in place' if path == 'inPlace' else 'rollout'}): "
              f"predicted goodput {candidate.gain:+.1%} at the observed batch sizes (mean {obs.batch_size_mean:.1f})"
              + candidate.note + ("; p99 latency SLO violated" if slo else "")
              + (f"; {refused_best}, so the best change in place instead" if refused_best else ""))
    return Decision(action=action_for(current, best), reason=reason, config=best, path=path,
                    predicted_gain=round(candidate.gain, 4), **common)


def _measure_acceptance(obs: Observation, tuning: TuningInput, st: PolicyState, now: float,
                        signals: Signals, moving: bool) -> Decision | None:
    """Too little acceptance known and nothing drafted at today's batch sizes: draft there for a window (probe.py
    `acceptance_probe_for`), where probes may run and the load holds still. A probe whose window measured
    no acceptance either (the load moved off its batch sizes, the engine did not take it) goes back first."""
    current = obs.applied.config
    common: dict[str, Any] = {"signals": signals}
    if st.probe_from is not None:
        return _back_from_probe(tuning, st, now, current, common)
    if moving or not _may_probe(obs, tuning, signals):
        return None
    cost = CostModel.from_state(st.cost, tuning.cost_prior, tuning.cost_shape, st.prompt_per_generated)
    probe = acceptance_probe_for(cost, tuning, current, obs.batch_distribution(), st, now,
                                 one_k=signals != "specinfer")
    if probe is None or not in_place(current, probe.config, tuning.in_place_max_k, exact=tuning.drafts_startup_k()):
        return None
    return _issue_probe(tuning, st, now, current, probe, common, acceptance=True)


def _may_probe(obs: Observation, tuning: TuningInput, signals: Signals) -> bool:
    """Probes are on, the window measures step times by K -- per batch size (our plugin's series), or
    pooled over a window that runs one K across its batch sizes (vLLM's, `one_k_over`; probe_for
    probes only such a window) -- and the latency SLO holds (a probe may slow its window)."""
    by_k = bool(obs.step_samples) if signals == "specinfer" else signals == "vllm"
    return tuning.probe_in_place and by_k and not guards.slo_violated(obs, tuning)


def _issue_probe(tuning: TuningInput, st: PolicyState, now: float, current: DraftConfig, probe: Probe,
                 common: dict[str, Any], *, acceptance: bool = False) -> Decision:
    """A window in place at the K a doubted prior would choose: nothing to verify, the optimiser judges
    it after one window, from the config it replaced (`_back_from_probe`)."""
    st.record_change(now, in_place=True)
    remember(st, probe, current, tuning, now, acceptance=acceptance)
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
        prefill_seconds_per_generated_token=float(f"{model.prefill_per_token:.4g}"),
        speedup_vs_no_speculation=round(goodput(model, dense, distribution) / off, 4) if off > 0 else 1.0,
    )
