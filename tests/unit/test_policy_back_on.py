"""Speculation back on is not taken on a gain only the prior supports.

Recorded on the real vLLM CPU engine (tests/engine/test_tuning_engine.py, the crossover resource, a CI run
beside other load): speculation was switched off at batch 1, where drafting had been measured; the load then
rose to batch 62, where only plain decode steps had been. Every batch size there counted as measured, so the
policy rolled out K=4 at batch sizes 6-64 on the prior's cost of drafting there (predicted +10.5%); it
realised -51% and was rolled back -- two restarts. A plain step says nothing of what the drafter and the
verification of K + 1 tokens cost (support.py): going back on now waits for batch sizes where speculation
was measured, there or above (below a peak that switched it off, the ordinary extrapolation).
"""

from __future__ import annotations

import math

import pytest

from specinfer.bench.observations import synthetic_observation
from specinfer.operator.tuner.policy import CostPrior, PolicyState, TuningInput, decide, guards
from specinfer.operator.tuner.policy.cost import CostModel
from specinfer.operator.tuner.policy.support import measured_sizes

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
    return [(now - 60.0 * i, float(batch)) for i in range(minutes, 0, -1)]


def drafted_at_one_then_off_at(batch: int) -> tuple[PolicyState, float]:
    """Drafting measured at batch 1 (K=4), then speculation off (applied as if by a disable) at `batch`."""
    _, state = decide(window(1800.0, 4, 1, 0.0), SPEC, PolicyState(loads=loads(1, 1800.0)), 1800.0)
    state = state.model_copy(update={"loads": [*state.loads, *loads(batch, 3600.0)], "pending": None})
    for now in (2400.0, 2460.0):  # two windows of plain steps at the new load
        _, state = decide(window(now, 0, batch, 2000.0), SPEC, state, now)
    return state, 2520.0


def test_plain_steps_do_not_measure_drafting_there():
    state, _ = drafted_at_one_then_off_at(64)
    assert set(state.cost["cells"]) >= {"1:4", "64:0"}, state.cost["cells"]
    cost = CostModel.from_state(state.cost, PRIOR, SPEC.cost_shape)
    assert 64 in measured_sizes(cost, [64])  # measured, at some K
    assert 64 not in measured_sizes(cost, [64], speculating_at_or_above=True)
    assert 1 in measured_sizes(cost, [1], speculating_at_or_above=True)


def test_back_on_above_where_drafting_was_measured_waits_for_a_measurement():
    state, now = drafted_at_one_then_off_at(64)
    decision, _ = decide(window(now, 0, 64, 2000.0), SPEC, state, now)
    assert decision.action == "keep", decision.reason
    assert decision.guard == guards.UNMEASURED, decision.reason
    assert "rests on the step-cost prior at batch size 64" in decision.reason
    assert decision.recommendation.config.num_speculative_tokens >= 1  # what the prior alone would do


def test_back_on_below_where_drafting_was_measured_is_taken():
    # drafting measured at a peak (batch 64), speculation off there, the load falls to batch 4
    _, state = decide(window(1800.0, 2, 64, 0.0), SPEC, PolicyState(loads=loads(64, 1800.0)), 1800.0)
    state = state.model_copy(update={"loads": [*state.loads, *loads(4, 3600.0)], "pending": None})
    for now in (2400.0, 2460.0):
        _, state = decide(window(now, 0, 4, 2000.0), SPEC, state, now)
    decision, _ = decide(window(2520.0, 0, 4, 2000.0), SPEC, state, 2520.0)
    assert decision.action == "reenable", decision.reason
