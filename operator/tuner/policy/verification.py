"""Verification of a change: realised gain against what the replaced config would have done.

After a change the policy compares the new config's measured tokens with what the previous
config would have produced in the same busy time -- the model's speed of the previous config
under today's acceptance and load, times the smoothed measured/modelled ratio seen while it ran.
Noisy step times lengthen the verification and widen the rollback margin, so noise alone does
not roll a good change back.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from . import guards
from .config import DraftConfig, differs_at
from .cost import CELL_MEMORY, PREFILL_TERM
from .decision import Decision, ModelSummary, Signals
from .goodput import Distribution, Model, sequence_speed
from .inputs import TuningInput
from .observation import Observation
from .state import DEFAULT_NOISE, LOAD_SHIFT, Calibration, PendingChange, PolicyState, Rejection

CALIBRATION_WEIGHT = 0.3  # per window, for the measured/modelled speed ratio
NOISE_WEIGHT = 0.3  # per window, for the measurement noise
MAX_VERIFY_WINDOWS = 8
MIN_DIFFERING_SHARE = 0.5  # a window verifies a change only where the change alters K


def calibrate(st: PolicyState, obs: Observation, model: Model, current: DraftConfig, dense: Sequence[int],
              distribution: Distribution, max_batch_size: int) -> None:
    """Smoothed ratio of measured to modelled speed for the applied config: the baseline a change
    is verified against, steadier than one window's noisy step times."""
    ratio = obs.measured_speed / max(sequence_speed(model, dense, distribution), 1e-9)
    if not 0.2 < ratio < 5.0:
        return
    if st.calibration and st.calibration.config.same_as(current, max_batch_size):
        value = (1 - CALIBRATION_WEIGHT) * st.calibration.value + CALIBRATION_WEIGHT * ratio
    else:
        value = ratio
    st.calibration = Calibration(config=current, value=value)


def update_noise(st: PolicyState, sample: float | None) -> None:
    """Fold one window's measurement noise (cost.CostModel.learn) into the smoothed estimate.

    Measured on the step times themselves, not on measured/modelled speed: the model's own
    learning (a workload shift, a new K) must not read as noise and hold a good change back."""
    if sample is None or not math.isfinite(sample):
        return
    previous = st.noise_variance
    st.noise_variance = sample if previous is None else (1 - NOISE_WEIGHT) * previous + NOISE_WEIGHT * sample


def measured_noise(st: PolicyState) -> float:
    """Relative window-to-window noise of measured step times (1% until observed)."""
    return math.sqrt(st.noise_variance) if st.noise_variance is not None else DEFAULT_NOISE


def window_noise(st: PolicyState) -> float | None:
    """One window's noise of the predicted gain, bounded by the step times' noise (None until measured)."""
    return math.sqrt(st.noise_variance) if st.noise_variance is not None else None


def model_noise(st: PolicyState) -> float:
    """Two standard errors of a prediction, from the window-to-window noise of step times averaged
    over the windows a step-time cell remembers (quiet engines: ~1%, no effect)."""
    return 2 * measured_noise(st) / math.sqrt(CELL_MEMORY + 1)


def differing_share(distribution: Distribution, before: Sequence[int], after: Sequence[int],
                    max_batch_size: int) -> float:
    """Share of engine time spent at batch sizes where two configs run differently (another K, or adaptive
    verification in one only)."""
    total = sum(fraction for _, fraction in distribution) or 1.0
    return sum(fraction for size, fraction in distribution
               if differs_at(before, after, min(max(size, 1), max_batch_size))) / total


def verify(obs: Observation, tuning: TuningInput, st: PolicyState, model: Model, distribution: Distribution,
           now: float, signals: Signals, summary: ModelSummary) -> Decision | None:
    """Accumulate realised gain for the pending change; roll back or accept once enough windows passed.

    None: nothing to say this tick (verification ended or cannot judge); the optimiser decides."""
    pending = st.pending
    assert pending is not None
    if not obs.applied.config.same_as(pending.config, tuning.max_batch_size):
        if now - pending.at > 2 * tuning.cooldown_seconds + tuning.restart_seconds:
            st.pending = None  # never applied (observe mode, or someone changed the tuning): stop waiting
            return None
        return Decision(action="keep", reason=f"waiting for {pending.config.describe()} to be applied",
                        guard=guards.VERIFYING, signals=signals, model=summary)
    if pending.batch_mean > 0 and not 1 / LOAD_SHIFT <= obs.batch_size_mean / pending.batch_mean <= LOAD_SHIFT:
        # The load moved too far to judge the change by: the optimiser decides afresh instead.
        st.pending = None
        return None
    previous_dense = pending.previous.dense(tuning.max_batch_size)
    changed_dense = pending.config.dense(tuning.max_batch_size)
    if differing_share(distribution, previous_dense, changed_dense, tuning.max_batch_size) < MIN_DIFFERING_SHARE:
        # At today's batch sizes the new and the old config draft the same K: this window says
        # nothing about the change, only about the model's error at a load it has not seen. Judging
        # the change by it rolled good schedules back when load rose right after a change.
        st.pending = None
        return None
    busy = obs.sequence_steps * obs.step_mean_seconds
    pending.measured_tokens += obs.generated_tokens
    # The model as it was when deciding, the one the calibration belongs to: learning from the new
    # config since then must not move the baseline. A change pending from before the prefill term was decided
    # and calibrated by a model without it: no prefill.
    theta = [*pending.theta, pending.prefill_theta] if len(pending.theta) == PREFILL_TERM else []
    then = Model(pending.prefix, model.cost, np.asarray(theta), model.schedule_factor,
                 always_scheduled=model.always_scheduled) if theta else model
    pending.expected_tokens += busy * sequence_speed(then, previous_dense, distribution) * pending.calibration
    pending.windows += 1
    realised = pending.measured_tokens / pending.expected_tokens - 1 if pending.expected_tokens > 0 else 0.0
    # Noisy step times need more windows and a wider margin before a rollback is justified.
    noise = measured_noise(st)
    needed = min(MAX_VERIFY_WINDOWS, max(tuning.confirmations, math.ceil((2 * noise / tuning.rollback_tolerance) ** 2)))
    margin = 2 * noise * math.sqrt(1 / pending.windows + CALIBRATION_WEIGHT / (2 - CALIBRATION_WEIGHT))
    if pending.windows < needed:
        return Decision(action="keep", reason=f"verifying {pending.config.describe()}: realised {realised:+.1%} so far "
                        f"(predicted {pending.predicted_gain:+.1%})", guard=guards.VERIFYING, signals=signals,
                        realised_gain=round(realised, 4), model=summary)
    st.pending = None
    st.realised_gain = realised
    # A change taken with a loss here (an envelope that drafts less for the load to come) is rolled back only for
    # losing more than that.
    if realised >= -pending.tolerated_loss - (tuning.rollback_tolerance + margin):
        return None  # accepted; carry on optimising from here
    held = None if pending.in_place else guards.budget_guard(st, tuning, now, reserve=0)
    reason = (f"{pending.config.describe()} realised {realised:+.1%} against a predicted "
              f"{pending.predicted_gain:+.1%}: rolling back to {pending.previous.describe()}")
    if held:
        return Decision(action="keep", reason=f"{reason} is due but {held}", guard=guards.RESTART_BUDGET,
                        signals=signals, realised_gain=round(realised, 4), model=summary)
    st.rejected = [r for r in st.rejected if r.until > now] + [
        Rejection(config=pending.config, until=now + tuning.reject_hold_seconds,
                  batch_sizes=sorted({min(b, tuning.max_batch_size) for b, _ in distribution}))]
    st.record_change(now, in_place=pending.in_place)
    forget_switch_on_rollback(st, pending)
    return Decision(action="rollback", reason=reason, config=pending.previous, predicted_gain=round(-realised, 4),
                    path="inPlace" if pending.in_place else "rollout", signals=signals,
                    realised_gain=round(realised, 4), model=summary)


def forget_switch_on_rollback(st: PolicyState, rolled_back: PendingChange) -> PolicyState:
    """A rolled-back switch on or off is held by its rejection: the reversal guard's memory of it goes.
    A rollback of a K change made since keeps it."""
    if rolled_back.config.off != rolled_back.previous.off:
        st.switched = None
    return st
