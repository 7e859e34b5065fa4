"""Safety guards: each a small pure check that returns why the policy must hold, or None.

Restarts are expensive (a vLLM restart reloads the model), so every change must clear all of
these; the guard's name is reported in the decision so status and metrics can say what held.
"""

from __future__ import annotations

import math

from .config import DraftConfig
from .inputs import TuningInput
from .observation import Observation
from .state import LOAD_SHIFT, PolicyState

# Guard names as they appear in decisions (`Decision.guard`).
INVALID_TUNING = "invalidTuning"
INVALID_DATA = "invalidData"
STALE_DATA = "staleData"
ROLLOUT = "rolloutInProgress"
SETTLING = "settling"
INSUFFICIENT_SAMPLES = "insufficientSamples"
COOLDOWN = "cooldown"
RESTART_BUDGET = "restartBudget"
BELOW_THRESHOLD = "belowThreshold"
CONFIRMING = "confirming"
RECENTLY_REJECTED = "recentlyRejected"
COLLAPSE_HOLD = "collapseHold"
VERIFYING = "verifying"
NO_ACCEPTANCE_DATA = "noAcceptanceData"
LOAD_MOVING = "loadMoving"
UNMEASURED = "unmeasured"
REVERSAL = "reversal"
DOUBTED = "doubted"  # a rollout after a probe that a doubted prior still calls a loss (probe.py)
RECURRING = "recurringLoad"  # speculation back on, which loses over a load that keeps coming back (recurring.py)

# The load moves when the newest stretch of the window ran at another batch size than the oldest:
# by more than MOVING_SHARE of the mean and MOVING_REQUESTS requests (less is the wobble of a steady load).
MOVING_SHARE = 0.3
MOVING_REQUESTS = 2.0
MAX_STRETCHES = 4.0  # window/interval beyond this (a tick seconds after the last) is not amplified further


def rollout_guard(obs: Observation) -> str | None:
    if obs.rollout_in_progress:
        return "a rollout is in progress: its replicas mix two configs, waiting for it to finish"
    return None


def load_moving_guard(previous: tuple[float, float] | None, obs: Observation) -> str | None:
    """The batch-size mix is still moving (a ramp): the window mixes two loads, and a decision on it
    would price neither. Consecutive windows overlap when the tuning interval is shorter than the
    window (30 s over 120 s by default), so the difference of their means times window/interval is
    the difference between the stretch the window gained and the one it lost. Windows that do not
    overlap cannot tell a ramp inside the newer one from a step between them: they do not hold (the
    `unmeasured` guard still keeps the prior's part of a gain at new batch sizes out)."""
    if previous is None:
        return None
    mean_before, at = previous
    if not load_moved(mean_before, at, obs.batch_size_mean, obs.time, obs.window_seconds):
        return None
    return (f"the load is moving: mean batch size {mean_before:.1f} -> {obs.batch_size_mean:.1f} in "
            f"{obs.time - at:.0f}s; waiting for a window of one load before deciding")


def load_moved(mean_before: float, at_before: float, mean: float, at: float, window_seconds: float) -> bool:
    """Two overlapping windows' means differ by more than a steady load wobbles (`load_moving_guard`)."""
    elapsed = at - at_before
    if elapsed <= 0 or elapsed >= window_seconds:
        return False
    stretch_shift = abs(mean - mean_before) * min(window_seconds / elapsed, MAX_STRETCHES)
    return stretch_shift > max(MOVING_REQUESTS, MOVING_SHARE * max(mean, mean_before))


def samples_guard(obs: Observation, tuning: TuningInput, remembered_drafts: float = 0.0) -> str | None:
    """Enough engine steps in the window to trust its rates, and enough drafts -- in the window or remembered
    (`remembered_drafts`: the acceptance memory's drafts at the first position) -- to know the acceptance.

    A window that drafts little because a schedule's K = 0 range covers today's batch sizes still measures
    its steps (its few drafts are left out of the memory: decide._learn). Held for them, an engine
    under a load above its first schedule's crossover kept that K = 0 range for good -- paying the drafter's
    first pass on every step -- though the policy knew the acceptance from an earlier load."""
    if obs.sequence_steps < tuning.min_steps:
        return f"only {obs.sequence_steps:.0f} request-steps in the window (need {tuning.min_steps:.0f})"
    if (not obs.applied.config.off and 0 < obs.drafts < tuning.min_drafts
            and remembered_drafts < tuning.min_drafts):
        return f"only {obs.drafts:.0f} drafts in the window (need {tuning.min_drafts:.0f})"
    return None


def collapse_detected(first_position: float | None, obs: Observation, tuning: TuningInput) -> bool:
    """Acceptance near zero on plenty of drafts: the drafter is broken (backend bug, bad upgrade)."""
    return (
        first_position is not None
        and obs.drafts >= tuning.min_drafts
        and first_position < tuning.collapse_acceptance
    )


def cooldown_guard(state: PolicyState, tuning: TuningInput, now: float) -> str | None:
    if state.last_change_at is None:
        return None
    waited = now - state.last_change_at
    if waited < tuning.cooldown_seconds:
        return f"cooling down: the last change was {waited:.0f}s ago (cooldown {tuning.cooldown_seconds:.0f}s)"
    return None


def budget_guard(state: PolicyState, tuning: TuningInput, now: float, *, reserve: int) -> str | None:
    """Restarts in the past hour; ordinary changes keep `reserve` restarts back for a rollback.

    A budget of 0 means in place only: said as such, since where nothing is retuned in place (`in_place_max_k`
    None) it leaves the tuner recommending only."""
    if tuning.max_restarts_per_hour == 0:
        where = ("" if tuning.in_place_max_k is not None else
                 " and this engine is not retuned in place (docs/live-schedule.md), so the tuner only recommends")
        return f"maxRestartsPerHour is 0: in place only, and this change needs a rollout{where}"
    used = state.restarts_within(now)
    if used + reserve >= tuning.max_restarts_per_hour:
        return (f"restart budget: {used} restart(s) in the past hour, limit {tuning.max_restarts_per_hour}"
                + (f" with {reserve} kept for a rollback" if reserve else ""))
    return None


def required_gain(tuning: TuningInput, *, slo_violated: bool, noise: float = 0.0, restart_cost_seconds: float = 0.0,
                  horizon_seconds: float | None = None, in_place: bool = False) -> tuple[float, str]:
    """The gain a change must promise: the hysteresis threshold, the restart's payback, and the
    model's own noise.

    A rollout costs `restart_cost_seconds` of the fleet's goodput at today's load (restart.py); over
    `horizon_seconds` (paybackSeconds, or less where loads last less) the gain must repay it.
    `noise` is the relative error the measurements leave in the model (two standard errors): a
    predicted gain inside it is not evidence. While the SLO is violated the hysteresis threshold is
    waived; payback and noise still hold. A change applied `in_place` has the lower floor
    `min_gain_in_place` (nothing to repay, a wrong one is undone in place).
    """
    horizon = tuning.payback_seconds if horizon_seconds is None else horizon_seconds
    candidates = [(restart_cost_seconds / horizon, "restart payback")]
    if not slo_violated:
        candidates.append((tuning.min_gain_in_place if in_place else tuning.min_gain, "hysteresis threshold"))
    if noise > 0:
        candidates.append((noise, "measurement noise"))
    needed, name = max(candidates)
    return needed, name + (" (SLO violated, hysteresis waived)" if slo_violated else "")


def threshold_guard(gain: float, tuning: TuningInput, *, slo_violated: bool, noise: float = 0.0,
                    restart_cost_seconds: float = 0.0, horizon_seconds: float | None = None,
                    in_place: bool = False) -> str | None:
    needed, name = required_gain(tuning, slo_violated=slo_violated, noise=noise,
                                 restart_cost_seconds=restart_cost_seconds, horizon_seconds=horizon_seconds,
                                 in_place=in_place)
    if gain < needed:
        return f"predicted gain {gain:+.1%} is below the {name} of {needed:.1%}"
    return None


EVIDENCE_Z = 2.0  # standard errors by which the confirming windows' gain must clear the threshold to act early


def confirmation_guard(state: PolicyState, tuning: TuningInput, window_noise: float | None = None) -> str | None:
    """The gain must clear the threshold in `confirmations` consecutive windows (noise rejection) --
    or sooner, once the measurement noise is known, when the gain those windows saw beyond the
    threshold is EVIDENCE_Z standard errors of their mean: a large, clear gain is not kept waiting."""
    if state.confirmations >= tuning.confirmations:
        return None
    if window_noise is not None and state.confirmations > 0 \
            and state.evidence >= EVIDENCE_Z * window_noise * math.sqrt(state.confirmations):
        return None
    return f"gain seen in {state.confirmations} of {tuning.confirmations} consecutive windows needed"


def rejected_guard(state: PolicyState, candidate: list[int], max_batch_size: int, now: float) -> str | None:
    """A config rolled back recently is not retried until its hold expires -- nor one that runs the
    same K at the batch sizes where it was measured worse (schedule boundaries jitter with noise)."""
    for entry in state.rejected:
        if entry.until <= now:
            continue
        rejected = entry.config.dense(max_batch_size)
        sizes = entry.batch_sizes or range(1, max_batch_size + 1)
        if all(candidate[b] == rejected[b] for b in sizes if b < len(candidate)):
            return f"a config running the same K here was rolled back; retry hold ends in {entry.until - now:.0f}s"
    return None


def reversal_guard(state: PolicyState, current: DraftConfig, candidate: DraftConfig, batch_mean: float,
                   hold_seconds: float, now: float) -> str | None:
    """A rollout that turns speculation back on (or off) at the load where the last one turned it off
    (or on) waits for another load. Both were predictions of one model at one load; it cannot tell
    which was wrong, and following it pays two restarts per flip (seen on the real CPU engine: off at
    mean batch 50.5, on again at 34.5 four minutes later, measured -12.8%, rolled back). "This load" is
    within LOAD_SHIFT of the batch mean when the switch was decided or of the first window judged after
    it that the switch itself could have moved there (SpeculationSwitch.moved_it). A change measured
    worse is undone by its verification's rollback, not here; another load, or the hold's end, lets
    the model decide again."""
    last = state.switched
    if last is None or now - last.at >= hold_seconds or candidate.off != last.speculative:
        return None  # no switch back to where the last one came from
    if candidate.off == current.off:
        return None  # no switch at all: an in-place change, or a K change while drafting
    # decided on a ramp: where it settled -- and until then, where it was decided
    unsettled_ramp = last.ramp_mean if last.batch_mean <= 0 and last.settled_mean is None else None
    means = [m for m in (last.batch_mean, last.settled_mean, unsettled_ramp) if m is not None and m > 0]
    if means and not any(1 / LOAD_SHIFT <= batch_mean / m <= LOAD_SHIFT for m in means):
        return None
    turned, ago = ("on" if last.speculative else "off"), now - last.at
    load = last.batch_mean if last.batch_mean > 0 else (last.settled_mean or unsettled_ramp or 0.0)
    return (f"speculation was turned {turned} at this load (mean batch {load:.1f}) {ago:.0f}s ago: "
            f"turning it back waits for another load (or {hold_seconds - ago:.0f}s)")


def collapse_hold_guard(state: PolicyState, tuning: TuningInput, now: float) -> str | None:
    if state.collapsed_at is None:
        return None
    held = now - state.collapsed_at
    if held < tuning.collapse_hold_seconds:
        return (f"speculation is off since acceptance collapsed {held:.0f}s ago; "
                f"retrying after {tuning.collapse_hold_seconds:.0f}s")
    return None


def slo_violated(obs: Observation, tuning: TuningInput) -> bool:
    slo = tuning.slo
    per_token = slo.per_token_p99_seconds is not None and obs.per_token_p99_seconds is not None \
        and obs.per_token_p99_seconds > slo.per_token_p99_seconds
    ttft = slo.ttft_p99_seconds is not None and obs.ttft_p99_seconds is not None \
        and obs.ttft_p99_seconds > slo.ttft_p99_seconds
    return bool(per_token or ttft)
