"""What the tuner expects a load it has not decided on to serve, and the range it states (policy/forecast.py).

The real-engine test holds the high load's first window to it (tests/engine/test_tuning_engine.py); here the
world is the simulator's step-cost model with a prior that is wrong where the tuner has not measured."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from specinfer.bench.observations import synthetic_observation
from specinfer.operator.tuner.policy import DraftConfig, decide
from specinfer.operator.tuner.policy.forecast import window_forecast
from specinfer.operator.tuner.pure.target import simulator_cost_prior
from specinfer.runtime.sim.model import acceptance_profile, cost_model
from tests.unit.test_policy_steady_measured import tuning

pytestmark = pytest.mark.unit

WORLD = cost_model("cpu-tiny")
PROFILE = acceptance_profile("draftModel", "chat")
K2 = DraftConfig(num_speculative_tokens=2)


def true_time(b: int, k: int, *, compute: float = 1.0, above_floor: float = 1.0) -> float:
    """The world's step; `above_floor`: every cost but the memory-bound floor that many times dearer."""
    w = WORLD
    world = replace(w, compute_per_token_s=w.compute_per_token_s * compute * above_floor,
                    kv_per_seq_s=w.kv_per_seq_s * above_floor, draft_pass_s=w.draft_pass_s * above_floor,
                    draft_per_token_s=w.draft_per_token_s * above_floor,
                    speculation_step_s=w.speculation_step_s * above_floor,
                    speculation_per_seq_s=w.speculation_per_seq_s * above_floor)
    return world.step_time(b, k, "sequential", draft_scale=3.0, speculative=True)


def window(now: float, batch: int, compute: float = 1.0):
    """A window at one batch size, with 3% step-time noise and binomial counts."""
    return synthetic_observation(
        time=now, window_seconds=60, method="draftModel", num_speculative_tokens=2, schedule=None, applied_since=0.0,
        batch_sizes={batch: 1.0}, prefix=PROFILE.prefix_probs(2),
        step_time=lambda b, k: true_time(b, k, compute=compute), rng=random.Random(int(now)), timing_noise=0.03)


def learnt_at_batch_1(prior_scale: float = 1.0):
    prior = simulator_cost_prior("cpu-tiny", "draftModel")
    prior = prior.model_copy(update={"kv_per_sequence": prior.kv_per_sequence * prior_scale})
    settings = tuning(method="draftModel", max_batch_size=64, cost_prior=prior, probe_in_place=False)
    state = None
    for index in range(6):
        _, state = decide(window(60.0 * (index + 1), 1), settings, state, 60.0 * (index + 1))
    return settings, state


def served(batch: int, compute: float = 1.0, above_floor: float = 1.0) -> float:
    return PROFILE.expected_tokens(2) / true_time(batch, 2, compute=compute, above_floor=above_floor)


def test_a_measured_batch_size_is_forecast_within_the_noise():
    settings, state = learnt_at_batch_1()
    at_one = window_forecast(window(500.0, 1), settings, state)
    assert at_one is not None and not at_one.unmeasured
    assert at_one.holds(served(1)) and at_one.high / at_one.low < 1.15


def test_an_unmeasured_batch_size_is_forecast_within_the_doubted_range_and_says_so():
    settings, state = learnt_at_batch_1()
    at_64 = window_forecast(window(500.0, 64), settings, state)
    assert at_64 is not None and at_64.unmeasured == (64,)
    assert at_64.high / at_64.low > 1.5  # the prior's shape, doubted
    assert at_64.holds(served(64))
    # a target whose compute is twice the prior's is still within the range it states
    assert at_64.holds(served(64, compute=2.0))
    # ... and so is one where every cost above the floor is DOUBT times dearer at once (the real CPU engine at
    # batch 63 served 0.4x the fit), but not 4x: the doubt bounds the range
    assert at_64.holds(served(64, above_floor=3.0)) and not at_64.holds(served(64, above_floor=4.0))
    # ... and a world far outside the doubts is not: the range can fail
    assert not at_64.holds(served(64) * 5) and not at_64.holds(served(64) / 5)


def test_the_stated_range_never_goes_below_zero_and_names_unmeasured_sizes_as_they_are():
    from specinfer.operator.tuner.policy.forecast import Forecast, forecast, model_of
    settings, state = learnt_at_batch_1()
    wild = forecast(model_of(state, settings), DraftConfig(num_speculative_tokens=2), [(1, 1.0)], 64, noise=1.5)
    assert wild.low == 0.0 < wild.speed < wild.high
    assert Forecast(10.0, 0.0, 20.0, (3, 64, 200)).describe().endswith("3 batch sizes from 3 to 200 not measured yet)")
    assert "batch size 64 not measured" in Forecast(10.0, 5.0, 20.0, (64,)).describe()
