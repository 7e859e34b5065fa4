"""Issue 43, item 3: a rollout's payback at the peak, in figures.

The issue's fleet: two replicas rolled with Replace, a 2- or 4-minute reload, 400-500 requests in
flight (200-250 a replica, maxBatchSize 256), where speculation off gains +45-52% over the K=3 that
runs. The policy asked for +86.6% and +174.7% there (a horizon of how long loads had lasted between
two 2x moves: a ramp's minute). Priced by restart.py, the rollout costs about one reload of the
fleet's goodput (the surviving replica is full, so half the fleet goes, twice) and each replica
gains once it runs the new config: it pays back when the peak lasts `reload / gain + 1.5 x reload`
from the decision -- 7 minutes with a 2-minute reload, 14 with a 4-minute one. A timeline of the
two replicas, played with the model's own goodput, agrees; and the policy says that minimum, takes
the best change in place until the peak has lasted it, then rolls out.
"""

from __future__ import annotations

import pytest

from specinfer.bench.observations import synthetic_observation
from specinfer.operator.tuner.policy import OFF, CostPrior, DraftConfig, PolicyState, TuningInput, decide
from specinfer.operator.tuner.policy.cost import CostModel
from specinfer.operator.tuner.policy.goodput import Model, goodput
from specinfer.operator.tuner.policy.restart import payback

pytestmark = pytest.mark.unit

PREFIX = [0.75, 0.5, 0.32, 0.2]
# An 8B target on one GPU whose drafter's per-token work is dear: off gains +48-50% over K=3 at 200-250.
PRIOR = CostPrior(floor=0.007, compute_per_token=5.5e-5, kv_per_sequence=3e-5, draft_pass=0.001, draft_token=2.5e-5)
COST = CostModel.from_state(None, PRIOR, "sequential")
MODEL = Model(PREFIX, COST, COST.multipliers())
TOP = 256
K3, NO_SPEC = [0] + [3] * TOP, [0] * (TOP + 1)


def fleet(reload: float, **fields) -> TuningInput:
    return TuningInput(method="eagle3", k_max=4, max_batch_size=TOP, replicas=2, downtime_fraction=1.0,
                       restart_seconds=reload, cost_prior=PRIOR, **fields)


def replica_goodput(dense: list[int], batch: float) -> float:
    return goodput(MODEL, dense, [(min(batch, TOP), 1.0)])


def net_tokens(reload: float, batch: float, peak_seconds: float) -> float:
    """Tokens the rollout K=3 -> off gains over the peak, replica by replica: replica 0 stops for its
    reload while replica 1 carries every request (at most TOP at a time), then the other way round,
    then both run the new config."""
    survivor = min(2 * batch, TOP)
    with_rollout = (reload * replica_goodput(K3, survivor) + reload * replica_goodput(NO_SPEC, survivor)
                    + (peak_seconds - 2 * reload) * 2 * replica_goodput(NO_SPEC, batch))
    return with_rollout - peak_seconds * 2 * replica_goodput(K3, batch)


@pytest.mark.parametrize(("reload", "concurrent", "gain", "minutes"), [
    (120, 400, 0.482, 7.11), (120, 500, 0.502, 6.98), (240, 400, 0.482, 14.22), (240, 500, 0.502, 13.96)])
def test_at_the_peak_the_rollout_pays_back_when_the_peak_lasts_the_computed_minimum(reload, concurrent, gain, minutes):
    batch = concurrent / 2
    assert replica_goodput(NO_SPEC, batch) / replica_goodput(K3, batch) - 1 == pytest.approx(gain, abs=0.001)
    pay = payback(MODEL, K3, NO_SPEC, [(batch, 1.0)], fleet(reload), [], 0.0, 120.0)
    assert pay.cost_seconds == pytest.approx(reload, rel=0.02)  # half the fleet, for two reloads
    minimum = pay.minimum_seconds(gain)
    assert minimum / 60 == pytest.approx(minutes, abs=0.01)
    assert minimum == pytest.approx(reload / gain + 1.5 * reload, rel=0.02)
    # the replicas' own timeline: a loss for a peak a little shorter, a gain for one a little longer
    assert net_tokens(reload, batch, 0.95 * minimum) < 0 < net_tokens(reload, batch, 1.05 * minimum)
    # what the policy asked before: a gain of +86.6% and +174.7% -- the rollout needed about twice +45-52%
    assert pay.cost_seconds / (minimum - pay.onset_seconds) == pytest.approx(gain, rel=1e-6)


def peak_window(now: float, config: DraftConfig, since: float) -> object:
    return synthetic_observation(time=now, window_seconds=120.0, method="eagle3",
                                 num_speculative_tokens=config.num_speculative_tokens, schedule=config.schedule,
                                 applied_since=since, batch_sizes={225: 1.0}, prefix=PREFIX,
                                 step_time=lambda b, k: MODEL.step_time(b, k, speculative=True))


def history(batch: float, start: float, end: float) -> list[tuple[float, float]]:
    return [(t, batch) for t in range(int(start), int(end), 30)]


def minimum_in(reason: str) -> float:
    """The minutes a decision says the load must stay for the rollout to pay back."""
    return float(reason.split(" or more for ")[1].split(" min")[0])


def test_without_a_change_in_place_the_rollout_waits_for_the_peak_to_last_the_minimum_it_names():
    tuning = fleet(240.0, confirmations=1)  # every change rolls out
    k3 = DraftConfig(num_speculative_tokens=3)
    # Windows at the peak for two minutes (the first one's half counts: 3 min): not yet.
    early, _ = decide(peak_window(1200.0, k3, 0.0), tuning, PolicyState(loads=history(225, 1080, 1200)), 1200.0)
    assert (early.action, early.guard) == ("keep", "belowThreshold"), early.reason
    assert "only if the load stays at batch size" in early.reason and "it has for 3.0 min" in early.reason
    minimum = minimum_in(early.reason)
    assert minimum == pytest.approx(14.1, abs=0.3)  # 240 / 0.49 + 1.5 x 240 seconds
    # A minute short of it, still not; once the peak has lasted it, the rollout goes.
    for lasted, action in ((minimum - 1, "keep"), (minimum + 0.5, "disable")):
        now = 1200.0 + 60 * lasted
        # the oldest window's half counts: windows since `now - lasted + 1 min`
        state = PolicyState(loads=history(225, now - 60 * lasted + 60, now))
        decision, _ = decide(peak_window(now, k3, 0.0), tuning, state, now)
        assert decision.action == action, (lasted, decision.reason)
    assert decision.path == "rollout" and "pays back" in decision.reason


def test_in_place_the_change_is_taken_at_once_and_the_rest_of_the_gain_waits_for_its_own_minimum():
    # an hour of peak may repay a restart here (paybackSeconds: the longest a load is counted on)
    tuning = fleet(240.0, in_place_max_k=4, confirmations=1, probe_in_place=False, payback_seconds=3600)
    k3 = DraftConfig(num_speculative_tokens=3)
    early, state = decide(peak_window(1200.0, k3, 0.0), tuning, PolicyState(loads=history(225, 1080, 1200)), 1200.0)
    assert early.path == "inPlace" and early.action == "setSchedule", early.reason
    assert "best is speculation off (+4" in early.reason and "the best change in place instead" in early.reason
    assert minimum_in(early.reason) == pytest.approx(14.1, abs=0.3)
    assert early.recommendation.config == OFF and early.predicted_gain > 0.3  # most of the +49%, no restart
    # Off's remaining gain over the schedule in place is a tenth: it repays the reload only over a longer peak.
    live, now = early.config, 1500.0
    state = state.model_copy(update={"loads": history(225, 1080, now)})
    held, _ = decide(peak_window(now, live, 1200.0), tuning, state, now)
    assert held.action == "keep" and "best is speculation off (+1" in held.reason, held.reason
    minimum = minimum_in(held.reason)
    assert 30 < minimum < 60  # more than the default paybackSeconds would ever count on
    now = 1080.0 + 60 * minimum
    later, _ = decide(peak_window(now, live, 1200.0), tuning, state.model_copy(update={
        "loads": history(225, 1080, now)}), now)
    assert (later.action, later.path, later.config) == ("disable", "rollout", OFF), later.reason


def test_the_way_back_after_the_peak_waits_for_the_new_config_to_arrive():
    """At low load the same rollout costs almost nothing (the other replica takes the stopped one's
    requests), but its gain starts only once a replica runs it: the load must stay for the onset."""
    quiet = [(2.0, 1.0)]
    pay = payback(MODEL, NO_SPEC, K3, quiet, fleet(120.0), history(2, 0, 60), 60.0, 120.0)
    assert pay.cost_seconds < 5 and pay.region is not None and pay.region[0] == 1
    assert pay.needed() == float("inf")  # seen for 1.5 min, the second replica runs K=3 only after 4
    settled = payback(MODEL, NO_SPEC, K3, quiet, fleet(120.0), history(2, 0, 600), 600.0, 120.0)
    assert settled.needed() < 0.01
