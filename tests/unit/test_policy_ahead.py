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
from specinfer.operator.tuner.policy.observation import Observation
from specinfer.operator.tuner.policy.state import SpeculationSwitch

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
    # one K for all batch sizes depends on the mix: on a ramp it waits -- unless it wins at every batch size from
    # both windows' up (ramp.py). From K=4 at batch 4: K=2 at 4-24 would lose at batch 4 (held), K=2 at 20-40 wins
    # at every batch size from 14, the window before's mean, up (taken)
    k4, state, decisions = DraftConfig(num_speculative_tokens=4), None, []
    for now, batches in ((150.0, {2: 0.3, 4: 0.4, 6: 0.3}), (180.0, {4: 0.3, 14: 0.4, 24: 0.3}),
                         (210.0, {20: 0.3, 30: 0.4, 40: 0.3})):
        decision, state = decide(window(now, batches, k4), tuning(allow_schedule=False), state, now)
        decisions.append(decision)
    quiet, held, taken = decisions
    assert not quiet.is_change and held.guard == guards.LOAD_MOVING, held.reason
    assert held.recommendation.config.num_speculative_tokens < 4
    assert taken.is_change and taken.config.num_speculative_tokens < 4, taken.reason
    assert wins_from(14, DraftConfig(num_speculative_tokens=4), taken.config)


def wins_from(start: int, current: DraftConfig, candidate: DraftConfig, end: int = 256) -> bool:
    """By the world's own step times, `candidate` serves more than `current` at every batch size start..end."""
    def speed(config: DraftConfig, b: int) -> float:
        k = config.dense(256)[b]
        return (1 + sum(PREFIX[:k])) / world_step(b, k)
    return all(speed(candidate, b) > speed(current, b) for b in range(start, end + 1))


def test_a_rollout_on_a_ramp_waits_and_says_so():
    rollouts = tuning(in_place_max_k=None, confirmations=2)  # every change rolls out
    state = PolicyState(loads=[(t, 200.0) for t in range(0, 1800, 30)])  # half an hour at the peak
    first, state = decide(window(1800.0, {190: 0.5, 200: 0.5}), rollouts, state, 1800.0)
    assert first.guard == guards.CONFIRMING, first.reason  # the rollout pays back: one more window
    assert first.config is None and first.recommendation.config.dense(256)[20] == 3  # K=3 kept at batch 20
    # the load falls towards batch sizes where the rollout changes nothing: whether it pays depends on the mix
    moved, _ = decide(window(1830.0, {90: 0.5, 100: 0.5}), rollouts, state, 1830.0)
    assert moved.guard == guards.LOAD_MOVING and not moved.is_change, moved.reason
    assert "the load is moving" in moved.reason


def test_a_rollout_that_wins_wherever_the_ramp_goes_is_not_held_by_it():
    """Issue 43 item 4 (ramp.py): drafting less at large batch sizes wins at every batch size a rising load
    moves through; the ramp does not make it a choice of the mix. Its confirmations are the ramp's own windows
    (what the window before the ramp saw was seen at another load)."""
    rollouts = tuning(in_place_max_k=None, confirmations=2)
    state = PolicyState(loads=[(t, 200.0) for t in range(0, 1800, 30)])
    first, state = decide(window(1800.0, {190: 0.5, 200: 0.5}), rollouts, state, 1800.0)
    assert first.guard == guards.CONFIRMING, first.reason
    rising = window(1830.0, {215: 0.5, 225: 0.5})
    assert guards.load_moving_guard((195.0, 1800.0), rising) is not None  # a window on the ramp
    confirming, state = decide(rising, rollouts, state, 1830.0)
    assert confirming.guard == guards.CONFIRMING and "1 of 2" in confirming.reason, confirming.reason
    higher = window(1860.0, {240: 0.5, 250: 0.5})
    assert guards.load_moving_guard((220.0, 1830.0), higher) is not None  # still on it
    change, _ = decide(higher, rollouts, state, 1860.0)
    assert change.is_change and change.path == "rollout", change.reason
    assert wins_from(220, K3, change.config)


OFF = DraftConfig(num_speculative_tokens=0)


def surge_rollouts() -> TuningInput:
    """Every change a rollout, under Surge (no downtime), decided on one confirming window."""
    return tuning(in_place_max_k=None, confirmations=1, downtime_fraction=0.0)


def falling_after_off(signals: str = "specinfer") -> tuple[PolicyState, float, Observation]:
    """A policy that learnt K=3 at batch ~200 and speculation off at ~80 (changing nothing), and the next window:
    the load falling to ~40, still off."""
    learning = surge_rollouts().model_copy(update={"min_gain": 100.0})  # learns, changes nothing
    state, now = PolicyState(loads=[(t, 200.0) for t in range(0, 600, 30)]), 600.0
    for batches, config in (({190: .3, 200: .4, 210: .3}, K3), ({190: .3, 200: .4, 210: .3}, K3),
                            ({70: .3, 80: .4, 90: .3}, OFF), ({70: .3, 80: .4, 90: .3}, OFF)):
        now += 30
        _, state = decide(window(now, batches, config, signals=signals), learning, state, now)
    now += 30
    falling = window(now, {30: .3, 40: .4, 50: .3}, OFF, signals=signals)
    assert guards.load_moving_guard((80.0, now - 30), falling) is not None
    return state, now, falling


def test_a_switch_decided_on_a_ramp_is_remembered_where_it_settles():
    """The reversal guard's load for a switch decided mid-ramp is the one its first window runs at, whenever
    that comes -- not the load it passed through."""
    surge = surge_rollouts()
    state, now, falling = falling_after_off()
    back_on, state = decide(falling, surge, state, now)
    assert back_on.action == "reenable", back_on.reason
    assert state.switched is not None and state.switched.batch_mean == 0.0 and state.switched.settled_mean is None
    # its first window long after the rollout (thin windows, a drain) is still where it settled
    late = now + 900
    _, state = decide(window(late, {20: .3, 30: .4, 40: .3}, back_on.config, since=now + 240), surge, state, late)
    assert state.switched.settled_mean == pytest.approx(30.0)


def test_with_vllms_series_a_rollout_on_a_ramp_waits_whatever_it_wins():
    """vLLM's pooled series run one K across today's batch sizes: on a ramp the policy's per-batch-size choice is
    one of the mix (a review's case: K=5, every change a rollout, the load from 30 to 70)."""
    rollouts = tuning(in_place_max_k=None, confirmations=1)
    k5 = DraftConfig(num_speculative_tokens=5)
    for signals in ("vllm", "specinfer"):
        state = PolicyState(loads=[(t, 30.0) for t in range(0, 1800, 30)])
        _, state = decide(window(1800.0, {20: 0.3, 30: 0.4, 40: 0.3}, k5, signals=signals),
                          tuning(in_place_max_k=None, min_gain=100.0), state, 1800.0)  # learnt, nothing changed
        moved, _ = decide(window(1830.0, {20: 0.3, 70: 0.4, 120: 0.3}, k5, signals=signals), rollouts, state,
                          1830.0)
        if signals == "vllm":
            assert moved.guard == guards.LOAD_MOVING and not moved.is_change, moved.reason
        else:  # the plugin's series measure each batch size's K: drafting less from 20 up wins wherever it goes
            assert moved.is_change and wins_from(20, k5, moved.config), moved.reason


def test_with_vllms_series_speculation_back_on_is_not_held_by_a_falling_load():
    """From speculation off no window mixes K: speculation back on where it beats off at every batch size down to 1
    does not depend on the mix with vLLM's series either (the bench's draft-model-peak under Surge waited seven
    minutes of its ramp down, at +3% to +35%, before the rollout was even decided)."""
    for signals in ("vllm", "specinfer"):
        state, now, falling = falling_after_off(signals)
        back_on, after = decide(falling, surge_rollouts(), state, now)
        assert back_on.action == "reenable", (signals, back_on.reason)
        # remembered at the load it was decided at and the way the load moved: it settles where that went
        switched = after.switched
        assert switched is not None and switched.batch_mean == 0.0 and switched.ramp_rising is False
        assert switched.ramp_mean == pytest.approx(falling.batch_size_mean)
        if signals == "vllm":  # the windows after it measure one K across today's batch sizes, as at rest
            assert len({back_on.config.dense(256)[b] for b in (30, 40, 50)}) == 1, back_on.config.describe()


def test_speculation_back_on_is_not_held_where_the_load_moved_while_the_switch_rolled():
    """Off decided as a peak ended (batch ~165), its first window after the ramp down at batch ~8: that is another
    load, not the one the switch settled at, and speculation back on there is not held as a flip back."""
    surge = surge_rollouts()
    learning = surge.model_copy(update={"min_gain": 100.0})
    state, now = PolicyState(loads=[(t, 165.0) for t in range(0, 600, 30)]), 600.0
    peak = window(now, {160: .3, 165: .4, 170: .3})
    _, state = decide(peak, learning, state, now)
    state.switched = SpeculationSwitch(speculative=False, batch_mean=165.0, at=now, predicted_gain=0.2,
                                       throughput=peak.throughput)
    first = now + 300
    after, state = decide(window(first, {6: .3, 8: .4, 10: .3}, OFF, since=first - 200), surge, state, first)
    assert state.switched is not None and state.switched.settled_mean is None
    assert after.guard != guards.REVERSAL, after.reason
    assert after.action == "reenable", after.reason


def test_a_ramp_reads_its_direction_and_both_windows():
    from specinfer.operator.tuner.policy.ramp import Ramp
    model = Model(PREFIX, WORLD, WORLD.multipliers(), always_scheduled=True)
    k3, less_above = [0] + [3] * 256, [0] + [3] * 64 + [1] * 192
    up, down = Ramp("up", 80.0, 110.0), Ramp("down", 150.0, 110.0)
    assert up.rising and not down.rising
    assert up.followed_by(model, k3, less_above, [(100, 0.5), (120, 0.5)], 256)
    assert not down.followed_by(model, k3, less_above, [(100, 0.5), (120, 0.5)], 256)  # the same K below 65
    assert not Ramp("up", 40.0, 110.0).followed_by(model, k3, less_above, [(100, 1.0)], 256)  # 40: no change
    off, k1, more_below = [0] * 257, [0] + [1] * 256, [0] + [2] * 16 + [1] * 240
    assert not down.followed_by(model, k3, off, [(100, 1.0)], 256)  # off loses at small batch sizes
    # K=2 up to 16 wins over K=1 from the window down; a dip from 200 spans 17-200 too, where both run K=1
    assert Ramp("down", 16.0, 12.0).followed_by(model, k1, more_below, [(10, 0.5), (14, 0.5)], 256)
    assert not Ramp("down", 200.0, 12.0).followed_by(model, k1, more_below, [(10, 0.5), (14, 0.5)], 256)
    assert not up.followed_by(model, k3, less_above, [], 256)
