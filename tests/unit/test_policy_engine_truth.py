"""The policy's side of engine truth: a schedule is priced with the step-time factor vLLM imposes
on it (PIECEWISE CUDA graphs), and never recommended where the tuning input forbids it."""

from __future__ import annotations

import pytest

from specinfer.bench.observations import synthetic_observation
from specinfer.operator.tuner.policy import CostPrior, DraftConfig, TuningInput, decide
from specinfer.operator.tuner.policy.cost import CostModel
from specinfer.runtime.methods.engine_truth import PIECEWISE_COST

pytestmark = pytest.mark.unit

PREFIX = [0.8**(i + 1) for i in range(16)]
PRIOR = CostPrior(floor=0.010, compute_per_token=1.5e-4, kv_per_sequence=1e-6, draft_pass=0.0008, draft_token=1e-7)
WORLD = CostModel.from_state(None, PRIOR, "sequential")
MIX = {4: 0.5, 24: 0.5}  # best K 6 at batch 4, 2 at batch 24 (test_policy_restarts.py's world)


def tuning(**overrides) -> TuningInput:
    base = {"method": "eagle3", "max_batch_size": 64, "restart_seconds": 0, "confirmations": 1, "cost_prior": PRIOR}
    return TuningInput(**{**base, **overrides})


def window(config: DraftConfig, factor: float = 1.0):
    slowdown = factor if config.schedule else 1.0
    return synthetic_observation(time=120.0, window_seconds=60.0, method="eagle3",
                                 num_speculative_tokens=config.num_speculative_tokens, schedule=config.schedule,
                                 applied_since=0.0, batch_sizes=MIX, prefix=PREFIX,
                                 step_time=lambda b, k: WORLD.step_time(b, k) * slowdown)


def test_a_schedule_must_beat_the_best_single_k_by_the_piecewise_factor():
    current = DraftConfig(num_speculative_tokens=1)
    free, _ = decide(window(current), tuning(), None, 120.0)
    assert free.recommendation.config.schedule  # per batch size when a schedule costs nothing
    factor = PIECEWISE_COST.step_time_factor
    priced, _ = decide(window(current), tuning(schedule_step_factor=factor), None, 120.0)
    assert priced.recommendation.config.schedule is None  # ~19% on every step outweighs it here
    assert priced.recommendation.config.num_speculative_tokens >= 1


def test_step_times_under_a_schedule_are_learnt_without_the_piecewise_factor():
    factor = PIECEWISE_COST.step_time_factor
    schedule = DraftConfig(num_speculative_tokens=6, schedule=((1, 8, 6), (9, 64, 2)))
    _, state = decide(window(schedule, factor), tuning(schedule_step_factor=factor, min_gain=10.0), None, 120.0)
    learnt = CostModel.from_state(state.cost, PRIOR, "sequential")
    for batch, k in ((4, 6), (24, 2)):
        assert learnt.step_time(batch, k) == pytest.approx(WORLD.step_time(batch, k), rel=0.02)


def test_no_schedule_is_recommended_where_the_engine_would_drop_it():
    decision, _ = decide(window(DraftConfig(num_speculative_tokens=1)), tuning(allow_schedule=False), None, 120.0)
    assert decision.recommendation.config.schedule is None
    assert decision.config is None or decision.config.schedule is None
