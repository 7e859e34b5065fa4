"""A drafter that drafts its startup K on every step (vLLM 0.33.0's draft model, multi-module MTP, DFlash and
DSpark on Model Runner V2) runs its envelope -- the K in force -- whatever the published schedule. When that
envelope is already the tuning maximum, drafting less on every step is still a rollout to a smaller largest K:
the optimiser must weigh those configs too, not only the in-place schedule and speculation off. (The bench's
mtp-limit ran K=1 with adaptive verification as the only lower-drafting rollout it weighed, then paid a
second rollout to plain K=1, which the model ranked higher all along.)"""

from __future__ import annotations

from dataclasses import replace

import pytest

from specinfer.bench.observations import synthetic_observation
from specinfer.operator.tuner.policy import CostPrior, TuningInput, decide
from specinfer.operator.tuner.policy.acceptance import AcceptanceEstimate, extrapolated_prefix
from specinfer.operator.tuner.policy.config import AdaptiveDense, DraftConfig
from specinfer.operator.tuner.policy.cost import CostModel
from specinfer.operator.tuner.policy.goodput import Model, within_reach
from specinfer.operator.tuner.policy.lever import adaptive_instead
from specinfer.operator.tuner.policy.probe import measured_k

pytestmark = pytest.mark.unit

PREFIX = [0.75, 0.55, 0.4, 0.3]
# a 70B-class target with a draft model whose passes are dear: at batch 64 every drafted K costs
PRIOR = CostPrior(floor=0.02, compute_per_token=1.2e-4, kv_per_sequence=6e-5, draft_pass=0.004, draft_token=2e-5,
                  drafted_k="startup", zero_step="startup_k", startup_k=4)
WORLD = CostModel.from_state(None, PRIOR, "sequential")
ENVELOPE = 4


def world_step(batch_size: int, k: int) -> float:
    return WORLD.step_time(batch_size, k, speculative=True, config_k=ENVELOPE)


def tuning(**fields) -> TuningInput:
    base = {"method": "draftModel", "k_max": ENVELOPE, "max_batch_size": 128, "in_place_max_k": ENVELOPE,
            "replicas": 2, "downtime_fraction": 0.0, "restart_seconds": 240, "confirmations": 1,
            "cost_prior": PRIOR, "probe_in_place": False, "allow_adaptive_verification": True}
    return TuningInput(**{**base, **fields})


def window(now: float):
    return synthetic_observation(time=now, window_seconds=120.0, method="draftModel",
                                 num_speculative_tokens=ENVELOPE, schedule=None, applied_since=0.0,
                                 batch_sizes={60: 0.3, 64: 0.4, 68: 0.3}, prefix=PREFIX, step_time=world_step)


def served(k: int) -> float:
    """Tokens/s at batch 64 of an engine started at K (it drafts K on every step)."""
    expected = 1 + sum(PREFIX[:k])
    return 64 * expected / WORLD.step_time(64, k, speculative=True, config_k=k)


def test_at_the_tuning_maximum_a_smaller_envelope_is_weighed_and_chosen():
    best_k = max(range(1, ENVELOPE + 1), key=served)
    assert best_k < ENVELOPE and served(best_k) > 1.05 * served(ENVELOPE)  # the world: drafting less pays here
    state, decisions = None, []
    for tick in range(6):
        now = 600.0 + 30.0 * tick
        decision, state = decide(window(now), tuning(), state, now)
        decisions.append(decision)
        if decision.is_change:
            break
    change = decisions[-1]
    assert change.is_change and change.path == "rollout", [d.reason for d in decisions]
    config = change.config
    assert not config.adaptive and not config.off, change.reason
    assert max(config.dense(128)[1:]) < ENVELOPE, change.reason


def test_a_drafter_that_follows_the_schedule_still_reaches_every_k_in_place():
    """The same world for a drafter that drafts the step's K: lowering K is in place, nothing rolls out."""
    prior = PRIOR.model_copy(update={"drafted_k": "scheduled", "zero_step": "first_pass", "startup_k": None})
    state, decisions = None, []
    for tick in range(6):
        now = 600.0 + 30.0 * tick
        decision, state = decide(window(now), tuning(cost_prior=prior, method="eagle3"), state, now)
        decisions.append(decision)
    assert not any(d.is_change and d.path == "rollout" for d in decisions), [d.reason for d in decisions]
    change = next(d for d in decisions if d.is_change)
    assert change.path == "inPlace" and change.config.dense(128)[64] < ENVELOPE, change.reason


def test_the_k_a_window_measured_counts_as_measured_under_a_startup_k_drafter():
    """Its cells are kept apart by the envelope ("B:K@W"): the K measured there is still measured, so the
    probe does not spend a window on it again and a probe's doubt check sees the cell it left."""
    cost = CostModel.from_state(None, PRIOR, "sequential")
    cost.learn(window(600.0))
    assert all("@" in key for key in cost.cells), sorted(cost.cells)
    assert measured_k(cost, 64, ENVELOPE)
    assert not measured_k(cost, 64, 1) and not measured_k(cost, 8, ENVELOPE)


LOW_LOAD = {1: 0.5, 2: 0.5}


def low_load_window(now: float, started_at: int, measured: list[float]):
    """A quiet window of an engine started at `started_at`: it measures the acceptance of its own positions."""
    return synthetic_observation(time=now, window_seconds=120.0, method="draftModel",
                                 num_speculative_tokens=started_at, schedule=None, applied_since=0.0,
                                 batch_sizes=LOW_LOAD, prefix=measured,
                                 step_time=lambda b, k: WORLD.step_time(b, k, speculative=True, config_k=started_at))


def first_rollout(started_at: int, measured: list[float], **fields):
    # an engine whose load is its maxBatchSize: one future, so no hedge against a peak (test_policy_envelope_hedge.py:
    # at batch 1-2 under a maxBatchSize of 128 it keeps K=1) -- what a rollout reaches is this test's subject
    fields = {"max_batch_size": 2, **fields}
    state, reasons = None, []
    for tick in range(8):
        now = 600.0 + 30.0 * tick
        decision, state = decide(low_load_window(now, started_at, measured),
                                 tuning(in_place_max_k=started_at, **fields), state, now)
        reasons.append(decision.reason)
        if decision.is_change and decision.path == "rollout":
            return decision
    raise AssertionError(reasons)


HELD_BACK = "is rolled out at most one draft position beyond the 1 whose acceptance a window has measured"


@pytest.mark.parametrize("fields", [{}, {"allow_adaptive_verification": True}, {"allow_schedule": False}],
                         ids=["schedule", "adaptive-weighed", "one-k"])
def test_a_rollout_raises_a_startup_k_drafter_one_position_beyond_what_was_measured(fields):
    """Started at K=1, one draft position measured: the fit's next positions are the tail's extrapolation
    alone (at K=3 and 4 it ranks them above K=2 here), and the K rolled out to is drafted on every step at
    every batch size. It goes to K=2, the position after the one measured, and says what it held back --
    with a schedule, with adaptive verification weighed, and with one K for all batch sizes."""
    change = first_rollout(1, PREFIX[:1], **fields)
    assert max(change.config.dense(128)[1:]) == 2, change.reason
    assert "the fit ranks K=3 higher" in change.reason and HELD_BACK in change.reason, change.reason


def test_the_decision_names_the_reach_only_where_it_held_a_k_back():
    """A first position accepted 60% of the time: the fit's own best from K=1 is K=2, nothing was held back."""
    change = first_rollout(1, [0.6])
    assert max(change.config.dense(128)[1:]) == 2, change.reason
    assert HELD_BACK not in change.reason, change.reason


def test_adaptive_verification_is_weighed_only_at_k_within_reach():
    """The lever's candidate drafts its K on every step too: from K=1 with one position measured it is
    weighed at K=2 at most, where the extrapolation alone would put it higher."""
    tuned = tuning(in_place_max_k=1)
    current = DraftConfig.from_dense([0] + [1] * 128)
    free = Model(extrapolated_prefix(AcceptanceEstimate(prefix=(0.75,), weights=(1e4,)), ENVELOPE), WORLD,
                 WORLD.multipliers())
    capped = replace(free, measured_positions=1)
    points = list(LOW_LOAD.items())
    unbounded = adaptive_instead(free, tuned, current, current.dense(128), points)
    bounded = adaptive_instead(capped, tuned, current, current.dense(128), points)
    assert isinstance(unbounded, AdaptiveDense) and max(unbounded[1:]) > 2  # the world where the bound matters
    assert isinstance(bounded, AdaptiveDense) and max(bounded[1:]) == 2


def test_the_reach_is_the_k_in_force_or_one_position_beyond_the_measured_ones():
    def model(cost: CostModel, measured: int | None) -> Model:
        return Model(PREFIX, cost, cost.multipliers(), measured_positions=measured)

    ks = [0, 1, 2, 3, 4]
    at_one, at_four = [0] + [1] * 128, [0] + [4] * 128
    assert within_reach(model(WORLD, 1), ks, at_one) == [0, 1, 2]
    assert within_reach(model(WORLD, 3), ks, at_one) == ks
    assert within_reach(model(WORLD, 1), ks, at_four) == ks  # never forced below the K in force
    assert within_reach(model(WORLD, 0), [3, 4], [0] * 129) == [3]  # the spec's smallest K still drafts
    follows = CostModel.from_state(None, PRIOR.model_copy(update={"drafted_k": "scheduled", "zero_step": "first_pass",
                                                                  "startup_k": None}), "sequential")
    assert within_reach(model(follows, 1), ks, at_one) == ks  # in place a K is measured within a window
