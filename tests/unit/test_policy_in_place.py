"""The policy under issue 22: a change the engine takes in place restarts nothing, so the guards
that price restarts (budget, cooldown, payback, look-ahead) apply to rollouts only."""

from __future__ import annotations

import math

import pytest

from specinfer.bench.observations import synthetic_observation
from specinfer.operator.tuner.policy import OFF, CostPrior, DraftConfig, PolicyState, TuningInput, decide
from specinfer.operator.tuner.policy.decision import in_place, path_of

pytestmark = pytest.mark.unit

GOOD_PREFIX = [math.prod([0.8] * (i + 1)) for i in range(16)]
COLLAPSED_PREFIX = [0.01] + [0.0] * 15
CHANGES = {"setK", "setSchedule"}
PRIOR = CostPrior(floor=0.010, compute_per_token=2e-5, kv_per_sequence=1e-6, draft_pass=0.0008, draft_token=1e-7)


def step_time(batch_size: int, k: int) -> float:
    """A memory-bound GPU: the floor dominates, so a longer draft pays at small batch sizes."""
    return 0.010 + 2e-5 * batch_size * (k + 1) + 0.0008 * k


def tuning(**overrides) -> TuningInput:
    base = {"method": "eagle3", "k_min": 1, "k_max": 8, "max_batch_size": 64, "cooldown_seconds": 600,
            "restart_seconds": 30, "confirmations": 1, "cost_prior": PRIOR, "in_place_max_k": 8}
    base.update(overrides)
    return TuningInput(**base)


def observe(now: float, *, k: int = 1, schedule=None, since: float = 0.0, prefix=GOOD_PREFIX):
    return synthetic_observation(time=now, window_seconds=60.0, method="eagle3", num_speculative_tokens=k,
                                 schedule=schedule, applied_since=since, batch_sizes={2: 1.0}, prefix=prefix,
                                 step_time=step_time)


def test_the_paths_mirror_what_the_operator_renders():
    k3, k8, k9 = (DraftConfig(num_speculative_tokens=k) for k in (3, 8, 9))
    assert in_place(k3, k8, 8) and path_of(k3, k8, 8) == "inPlace"
    assert not in_place(k3, k9, 8)  # above the engine's startup maximum: a restart
    assert not in_place(k3, OFF, 8)  # no drafter at all: a restart
    assert not in_place(OFF, k3, 8)  # no drafter loaded yet: a restart
    assert not in_place(k3, k8, None)  # an engine that does not follow a published schedule


def test_an_in_place_change_passes_the_budget_and_the_cooldown_a_rollout_waits_for():
    # One restart used and the last one 100 s ago: a rollout waits out both guards ...
    state = PolicyState(changes=[3500.0, 3550.0], last_change_at=3550.0)
    held, _ = decide(observe(3650.0), tuning(in_place_max_k=None, max_restarts_per_hour=3), state, 3650.0)
    assert (held.action, held.guard) == ("keep", "cooldown")
    # ... the same change in place is issued now, and costs the budget nothing.
    decision, after = decide(observe(3650.0), tuning(max_restarts_per_hour=3), state, 3650.0)
    assert decision.action in CHANGES and decision.path == "inPlace"
    assert "in place" in decision.reason
    assert after.changes == state.changes and after.last_change_at == 3550.0
    assert after.pending is not None and after.pending.in_place


def test_a_rollout_is_still_counted_and_says_so():
    decision, after = decide(observe(120.0), tuning(in_place_max_k=None), None, 120.0)
    assert decision.action in CHANGES and decision.path == "rollout"
    assert after.changes == [120.0] and after.last_change_at == 120.0


def test_an_in_place_change_pays_no_restart_payback():
    # A reload so long that no gain repays it: the rollout is held, the in-place change is not.
    slow = {"restart_seconds": 10**6, "downtime_fraction": 1.0, "min_gain": 0.01}
    held, _ = decide(observe(120.0), tuning(in_place_max_k=None, **slow), None, 120.0)
    assert held.guard == "belowThreshold" and "payback" in held.reason
    decision, _ = decide(observe(120.0), tuning(**slow), None, 120.0)
    assert decision.action in CHANGES and decision.path == "inPlace"


def test_an_in_place_change_clears_its_own_lower_hysteresis_floor():
    # The same gain, a floor no rollout clears: the rollout is held by the hysteresis ...
    bars = {"restart_seconds": 0.0, "min_gain": 10.0, "min_gain_in_place": 0.0}
    held, _ = decide(observe(120.0), tuning(in_place_max_k=None, **bars), None, 120.0)
    assert held.guard == "belowThreshold" and "hysteresis threshold of 1000.0%" in held.reason
    # ... in place only `minGainInPlace` applies.
    decision, _ = decide(observe(120.0), tuning(**bars), None, 120.0)
    assert decision.action in CHANGES and decision.path == "inPlace"
    # And the in-place floor binds too: above the gain, it holds.
    held, _ = decide(observe(120.0), tuning(**{**bars, "min_gain_in_place": 10.0}), None, 120.0)
    assert held.guard == "belowThreshold" and "hysteresis" in held.reason


def test_a_choice_above_the_engines_maximum_is_a_rollout():
    # Surge: the rollout costs no capacity, so nothing holds it
    decision, _ = decide(observe(120.0), tuning(in_place_max_k=2, downtime_fraction=0.0), None, 120.0)
    assert decision.action in CHANGES
    assert decision.config.num_speculative_tokens > 2 and decision.path == "rollout"


def test_where_the_best_rollout_is_refused_the_best_change_in_place_is_taken_and_both_are_said():
    # Replace, and a load seen for one window: the rollout above the envelope cannot have paid back yet
    decision, state = decide(observe(120.0), tuning(in_place_max_k=2), None, 120.0)
    assert decision.action in CHANGES and decision.path == "inPlace"
    assert decision.config.num_speculative_tokens == 2  # the best the engine takes without a restart
    assert "payback" in decision.reason and "the best change in place instead" in decision.reason
    assert decision.recommendation.config.num_speculative_tokens > 2  # the best is still what it recommends
    assert state.changes == []  # nothing restarted


def test_a_collapse_rolls_out_to_no_speculation():
    decision, _ = decide(observe(120.0, k=3, prefix=COLLAPSED_PREFIX), tuning(), None, 120.0)
    assert (decision.action, decision.path, decision.config) == ("disable", "rollout", OFF)


def test_a_rollback_of_an_in_place_change_is_in_place_and_ignores_the_budget():
    spec = tuning(confirmations=2, max_restarts_per_hour=1)
    first, state = decide(observe(60.0), spec, None, 60.0)
    decision, state = decide(observe(120.0), spec, state, 120.0)
    assert decision.action in CHANGES and decision.path == "inPlace"
    new = decision.config
    worse = [0.8] + [0.0] * 15  # only the first draft position is ever accepted after the change
    outcomes = []
    for now in (300.0, 360.0):
        outcome, state = decide(observe(now, k=new.num_speculative_tokens, schedule=new.schedule, since=200.0,
                                        prefix=worse), spec, state, now)
        outcomes.append(outcome)
    assert outcomes[-1].action == "rollback", [o.reason for o in outcomes]
    assert outcomes[-1].path == "inPlace"
    assert state.changes == []  # neither the change nor its rollback restarted anything
