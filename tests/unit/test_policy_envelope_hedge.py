"""The envelope of a drafter that drafts its startup K is chosen for the load that may come (envelope.py).

A draft model drafts the config's largest K on every step, so a quiet phase's best envelope (K=3 here: 18%
more than K=1 at batch 8) is drafted through the peak, where it serves 17% less than K=1, unless a rollout at
the peak undoes it -- and under Replace that rollout costs a replica's capacity per reload. The bench's
draft-model-peak rolled K=2 out in the quiet phase and served 0.878 of the per-phase oracle; mtp-slow-peak
0.960. The choice is minimax regret over two futures of paybackSeconds: the load stays, or it rises to
maxBatchSize.
"""

from __future__ import annotations

import pytest

from specinfer.bench.observations import synthetic_observation
from specinfer.operator.tuner.policy import CostPrior, PolicyState, TuningInput, decide
from specinfer.operator.tuner.policy.config import AdaptiveDense, DraftConfig
from specinfer.operator.tuner.policy.cost import CostModel
from specinfer.operator.tuner.policy.envelope import EnvelopeRisk, choose_envelope
from specinfer.operator.tuner.policy.goodput import Model, best_dense
from specinfer.operator.tuner.policy.lever import adaptive_instead

pytestmark = pytest.mark.unit

PREFIX = [0.8, 0.6, 0.45, 0.3]
# a 70B-class target with a draft model whose passes are dear
PRIOR = CostPrior(floor=0.02, compute_per_token=1.2e-4, kv_per_sequence=6e-5, draft_pass=0.004, draft_token=2e-5,
                  drafted_k="startup", zero_step="startup_k", startup_k=4)
WORLD = CostModel.from_state(None, PRIOR, "sequential")
TOP = 256
QUIET = [(7, 0.3), (8, 0.4), (9, 0.3)]
REPLACE = {"downtime_fraction": 1.0}
SURGE = {"downtime_fraction": 0.0}


def tuning(**fields) -> TuningInput:
    base = {"method": "draftModel", "k_max": 4, "max_batch_size": TOP, "in_place_max_k": 4, "replicas": 2,
            "restart_seconds": 240, "confirmations": 1, "cost_prior": PRIOR, "probe_in_place": False}
    return TuningInput(**{**base, **fields})


def model(cost: CostModel = WORLD) -> Model:
    return Model(PREFIX, cost, cost.multipliers(), always_scheduled=True)


def served(k: int, batch_size: int) -> float:
    """Tokens/s of an engine started at K, at one batch size (it drafts K on every step)."""
    return batch_size * (1 + sum(PREFIX[:k])) / WORLD.step_time(batch_size, k, speculative=True, config_k=k)


def envelope_of(dense) -> int:
    return max(dense[1:])


def options(tuned: TuningInput) -> list[list[int]]:
    """One schedule per largest K, as `best_dense` builds them, collected through its hook."""
    seen: list[list[int]] = []

    def collect(choices: list[list[int]]) -> list[int]:
        seen.extend(choices)
        return choices[0]

    best_dense(model(), tuned, [0] + [4] * TOP, QUIET, pick_envelope=collect)
    return seen


def test_the_world_is_the_failing_pattern():
    """Quiet: K=3 serves most, K=1 18% less; at maxBatchSize: K=1 serves most, K=3 17% less."""
    assert max(range(1, 5), key=lambda k: served(k, 8)) == 3
    assert served(3, 8) > 1.15 * served(1, 8)
    assert max(range(1, 5), key=lambda k: served(k, TOP)) == 1
    assert served(1, TOP) > 1.15 * served(3, TOP)


def test_under_replace_the_envelope_drafts_least_and_says_what_it_gave_up():
    tuned = tuning(**REPLACE)
    choice = choose_envelope(model(), tuned, options(tuned), QUIET)
    assert envelope_of(choice.best_today) == 3
    assert choice.hedged and envelope_of(choice.chosen) == 1
    words = choice.describe()
    assert "drafts at most K=1: K=3 serves" in words and "at batch size 256" in words, words
    assert "a rollout costs 240s of the fleet's goodput" in words, words  # 2 replicas x 240 s x half the fleet


def test_under_surge_undoing_costs_its_onset_and_the_fit_alone_judges_it():
    """Surge loses nothing while a replica reloads: a wrong envelope costs its shortfall until the rollout lands
    (360 s for two replicas of 240 s), by the fit alone. The envelope drafts less than today's best, not as
    little as under Replace."""
    tuned = tuning(**SURGE)
    choice = choose_envelope(model(), tuned, options(tuned), QUIET)
    assert choice.risk is not None and len(choice.risk.peak_models) == 1
    assert envelope_of(choice.best_today) == 3 and envelope_of(choice.chosen) == 2, choice.describe()
    assert "a rollout takes 360s on average to land" in choice.describe() and "at worst" not in choice.describe()


def test_where_the_peak_costs_little_the_best_today_is_kept():
    """A drafter 50x cheaper: drafting K=4 at the peak loses 1.2% by the fit, 3.4% by the worst doubted one,
    and K=4 serves 10% more today. Under Replace the envelope still drafts K=3 (it serves within 9% of K=4 and
    loses 2.3% at worst at the peak, five times today's goodput), not K=1."""
    cheap = CostModel.from_state(None, PRIOR.model_copy(update={"draft_pass": 5e-5, "draft_token": 1e-6}),
                                 "sequential")
    tuned = tuning(**REPLACE, cost_prior=cheap.prior)
    seen: list[list[int]] = []
    best_dense(model(cheap), tuned, [0] + [4] * TOP, QUIET, pick_envelope=lambda c: seen.extend(c) or c[0])
    choice = choose_envelope(model(cheap), tuned, seen, QUIET)
    assert envelope_of(choice.best_today) == 4 and envelope_of(choice.chosen) == 3, choice.describe()


def test_a_load_near_max_batch_size_leaves_one_future():
    tuned = tuning(**REPLACE)
    near = [(200, 1.0)]
    choice = choose_envelope(model(), tuned, options(tuned), near)
    assert choice.risk is None and choice.chosen == choice.best_today


def test_the_doubted_fits_judge_the_peak_only_where_it_is_unmeasured():
    replace_choice = choose_envelope(model(), tuning(**REPLACE), options(tuning(**REPLACE)), QUIET)
    assert replace_choice.risk is not None and len(replace_choice.risk.peak_models) == 5
    measured = CostModel.from_state(None, PRIOR, "sequential")
    measured.learn(window(600.0, 4, {TOP: 1.0}))
    tuned = tuning(**REPLACE)
    seen: list[list[int]] = []
    best_dense(model(measured), tuned, [0] + [4] * TOP, QUIET, pick_envelope=lambda c: seen.extend(c) or c[0])
    choice = choose_envelope(model(measured), tuned, seen, QUIET)
    assert choice.risk is not None and len(choice.risk.peak_models) == 1


def test_the_risk_removed_is_worth_a_restart_now():
    tuned = tuning(**REPLACE)
    choice = choose_envelope(model(), tuned, options(tuned), QUIET)
    assert choice.risk is not None
    current = [0] + [4] * TOP
    assert choice.risk.reduction(current, choice.chosen) > 0.5  # a peak's loss outweighs a quiet half hour's
    assert choice.risk.reduction(current, current) == 0.0


def test_adaptive_verification_drafts_within_the_hedged_envelope():
    tuned = tuning(**REPLACE, allow_adaptive_verification=True)
    current = DraftConfig.from_dense([0] + [1] * TOP)
    free = adaptive_instead(model(), tuned, current, current.dense(TOP), QUIET)
    capped = adaptive_instead(model(), tuned, current, current.dense(TOP), QUIET, max_k=1)
    assert isinstance(free, AdaptiveDense) and envelope_of(free) > 1  # the world where the cap matters
    assert not isinstance(capped, AdaptiveDense) or envelope_of(capped) == 1


def test_one_k_across_todays_batch_sizes_stays_within_each_envelope():
    """vLLM's series: one K across today's batch sizes. Applied after the envelope was chosen it put K=2 there
    under an envelope of K=1 -- another envelope, priced as the larger one."""
    tuned = tuning(**REPLACE)
    picked: list[int] = []

    def pick(choices: list[list[int]]) -> list[int]:
        choice = choose_envelope(model(), tuned, choices, QUIET)
        picked.append(envelope_of(choice.chosen))
        return choice.chosen

    dense = best_dense(model(), tuned, [0] + [4] * TOP, QUIET, one_k_where_observed=True, pick_envelope=pick)
    assert picked == [1] and envelope_of(dense) == 1


def window(now: float, started_at: int, batch_sizes, schedule=None):
    return synthetic_observation(time=now, window_seconds=120.0, method="draftModel", num_speculative_tokens=started_at,
                                 schedule=schedule, applied_since=0.0, batch_sizes=dict(batch_sizes), prefix=PREFIX,
                                 step_time=lambda b, k: WORLD.step_time(b, k, speculative=True, config_k=started_at))


def run(tuned: TuningInput, started_at: int, ticks: int):
    """Quiet windows from an engine started at K: changes in place take effect at once; stops at a rollout."""
    decisions, state, schedule = [], None, None
    for tick in range(ticks):
        now = 600.0 + 30.0 * tick
        decision, state = decide(window(now, started_at, QUIET, schedule), tuned, state, now)
        decisions.append(decision)
        if decision.is_change and decision.path == "rollout":
            break
        if decision.is_change:
            schedule = decision.config.schedule
    return decisions, state


def after_rollout(tuned: TuningInput, decisions, state, slower: float = 1.0):
    """The new engine's windows after `decisions`' last (a rollout to K=1): K=1 drafted on every step, each step
    `slower` times the world's; stops at a rollback."""
    change, after = decisions[-1], []
    since = 600.0 + 30.0 * len(decisions) + 180.0
    for tick in range(1, 12):
        now = since + 120.0 + 30.0 * tick
        obs = synthetic_observation(time=now, window_seconds=120.0, method="draftModel", num_speculative_tokens=1,
                                    schedule=change.config.schedule, applied_since=since, batch_sizes=dict(QUIET),
                                    prefix=PREFIX,
                                    step_time=lambda b, k: slower * WORLD.step_time(b, k, speculative=True, config_k=1))
        decision, state = decide(obs, tuned, state, now)
        after.append(decision)
        if decision.action == "rollback":
            break
    return after, state


def test_closed_loop_replace_rolls_out_the_hedged_envelope_and_keeps_it():
    """From K=4 at a quiet load: the rollout goes to K=1, though K=3 serves more today, and says why. Its
    windows then serve what it predicted -- less than K=4 did -- and verification keeps it."""
    tuned = tuning(**REPLACE)
    decisions, state = run(tuned, 4, 12)
    change = decisions[-1]
    assert change.is_change and change.path == "rollout", [d.reason for d in decisions]
    assert envelope_of(change.config.dense(TOP)) == 1, change.reason
    assert "drafts at most K=1" in change.reason and "that risk is worth" in change.reason, change.reason
    assert change.predicted_gain < 0  # it serves less today: the hedge is not taken for today's gain
    after, state = after_rollout(tuned, decisions, state)
    assert not any(d.action == "rollback" for d in after), [d.reason for d in after]
    assert not any(d.is_change and d.path == "rollout" for d in after), [d.reason for d in after]
    # verified: it realised a loss today, near the one predicted, and was kept
    assert state.realised_gain is not None and change.predicted_gain - 0.03 < state.realised_gain < -0.05
    assert "drafts at most K=1" in after[-1].reason


def test_a_hedged_change_losing_more_than_predicted_is_rolled_back():
    """The tolerance is the predicted loss, not any loss: a K=1 engine serving 30% less than the model said
    is rolled back."""
    tuned = tuning(**REPLACE)
    decisions, state = run(tuned, 4, 12)
    change = decisions[-1]
    assert change.is_change and envelope_of(change.config.dense(TOP)) == 1
    after, _ = after_rollout(tuned, decisions, state, slower=1.4)
    assert after[-1].action == "rollback", [d.reason for d in after]


def test_one_k_for_every_batch_size_is_hedged_too():
    """Without schedules each single K is an envelope, and the same choice applies."""
    tuned = tuning(**REPLACE, allow_schedule=False)
    seen: list[list[int]] = []

    def pick(choices: list[list[int]]) -> list[int]:
        seen.extend(choices)
        return choose_envelope(model(), tuned, choices, QUIET).chosen

    dense = best_dense(model(), tuned, [0] + [4] * TOP, QUIET, pick_envelope=pick)
    assert [envelope_of(option) for option in seen] == [1, 2, 3, 4]
    assert dense == [0] + [1] * TOP


def test_adaptive_verification_on_above_the_hedged_envelope_is_not_kept():
    """An engine running adaptive verification at K=3: the hedged best (K=1) is weighed, not staying."""
    tuned = tuning(**REPLACE, allow_adaptive_verification=True)
    current = DraftConfig(num_speculative_tokens=3, adaptive_verification=True)
    best = [0] + [1] * TOP
    assert adaptive_instead(model(), tuned, current, best, QUIET, max_k=1) == best
    stays = adaptive_instead(model(), tuned, current, best, QUIET)
    assert isinstance(stays, AdaptiveDense) and envelope_of(stays) == 3  # without the cap it stays


def test_the_hedge_needs_two_futures():
    """Today's largest batch size within sqrt(2) of maxBatchSize: one future, the best today."""
    tuned = tuning(**REPLACE)
    near, below = [(182, 1.0)], [(180, 1.0)]  # 182 * 1.414 > 256 > 180 * 1.414
    assert choose_envelope(model(), tuned, options(tuned), near).risk is None
    assert choose_envelope(model(), tuned, options(tuned), below).risk is not None


def test_the_peak_regret_is_capped_by_undoing_it():
    """Over a long enough horizon a wrong envelope is undone at the peak rather than kept through it: the regret
    is the rollout there plus the shortfall until it lands."""
    tuned = tuning(**REPLACE, payback_seconds=1e6)
    choice = choose_envelope(model(), tuned, options(tuned), QUIET)
    risk = choice.risk
    assert risk is not None
    shortfall = risk.shortfall_at_peak(choice.best_today)
    undo = risk.undo_seconds(choice.best_today) + shortfall * 360.0  # onset: 240 s x (2 + 1) / 2
    assert risk.regret(choice.best_today) == pytest.approx(risk.best_at_peak * undo)


def test_closed_loop_surge_rolls_out_the_milder_hedge():
    decisions, _ = run(tuning(**SURGE), 4, 12)
    change = decisions[-1]
    assert change.is_change and change.path == "rollout", [d.reason for d in decisions]
    assert envelope_of(change.config.dense(TOP)) == 2 and "drafts at most K=2" in change.reason, change.reason


def test_where_the_risk_does_not_repay_the_rollout_todays_best_envelope_is_weighed(monkeypatch):
    """The hedged envelope's bar refuses it: the best envelope for today goes by the usual bar, rather than
    holding K=4, which is worse in both futures (K=3's +2% waits for its payback: 24 minutes of this load)."""
    monkeypatch.setattr(EnvelopeRisk, "reduction", lambda self, current, candidate: 0.0)
    decisions, _ = run(tuning(**REPLACE), 4, 80)
    change = decisions[-1]
    assert change.is_change and change.path == "rollout", [d.reason for d in decisions]
    assert envelope_of(change.config.dense(TOP)) == 3, change.reason


def test_the_pending_hedge_carries_the_loss_it_was_taken_with():
    decisions, state = run(tuning(**REPLACE), 4, 12)
    change = decisions[-1]
    assert state.pending is not None and change.predicted_gain < 0
    assert state.pending.tolerated_loss == pytest.approx(-change.predicted_gain, abs=1e-4)
    legacy = state.to_json()
    legacy["pending"].pop("tolerated_loss", None)
    assert PolicyState.from_json(legacy).pending.tolerated_loss == 0.0  # a state from before: no loss tolerated


def test_a_rollout_between_envelopes_must_remove_enough_of_the_worse_futures_regret(monkeypatch):
    """From K=1, K=2 serves more today and a rollout would go on that gain alone; where two futures are weighed it
    must also remove enough of the worse future's regret, so a close call between envelopes does not roll out each
    way as the fit moves."""
    cheap = PRIOR.model_copy(update={"draft_pass": 5e-5, "draft_token": 1e-6})
    world = CostModel.from_state(None, cheap, "sequential")

    def quiet(now: float):
        return synthetic_observation(time=now, window_seconds=120.0, method="draftModel", num_speculative_tokens=1,
                                     schedule=None, applied_since=0.0, batch_sizes=dict(QUIET), prefix=PREFIX,
                                     step_time=lambda b, k: world.step_time(b, k, speculative=True, config_k=1))

    def first_change(tuned: TuningInput):
        state, reasons = None, []
        for tick in range(60):
            now = 600.0 + 30.0 * tick
            decision, state = decide(quiet(now), tuned, state, now)
            reasons.append(decision.reason)
            if decision.is_change and decision.path == "rollout":
                return decision, reasons
        return None, reasons

    tuned = tuning(**REPLACE, cost_prior=cheap, in_place_max_k=1)
    change, reasons = first_change(tuned)
    assert change is not None and envelope_of(change.config.dense(TOP)) == 2, reasons[-1]
    monkeypatch.setattr(EnvelopeRisk, "reduction", lambda self, current, candidate: 0.001)
    change, reasons = first_change(tuned)
    assert change is None, change.reason
    assert "it removes +0.1% of the worse future's regret" in reasons[-1], reasons[-1]


def test_a_change_at_the_same_largest_k_is_not_held_by_the_risk_bar(monkeypatch):
    """Every change rolls out (no in-place envelope): a schedule that verifies 1 where K=2 serves more today keeps
    the largest K, so the envelope does not change and today's gain decides, as before the hedge -- even where the
    worse future's regret (the peak's, which both share) is all there is."""
    monkeypatch.setattr(EnvelopeRisk, "reduction", lambda self, current, candidate: 0.0)
    tuned = tuning(**SURGE, in_place_max_k=None)
    schedule = ((1, 8, 2), (9, TOP, 1))
    state, reasons, change = None, [], None
    for tick in range(40):
        now = 600.0 + 30.0 * tick
        obs = synthetic_observation(time=now, window_seconds=120.0, method="draftModel", num_speculative_tokens=2,
                                    schedule=schedule, applied_since=0.0, batch_sizes={8: 0.5, 9: 0.5}, prefix=PREFIX,
                                    step_time=lambda b, k: WORLD.step_time(b, k, speculative=True, config_k=2))
        decision, state = decide(obs, tuned, state, now)
        reasons.append(decision.reason)
        if decision.is_change:
            change = decision
            break
    assert not any("a rollout between largest K needs" in reason for reason in reasons), reasons[-1]
    assert change is not None and change.path == "rollout", reasons[-1]
    assert change.config.dense(TOP)[9] == 2 and max(change.config.dense(TOP)[1:]) == 2, change.reason
