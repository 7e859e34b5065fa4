"""One test per safety guard of the tuning policy, driven through `decide` with typed inputs."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from pydantic import ValidationError

from specinfer.api.workload import TERMINATION_GRACE_SECONDS
from specinfer.bench.observations import synthetic_observation
from specinfer.operator.tuner.policy import (
    OFF,
    CostPrior,
    DraftConfig,
    PolicyState,
    TuningInput,
    decide,
    decide_json,
    tuning_from_json,
)
from specinfer.operator.tuner.policy.observation import DRAIN_LIMIT_SECONDS, StepSample
from specinfer.operator.tuner.policy.state import Rejection, SpeculationSwitch

pytestmark = pytest.mark.unit

GOOD_PREFIX = [math.prod([0.8] * (i + 1)) for i in range(16)]
COLLAPSED_PREFIX = [0.01] + [0.0] * 15
CHANGES = {"setK", "setSchedule"}


def step_time(batch_size: int, k: int) -> float:
    """A memory-bound GPU: the floor dominates, so speculation pays at small batch sizes."""
    return 0.010 + 2e-5 * batch_size * (k + 1) + 0.0008 * k


PRIOR = CostPrior(floor=0.010, compute_per_token=2e-5, kv_per_sequence=1e-6, draft_pass=0.0008, draft_token=1e-7)


def tuning(**overrides) -> TuningInput:
    """Surge rollouts unless a test says otherwise: a rollout then costs no capacity, and no payback holds it."""
    base = {"method": "eagle3", "k_min": 1, "k_max": 8, "max_batch_size": 64, "cooldown_seconds": 300,
            "restart_seconds": 30, "downtime_fraction": 0.0, "confirmations": 1, "cost_prior": PRIOR}
    base.update(overrides)
    return TuningInput(**base)


def observe(now: float, *, k: int = 1, schedule=None, since: float = 0.0, batch: int = 2,
            prefix=GOOD_PREFIX, window: float = 60.0, **kwargs):
    return synthetic_observation(time=now, window_seconds=window, method="eagle3", num_speculative_tokens=k,
                                 schedule=schedule, applied_since=since, batch_sizes={batch: 1.0}, prefix=prefix,
                                 step_time=step_time, **kwargs)


def lasting(batch: float, now: float, minutes: int = 30, **fields) -> PolicyState:
    """A state that has seen this load for `minutes` (a rollout's payback counts on it lasting)."""
    return PolicyState(loads=[(now - 60.0 * i, float(batch)) for i in range(minutes, 0, -1)], **fields)


def test_acts_on_good_data_when_gain_is_large():
    decision, state = decide(observe(120.0), tuning(), None, 120.0)
    assert decision.action in CHANGES
    assert decision.config.num_speculative_tokens > 1
    assert decision.predicted_gain > 0.05
    assert decision.guard is None
    assert state.changes == [120.0]


@pytest.mark.parametrize("corrupt", [
    lambda o: replace(o, step_mean_seconds=float("nan")),
    lambda o: replace(o, accepted_per_position=(float("inf"), *o.accepted_per_position[1:])),
    lambda o: replace(o, batch_size_mean=-1.0),
    lambda o: replace(o, drafts=-5.0),
])
def test_invalid_data_holds_and_learns_nothing(corrupt):
    observation = corrupt(observe(120.0))
    state = PolicyState(changes=[10.0])
    decision, new_state = decide(observation, tuning(), state, 120.0)
    assert decision.action == "keep"
    assert decision.guard == "invalidData"
    assert new_state.cost is None and new_state.acceptance is None
    assert new_state == state


def test_counter_reset_is_invalid_data():
    observation = observe(120.0)
    observation = replace(observation, accepted_per_position=(observation.drafts * 3,
                                                              *observation.accepted_per_position[1:]))
    decision, _ = decide(observation, tuning(), None, 120.0)
    assert decision.guard == "invalidData"
    assert "counter reset" in decision.reason


def test_stale_scrape_holds():
    decision, _ = decide(observe(1000.0, scrape_age=400.0), tuning(), None, 1000.0)
    assert (decision.action, decision.guard) == ("keep", "staleData")


def test_rollout_in_progress_holds():
    decision, _ = decide(observe(120.0, rollout_in_progress=True), tuning(), None, 120.0)
    assert (decision.action, decision.guard) == ("keep", "rolloutInProgress")


def test_window_mixing_two_configs_holds():
    decision, _ = decide(observe(120.0, since=100.0), tuning(), None, 120.0)
    assert (decision.action, decision.guard) == ("keep", "settling")


def test_a_replaced_engines_last_steps_in_the_window_hold_it():
    """After a rollout ends the replaced pod may still be draining, and its series stay in the window's rates
    (the real CPU engine: 725-2,316 drafts in three windows after a switch to speculation off, judged -45%
    and rolled back; that engine served 2x without speculation). Such a window measures two configs."""
    plain = observe(120.0, k=0)
    state = PolicyState(changes=[10.0])
    assert decide(plain, tuning(allow_disable=True), state, 120.0)[0].guard != "settling"
    decision, new_state = decide(replace(plain, drafts=725.0), tuning(allow_disable=True), state, 120.0)
    assert (decision.action, decision.guard) == ("keep", "settling")
    assert "725 drafts although speculation is off" in decision.reason
    assert new_state == state  # nothing learnt from it
    # past the longest drain they are no drain: another engine under the resource's name, a data fault
    late = observe(1000.0, k=0, since=600.0)
    decision, _ = decide(replace(late, drafts=725.0), tuning(allow_disable=True), state, 1000.0)
    assert (decision.action, decision.guard) == ("keep", "invalidData")
    assert "longer than a replaced pod drains" in decision.reason
    # while the rollout runs its end is not known yet (`since` is the decision's): that is the rollout's hold
    decision, _ = decide(replace(late, drafts=725.0, rollout_in_progress=True), tuning(allow_disable=True), state,
                         1000.0)
    assert (decision.action, decision.guard) == ("keep", "rolloutInProgress")
    lowered = observe(120.0, k=2)
    draining = StepSample(batch_size=2.0, k=4, count=12.0, mean_seconds=0.02)
    decision, _ = decide(replace(lowered, step_samples=(*lowered.step_samples, draining)), tuning(), None, 120.0)
    assert (decision.action, decision.guard) == ("keep", "settling")
    assert "steps at K=4 although the applied config drafts at most K=2" in decision.reason


def test_the_drain_limit_is_the_pods_termination_grace():
    assert DRAIN_LIMIT_SECONDS == TERMINATION_GRACE_SECONDS


def test_the_load_a_switch_settles_at_is_read_from_its_first_window_past_the_holds():
    """A replaced engine may drain for up to its termination grace, holding the windows after a switch to
    speculation off: the batch mean the switch settled at is that of the first window judged after it."""
    decided = observe(100.0, k=1, batch=40)
    switch = SpeculationSwitch(speculative=False, batch_mean=40.0, at=100.0, predicted_gain=0.1,
                               throughput=decided.throughput)
    state = PolicyState(method="eagle3", changes=[395.0], switched=switch)  # a change just made: no rollout now
    window = observe(400.0, k=0, since=160.0, batch=32)  # began 180 s after the switch took effect
    assert 400.0 - 160.0 > 2 * window.window_seconds  # past the two windows a switch settles in without a drain
    _, after = decide(window, tuning(allow_disable=True), state, 400.0)
    assert after.switched is not None and after.switched.settled_mean == window.batch_size_mean
    # a first window at a throughput the switch could not have moved it to (the load moved) is not where it settled
    elsewhere = observe(400.0, k=0, since=160.0, batch=4)
    assert elsewhere.throughput < decided.throughput / (2 * 1.1)
    _, after = decide(elsewhere, tuning(allow_disable=True), state.model_copy(deep=True), 400.0)
    assert after.switched is not None and after.switched.settled_mean is None


def test_minimum_samples():
    decision, _ = decide(observe(120.0, window=1.0), tuning(min_steps=500), None, 120.0)
    assert (decision.action, decision.guard) == ("keep", "insufficientSamples")
    decision, _ = decide(observe(120.0, window=1.0), tuning(min_steps=10, min_drafts=10**6), None, 120.0)
    assert decision.guard == "insufficientSamples"
    assert "drafts" in decision.reason


def test_hysteresis_threshold():
    decision, _ = decide(observe(120.0), tuning(min_gain=5.0), None, 120.0)
    assert (decision.action, decision.guard) == ("keep", "belowThreshold")
    assert decision.recommendation.config.num_speculative_tokens > 1  # still recommended (observe mode)


def test_restart_payback_raises_the_threshold():
    decision, _ = decide(observe(120.0), tuning(restart_seconds=10**6, downtime_fraction=1.0, min_gain=0.01), None,
                         120.0)
    assert decision.guard == "belowThreshold"
    assert "payback" in decision.reason


def test_slo_violation_waives_hysteresis_but_not_payback():
    gain = decide(observe(120.0), tuning(min_gain=5.0), None, 120.0)[0].predicted_gain
    slow = observe(120.0, per_token_p99_seconds=1.0)
    spec = tuning(min_gain=5.0, downtime_fraction=1.0, slo={"per_token_p99_seconds": 0.05})
    held, _ = decide(slow, spec, None, 120.0)  # a load seen for one window: the restart cannot have paid back
    assert held.action == "keep" and "payback" in held.reason
    decision, _ = decide(slow, spec, lasting(2, 120.0), 120.0)
    assert gain > 0.02 and decision.action in CHANGES
    assert "SLO" in decision.reason


def test_confirmations_need_consecutive_windows():
    first, state = decide(observe(120.0), tuning(confirmations=2), None, 120.0)
    assert (first.action, first.guard) == ("keep", "confirming")
    second, _ = decide(observe(180.0), tuning(confirmations=2), state, 180.0)
    assert second.action in CHANGES


def test_cooldown_after_a_change():
    state = PolicyState(changes=[100.0], last_change_at=100.0)
    decision, _ = decide(observe(200.0), tuning(cooldown_seconds=600), state, 200.0)
    assert (decision.action, decision.guard) == ("keep", "cooldown")
    decision, _ = decide(observe(800.0), tuning(cooldown_seconds=600), state, 800.0)
    assert decision.action in CHANGES


def test_restart_budget_keeps_one_restart_for_a_rollback():
    changes = [1000.0, 1500.0]
    state = PolicyState(changes=changes, last_change_at=1500.0)
    decision, _ = decide(observe(3000.0), tuning(max_restarts_per_hour=3, cooldown_seconds=60), state, 3000.0)
    assert (decision.action, decision.guard) == ("keep", "restartBudget")
    decision, _ = decide(observe(4700.0), tuning(max_restarts_per_hour=3, cooldown_seconds=60), state, 4700.0)
    assert decision.action in CHANGES  # the 1000s restart left the hour


def test_no_restart_budget_holds_every_rollout_and_says_in_place_only():
    decision, _ = decide(observe(3000.0), tuning(max_restarts_per_hour=0, cooldown_seconds=60), None, 3000.0)
    assert (decision.action, decision.guard) == ("keep", "restartBudget")
    assert "maxRestartsPerHour is 0: in place only" in decision.reason and "only recommends" in decision.reason
    assert decision.recommendation is not None and not decision.recommendation.config.same_as(
        DraftConfig(num_speculative_tokens=1), 64)  # the change, shown as advice
    collapsed, _ = decide(observe(120.0, k=3, prefix=COLLAPSED_PREFIX), tuning(max_restarts_per_hour=0), None, 120.0)
    assert (collapsed.action, collapsed.guard) == ("keep", "restartBudget") and collapsed.degraded is not None


def test_collapse_disables_with_degraded_reason_then_probes_after_hold():
    spec = tuning(collapse_hold_seconds=1800, cooldown_seconds=60)
    decision, state = decide(observe(120.0, k=3, prefix=COLLAPSED_PREFIX), spec, None, 120.0)
    assert decision.action == "disable"
    assert decision.config == OFF
    assert decision.degraded.reason == "AcceptanceCollapsed"
    held, state = decide(observe(600.0, k=0, since=200.0), spec, state, 600.0)
    assert (held.action, held.guard) == ("keep", "collapseHold")
    assert held.degraded.reason == "AcceptanceCollapsed"
    probe, state = decide(observe(2000.0, k=0, since=200.0), spec, state, 2000.0)
    assert probe.action == "reenable"
    assert probe.config.num_speculative_tokens == 3


def _change_then_verify(realised_prefix):
    """Issue a change from K=1 at t=120, then feed windows of the new config with `realised_prefix`."""
    spec = tuning(confirmations=2, cooldown_seconds=600)
    decide(observe(60.0), spec, None, 60.0)
    decision, state = decide(observe(120.0), spec, decide(observe(60.0), spec, None, 60.0)[1], 120.0)
    assert decision.action in CHANGES
    new = decision.config
    outcomes = []
    for now in (300.0, 360.0):
        window = observe(now, k=new.num_speculative_tokens, schedule=new.schedule, since=200.0,
                         prefix=realised_prefix)
        outcome, state = decide(window, spec, state, now)
        outcomes.append(outcome)
    return decision, outcomes, state, spec


def test_rollback_when_realised_gain_is_worse():
    # After the change drafts stop being accepted beyond the first position: the new K measures
    # worse than K=1 did, though not low enough to look like a collapse.
    worse = [0.8] + [0.0] * 15
    decision, outcomes, state, spec = _change_then_verify(worse)
    assert outcomes[0].guard == "verifying"
    assert outcomes[1].action == "rollback"
    assert outcomes[1].config == DraftConfig(num_speculative_tokens=1)
    assert outcomes[1].realised_gain < -0.03
    assert state.rejected[0].config == decision.config


def test_no_rollback_when_realised_gain_holds():
    _, outcomes, state, _ = _change_then_verify(GOOD_PREFIX)
    assert all(o.action == "keep" for o in outcomes)
    assert state.pending is None
    assert state.realised_gain > 0.05


def test_rolled_back_config_is_not_retried_during_its_hold():
    decision, _ = decide(observe(120.0), tuning(), None, 120.0)
    best = decision.config
    state = PolicyState(rejected=[Rejection(config=best, until=10_000.0, batch_sizes=[2])])
    held, _ = decide(observe(120.0), tuning(), state, 120.0)
    assert (held.action, held.guard) == ("keep", "recentlyRejected")
    expired = PolicyState(rejected=[Rejection(config=best, until=100.0, batch_sizes=[2])])
    assert decide(observe(120.0), tuning(), expired, 120.0)[0].action in CHANGES


def test_rejection_covers_configs_with_the_same_k_where_it_was_measured():
    decision, _ = decide(observe(120.0), tuning(), None, 120.0)
    k_here = decision.config.num_speculative_tokens
    lookalike = DraftConfig(num_speculative_tokens=k_here, schedule=((1, 2, k_here), (3, 64, 1)))
    state = PolicyState(rejected=[Rejection(config=lookalike, until=10_000.0, batch_sizes=[2])])
    held, _ = decide(observe(120.0), tuning(), state, 120.0)
    assert held.guard == "recentlyRejected"


def test_no_acceptance_data_while_off_and_never_measured():
    decision, _ = decide(observe(120.0, k=0), tuning(), None, 120.0)
    assert (decision.action, decision.guard) == ("keep", "noAcceptanceData")


def test_impossible_bounds_are_refused_naming_the_field():
    with pytest.raises(ValidationError, match="kMin=5 and kMax=2"):
        tuning(k_min=5, k_max=2)


def test_method_limits_from_the_catalogue_bound_the_json_input():
    spec = tuning_from_json({"method": "mtp", "kMax": 50})
    assert spec.k_max <= 8 and spec.cost_shape == "sequential"
    # the JSON key `drafting` is the cost shape; `none` is still read as its former spelling of `lookup`
    assert tuning_from_json({"method": "ngram"}).cost_shape == "lookup"
    assert tuning_from_json({"method": "ngram", "drafting": "none"}).cost_shape == "lookup"
    assert tuning_from_json({"method": "eagle3", "drafting": "parallel"}).cost_shape == "parallel"
    with pytest.raises(ValidationError, match="kmax"):
        tuning_from_json({"method": "eagle3", "kmax": 3})


# The JSON interface of docs/tuner.md, verbatim: it must keep parsing (it is the stable interface).
DOC_OBSERVATION = {
    "time": 1764410400.0, "windowSeconds": 60, "scrapeTime": 1764410395.0, "rolloutInProgress": False,
    "applied": {"method": "eagle3", "numSpeculativeTokens": 3, "schedule": [[1, 42, 3], [43, 128, 2]],
                "since": 1764409000.0},
    "acceptance": {"drafts": 41210, "acceptedPerPosition": [32968, 24390, 17310],
                   "draftsPerPosition": [41210, 41210, 38050]},
    "steps": {"count": 41210, "meanSeconds": 0.0121, "generatedTokens": 115800,
              "byBatchSize": [{"batchSize": 7.6, "k": 3, "count": 4950, "meanSeconds": 0.0120}]},
    "batchSize": {"mean": 7.5, "distribution": [[6, 0.2], [8, 0.7], [12, 0.1]]},
    "latency": {"perTokenP99Seconds": 0.0061, "ttftP99Seconds": 0.41},
}


def test_json_interface_of_the_docs_decides():
    decision, state = decide_json(DOC_OBSERVATION, {"method": "eagle3"}, None, 1764410400.0)
    assert decision["action"] in {"keep", *CHANGES} and decision["guard"] != "invalidData"
    assert decision["signals"] == "specinfer"
    assert decision["model"]["acceptancePrefix"][0] == pytest.approx(0.8, abs=1e-3)
    assert state["version"] == 1 and state["method"] == "eagle3"
    assert json.loads(json.dumps(decision)) == decision


@pytest.mark.parametrize("corrupt", [
    lambda o: o.pop("acceptance"),
    lambda o: o["steps"].pop("count"),
    lambda o: o["applied"].__setitem__("schedule", "1-42"),
])
def test_unreadable_json_observation_is_a_keep_naming_the_field(corrupt):
    observation = json.loads(json.dumps(DOC_OBSERVATION))
    corrupt(observation)
    decision, _ = decide_json(observation, {"method": "eagle3"}, None, 1764410400.0)
    assert (decision["action"], decision["guard"]) == ("keep", "invalidData")
    assert "observation" in decision["reason"]


def test_invalid_json_tuning_is_reported_not_raised():
    decision, _ = decide_json(DOC_OBSERVATION, {"method": "eagle3", "kMin": 5, "kMax": 2}, None, 1764410400.0)
    assert decision["guard"] == "invalidTuning"
    assert "kMin" in decision["reason"]


def test_state_round_trips_through_json():
    decision, state = decide(observe(120.0), tuning(), None, 120.0)
    again = PolicyState.from_json(json.loads(json.dumps(state.to_json())))
    assert again == state
    decision2, state2 = decide(observe(180.0, k=decision.config.num_speculative_tokens, since=130.0),
                               tuning(), again, 250.0)
    assert PolicyState.from_json(json.loads(json.dumps(state2.to_json()))) == state2
    assert json.loads(json.dumps(decision2.to_json())) == decision2.to_json()


def test_a_state_from_another_version_or_unreadable_starts_afresh():
    assert PolicyState.from_json({"version": 99, "changes": [1.0]}) == PolicyState()
    assert PolicyState.from_json({"version": 1, "changes": "soon"}) == PolicyState()
    assert PolicyState.from_json(None) == PolicyState()


def test_noisy_measurements_extend_verification_before_any_rollback():
    spec = tuning(confirmations=2, cooldown_seconds=600)
    _, state = decide(observe(60.0), spec, None, 60.0)
    decision, state = decide(observe(120.0), spec, state, 120.0)
    state.noise_variance = 0.08**2  # step times jump ~8% per window
    new = decision.config
    guards_seen = []
    for now in (300.0, 360.0, 420.0):
        window = observe(now, k=new.num_speculative_tokens, schedule=new.schedule, since=200.0,
                         prefix=[0.8] + [0.0] * 15)
        outcome, state = decide(window, spec, state, now)
        guards_seen.append(outcome.guard)
    assert guards_seen == ["verifying"] * 3  # a quiet engine would have been judged after two


def test_idle_positions_left_over_from_a_larger_k_are_ignored():
    observation = observe(120.0, k=2)
    # the old pods' K=4 series, now idle, arrive with the JSON form; reading it drops them
    data = json.loads(json.dumps(DOC_OBSERVATION))
    data["applied"] = {"method": "eagle3", "numSpeculativeTokens": 2, "schedule": None, "since": 0.0}
    for cell in data["steps"]["byBatchSize"]:  # steps of the K=2 engine that runs now
        cell["k"] = min(cell["k"], 2)
    data["acceptance"] = {"drafts": observation.drafts,
                          "acceptedPerPosition": [*observation.accepted_per_position, 0.0, 0.0],
                          "draftsPerPosition": [*observation.drafts_per_position, 0.0, 0.0]}
    decision, _ = decide_json(data, {"method": "eagle3"}, None, 1764410400.0)
    assert decision["guard"] != "invalidData"
    data["acceptance"]["acceptedPerPosition"][3] = 50.0  # still counting: two configs mixed
    decision, _ = decide_json(data, {"method": "eagle3"}, None, 1764410400.0)
    assert decision["guard"] == "invalidData"
    mixed = replace(observation, accepted_per_position=(*observation.accepted_per_position, 0.0, 50.0))
    decision, _ = decide(mixed, tuning(), None, 120.0)
    assert decision.guard == "invalidData"


def test_noisy_measurements_raise_the_threshold():
    quiet_decision, state = decide(observe(120.0), tuning(min_gain=0.01), None, 120.0)
    assert quiet_decision.action in CHANGES
    _, state = decide(observe(60.0), tuning(min_gain=10.0), None, 60.0)  # learn, hold
    # Measured speed jumps from window to window by more than the gain on offer.
    state.noise_variance = (2 * quiet_decision.predicted_gain) ** 2
    held, _ = decide(observe(120.0), tuning(min_gain=0.01), state, 120.0)
    assert held.guard == "belowThreshold"
    assert "measurement noise" in held.reason


def test_disable_under_load_then_reenable_when_load_falls():
    spec = tuning(allow_schedule=False, cooldown_seconds=60, min_gain=0.02, max_batch_size=256, downtime_fraction=1.0,
                  cost_prior=CostPrior(floor=0.010, compute_per_token=2e-4, draft_pass=0.0008))

    def compute_bound(batch_size: int, k: int) -> float:
        return 0.010 + 2e-4 * batch_size * (k + 1) + 0.0008 * k

    def window(now, k, batch, since):
        return synthetic_observation(time=now, window_seconds=60.0, method="eagle3", num_speculative_tokens=k,
                                     schedule=None, applied_since=since, batch_sizes={batch: 1.0},
                                     prefix=GOOD_PREFIX, step_time=compute_bound)

    # the load has stayed there long enough for the rollout to pay back (restart.py)
    off, state = decide(window(1800.0, 2, 200, 0.0), spec, lasting(200, 1800.0), 1800.0)
    assert off.action == "disable" and off.degraded is None  # a load decision, not a fault
    state = state.model_copy(update={"loads": [*state.loads, *((t, 1.0) for t in range(2000, 2600, 60))]})
    on, state = decide(window(2600.0, 0, 1, 2000.0), spec, state, 2600.0)
    assert on.action == "reenable"
    assert on.config.num_speculative_tokens >= 1


def test_differing_share_counts_only_batch_sizes_where_k_changes():
    from specinfer.operator.tuner.policy.verification import differing_share

    before = DraftConfig(num_speculative_tokens=1).dense(256)
    after = DraftConfig(num_speculative_tokens=4, schedule=((1, 12, 4), (13, 256, 1))).dense(256)
    assert differing_share([(2, 1.0)], before, after, 256) == 1.0
    assert differing_share([(94, 1.0)], before, after, 256) == 0.0
    assert differing_share([(2, 0.25), (94, 0.75)], before, after, 256) == 0.25



def test_the_json_interface_takes_the_new_optional_keys_and_reads_old_states():
    tuning_json = {"method": "eagle3", "replicas": 4, "downtimeFraction": 1.0, "scheduleStepFactor": 1.19}
    decision, state = decide_json(DOC_OBSERVATION, tuning_json, None, 1764410400.0)
    assert decision["guard"] not in ("invalidTuning", "invalidData")
    assert tuning_from_json(tuning_json).replicas == 4
    with pytest.raises(ValidationError, match="scheduleStepFactor"):
        tuning_from_json({"method": "eagle3", "scheduleStepFactor": 0.5})  # a schedule never speeds steps up
    # A state stored by the previous release (calibration with its variance, no noise fields) still loads.
    old = json.loads(json.dumps(state))
    old.pop("noiseVariance", None)
    old.pop("noise_variance", None)
    old["calibration"] = {"config": {"numSpeculativeTokens": 3, "schedule": None}, "value": 1.02, "variance": 0.0004}
    loaded = PolicyState.from_json(old)
    assert loaded.calibration is not None and loaded.calibration.value == 1.02
    assert loaded.noise_variance is None


def test_a_window_drafting_little_is_used_once_the_acceptance_is_known():
    """A load above the first schedule's crossover runs its K = 0 range: a few drafts a window, from the
    moments the batch dips under it. Held for them, the policy kept that range (and the drafter's first pass
    on every step) for good; with the acceptance remembered from an earlier load, the window's steps count."""
    thin_schedule = [[1, 30, 2], [31, 64, 0]]
    policy = tuning(min_steps=10, min_drafts=200)
    window = synthetic_observation(time=600.0, window_seconds=60.0, method="eagle3", num_speculative_tokens=2,
                                   schedule=thin_schedule, applied_since=0.0, batch_sizes={30: 0.0005, 32: 0.9995},
                                   prefix=GOOD_PREFIX, step_time=step_time)
    assert 0 < window.drafts < 200  # a few drafts: the batch dipped to 30 for a moment

    fresh, _ = decide(window, policy, None, 600.0)
    assert fresh.guard == "insufficientSamples" and "drafts" in fresh.reason  # nothing known: nothing to go on

    # the acceptance measured at an earlier, low load (K=2 at batch 2)
    _, known = decide(observe(300.0, k=2, since=0.0, batch=2), policy, None, 300.0)
    known.pending = None  # (a change it proposed at batch 2 is not what this test is about)
    assert known.acceptance is not None and known.acceptance.weights[0] >= 200
    decision, after = decide(window, policy, known, 600.0)
    assert decision.guard != "insufficientSamples" and decision.guard != "verifying", decision.reason
    assert any(key.startswith("32:0s") for key in after.cost["cells"])  # the K = 0 range's steps were learnt
    # window after window of a few drafts: the remembered acceptance does not wear away under them
    state = after
    for i in range(12):
        thin = replace(window, time=660.0 + 60 * i)
        decision, state = decide(thin, policy, state, thin.time)
        assert decision.guard != "insufficientSamples", (i, decision.reason)
    assert state.acceptance.weights[0] == known.acceptance.weights[0]
