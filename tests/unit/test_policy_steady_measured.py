"""Issue 25: the policy decides on a steady load, and on step costs it has measured.

A window that straddles a ramp (the mean batch size still moving) triggers no rollout that depends on the
load mix (issue 43 item 4: one that wins at every batch size the ramp may reach does not); a gain
that rests on batch sizes the step-cost model never measured is held until a window has measured
them. Both as hypothesis properties, each with a companion that shows the property can fail.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specinfer.bench.observations import synthetic_observation
from specinfer.operator.tuner.policy import CHANGES, CostPrior, DraftConfig, Observation, TuningInput, decide, guards
from specinfer.operator.tuner.policy.forecast import model_of
from specinfer.operator.tuner.policy.goodput import goodput
from specinfer.operator.tuner.policy.ramp import Ramp
from specinfer.operator.tuner.policy.state import PolicyState
from tests.unit.test_policy_properties import prefix_from

pytestmark = pytest.mark.unit

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
WINDOW = 60.0
PRIOR = CostPrior(floor=0.010, compute_per_token=2e-5, kv_per_sequence=1e-6, draft_pass=0.0008, draft_token=1e-7)


def window(now: float, batches: dict[int, float], *, k: int, conditional: list[float], floor: float, slope: float,
           draft: float, since: float = 0.0) -> Observation:
    return synthetic_observation(
        time=now, window_seconds=WINDOW, method="eagle3", num_speculative_tokens=k, schedule=None,
        applied_since=since, batch_sizes=batches, prefix=prefix_from(conditional),
        step_time=lambda b, kk: floor + slope * b * (kk + 1) + draft * kk)


def thin(observation: Observation, factor: float) -> Observation:
    """The same window with `factor` of its engine steps in the per-batch-size step series."""
    samples = tuple(replace(s, count=s.count * factor) for s in observation.step_samples or ())
    return replace(observation, step_samples=samples)


def mean(batches: dict[int, float]) -> float:
    total = sum(batches.values())
    return sum(b * f for b, f in batches.items()) / total


def tuning(**overrides) -> TuningInput:
    base = {"method": "eagle3", "k_min": 1, "k_max": 8, "max_batch_size": 256, "cooldown_seconds": 0,
            "confirmations": 1, "restart_seconds": 0, "downtime_fraction": 0.0, "cost_prior": PRIOR}
    return TuningInput(**{**base, **overrides})


worlds = st.fixed_dictionaries({
    "conditional": st.lists(st.floats(0.1, 0.98), min_size=16, max_size=16),
    "floor": st.floats(0.003, 0.05),
    "slope": st.floats(1e-6, 5e-4),
    "draft": st.floats(0.0, 0.005),
    "k": st.integers(1, 8),
})
loads = st.dictionaries(st.integers(1, 200), st.floats(0.05, 1.0), min_size=1, max_size=3)


def moving(before: dict[int, float], after: dict[int, float], elapsed: float) -> bool:
    """Overlapping windows whose stretches differ by more than the wobble of a steady load."""
    if elapsed >= WINDOW:
        return False
    shift = abs(mean(after) - mean(before)) * min(WINDOW / elapsed, guards.MAX_STRETCHES)
    return shift > max(guards.MOVING_REQUESTS, guards.MOVING_SHARE * max(mean(after), mean(before)))


def wins_wherever_the_ramp_goes(state: PolicyState, current: DraftConfig, candidate: DraftConfig,
                                 before: dict[int, float], after: dict[int, float]) -> bool:
    """By the policy's own model, `candidate` serves more than `current` at every batch size of this window and
    from the one before's mean on in the ramp's direction -- checked here batch size by batch size, not by
    policy/ramp.py."""
    model = model_of(state, tuning())
    assert model is not None
    top = tuning().max_batch_size
    seen = [*after, round(mean(before))]  # this window's batch sizes and the one before's mean
    span = range(min(seen), top + 1) if mean(after) > mean(before) else range(1, max(seen) + 1)
    return all(goodput(model, candidate.dense(top), [(b, 1.0)]) > goodput(model, current.dense(top), [(b, 1.0)])
               for b in span)


def on_a_ramp(world: dict, before: dict[int, float], after: dict[int, float], elapsed: float):
    shape = {key: world[key] for key in ("conditional", "floor", "slope", "draft")}
    _, state = decide(window(600.0, before, k=world["k"], **shape), tuning(), None, 600.0)
    now = 600.0 + elapsed
    observation = window(now, after, k=world["k"], **shape)
    decision, state = decide(observation, tuning(), state, now)
    return observation.applied.config, decision, state


@SETTINGS
@given(world=worlds, before=loads, after=loads, elapsed=st.floats(5.0, WINDOW - 1))
def test_a_ramp_window_triggers_no_rollout_that_depends_on_the_mix(world, before, after, elapsed):
    """Issue 43 item 4: on a ramp a rollout goes only where it wins wherever the ramp goes (policy/ramp.py);
    whatever else a ramp window recommends waits for a window of one load."""
    if not moving(before, after, elapsed):
        return
    current, decision, state = on_a_ramp(world, before, after, elapsed)
    shown = decision.config if decision.is_change else (
        decision.recommendation.config if decision.recommendation is not None else None)
    if decision.guard in (guards.LOAD_MOVING, guards.INSUFFICIENT_SAMPLES) or shown is None \
            or shown.same_as(current, tuning().max_batch_size):
        assert not decision.is_change, decision.reason
        return
    assert wins_wherever_the_ramp_goes(state, current, shown, before, after), decision.reason


def test_without_the_ramp_check_a_ramp_window_rolls_out_what_depends_on_the_mix(monkeypatch):
    """The companion: with every change taken for one that wins wherever the ramp goes, a ramp window from batch 4
    to 32 rolls out a K that loses at the batch sizes the ramp goes to -- the property above would catch it."""
    world = {"conditional": [0.8] * 16, "floor": 0.01, "slope": 2e-5, "draft": 0.0008, "k": 1}
    monkeypatch.setattr(Ramp, "followed_by", lambda *args, **kwargs: True)
    current, decision, state = on_a_ramp(world, {4: 1.0}, {32: 1.0}, 20.0)
    assert decision.is_change, decision.reason
    assert not wins_wherever_the_ramp_goes(state, current, decision.config, {4: 1.0}, {32: 1.0})


def learnt_at(sizes: dict[int, float], shape: dict, k: int) -> PolicyState:
    """A policy that measured `sizes` for three steady windows and changed nothing (min gain out of reach)."""
    state = None
    for i in range(3):
        now = 600.0 + 20 * i
        _, state = decide(window(now, sizes, k=k, **shape), tuning(min_gain=100.0), state, now)
    assert state is not None
    return state


@SETTINGS
@given(world=worlds, size=st.integers(1, 16), factor=st.integers(4, 16), share=st.floats(0.0, 0.9))
def test_a_gain_built_only_on_the_prior_is_held_until_measured(world, size, factor, share):
    """Measured at `size`; then a steady window at a batch size at least 4x larger whose step series
    hold a `share` of a full window's steps. Any change keeps the K of that batch size."""
    shape = {key: world[key] for key in ("conditional", "floor", "slope", "draft")}
    state = learnt_at({size: 1.0}, shape, world["k"])
    far = size * factor
    now = 600.0 + 10 * WINDOW  # long after: not a ramp, a new steady load
    observation = thin(window(now, {far: 1.0}, k=world["k"], **shape), share * 200 / _steps(window(
        now, {far: 1.0}, k=world["k"], **shape)))
    decision, _ = decide(observation, tuning(), state, now)
    if decision.action in CHANGES:
        assert decision.config.dense(256)[far] == world["k"], decision.reason


def _steps(observation: Observation) -> float:
    return sum(s.count for s in observation.step_samples or ())


def test_held_until_measured_then_acted_on():
    """The companion: the thin window holds with guard `unmeasured`; a full window at the same
    batch size measures it and the same gain is acted on."""
    shape = {"conditional": [0.85] * 16, "floor": 0.01, "slope": 2e-6, "draft": 0.0002}
    state = learnt_at({1: 1.0}, shape, 1)
    now = 600.0 + 10 * WINDOW
    full = window(now, {24: 1.0}, k=1, **shape)
    top = tuning(max_batch_size=24)  # nothing above today's batch size: no look-ahead
    held, _ = decide(thin(full, 50 / _steps(full)), top, state, now)
    acted, _ = decide(full, top, state, now)
    assert held.action == "keep" and held.guard == guards.UNMEASURED, held.reason
    assert "not measured yet" in held.reason and "batch size 24" in held.reason
    assert acted.action in CHANGES, acted.reason
    assert acted.config.dense(24)[24] > 1
