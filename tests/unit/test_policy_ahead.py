"""Issue 43, items 1 and 4: in place the schedule is right for every batch size, not only today's.

The world: an 8B target on one GPU whose compute per verified token is 2.5x what the prior says
(long contexts). Quiet, at batch 4, the engine runs K=3 at every batch size; at batch 200 K=3 serves
far less than K=1. Nothing has been measured there, and the fit believes the prior's compute slope.
"""

from __future__ import annotations

import pytest

from specinfer.bench.observations import synthetic_observation
from specinfer.operator.tuner.policy import CostPrior, DraftConfig, PolicyState, TuningInput, decide, guards
from specinfer.operator.tuner.policy.cost import CostModel, terms
from specinfer.operator.tuner.policy.goodput import Model
from specinfer.operator.tuner.policy.hedge import Hedge, unvisited_sizes

pytestmark = pytest.mark.unit

PREFIX = [0.8, 0.6, 0.45, 0.33, 0.24, 0.17]
PRIOR = CostPrior(floor=0.007, compute_per_token=5.5e-5, kv_per_sequence=3e-5, draft_pass=0.00085, draft_token=6e-6)
WORLD = CostModel.from_state(None, PRIOR.model_copy(update={"compute_per_token": 2.5 * 5.5e-5}), "sequential")
K3 = DraftConfig(num_speculative_tokens=3)


def world_step(batch_size: int, k: int) -> float:
    return WORLD.step_time(batch_size, k, speculative=True)


def tuning(**fields) -> TuningInput:
    base = {"method": "eagle3", "k_max": 6, "max_batch_size": 256, "in_place_max_k": 6, "replicas": 2,
            "downtime_fraction": 1.0, "restart_seconds": 120, "confirmations": 1, "cost_prior": PRIOR,
            "probe_in_place": False}
    return TuningInput(**{**base, **fields})


def window(now: float, batches: dict[int, float], config: DraftConfig = K3, since: float = 0.0, **kwargs):
    return synthetic_observation(time=now, window_seconds=120.0, method="eagle3",
                                 num_speculative_tokens=config.num_speculative_tokens, schedule=config.schedule,
                                 applied_since=since, batch_sizes=batches, prefix=PREFIX, step_time=world_step,
                                 **kwargs)


def true_best(batch_size: int) -> int:
    return max(range(7), key=lambda k: (1 + sum(PREFIX[:k])) / world_step(batch_size, k))


def test_where_nothing_is_measured_the_schedule_drafts_no_more_than_the_fit_and_less_where_fits_disagree():
    cost = CostModel.from_state(None, PRIOR, "sequential")
    for b in (3, 4, 5):  # a quiet engine has measured K=3 around batch 4 only
        cost.add(f"{b}:3", terms(PRIOR, b, 3, "sequential", True), world_step(b, 3), 400)
    model = Model(PREFIX, cost, cost.multipliers(), always_scheduled=True)
    hedge = Hedge.of(model, tuning())
    dense = hedge.dense([0] + [3] * 256, [(4, 1.0)])
    fit_best = {b: max(range(7), key=lambda k: (model.speed(b, k, True), -k)) for b in (64, 128, 200, 256)}
    for b, fit_k in fit_best.items():
        assert b not in hedge.measured
        assert dense[b] <= fit_k, (b, dense[b], fit_k)
    assert any(dense[b] < fit_k for b, fit_k in fit_best.items())  # the doubt moved it somewhere
    assert all(abs(dense[b] - true_best(b)) <= 1 for b in (128, 200, 256))  # and there it is near the truth
    assert unvisited_sizes([(4, 1.0)], 256) == [1, 2, 3, 6, 8, 11, 16, 23, 32, 45, 64, 91, 128, 181, 256]


def test_a_quiet_engine_publishes_the_schedule_for_the_peak_in_place_and_leaves_todays_k():
    k4 = DraftConfig(num_speculative_tokens=4)  # the best K at batch 3-5: nothing to gain there
    state, decisions = None, []
    for tick in range(1, 9):
        now = 120.0 + 30.0 * tick
        decision, state = decide(window(now, {3: 0.3, 4: 0.4, 5: 0.3}, k4), tuning(), state, now)
        decisions.append(decision)
        if decision.is_change:
            break
    change = decisions[-1]
    assert change.is_change and change.path == "inPlace", [d.reason for d in decisions]
    assert "nothing changes at today's batch sizes" in change.reason and "worst-case loss" in change.reason
    dense = change.config.dense(256)
    assert dense[3] == dense[4] == dense[5] == 4  # today's K untouched ...
    assert dense[200] <= 2 and dense[256] <= 2  # ... the peak's batch sizes draft less
    assert state.pending is None  # nothing changes here: nothing to verify
    assert state.changes == []  # no restart


def test_on_a_ramp_the_schedule_in_place_follows_and_only_what_depends_on_the_mix_waits():
    state = None
    ramp = [(150.0, 4), (180.0, 40), (210.0, 90), (240.0, 150)]
    decisions = []
    for now, mean in ramp:
        batches = {max(1, mean - 10): 0.3, mean: 0.4, mean + 10: 0.3}
        decision, state = decide(window(now, batches), tuning(), state, now)
        decisions.append(decision)
    moving = [d for d in decisions[1:] if d.guard == guards.LOAD_MOVING or d.is_change]
    assert moving, [d.reason for d in decisions]
    assert any(d.is_change and d.path == "inPlace" for d in decisions[1:]), [d.reason for d in decisions]
    # one K for all batch sizes depends on the mix: on the same ramp it waits
    state = None
    for now, mean in ramp:
        batches = {max(1, mean - 10): 0.3, mean: 0.4, mean + 10: 0.3}
        decision, state = decide(window(now, batches), tuning(allow_schedule=False), state, now)
        if now > 150.0:
            assert not decision.is_change and decision.guard == guards.LOAD_MOVING, decision.reason


def test_a_rollout_on_a_ramp_waits_and_says_so():
    rollouts = tuning(in_place_max_k=None, confirmations=2)  # every change rolls out
    state = PolicyState(loads=[(t, 200.0) for t in range(0, 1800, 30)])  # half an hour at the peak
    first, state = decide(window(1800.0, {190: 0.5, 200: 0.5}), rollouts, state, 1800.0)
    assert first.guard == guards.CONFIRMING, first.reason  # the rollout pays back: one more window
    moved, _ = decide(window(1830.0, {240: 0.5, 250: 0.5}), rollouts, state, 1830.0)
    assert moved.guard == guards.LOAD_MOVING and not moved.is_change, moved.reason
    assert "the load is moving" in moved.reason
