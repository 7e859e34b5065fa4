"""One test per safety guard of the tuning policy, driven through `decide` with plain dicts."""

from __future__ import annotations

import copy
import math

import pytest

from specinfer.operator.tuner.policy import decide
from specinfer.operator.tuner.synthetic import synthetic_observation
from specinfer.operator.tuner.tuning import TuningError, parse_tuning

pytestmark = pytest.mark.unit

GOOD_PREFIX = [math.prod([0.8] * (i + 1)) for i in range(16)]
COLLAPSED_PREFIX = [0.01] + [0.0] * 15
CHANGES = {"setK", "setSchedule"}


def step_time(batch_size: int, k: int) -> float:
    """A memory-bound GPU: the floor dominates, so speculation pays at small batch sizes."""
    return 0.010 + 2e-5 * batch_size * (k + 1) + 0.0008 * k


def tuning(**overrides) -> dict:
    base = {"method": "eagle3", "kMin": 1, "kMax": 8, "maxBatchSize": 64, "cooldownSeconds": 300,
            "restartSeconds": 30, "confirmations": 1, "costPrior": {"floorSeconds": 0.010,
            "computePerTokenSeconds": 2e-5, "kvPerSequenceSeconds": 1e-6, "draftPassSeconds": 0.0008,
            "draftTokenSeconds": 1e-7}}
    base.update(overrides)
    return base


def observe(now: float, *, k: int = 1, schedule=None, since: float = 0.0, batch: int = 2,
            prefix=GOOD_PREFIX, window: float = 60.0, **kwargs) -> dict:
    return synthetic_observation(time=now, window_seconds=window, method="eagle3", num_speculative_tokens=k,
                                 schedule=schedule, applied_since=since, batch_sizes={batch: 1.0}, prefix=prefix,
                                 step_time=step_time, **kwargs)


def test_acts_on_good_data_when_gain_is_large():
    decision, state = decide(observe(120.0), tuning(), None, 120.0)
    assert decision["action"] in CHANGES
    assert decision["config"]["numSpeculativeTokens"] > 1
    assert decision["predictedGain"] > 0.05
    assert decision["guard"] is None
    assert state["changes"] == [120.0]


@pytest.mark.parametrize("corrupt", [
    lambda o: o["steps"].__setitem__("meanSeconds", float("nan")),
    lambda o: o["acceptance"]["acceptedPerPosition"].__setitem__(0, float("inf")),
    lambda o: o["batchSize"].__setitem__("mean", -1.0),
    lambda o: o.pop("acceptance"),
    lambda o: o["steps"].pop("count"),
])
def test_invalid_data_holds_and_learns_nothing(corrupt):
    observation = observe(120.0)
    corrupt(observation)
    state = {"version": 1, "changes": [10.0]}
    decision, new_state = decide(observation, tuning(), state, 120.0)
    assert decision["action"] == "keep"
    assert decision["guard"] == "invalidData"
    assert new_state["cost"] is None and new_state["acceptance"] is None


def test_counter_reset_is_invalid_data():
    observation = observe(120.0)
    observation["acceptance"]["acceptedPerPosition"][0] = observation["acceptance"]["drafts"] * 3
    decision, _ = decide(observation, tuning(), None, 120.0)
    assert decision["guard"] == "invalidData"
    assert "counter reset" in decision["reason"]


def test_stale_scrape_holds():
    decision, _ = decide(observe(1000.0, scrape_age=400.0), tuning(), None, 1000.0)
    assert (decision["action"], decision["guard"]) == ("keep", "staleData")


def test_rollout_in_progress_holds():
    decision, _ = decide(observe(120.0, rollout_in_progress=True), tuning(), None, 120.0)
    assert (decision["action"], decision["guard"]) == ("keep", "rolloutInProgress")


def test_window_mixing_two_configs_holds():
    decision, _ = decide(observe(120.0, since=100.0), tuning(), None, 120.0)
    assert (decision["action"], decision["guard"]) == ("keep", "settling")


def test_minimum_samples():
    decision, _ = decide(observe(120.0, window=1.0), tuning(minSteps=500), None, 120.0)
    assert (decision["action"], decision["guard"]) == ("keep", "insufficientSamples")
    decision, _ = decide(observe(120.0, window=1.0), tuning(minSteps=10, minDrafts=10**6), None, 120.0)
    assert decision["guard"] == "insufficientSamples"
    assert "drafts" in decision["reason"]


def test_hysteresis_threshold():
    decision, _ = decide(observe(120.0), tuning(minGain=5.0), None, 120.0)
    assert (decision["action"], decision["guard"]) == ("keep", "belowThreshold")
    assert decision["recommendation"]["config"]["numSpeculativeTokens"] > 1  # still recommended (observe mode)


def test_restart_payback_raises_the_threshold():
    decision, _ = decide(observe(120.0), tuning(restartSeconds=10**6, minGain=0.01), None, 120.0)
    assert decision["guard"] == "belowThreshold"
    assert "payback" in decision["reason"]


def test_slo_violation_waives_hysteresis_but_not_payback():
    gain = decide(observe(120.0), tuning(minGain=5.0), None, 120.0)[0]["predictedGain"]
    slow = observe(120.0, per_token_p99_seconds=1.0)
    decision, _ = decide(slow, tuning(minGain=5.0, slo={"perTokenP99Seconds": 0.05}), None, 120.0)
    assert gain > 0.02 and decision["action"] in CHANGES
    assert "SLO" in decision["reason"]


def test_confirmations_need_consecutive_windows():
    first, state = decide(observe(120.0), tuning(confirmations=2), None, 120.0)
    assert (first["action"], first["guard"]) == ("keep", "confirming")
    second, _ = decide(observe(180.0), tuning(confirmations=2), state, 180.0)
    assert second["action"] in CHANGES


def test_cooldown_after_a_change():
    state = {"version": 1, "changes": [100.0], "last_change_at": 100.0}
    decision, _ = decide(observe(200.0), tuning(cooldownSeconds=600), state, 200.0)
    assert (decision["action"], decision["guard"]) == ("keep", "cooldown")
    decision, _ = decide(observe(800.0), tuning(cooldownSeconds=600), state, 800.0)
    assert decision["action"] in CHANGES


def test_restart_budget_keeps_one_restart_for_a_rollback():
    changes = [1000.0, 1500.0]
    state = {"version": 1, "changes": changes, "last_change_at": 1500.0}
    decision, _ = decide(observe(3000.0), tuning(maxRestartsPerHour=3, cooldownSeconds=60), state, 3000.0)
    assert (decision["action"], decision["guard"]) == ("keep", "restartBudget")
    decision, _ = decide(observe(4700.0), tuning(maxRestartsPerHour=3, cooldownSeconds=60), state, 4700.0)
    assert decision["action"] in CHANGES  # the 1000s restart left the hour


def test_collapse_disables_with_degraded_reason_then_probes_after_hold():
    spec = tuning(collapseHoldSeconds=1800, cooldownSeconds=60)
    decision, state = decide(observe(120.0, k=3, prefix=COLLAPSED_PREFIX), spec, None, 120.0)
    assert decision["action"] == "disable"
    assert decision["config"] == {"numSpeculativeTokens": 0, "schedule": None}
    assert decision["degraded"]["reason"] == "AcceptanceCollapsed"
    held, state = decide(observe(600.0, k=0, since=200.0), spec, state, 600.0)
    assert (held["action"], held["guard"]) == ("keep", "collapseHold")
    assert held["degraded"]["reason"] == "AcceptanceCollapsed"
    probe, state = decide(observe(2000.0, k=0, since=200.0), spec, state, 2000.0)
    assert probe["action"] == "reenable"
    assert probe["config"]["numSpeculativeTokens"] == 3


def _change_then_verify(realised_prefix):
    """Issue a change from K=1 at t=120, then feed windows of the new config with `realised_prefix`."""
    spec = tuning(confirmations=2, cooldownSeconds=600)
    decide(observe(60.0), spec, None, 60.0)
    decision, state = decide(observe(120.0), spec, decide(observe(60.0), spec, None, 60.0)[1], 120.0)
    assert decision["action"] in CHANGES
    new = decision["config"]
    outcomes = []
    for now in (300.0, 360.0):
        window = observe(now, k=new["numSpeculativeTokens"], schedule=new["schedule"], since=200.0,
                         prefix=realised_prefix)
        outcome, state = decide(window, spec, state, now)
        outcomes.append(outcome)
    return decision, outcomes, state, spec


def test_rollback_when_realised_gain_is_worse():
    # After the change drafts stop being accepted beyond the first position: the new K measures
    # worse than K=1 did, though not low enough to look like a collapse.
    worse = [0.8] + [0.0] * 15
    decision, outcomes, state, spec = _change_then_verify(worse)
    assert outcomes[0]["guard"] == "verifying"
    assert outcomes[1]["action"] == "rollback"
    assert outcomes[1]["config"] == {"numSpeculativeTokens": 1, "schedule": None}
    assert outcomes[1]["realisedGain"] < -0.03
    assert state["rejected"][0]["config"] == decision["config"]


def test_no_rollback_when_realised_gain_holds():
    _, outcomes, state, _ = _change_then_verify(GOOD_PREFIX)
    assert all(o["action"] == "keep" for o in outcomes)
    assert state["pending"] is None
    assert state["realised_gain"] > 0.05


def test_rolled_back_config_is_not_retried_during_its_hold():
    decision, _ = decide(observe(120.0), tuning(), None, 120.0)
    best = decision["config"]
    state = {"version": 1, "rejected": [{"config": best, "until": 10_000.0, "batchSizes": [2]}]}
    held, _ = decide(observe(120.0), tuning(), state, 120.0)
    assert (held["action"], held["guard"]) == ("keep", "recentlyRejected")
    expired = {"version": 1, "rejected": [{"config": best, "until": 100.0, "batchSizes": [2]}]}
    assert decide(observe(120.0), tuning(), expired, 120.0)[0]["action"] in CHANGES


def test_rejection_covers_configs_with_the_same_k_where_it_was_measured():
    decision, _ = decide(observe(120.0), tuning(), None, 120.0)
    k_here = decision["config"]["numSpeculativeTokens"]
    lookalike = {"numSpeculativeTokens": k_here, "schedule": [[1, 2, k_here], [3, 64, 1]]}
    state = {"version": 1, "rejected": [{"config": lookalike, "until": 10_000.0, "batchSizes": [2]}]}
    held, _ = decide(observe(120.0), tuning(), state, 120.0)
    assert held["guard"] == "recentlyRejected"


def test_no_acceptance_data_while_off_and_never_measured():
    decision, _ = decide(observe(120.0, k=0), tuning(), None, 120.0)
    assert (decision["action"], decision["guard"]) == ("keep", "noAcceptanceData")


def test_invalid_tuning_is_reported_not_raised():
    decision, _ = decide(observe(120.0), tuning(kMin=5, kMax=2), None, 120.0)
    assert decision["guard"] == "invalidTuning"
    assert "kMin" in decision["reason"]
    with pytest.raises(TuningError, match="unknown keys"):
        parse_tuning({"method": "eagle3", "kmax": 3})


def test_method_limits_from_the_catalogue_bound_the_spec():
    spec = parse_tuning({"method": "mtp", "kMax": 50})
    assert spec.k_max <= 8 and spec.drafting == "sequential"


def test_state_round_trips_through_json():
    import json

    decision, state = decide(observe(120.0), tuning(), None, 120.0)
    again = json.loads(json.dumps(state))
    decision2, state2 = decide(observe(180.0, k=decision["config"]["numSpeculativeTokens"], since=130.0),
                               tuning(), copy.deepcopy(again), 250.0)
    assert json.loads(json.dumps(decision2)) == decision2
    assert json.loads(json.dumps(state2)) == state2


def test_noisy_measurements_extend_verification_before_any_rollback():
    spec = tuning(confirmations=2, cooldownSeconds=600)
    _, state = decide(observe(60.0), spec, None, 60.0)
    decision, state = decide(observe(120.0), spec, state, 120.0)
    state["calibration"]["variance"] = 0.08**2  # step times seen to jump ~8% window to window
    new = decision["config"]
    guards_seen = []
    for now in (300.0, 360.0, 420.0):
        window = observe(now, k=new["numSpeculativeTokens"], schedule=new["schedule"], since=200.0,
                         prefix=[0.8] + [0.0] * 15)
        outcome, state = decide(window, spec, state, now)
        guards_seen.append(outcome["guard"])
    assert guards_seen == ["verifying"] * 3  # a quiet engine would have been judged after two


def test_idle_positions_left_over_from_a_larger_k_are_ignored():
    observation = observe(120.0, k=2)
    observation["acceptance"]["acceptedPerPosition"] += [0.0, 0.0]  # the old pods' K=4 series, now idle
    observation["acceptance"]["draftsPerPosition"] += [0.0, 0.0]
    decision, _ = decide(observation, tuning(), None, 120.0)
    assert decision["guard"] != "invalidData"
    observation["acceptance"]["acceptedPerPosition"][3] = 50.0  # still counting: two configs mixed
    decision, _ = decide(observation, tuning(), None, 120.0)
    assert decision["guard"] == "invalidData"


def test_noisy_measurements_raise_the_threshold():
    quiet_decision, state = decide(observe(120.0), tuning(minGain=0.01), None, 120.0)
    assert quiet_decision["action"] in CHANGES
    _, state = decide(observe(60.0), tuning(minGain=10.0), None, 60.0)  # learn, hold
    # Measured speed jumps from window to window by more than the gain on offer.
    state["calibration"]["variance"] = (2 * quiet_decision["predictedGain"]) ** 2
    held, _ = decide(observe(120.0), tuning(minGain=0.01), state, 120.0)
    assert held["guard"] == "belowThreshold"
    assert "measurement noise" in held["reason"]


def test_disable_under_load_then_reenable_when_load_falls():
    spec = tuning(allowSchedule=False, cooldownSeconds=60, minGain=0.02, maxBatchSize=256,
                  costPrior={"floorSeconds": 0.010, "computePerTokenSeconds": 2e-4, "draftPassSeconds": 0.0008})

    def compute_bound(batch_size: int, k: int) -> float:
        return 0.010 + 2e-4 * batch_size * (k + 1) + 0.0008 * k

    def window(now, k, batch, since):
        return synthetic_observation(time=now, window_seconds=60.0, method="eagle3", num_speculative_tokens=k,
                                     schedule=None, applied_since=since, batch_sizes={batch: 1.0},
                                     prefix=GOOD_PREFIX, step_time=compute_bound)

    off, state = decide(window(120.0, 2, 200, 0.0), spec, None, 120.0)
    assert off["action"] == "disable" and off["degraded"] is None  # a load decision, not a fault
    on, state = decide(window(600.0, 0, 1, 300.0), spec, state, 600.0)
    assert on["action"] == "reenable"
    assert on["config"]["numSpeculativeTokens"] >= 1


def test_differing_share_counts_only_batch_sizes_where_k_changes():
    from specinfer.operator.tuner.goodput import dense_ks
    from specinfer.operator.tuner.verification import differing_share

    before = dense_ks({"numSpeculativeTokens": 1, "schedule": None}, 256)
    after = dense_ks({"numSpeculativeTokens": 4, "schedule": [[1, 12, 4], [13, 256, 1]]}, 256)
    assert differing_share([(2, 1.0)], before, after, 256) == 1.0
    assert differing_share([(94, 1.0)], before, after, 256) == 0.0
    assert differing_share([(2, 0.25), (94, 0.75)], before, after, 256) == 0.25

