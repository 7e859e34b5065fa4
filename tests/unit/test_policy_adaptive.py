"""The tuner's step model of vLLM's adaptive verification (operator/tuner/policy/adaptive.py)."""

from __future__ import annotations

import numpy as np
import pytest

from specinfer.operator.tuner.policy import CostPrior
from specinfer.operator.tuner.policy.adaptive import adaptive_step
from specinfer.operator.tuner.policy.cost import CostModel, step_times_over_tokens
from specinfer.operator.tuner.policy.goodput import Model, goodput
from specinfer.operator.tuner.policy.lever import adaptive_best_k, adaptive_goodput
from specinfer.runtime.methods.adaptive import ADAPTIVE_COST, admitted, verification_budget
from specinfer.runtime.sim.model import COST_MODELS, acceptance_profile

pytestmark = pytest.mark.unit

H100 = COST_MODELS["h100-llama8b"]
PRIOR = CostPrior(floor=H100.floor_s, compute_per_token=H100.compute_per_token_s, kv_per_sequence=H100.kv_per_seq_s,
                  draft_pass=H100.draft_pass_s, draft_token=H100.draft_per_token_s)
CHAT = acceptance_profile("eagle3", "chat").prefix_probs(8)


def model() -> Model:
    cost = CostModel(PRIOR, "sequential", {})
    return Model(CHAT, cost, cost.multipliers())


def test_vllms_rule_takes_the_best_ratio_and_admits_a_prefix_of_each_request():
    scores = [0.9, 0.5, 0.1]
    flat = verification_budget(scores, 1, lambda n: np.ones_like(n, dtype=float))  # verifying is free: all of them
    assert flat == 3
    dear = verification_budget(scores, 1, lambda n: 1.0 + 0.6 * np.asarray(n, dtype=float))
    assert dear == 1  # (1 + 0.9) / 1.6 beats (1 + 1.4) / 2.2 and (1 + 1.5) / 2.8
    survival = np.array([[0.9, 0.8, 0.2], [0.7, 0.1, 0.05]])
    assert admitted(survival, 3).tolist() == [2, 1]
    assert admitted(survival, 0).tolist() == [0, 0]


def test_the_step_time_over_tokens_is_the_step_models_own():
    cost = CostModel(PRIOR, "sequential", {})
    theta = cost.multipliers()
    times = step_times_over_tokens(PRIOR, theta, 16, 4, "sequential", np.array([16 * 5, 16 + 10]))
    assert times[0] == pytest.approx(cost.step_time(16, 4, theta))
    assert times[1] < times[0]  # fewer tokens verified, the same drafting


def test_it_verifies_everything_at_a_small_batch_and_little_at_a_large_one():
    m = model()
    small = adaptive_step(m, 2, 7, config_k=7)
    assert small.verified == pytest.approx(7)
    assert small.seconds == pytest.approx(m.step_time(2, 7, True, 7) * ADAPTIVE_COST.step_time_factor)
    large = adaptive_step(m, 256, 7, config_k=7)
    assert large.verified < 3
    assert large.speed > m.speed(256, 7, True, 7)  # a fixed K = 7 verifies every draft at 256


def test_adaptive_verification_at_its_best_static_k_against_a_fixed_k():
    """vLLM's own answer to load (the baseline the tuner must beat): at 256 requests it beats a fixed K = 7;
    at 4 it costs its overhead."""
    m = model()
    dense7 = [0] + [7] * 256
    for size, better in ((256, True), (4, False)):
        mix = [(size, 1.0)]
        assert (adaptive_goodput(m, dense7, mix) > goodput(m, dense7, mix)) is better
    best = adaptive_best_k(m, range(1, 9), [(256, 1.0)], 256)
    assert 1 <= best <= 8
    assert adaptive_goodput(m, [0] + [best] * 256, [(256, 1.0)]) >= adaptive_goodput(m, dense7, [(256, 1.0)])
