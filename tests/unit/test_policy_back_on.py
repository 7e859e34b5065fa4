"""Speculation back on is not taken on a gain only the prior supports.

Recorded on the real vLLM CPU engine (tests/engine/test_tuning_engine.py, the crossover resource, a CI run
beside other load): speculation was switched off at batch 1, where drafting had been measured; the load then
rose to batch 62, where only plain decode steps had been. Every batch size there counted as measured, so the
policy rolled out K=4 at batch sizes 6-64 on the prior's cost of drafting there (predicted +10.5%); it
realised -51% and was rolled back -- two restarts. A plain step says nothing of what the drafter and the
verification of K + 1 tokens cost (support.py): going back on now waits for batch sizes where speculation
was measured, up to 4x above (below a peak that switched it off, the ordinary extrapolation).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from specinfer.bench.observations import synthetic_observation
from specinfer.operator.tuner.policy import CostPrior, PolicyState, TuningInput, decide, guards
from specinfer.operator.tuner.policy.cost import CostModel
from specinfer.operator.tuner.policy.support import drafted_up_to, measured_sizes

pytestmark = pytest.mark.unit

PREFIX = [math.prod([0.8] * (i + 1)) for i in range(16)]
# memory-bound up to large batch sizes: the prior says drafting pays at batch 64
PRIOR = CostPrior(floor=0.010, compute_per_token=2e-5, draft_pass=0.0008)
SPEC = TuningInput(method="eagle3", k_min=1, k_max=4, max_batch_size=64, allow_schedule=False, cooldown_seconds=0,
                   min_gain=0.02, downtime_fraction=1.0, cost_prior=PRIOR)


def step_time(batch_size: float, k: int) -> float:
    return 0.010 + 2e-5 * batch_size * (k + 1) + 0.0008 * k


def window(now: float, k: int, batch: int, since: float):
    return synthetic_observation(time=now, window_seconds=60.0, method="eagle3", num_speculative_tokens=k,
                                 schedule=None, applied_since=since, batch_sizes={batch: 1.0}, prefix=PREFIX,
                                 step_time=step_time)


def loads(batch: float, now: float, minutes: int = 30) -> list[tuple[float, float]]:
    """The load seen for `minutes` before `now` (a rollout's payback counts on it lasting)."""
    return [(now - 60.0 * i, float(batch)) for i in range(minutes, 0, -1)]


OFF_SINCE = 2000.0  # speculation off applied (as if by a disable); its windows follow
PLAIN_WINDOWS = (2400.0, 2460.0, 2520.0)


def drafted_then_off(drafted_at: int, k: int, off_at: int) -> PolicyState:
    """Drafting measured at batch `drafted_at` (K = `k`) until 1800 s; speculation off since OFF_SINCE, the
    load at `off_at` from then on."""
    _, state = decide(window(1800.0, k, drafted_at, 0.0), SPEC, PolicyState(loads=loads(drafted_at, 1800.0)), 1800.0)
    since_off = [(t, float(off_at)) for t in np.arange(OFF_SINCE, PLAIN_WINDOWS[0], 60.0)]
    return state.model_copy(update={"loads": [*state.loads, *since_off], "pending": None})


def actions_over_plain_windows(state: PolicyState, batch: int) -> list[str]:
    """The policy's actions over PLAIN_WINDOWS of plain steps at `batch`, speculation off."""
    actions = []
    for now in PLAIN_WINDOWS:
        decision, state = decide(window(now, 0, batch, OFF_SINCE), SPEC, state, now)
        actions.append(decision.action)
    return actions


def test_plain_steps_do_not_measure_drafting_there():
    state = drafted_then_off(1, 4, 64)
    for now in PLAIN_WINDOWS:
        _, state = decide(window(now, 0, 64, OFF_SINCE), SPEC, state, now)
    assert set(state.cost["cells"]) >= {"1:4", "64:0"}, state.cost["cells"]
    cost = CostModel.from_state(state.cost, PRIOR, SPEC.cost_shape)
    assert 64 in measured_sizes(cost, [64])  # measured, at some K
    assert drafted_up_to(cost) == pytest.approx(2 ** 0.5)  # drafting: the cell at batch 1 only


def test_back_on_above_where_drafting_was_measured_waits_for_a_measurement():
    state = drafted_then_off(1, 4, 64)
    for now in PLAIN_WINDOWS:  # every window of plain steps at batch 64 holds, saying why
        decision, state = decide(window(now, 0, 64, OFF_SINCE), SPEC, state, now)
        assert decision.action == "keep", (now, decision.reason)
        assert decision.guard == guards.UNMEASURED, (now, decision.reason)
        assert "rests on the step-cost prior at batch size 64: drafting was measured up to batch size 6" \
            in decision.reason
        assert decision.recommendation.config.num_speculative_tokens >= 1  # what the prior alone would do
    assert state.pending is None


def test_back_on_below_where_drafting_was_measured_is_taken():
    # drafting measured at a peak (batch 64), speculation off there, the load falls to batch 4
    state = drafted_then_off(64, 2, 4)
    decisions = actions_over_plain_windows(state, 4)
    assert "reenable" in decisions, decisions


def test_back_on_a_little_above_where_drafting_was_measured_is_taken():
    # drafting measured at batch 1, speculation off, the load at 4: within DRAFTING_REACH of it
    state = drafted_then_off(1, 4, 4)
    decisions = actions_over_plain_windows(state, 4)
    assert "reenable" in decisions, decisions


def test_with_no_drafting_left_in_the_model_plain_steps_decide():
    # Cells fade over hours, and no window measures drafting while speculation is off: with none left,
    # the prior's drafting cost is all there is, and back on must stay possible (the plain rule).
    state = drafted_then_off(1, 4, 64)
    state = state.model_copy(update={"cost": {**state.cost, "cells": {}}})
    decisions = actions_over_plain_windows(state, 64)
    assert "reenable" in decisions, decisions
