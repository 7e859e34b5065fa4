"""An engine that never drafted at its load measures its acceptance in place (probe.acceptance_probe_for).

Started under a load above its first schedule's crossover, an engine runs that schedule's K = 0 range: a
window holds no draft (or a few, when the batch dips), no acceptance is known, and without one nothing can
be predicted. Before, the policy held there for good -- a model drafter paying its first pass on every
step; now it drafts the cheapest K at today's batch sizes for a window, goes back, and decides."""

from __future__ import annotations

import pytest

from specinfer.bench.observations import synthetic_observation
from specinfer.operator.tuner.policy import decide
from tests.unit.test_policy_guards import GOOD_PREFIX, step_time, tuning

pytestmark = pytest.mark.unit

FIRST_SCHEDULE = [[1, 30, 2], [31, 64, 0]]  # K = 0 above the preset's crossover, as the engine starts
HEAVY = 32


def window(now: float, config, since: float, batch_sizes=None):
    return synthetic_observation(time=now, window_seconds=60.0, method="eagle3",
                                 num_speculative_tokens=config[0], schedule=config[1], applied_since=since,
                                 batch_sizes=batch_sizes or {HEAVY: 1.0}, prefix=GOOD_PREFIX, step_time=step_time)


def in_place_tuning(**overrides):
    return tuning(in_place_max_k=2, k_max=2, min_steps=10, min_drafts=200, **overrides)


def test_an_engine_that_never_drafted_at_its_load_drafts_for_a_window_then_decides():
    policy = in_place_tuning()
    first = window(600.0, (2, FIRST_SCHEDULE), since=0.0)
    assert first.drafts == 0  # batch 32 runs the K = 0 range: nothing drafted, nothing known

    probe, state = decide(first, policy, None, 600.0)
    assert probe.probe and probe.path == "inPlace", probe.reason
    assert probe.config.dense(64)[HEAVY] == 1 and probe.config.dense(64)[2] == 2  # only today's sizes change
    assert "no acceptance has been measured" in probe.reason
    assert -0.5 <= probe.predicted_gain < 0  # priced with every draft rejected: a bounded loss

    drafted = window(700.0, (probe.config.num_speculative_tokens, probe.config.schedule), since=620.0)
    assert drafted.drafts >= 200
    back, state = decide(drafted, policy, state, 700.0)
    assert state.acceptance is not None  # measured
    assert back.config.dense(64) == first.applied.config.dense(64), back.reason  # back to what it replaced

    again = window(800.0, (2, FIRST_SCHEDULE), since=720.0, batch_sizes={30: 0.0005, HEAVY: 0.9995})
    assert 0 < again.drafts < 200
    decision, _ = decide(again, policy, state, 800.0)
    assert decision.guard != "insufficientSamples" and not decision.probe, decision.reason


def test_no_acceptance_probe_where_probes_are_off_or_something_drafts():
    held, _ = decide(window(600.0, (2, FIRST_SCHEDULE), since=0.0), in_place_tuning(probe_in_place=False),
                     None, 600.0)
    assert held.action == "keep" and not held.probe and "no acceptance" in held.reason
    # a rollout-only engine (no schedule in place): nothing to probe with
    rollout_only, _ = decide(window(600.0, (2, FIRST_SCHEDULE), since=0.0), tuning(min_steps=10, min_drafts=200),
                             None, 600.0)
    assert not rollout_only.probe, rollout_only.reason
    # drafting at today's batch sizes: its own windows measure the acceptance
    drafting, _ = decide(window(600.0, (2, FIRST_SCHEDULE), since=0.0, batch_sizes={20: 1.0}), in_place_tuning(),
                         None, 600.0)
    assert not (drafting.probe and "no acceptance" in drafting.reason), drafting.reason


def test_a_dip_under_the_k0_range_drafts_too_little_to_stop_the_probe():
    """The batch dips to 30 for a moment now and then and drafts a few there: too few to know the
    acceptance, so the probe runs at the batch sizes that draft nothing, not over the dip."""
    dipping = window(600.0, (2, FIRST_SCHEDULE), since=0.0, batch_sizes={30: 0.0005, HEAVY: 0.9995})
    assert 0 < dipping.drafts < 200
    probe, _ = decide(dipping, in_place_tuning(), None, 600.0)
    assert probe.probe and "no acceptance has been measured" in probe.reason, probe.reason
    dense = probe.config.dense(64)
    assert dense[HEAVY] == 1 and dense[30] == 2 and dense[31] == 0  # K=1 at 32 alone; the dip keeps its K


def test_a_probe_whose_window_drafted_nothing_goes_back():
    """The load left the probed batch size (or the engine never took the schedule): the window measured no
    acceptance either, and the probe's config must not stay for good."""
    policy = in_place_tuning()
    probe, state = decide(window(600.0, (2, FIRST_SCHEDULE), since=0.0), policy, None, 600.0)
    assert probe.probe
    moved = window(700.0, (probe.config.num_speculative_tokens, probe.config.schedule), since=620.0,
                   batch_sizes={40: 1.0})  # batch 40 runs the probe's K = 0 there: nothing drafted
    assert moved.drafts == 0
    back, state = decide(moved, policy, state, 700.0)
    assert "back to the config it replaced" in back.reason, back.reason
    assert back.config.dense(64) == [0] + [2] * 30 + [0] * 34 and state.probe_from is None


def test_no_acceptance_probe_while_the_load_moves():
    policy = in_place_tuning()
    _, state = decide(window(570.0, (2, FIRST_SCHEDULE), since=0.0, batch_sizes={36: 1.0}), policy, None, 570.0)
    state.probed, state.probe_from, state.changes = [], None, []  # whatever the first window did: a fresh start
    ramp = window(600.0, (2, FIRST_SCHEDULE), since=0.0, batch_sizes={56: 1.0})  # overlapping windows: a ramp
    decision, _ = decide(ramp, policy, state, 600.0)
    assert not decision.probe, decision.reason
    steady = window(600.0, (2, FIRST_SCHEDULE), since=0.0, batch_sizes={36: 1.0})  # the control: a steady load
    decision, _ = decide(steady, policy, state.model_copy(deep=True), 600.0)
    assert decision.probe, decision.reason


def test_the_acceptance_probe_does_not_start_the_doubted_guard():
    """Its record says it measured the acceptance: a rollout after it is not held for a doubt of the
    step's split that nobody raised (probe.doubted_loss)."""
    _, state = decide(window(600.0, (2, FIRST_SCHEDULE), since=0.0), in_place_tuning(), None, 600.0)
    assert state.probed and state.probed[-1].acceptance
