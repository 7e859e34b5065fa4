"""Property-based tests of the policy: bounds always hold, invalid data never moves it, and
stationary noise never makes it flip-flop."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from specinfer.bench.observations import synthetic_observation
from specinfer.operator.tuner.policy import DraftConfig, Observation, TuningInput, decide, tuning_from_json
from specinfer.runtime.methods.schedule import schedule_problems

pytestmark = pytest.mark.unit

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def cost(floor: float, slope: float, draft: float):
    return lambda b, k: floor + slope * b * (k + 1) + draft * k


def prefix_from(conditional: list[float]) -> list[float]:
    out, running = [], 1.0
    for rate in conditional:
        running *= rate
        out.append(running)
    return out


worlds = st.fixed_dictionaries({
    "conditional": st.lists(st.floats(0.1, 0.98), min_size=16, max_size=16),
    "floor": st.floats(0.003, 0.05),
    "slope": st.floats(1e-6, 5e-4),
    "draft": st.floats(0.0, 0.005),
    "batches": st.dictionaries(st.integers(1, 200), st.floats(0.05, 1.0), min_size=1, max_size=4),
    "k": st.integers(1, 8),
})
bounds = st.fixed_dictionaries({
    "method": st.sampled_from(["eagle3", "mtp", "dflash", "ngram"]),
    "kMin": st.integers(1, 3),
    "kMax": st.integers(3, 12),
    "maxBatchSize": st.sampled_from([16, 64, 256]),
    "allowSchedule": st.booleans(),
    "allowDisable": st.booleans(),
    "confirmations": st.just(1),
    "cooldownSeconds": st.just(60),
})


def window(world: dict, now: float, *, k: int, schedule=None, since: float = 0.0, rng=None, **kwargs) -> Observation:
    return synthetic_observation(
        time=now, window_seconds=60.0, method="eagle3", num_speculative_tokens=k, schedule=schedule,
        applied_since=since, batch_sizes=world["batches"], prefix=prefix_from(world["conditional"]),
        step_time=cost(world["floor"], world["slope"], world["draft"]), rng=rng, **kwargs)


@SETTINGS
@given(world=worlds, tuning=bounds)
def test_decisions_stay_within_the_bounds(world, tuning):
    try:
        spec = tuning_from_json(tuning)
    except ValidationError:
        return  # bounds the method cannot meet (e.g. kMin above MTP's limit) are refused, not acted on
    decision, state = decide(window(world, 120.0, k=world["k"]), spec, None, 120.0)
    for config in (decision.config, decision.recommendation.config if decision.recommendation else None):
        if config is None:
            continue
        k, schedule = config.num_speculative_tokens, config.schedule
        if k == 0:
            assert schedule is None
            assert tuning["allowDisable"] or decision.action == "keep"
            continue
        ks = set(config.dense(tuning["maxBatchSize"])[1:])
        allowed = set(range(tuning["kMin"], tuning["kMax"] + 1)) | ({0} if tuning["allowDisable"] else set())
        assert ks <= allowed, (ks, allowed)
        if schedule:
            assert tuning["allowSchedule"]
            assert schedule_problems(schedule, k) == []
            assert len(schedule) <= 8


corruptions = st.sampled_from(["nan-step", "inf-accepted", "negative-drafts", "stale", "rollout",
                               "nan-steps", "settling", "nan-distribution", "over-accepted"])


def corrupt(observation: Observation, how: str, now: float) -> Observation:
    accepted = observation.accepted_per_position
    if how == "nan-step":
        return replace(observation, step_mean_seconds=math.nan)
    if how == "inf-accepted":
        return replace(observation, accepted_per_position=(math.inf, *accepted[1:]))
    if how == "negative-drafts":
        return replace(observation, drafts=-5.0)
    if how == "stale":
        return replace(observation, scrape_time=now - 3600)
    if how == "rollout":
        return replace(observation, rollout_in_progress=True)
    if how == "nan-steps":
        return replace(observation, sequence_steps=math.nan)
    if how == "settling":
        return replace(observation, applied=replace(observation.applied, since=now - 10))
    if how == "nan-distribution":
        (size, _), *rest = observation.batch_size_distribution
        return replace(observation, batch_size_distribution=((size, math.nan), *rest))
    assert how == "over-accepted"
    return replace(observation, accepted_per_position=(observation.drafts * 5 + 100, *accepted[1:]))


@SETTINGS
@given(world=worlds, how=corruptions, warm=st.booleans())
def test_never_acts_on_invalid_data(world, how, warm):
    tuning = TuningInput(method="eagle3", max_batch_size=256, confirmations=1, cooldown_seconds=60)
    state = None
    if warm:  # a policy with memory, one window away from acting
        _, state = decide(window(world, 60.0, k=world["k"]), tuning.model_copy(update={"min_gain": 100.0}), None, 60.0)
    observation = corrupt(window(world, 120.0, k=world["k"]), how, 120.0)
    decision, new_state = decide(observation, tuning, state, 120.0)
    assert decision.action == "keep"
    assert decision.config is None
    assert decision.guard in {"invalidData", "staleData", "rolloutInProgress", "settling"}
    if state is not None:
        assert new_state == state  # nothing learned from it either


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world=worlds, seed=st.integers(0, 10_000), noise=st.floats(0.0, 0.1))
# Found by the explore profile: the look-ahead rule crept K upwards in four changes an hour (it let
# changes at today's batch sizes through below the noise threshold, and the noise estimate reset to
# 1% after every change).
@example(world={"conditional": [0.45, 0.8482951017181928, 0.600732353838284, 0.6780168434246103,
                                0.5227692010256298, 0.5743926334020192, 0.7542437490687276, *[0.5] * 9],
                "floor": 0.046875, "slope": 0.00011530427126418804, "draft": 0.0, "batches": {1: 1.0, 33: 1.0},
                "k": 1}, seed=365, noise=0.078125)
def test_no_flip_flop_under_stationary_noise(world, seed, noise):
    """Closed loop on a fixed world with noisy counters and timings: at most a couple of changes,
    and never back to a config it left (A -> B -> A)."""
    rng = random.Random(seed)
    tuning = TuningInput(method="eagle3", max_batch_size=256, cooldown_seconds=300, restart_seconds=60)
    config = DraftConfig(num_speculative_tokens=world["k"])
    since, state, history, reasons = 0.0, None, [config], []
    for tick in range(1, 61):
        now = 60.0 * tick + 60.0
        observation = window(world, now, k=config.num_speculative_tokens, schedule=config.schedule,
                             since=since, rng=rng, timing_noise=noise)
        decision, state = decide(observation, tuning, state, now)
        if decision.is_change:
            config, since = decision.config, now + 60.0
            history.append(config)
            reasons.append(f"{tick}: {decision.action}: {decision.reason}")
            if decision.action == "disable":
                return  # the world made speculation useless; nothing left to flip
    dense = [tuple(c.dense(256)) for c in history]
    rollbacks = sum(1 for i in range(2, len(dense)) if dense[i] == dense[i - 2])
    assert len(history) - 1 <= 3, (world["batches"], reasons)
    assert rollbacks <= 1, (world["batches"], reasons)  # one rollback may return to a config; oscillation may not
