"""The simulator exports the plugin's specinfer: series with the same semantics (virtual time, no noise)."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry

from specinfer.runtime.contract.telemetry.series import (
    ACCEPTED_TOKENS_PER_POS,
    DRAFT_TOKENS_PER_POS,
    ENGINE_STEPS,
    STEP_DURATION,
    STEP_REQUESTS,
)
from specinfer.runtime.pod.telemetry.sim_sink import TelemetrySink
from specinfer.runtime.sim.engine import Engine, SimRequest
from specinfer.runtime.sim.metrics import build_sinks
from specinfer.runtime.sim.model import acceptance_profile
from specinfer.runtime.sim.settings import SimulatorSettings

pytestmark = pytest.mark.unit

SCHEDULE = ((1, 8, 4), (9, 64, 2))  # K=4 up to batch 8, K=2 above: positions 2-3 drafted at small batches only
LABELS = {"model_name": "simulated-model", "engine": "0"}


@pytest.fixture(scope="module")
def simulated():
    settings = SimulatorSettings(method="eagle3", num_speculative_tokens=4,
                                 schedule=SCHEDULE, noise=0.0, seed=3, max_batch_size=64)
    engine = Engine(settings)
    registry = CollectorRegistry()
    sink = TelemetrySink(registry, model_name=settings.model_name, engine="0", num_speculative_tokens=4)
    for index in range(48):  # staggered lengths: the batch shrinks from 48 to 1, K moves from 2 to 4
        engine.add(SimRequest(request_id=str(index), prompt_tokens=16, max_tokens=60 + 25 * index, arrival=0.0))
    now, steps = 0.0, []
    while not engine.idle:
        plan = engine.plan_step(now)
        now += plan.duration
        stats = engine.complete_step(plan, now)
        sink.observe_step(stats)
        steps.append(stats)
    return engine, registry, steps


def sample(registry, name, **labels):
    return registry.get_sample_value(name, {**LABELS, **labels}) or 0.0


def test_unbiased_per_position_acceptance_matches_the_profile(simulated):
    _, registry, steps = simulated
    expected = acceptance_profile("eagle3", "chat").prefix_probs(4)
    drafts = sum(s.num_drafts for s in steps)
    for position in range(4):
        drafted = sample(registry, DRAFT_TOKENS_PER_POS.promql, position=str(position))
        accepted = sample(registry, ACCEPTED_TOKENS_PER_POS.promql, position=str(position))
        assert drafted == sum(s.draft_per_pos[position] for s in steps if s.k > position)
        p = expected[position]
        assert abs(accepted / drafted - p) < 5 * math.sqrt(p * (1 - p) / drafted), position
    # vLLM's series alone (accepted / all drafts) read position 3 far too low under this schedule
    assert sample(registry, ACCEPTED_TOKENS_PER_POS.promql, position="3") / drafts < 0.7 * expected[3]


def test_step_time_cells_reproduce_the_cost_model(simulated):
    engine, registry, steps = simulated
    for batch_size, k in ((1, 4), (2, 4), (3, 4), (4, 4)):
        labels = {"batch_size": str(batch_size), "k": str(k)}
        count = sample(registry, f"{STEP_DURATION.name}_count", **labels)
        assert count > 0
        mean = sample(registry, f"{STEP_DURATION.name}_sum", **labels) / count
        truth = engine.cost.step_time(batch_size, k, "sequential", draft_scale=engine.draft_scale)
        assert mean == pytest.approx(truth, rel=1e-9)
        assert sample(registry, STEP_REQUESTS.promql, **labels) == batch_size * count
    mixed = {"batch_size": "33-48", "k": "2"}  # a range bucket: the requests counter gives its mean batch size
    mean_batch = (sample(registry, STEP_REQUESTS.promql, **mixed)
                  / sample(registry, f"{STEP_DURATION.name}_count", **mixed))
    assert 33 <= mean_batch <= 48


def test_steps_by_effective_k_count_every_step(simulated):
    _, registry, steps = simulated
    by_k = {k: sample(registry, ENGINE_STEPS.promql, k=str(k)) for k in range(5)}
    assert sum(by_k.values()) == len(steps)
    assert by_k[4] == sum(1 for s in steps if s.k == 4 and s.num_drafts)
    assert by_k[2] > 0 and by_k[3] == 0 and by_k[1] == 0


def test_the_simulator_exports_the_specinfer_series():
    registry = CollectorRegistry()
    sinks = build_sinks(registry, model_name="m", engine="0", num_speculative_tokens=3)
    assert any(isinstance(sink, TelemetrySink) for sink in sinks)
    assert registry.get_sample_value(DRAFT_TOKENS_PER_POS.promql, {"model_name": "m", "engine": "0",
                                                                    "position": "2"}) == 0.0
