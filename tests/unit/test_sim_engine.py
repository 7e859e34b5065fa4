"""The simulated engine in virtual time: acceptance statistics, schedule semantics, batching, speedup."""

from __future__ import annotations

import math

import pytest

from specinfer.runtime.sim.engine import Engine, SimRequest
from specinfer.runtime.sim.model import acceptance_profile
from specinfer.runtime.sim.settings import SimulatorSettings

pytestmark = pytest.mark.unit


def settings(**overrides) -> SimulatorSettings:
    base = {"method": "eagle3", "num_speculative_tokens": 4, "noise": 0.0, "seed": 7}
    base.update(overrides)
    return SimulatorSettings(**base)


def run(engine: Engine, *, requests: int, max_tokens: int | list[int], prompt: int = 16):
    """Submit `requests` at t=0 and step until all finish; returns every StepStats."""
    lengths = max_tokens if isinstance(max_tokens, list) else [max_tokens] * requests
    for index, length in enumerate(lengths):
        engine.add(SimRequest(request_id=str(index), prompt_tokens=prompt, max_tokens=length, arrival=0.0))
    now, steps = 0.0, []
    while not engine.idle:
        plan = engine.plan_step(now)
        now += plan.duration
        steps.append(engine.complete_step(plan, now))
        assert len(steps) < 100_000
    return steps


def test_per_position_acceptance_matches_the_profile_within_binomial_error():
    engine = Engine(settings(max_batch_size=64))
    steps = run(engine, requests=64, max_tokens=400)
    drafts = sum(s.num_drafts for s in steps)
    accepted = [sum(s.accepted_per_pos[pos] for s in steps if s.k > pos) for pos in range(4)]
    expected = acceptance_profile("eagle3", "chat").prefix_probs(4)
    assert drafts > 5000
    for pos in range(4):
        p = expected[pos]
        sigma = math.sqrt(p * (1 - p) / drafts)
        assert abs(accepted[pos] / drafts - p) < 5 * sigma, (pos, accepted[pos] / drafts, p)
    assert sum(s.num_accepted_tokens for s in steps) == sum(accepted)
    assert sum(s.num_draft_tokens for s in steps) == 4 * drafts


def test_mean_tokens_per_step_is_the_expected_accepted_length():
    engine = Engine(settings(max_batch_size=32, workload="math"))
    steps = run(engine, requests=32, max_tokens=5000)
    decode_steps = [s for s in steps if s.num_drafts == s.batch_size == 32]
    tokens = sum(s.generation_tokens for s in decode_steps)
    per_request_step = tokens / (32 * len(decode_steps))
    assert per_request_step == pytest.approx(acceptance_profile("eagle3", "math").expected_tokens(4), rel=0.03)


def test_schedule_turns_drafting_off_above_a_batch_size():
    # K=3 up to batch 4, K=0 from 5 on: vLLM's Dynamic SD semantics via effective_k
    engine = Engine(settings(num_speculative_tokens=3, schedule=((1, 4, 3), (5, 8, 0))))
    steps = run(engine, requests=6, max_tokens=[20, 40, 60, 80, 100, 120])
    by_batch = {s.batch_size: s.k for s in steps if s.batch_size}
    assert by_batch[6] == by_batch[5] == 0
    assert by_batch[4] == by_batch[1] == 3
    assert all(s.num_drafts == 0 for s in steps if s.batch_size >= 5)
    assert any(s.num_drafts > 0 for s in steps if 0 < s.batch_size <= 4)


def test_method_none_never_drafts():
    engine = Engine(SimulatorSettings(method="none", noise=0.0))
    steps = run(engine, requests=3, max_tokens=20)
    assert all(s.num_drafts == 0 and s.k == 0 for s in steps)
    assert sum(s.generation_tokens for s in steps) == 60


def test_continuous_batching_respects_max_batch_size_and_exact_lengths():
    engine = Engine(settings(max_batch_size=8))
    steps = run(engine, requests=20, max_tokens=33)
    assert max(s.running for s in steps) <= 8
    assert max(s.waiting for s in steps) == 12
    finished = [f for s in steps for f in s.finished]
    assert len(finished) == 20
    assert all(f.generation_tokens == 33 and f.finish_reason == "length" for f in finished)
    for f in finished:
        assert f.e2e_latency >= f.time_to_first_token >= f.queued_time >= 0
        assert f.mean_time_per_output_token == pytest.approx(f.decode_time / 32)


def test_a_schedules_k_zero_steps_cost_more_than_speculation_off():
    """K = 0 in a schedule is not speculation off: the drafter's first pass still runs each step."""
    in_schedule = Engine(settings(num_speculative_tokens=3, schedule=((1, 1, 3), (2, 8, 0)), max_batch_size=8))
    off = Engine(settings(method="none", num_speculative_tokens=0, max_batch_size=8))
    scheduled_steps, off_steps = run(in_schedule, requests=8, max_tokens=200), run(off, requests=8, max_tokens=200)
    at_eight = [s.duration for s in scheduled_steps if s.batch_size == 8 and s.num_drafts == 0]
    plain = [s.duration for s in off_steps if s.batch_size == 8]
    assert at_eight and plain
    extra = in_schedule.cost.first_pass_time(8, "sequential", draft_scale=in_schedule.draft_scale)
    assert min(at_eight) == pytest.approx(min(plain) + extra, rel=1e-6)


def test_engine_throughput_ratio_matches_the_cost_model():
    """Speculation's simulated speedup at a fixed batch equals E_K * T(B,0) / T(B,K)."""
    spec = Engine(settings(max_batch_size=8))
    base = Engine(settings(method="none", num_speculative_tokens=0, max_batch_size=8))
    spec_steps, base_steps = run(spec, requests=8, max_tokens=3000), run(base, requests=8, max_tokens=3000)
    spec_time = sum(s.duration for s in spec_steps)
    base_time = sum(s.duration for s in base_steps)
    cost = spec.cost
    predicted = (acceptance_profile("eagle3", "chat").expected_tokens(4) * cost.step_time(8, 0, "none")
                 / cost.step_time(8, 4, "sequential"))
    assert base_time / spec_time == pytest.approx(predicted, rel=0.05)


def test_workload_switch_changes_acceptance_and_unknown_workloads_are_refused():
    engine = Engine(settings(method="ngram", num_speculative_tokens=5))
    chat = run(engine, requests=16, max_tokens=400)
    engine.set_workload("summarization")
    summarization = run(engine, requests=16, max_tokens=400)

    def rate(steps):
        return sum(s.num_accepted_tokens for s in steps) / sum(s.num_draft_tokens for s in steps)

    assert rate(summarization) > rate(chat) + 0.2
    with pytest.raises(KeyError, match="known"):
        engine.set_workload("poetry")


def test_invalid_settings_name_the_field():
    with pytest.raises(ValueError, match="costModel: unknown 'tpu'"):
        Engine(settings(cost_model="tpu"))
    with pytest.raises(ValueError, match="schedule: .*first range must start at batch size 1"):
        Engine(settings(schedule=((2, 4, 3),)))


def mean_per_token_latency(settings_: SimulatorSettings, *, qps: float, prompt: int, output: int,
                           seconds: float) -> float:
    """Poisson arrivals in virtual time; mean request_time_per_output_token after a warm-up third."""
    import numpy as np

    engine = Engine(settings_)
    rng = np.random.default_rng(11)
    arrivals = np.cumsum(rng.exponential(1.0 / qps, size=int(qps * seconds * 1.5) + 1))
    now, next_arrival, samples = 0.0, 0, []
    while now < seconds:
        while next_arrival < len(arrivals) and arrivals[next_arrival] <= now:
            engine.add(SimRequest(str(next_arrival), prompt, output, float(arrivals[next_arrival])))
            next_arrival += 1
        if engine.idle:
            now = float(arrivals[next_arrival])
            continue
        plan = engine.plan_step(now)
        now += plan.duration
        stats = engine.complete_step(plan, now)
        if now > seconds / 3:
            samples += [f.mean_time_per_output_token for f in stats.finished]
    return sum(samples) / len(samples)


def test_mtp_speedup_under_poisson_load_decays_like_the_steady_state_model():
    """The discrete-event engine reproduces the calibrated QPS shape (MTP 1.6x at low load, ~1x near capacity).

    Outputs and prompts are 4x shorter than the calibration's 1k/1k and the rates 4x higher:
    the same running batch by Little's law, a quarter of the simulated steps.
    """
    def ratio(qps: float) -> float:
        common = {"cost_model": "h100x4-moe80b", "noise": 0.05, "max_batch_size": 256}
        spec = mean_per_token_latency(settings(method="mtp", num_speculative_tokens=1, **common),
                                      qps=qps, prompt=256, output=256, seconds=120)
        base = mean_per_token_latency(settings(method="none", num_speculative_tokens=0, **common),
                                      qps=qps, prompt=256, output=256, seconds=120)
        return base / spec

    low, high = ratio(4.0), ratio(26.0)
    print(f"\nMTP engine: {low:.2f}x at 1 QPS-equivalent, {high:.2f}x at 6.5 QPS-equivalent (published 1.6x, ~1.0x)")
    assert low == pytest.approx(1.62, abs=0.15)
    assert high < 1.2


def test_accepted_per_position_counts_prefixes():
    from specinfer.runtime.sim.engine import accepted_per_position

    assert accepted_per_position([0, 1, 3, 3, 2], 3) == [4, 3, 2]
    assert accepted_per_position([0, 0], 2) == [0, 0]
    assert accepted_per_position([], 0) == []
