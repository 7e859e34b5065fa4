"""Speculation off for a load that keeps coming back (operator/tuner/policy/recurring.py).

The world: an 8B target on two replicas (Replace, 2-minute reload) whose drafter's passes cost 4x the
8B preset's, and the prior knows it. Quiet, at batch 3, K=2 serves 21% more than speculation off; at a
peak, at batch 200, speculation off serves 13% more than K=1, the best the engine reaches in place. A
peak of 8 minutes is too short to repay a rollout of its own at the peak's load.
"""

from __future__ import annotations

import importlib
from dataclasses import replace

import pytest

from specinfer.bench.observations import synthetic_observation
from specinfer.operator.tuner.policy import CostPrior, DraftConfig, TuningInput, decide, guards
from specinfer.operator.tuner.policy.config import OFF
from specinfer.operator.tuner.policy.cost import CostModel, terms
from specinfer.operator.tuner.policy.goodput import Model, goodput
from specinfer.operator.tuner.policy.recurring import BROKEN, RECURRENCE_MEMORY, Recurrence, back_on_now, recurrence
from specinfer.operator.tuner.policy.state import PolicyState

_decision_seconds = importlib.import_module("specinfer.operator.tuner.policy.decide")._decision_seconds

pytestmark = pytest.mark.unit

PREFIX = [0.8, 0.6, 0.45, 0.33, 0.24, 0.17]
PRIOR = CostPrior(floor=0.007, compute_per_token=5.5e-5, kv_per_sequence=3e-5, draft_pass=0.0034, draft_token=2.4e-5)
WORLD = CostModel.from_state(None, PRIOR, "sequential")
QUIET, PEAK = 3, 200
K2 = DraftConfig(num_speculative_tokens=2)


def tuning(**fields) -> TuningInput:
    base = {"method": "eagle3", "k_max": 6, "max_batch_size": 256, "in_place_max_k": 6, "replicas": 2,
            "downtime_fraction": 1.0, "restart_seconds": 120, "confirmations": 1, "cost_prior": PRIOR,
            "probe_in_place": False}
    return TuningInput(**{**base, **fields})


def world_step(batch_size: int, k: int) -> float:
    return WORLD.step_time(batch_size, k, speculative=True)


def plain_or_drafting(config: DraftConfig):
    return (lambda b, k: WORLD.step_time(b, 0, speculative=False)) if config.off else world_step


def pattern(peaks: int, *, quiet: float = 600.0, peak: float = 480.0, gap: float = 480.0, low: int = QUIET):
    """The batch size at time t: `low`, then `peaks` times a peak and a gap, then `low` for good."""
    def batch_at(t: float) -> int:
        if t < quiet:
            return low
        cycle, offset = divmod(t - quiet, peak + gap)
        return PEAK if cycle < peaks and offset < peak else low
    return batch_at


def window(now: float, batch_at, config: DraftConfig, since: float, **kwargs):
    shares: dict[int, float] = {}
    for second in range(int(now) - 120, int(now), 10):
        size = batch_at(second)
        shares[size] = shares.get(size, 0.0) + 1 / 12
    return synthetic_observation(time=now, window_seconds=120.0, method="eagle3",
                                 num_speculative_tokens=config.num_speculative_tokens, schedule=config.schedule,
                                 applied_since=since, batch_sizes=shares, prefix=PREFIX,
                                 step_time=plain_or_drafting(config), **kwargs)


def closed_loop(batch_at, minutes: float, config: DraftConfig = K2, **fields):
    """Every 30 s a window of the load at the config in force; a change is in force at once (its settling
    window follows, as the operator's). Each decision with the state it left."""
    state, since, decisions = None, 0.0, []
    for tick in range(4, int(minutes * 2)):
        now = 30.0 * tick
        decision, state = decide(window(now, batch_at, config, since), tuning(**fields), state, now)
        decisions.append((now, decision, state))
        if decision.is_change:
            config, since = decision.config, now
    return decisions


def test_the_world_is_as_described():
    def speed(b: int, k: int, speculative: bool = True) -> float:
        return b * (1 + sum(PREFIX[:k])) / WORLD.step_time(b, k, speculative=speculative)
    assert speed(QUIET, 2) / speed(QUIET, 0, False) > 1.2
    assert speed(PEAK, 0, False) / max(speed(PEAK, k) for k in range(7)) > 1.1


def measured_at_both_ends():
    """The world's fit with K=2 measured quiet and K=1 at the peak; the schedule that runs them, and speculation
    off."""
    cost = CostModel.from_state(None, PRIOR, "sequential")
    for b, k in ((QUIET, 2), (PEAK, 1)):
        cost.add(f"{b}:{k}", terms(PRIOR, b, k, "sequential", True), world_step(b, k), 400)
    model = Model(PREFIX, cost, cost.multipliers(), always_scheduled=True)
    return model, [0] + [2] * 30 + [1] * 226, OFF.dense(256)


def test_recurrence_counts_stays_of_a_window_or_more_and_weighs_each_window_by_the_time_it_stands_for():
    model, current, off = measured_at_both_ends()
    # windows of 60 s every 30 s: a stay of a window at the peak, a window of quiet, a stay holding a quiet blip of
    # half a window, then quiet holding a peak blip of half a window, and a gap in the windows
    loads = [(0, QUIET), (30, PEAK), (60, PEAK), (90, QUIET), (120, QUIET), (150, PEAK), (180, PEAK), (210, QUIET),
             (240, PEAK), (270, QUIET), (300, QUIET), (330, PEAK), (360, QUIET), (600, QUIET)]
    seen = recurrence(model, current, off, loads, 600.0, 256, 60.0)
    assert seen is not None and seen.stays == 2 and seen.recurs  # neither blip is a stay, or ends one
    # the first window stands for the spacing after it, the one after the gap for one window only
    assert dict(seen.distribution) == pytest.approx({QUIET: 270 / 450, PEAK: 180 / 450})
    assert seen.span_seconds == pytest.approx(450)
    # by the clock: the first stay 0-60, the quiet 60-120, the second stay 120-240; the quiet since holds the blip.
    # The first began within a window of the windows' start (a shorter quiet before it would not have ended it)
    assert seen.gaps == pytest.approx((60,)) and seen.quiet_seconds == pytest.approx(360)
    assert seen.stay_seconds == pytest.approx((120,)) and seen.stay_distribution == [(PEAK, 1.0)]
    once = recurrence(model, current, off, loads[:5], 120.0, 256, 60.0)
    assert once is not None and once.stays == 1 and not once.recurs
    # times are stored rounded to 0.1 s: the newest window, stamped a little after `now`, still counts
    assert recurrence(model, current, off, [(0, QUIET), (30.1, PEAK)], 30.06, 256, 60.0).distribution[-1][0] == PEAK
    assert recurrence(model, current, off, loads[:1], 30.0, 256, 60.0) is None
    # turned over, on wins in the quiet: from 60 and from 240 (clock) it lasted a window (the blip at 330 in the latter)
    assert recurrence(model, off, current, loads, 600.0, 256, 60.0).stays == 2


def test_speculation_off_is_taken_between_peaks_that_keep_coming_back_and_held_off_there():
    # no reversal hold: what keeps it off between peaks is the recurring load
    decisions = closed_loop(pattern(3), 58, reject_hold_seconds=0)
    changes = [(now, d) for now, d, _ in decisions if d.is_change and not d.probe]
    offs = [(now, d, st) for now, d, st in decisions if d.action == "disable"]
    assert offs, [d.reason for _, d, _ in decisions if d.action != "keep" or d.guard][-5:]
    at, off, state = offs[0]
    assert off.path == "rollout" and "keeps coming back" in off.reason
    assert pattern(3)(at) == QUIET and at > 600 + 960  # between peaks, once two of them were seen
    assert off.predicted_gain < 0  # it loses today, at the quiet load: taken for the pattern ...
    assert state.pending is not None and state.pending.tolerated_loss == pytest.approx(-off.predicted_gain, abs=1e-3)
    assert state.switched is not None and state.switched.recurring  # ... and verification tolerates that loss
    assert not [d for now, d in changes if now > at]  # never back on while the pattern lasts
    held = [d for now, d, _ in decisions if now > at and d.guard == guards.RECURRING]
    assert held and "kept off for the load that keeps coming back" in held[0].reason


def test_peaks_further_apart_than_half_the_recent_windows_do_not_flip_it_each_cycle():
    # 8-minute peaks every 53 minutes for eight hours: two peaks fit the recent hour only now and then
    decisions = closed_loop(pattern(9, gap=2700.0), 8 * 60, reject_hold_seconds=0)
    switches = [(now, d.action) for now, d, _ in decisions if d.action in ("disable", "reenable")]
    assert [action for _, action in switches] == ["disable"], switches


def test_a_single_peak_is_not_a_pattern():
    decisions = closed_loop(pattern(1), 40)
    assert not any("keeps coming back" in d.reason for _, d, _ in decisions)
    assert not any(d.action == "disable" for _, d, _ in decisions)


def test_without_allow_disable_nothing_is_switched_or_held_for_the_pattern():
    decisions = closed_loop(pattern(3), 58, allow_disable=False)
    assert not any(d.action == "disable" or d.guard == guards.RECURRING for _, d, _ in decisions)


def test_speculation_comes_back_once_the_peaks_have_left_the_recent_windows():
    decisions = closed_loop(pattern(3), 58 + 70, reject_hold_seconds=0)
    off_at = next(now for now, d, _ in decisions if d.action == "disable")
    last_peak_ends = 600 + 2 * 960 + 480
    memory = RECURRENCE_MEMORY * tuning().payback_seconds
    back = [now for now, d, _ in decisions if d.action == "reenable"]
    assert back, [d.reason for _, d, _ in decisions[-4:]]
    assert last_peak_ends + memory - 240 < back[0] <= last_peak_ends + memory + 240, (off_at, back)


def test_a_resource_that_may_no_longer_turn_speculation_off_is_not_held_off_for_the_pattern():
    decisions = closed_loop(pattern(3), 40, reject_hold_seconds=0)
    at, _, state = next((now, d, st) for now, d, st in decisions if d.action == "disable")
    later = at + 180.0  # quiet still, the rollout's settling over
    quiet = window(later, pattern(3), DraftConfig(num_speculative_tokens=0), at)
    fields = {"reject_hold_seconds": 0, "cooldown_seconds": 0}
    held, _ = decide(quiet, tuning(**fields), state.model_copy(deep=True), later)
    assert held.guard == guards.RECURRING, held.reason
    free, _ = decide(quiet, tuning(**fields, allow_disable=False), state.model_copy(deep=True), later)
    assert free.guard != guards.RECURRING and free.action == "reenable", free.reason


def test_with_surge_each_peak_switches_off_on_its_own_payback_and_the_quiet_between_them_is_held_off():
    # With Surge a rollout costs no goodput: each peak's switch off repays itself. Back on in the quiet between
    # peaks is what the pattern holds: it lands as the next peak comes, and the cooldown then keeps that peak
    # drafting where off gains 13% (here the second peak, minutes 26-34, until minute 32).
    decisions = closed_loop(pattern(3), 58, reject_hold_seconds=0, downtime_fraction=0.0)
    offs = [(now, d) for now, d, _ in decisions if d.action == "disable"]
    assert offs and all(pattern(3)(now - 60) == PEAK and "keeps coming back" not in d.reason for now, d in offs), offs
    held = [now for now, d, _ in decisions if d.guard == guards.RECURRING]
    assert held, [d.reason for _, d, _ in decisions if d.action != "keep"]
    assert all(pattern(3)(now) == QUIET or pattern(3)(now - 60) == QUIET for now in held)
    first_hold = held[0]
    assert first_hold > 600 + 960  # once two peaks were seen
    assert not [now for now, d, _ in decisions if d.action == "reenable" and now > first_hold]
    # the third peak (minutes 42-50) runs speculation off from its start: no switch at it
    assert not [now for now, _ in offs if now >= 42 * 60]


def test_with_surge_back_on_is_taken_where_the_quiet_left_serves_more_than_the_next_peak_loses():
    # 25 quiet minutes at batch 30 between 8-minute peaks: back on gains 16% there (~620 tokens/s a replica) for
    # the ~21 minutes left after a rollout; the next peak runs it a decision and a rollout long (6 minutes) where
    # off gains ~1,300 tokens/s. (A window that still holds the peak's end sees back on gain little: held there.)
    quiet_gaps = pattern(3, gap=1500.0, low=30)
    decisions = closed_loop(quiet_gaps, 110, reject_hold_seconds=0, downtime_fraction=0.0)
    switches = [(now, d.action) for now, d, _ in decisions if d.action in ("disable", "reenable")]
    assert [action for _, action in switches][:6] == ["disable", "reenable"] * 3, switches
    peak_ends = [600 + 480 + n * (480 + 1500) for n in range(3)]
    assert [now for now, action in switches if action == "reenable"] == pytest.approx(
        [end + 240 for end in peak_ends], abs=60)  # the cooldown since the switch off, then the first window


def test_with_surge_a_quiet_too_light_to_repay_the_next_peak_is_held_off_until_it_outlasts_the_pattern():
    # the same 25 minutes at batch 3: back on would gain ~90 tokens/s a replica there, the next peak lose ~1,300
    # for 6 minutes. After the third peak the quiet lasts for good: once a quarter longer than any between the
    # peaks, the pattern has broken and speculation comes back (the recent windows, two paybacks, still hold the
    # last two peaks then)
    quiet_gaps = pattern(3, gap=1500.0)
    decisions = closed_loop(quiet_gaps, 130, reject_hold_seconds=0, downtime_fraction=0.0, payback_seconds=3600)
    held = [(now, d) for now, d, _ in decisions if d.guard == guards.RECURRING]
    assert held and all(quiet_gaps(now - 60) == QUIET for now, _ in held), [d.reason for _, d, _ in decisions[-3:]]
    assert "tokens lost" in held[0][1].reason and "of quiet expected before the next peak" in held[0][1].reason
    assert any("the next peak is due" in d.reason for _, d in held)
    back = [now for now, d, _ in decisions if d.action == "reenable"]
    last_peak_ends = 600 + 2 * (480 + 1500) + 480
    assert len(back) == 2 and back[0] < 600 + 480 + 1500  # once before the pattern was seen
    broken = last_peak_ends + BROKEN * 1500
    assert broken - 120 < back[1] <= broken + 60, (back, broken)


def test_back_on_is_priced_by_the_quiet_left_and_the_next_peaks_run_until_off_lands():
    model, current, off = measured_at_both_ends()
    quiet, peak = [(QUIET, 1.0)], [(PEAK, 1.0)]
    on_gain = goodput(model, current, quiet) - goodput(model, off, quiet)
    peak_loss = goodput(model, off, peak) - goodput(model, current, peak)
    assert on_gain > 0 and peak_loss > 0
    seen = Recurrence(3, [(QUIET, 0.5), (PEAK, 0.5)], 3600.0, gaps=(1200.0, 1800.0), quiet_seconds=300.0,
                      stay_seconds=(480.0, 480.0, 480.0), stay_distribution=peak)

    def price(**changes):
        return back_on_now(model, current, off, quiet, replace(seen, **changes), rollout_seconds=240.0,
                           cooldown_seconds=600.0, decision_seconds=120.0)

    # 1,500 s of quiet on average, 300 gone: 1,200 left, 960 of them after the rollout; the peak then runs it a
    # decision and a rollout (the cooldown is over by then)
    priced = price()
    assert priced.expected_seconds == pytest.approx(1500.0) and priced.gained == pytest.approx(on_gain * 960)
    assert priced.peak_seconds == pytest.approx(360.0) and priced.lost == pytest.approx(peak_loss * 360)
    # 400 s left: the cooldown's rest (200 s) outlasts the decision
    late = price(quiet_seconds=1100.0)
    assert late.gained == pytest.approx(on_gain * 160) and late.peak_seconds == pytest.approx(440.0)
    # a stay's mean length caps what the peak can lose
    assert price(stay_seconds=(300.0,)).peak_seconds == pytest.approx(300.0)
    # past the shorter quiet, the longer one is what is expected: 1,800 s, 500 left
    assert price(quiet_seconds=1300.0).expected_seconds == pytest.approx(1800.0)
    # past every one, the next peak is due: nothing gained, until a quiet a quarter longer than any breaks the pattern
    due = price(quiet_seconds=BROKEN * 1800.0 - 1)
    assert due is not None and due.gained == 0 and not due.pays and "the next peak is due" in due.describe()
    for broken in ({"gaps": ()}, {"quiet_seconds": BROKEN * 1800.0 + 1}, {"stay_seconds": ()}):
        assert price(**broken) is None, broken


def test_recurrence_measures_stays_and_quiets_by_the_clock_and_loads_by_the_windows():
    model, current, off = measured_at_both_ends()
    # a stay ends at 60; quiet windows at 90-210, then a rollout records nothing until 400; the next stay from 460.
    # The next peak keeps the clock: the quiet lasted from 60 until the window ending at 460 began. The loads are the
    # windows': the rollout's minutes are no load seen. The first stay began with the windows (maybe before them):
    # its length is not the peak's while another stay's is known
    loads = [(0, PEAK), (30, PEAK), (60, PEAK), (90, QUIET), (120, QUIET), (150, QUIET), (180, QUIET), (210, QUIET),
             (400, QUIET), (460, PEAK), (490, PEAK), (520, QUIET)]
    seen = recurrence(model, current, off, loads, 520.0, 256, 30.0)
    assert seen is not None and seen.stays == 2 and seen.gaps == pytest.approx((370.0,))
    assert seen.span_seconds == pytest.approx(12 * 30)
    assert seen.stay_seconds == pytest.approx((60.0,)) and seen.quiet_seconds == pytest.approx(30.0)
    first = recurrence(model, current, off, loads[:4], 90.0, 256, 30.0)
    assert first.gaps == () and first.quiet_seconds == pytest.approx(30.0) and first.stay_seconds == (90.0,)
    # windows of 60 s every 30 s, a rollout at the first peak records nothing from 90 to 240: that stay lasted from
    # 30 until its load lost at 330 (its window began then), by the clock; the second stay began at 420, and the
    # dip since 480, shorter than a window, may be the next quiet's start
    loads = [(0, QUIET), (30, QUIET), (60, PEAK), (90, PEAK), (300, PEAK), (330, PEAK), (360, QUIET), (390, QUIET),
             (420, QUIET), (450, PEAK), (480, PEAK), (510, QUIET)]
    seen = recurrence(model, current, off, loads, 510.0, 256, 60.0)
    assert seen.stays == 2 and seen.stay_seconds == pytest.approx((300.0,)) and seen.gaps == pytest.approx((90.0,))
    assert seen.quiet_seconds == pytest.approx(30.0)


def test_a_switch_is_decided_a_window_and_a_tick_of_the_loop_per_further_confirmation_after_its_load_came():
    every_30s_and_a_rollout = PolicyState(loads=[[30.0 * n, QUIET] for n in (0, 1, 2, 3, 4, 14, 15)])
    every_5min = PolicyState(loads=[[300.0 * n, QUIET] for n in range(6)])
    obs = window(450.0, pattern(0), K2, 0.0)
    assert _decision_seconds(obs, tuning(confirmations=2), every_30s_and_a_rollout) == pytest.approx(120 + 30)
    assert _decision_seconds(obs, tuning(confirmations=2), every_5min) == pytest.approx(120 + 300)
    assert _decision_seconds(obs, tuning(confirmations=1), every_5min) == pytest.approx(120)
    assert _decision_seconds(obs, tuning(confirmations=3), PolicyState()) == pytest.approx(120 * 3)


def test_the_switch_waits_for_its_own_confirmations_and_clears_the_floor():
    decisions = closed_loop(pattern(3), 58, reject_hold_seconds=0, confirmations=2)
    off_at = next(now for now, d, _ in decisions if d.action == "disable")
    before = [d for now, d, _ in decisions if now == off_at - 30.0][0]
    assert before.guard == guards.CONFIRMING and "keeps coming back" in before.reason, before.reason
    assert "1 of 2 consecutive windows" in before.reason
    high_floor = closed_loop(pattern(3), 58, reject_hold_seconds=0, min_gain=0.5)
    assert not any(d.action == "disable" for _, d, _ in high_floor)


def test_a_guard_that_holds_the_rollout_leaves_todays_load_to_decide():
    decisions = closed_loop(pattern(3), 58, reject_hold_seconds=0, max_restarts_per_hour=0)
    assert not any(d.action == "disable" for _, d, _ in decisions)
    assert not any("keeps coming back" in d.reason for _, d, _ in decisions)


def test_at_a_peak_the_rollout_waits_for_the_quiet_where_it_costs_a_fraction():
    # no rollout allowed until the third peak: then the pattern has long cleared its bar, and at the peak's load a
    # reloading replica's share of the fleet would take most of what the pattern gains
    held = closed_loop(pattern(3), 47, reject_hold_seconds=0, max_restarts_per_hour=0)
    now, _, state = held[-1]
    assert pattern(3)(now) == PEAK and pattern(3)(now - 240) == PEAK
    config = next(d.config for _, d, _ in reversed(held) if d.is_change)  # in force: the last change's
    later = now + 30.0
    decision, _ = decide(window(later, pattern(3), config, 0.0), tuning(reject_hold_seconds=0),
                         state.model_copy(deep=True), later)
    assert decision.action != "disable", decision.reason


def test_while_the_latency_slo_is_violated_the_pattern_holds_nothing_off():
    decisions = closed_loop(pattern(3), 40, reject_hold_seconds=0)
    at, _, state = next((now, d, st) for now, d, st in decisions if d.action == "disable")
    later = at + 180.0
    off = DraftConfig(num_speculative_tokens=0)
    slo = {"reject_hold_seconds": 0, "cooldown_seconds": 0, "slo": {"per_token_p99_seconds": 0.05}}
    met = window(later, pattern(3), off, at, per_token_p99_seconds=0.04)
    violated = window(later, pattern(3), off, at, per_token_p99_seconds=0.06)
    held, _ = decide(met, tuning(**slo), state.model_copy(deep=True), later)
    assert held.guard == guards.RECURRING, held.reason
    free, _ = decide(violated, tuning(**slo), state.model_copy(deep=True), later)
    assert free.guard != guards.RECURRING, free.reason
