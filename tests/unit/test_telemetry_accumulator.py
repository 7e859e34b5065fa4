"""The pure accumulator, driven with vLLM 0.33.0's own stats classes (loaded from the cached wheel)."""

from __future__ import annotations

import random

import pytest

from specinfer.bench.wheel_stats import StepRequest, build_step, vllm_from_wheel
from specinfer.runtime.contract.telemetry.accumulator import StepAccumulator
from specinfer.runtime.contract.telemetry.series import (
    BATCH_SIZE_EDGES,
    batch_size_labels,
    batch_size_range,
    bucket_lookup,
)

pytestmark = [pytest.mark.unit, pytest.mark.wheel]  # vLLM's stats classes, executed from the pinned wheel


@pytest.fixture(scope="module")
def vllm_stats():
    with vllm_from_wheel() as modules:
        yield modules


def test_dynamic_schedule_denominators_make_per_position_acceptance_unbiased(vllm_stats):
    """K=4 at batch 2, K=2 at batch 4 (a Dynamic SD schedule): positions 2-3 are drafted only at batch 2."""
    rng = random.Random(7)
    true_conditional = [0.8, 0.7, 0.6, 0.5]
    accumulator = StepAccumulator(max_k=4)
    drafted_at = [0] * 4
    accepted_at = [0] * 4
    drafts = 0
    now = 0.0
    for step in range(400):
        batch, k = (2, 4) if step % 2 else (4, 2)
        requests = []
        for _ in range(batch):
            accepted = 0
            while accepted < k and rng.random() < true_conditional[accepted]:
                accepted += 1
            requests.append(StepRequest(drafted=k, accepted=accepted, last_output=now))
            drafts += 1
            for position in range(k):
                drafted_at[position] += 1
                accepted_at[position] += position < accepted
        now += 0.02
        accumulator.record(*build_step(requests, now=now, num_spec_tokens=4))
    assert accumulator.draft_per_pos == drafted_at
    assert accumulator.accepted_per_pos == accepted_at
    unbiased = [a / d for a, d in zip(accumulator.accepted_per_pos, accumulator.draft_per_pos, strict=True)]
    biased = [a / drafts for a in accumulator.accepted_per_pos]  # what vLLM's series alone allow
    prefix = [0.8, 0.8 * 0.7, 0.8 * 0.7 * 0.6, 0.8 * 0.7 * 0.6 * 0.5]
    for position in range(4):
        assert unbiased[position] == pytest.approx(prefix[position], abs=0.06)
    # positions drafted only at batch 2 (a third of the drafts) read ~3x too low without the denominators
    assert biased[3] < unbiased[3] / 2
    assert accumulator.steps_by_k == [0, 0, 200, 0, 200]


def test_effective_k_is_the_longest_draft_verified(vllm_stats):
    accumulator = StepAccumulator(max_k=5)
    # n-gram style: drafts of different lengths in one step
    step = [StepRequest(drafted=3, accepted=1, last_output=0.0), StepRequest(drafted=1, accepted=0, last_output=0.0)]
    assert accumulator.record(*build_step(step, now=0.05, num_spec_tokens=5))
    assert accumulator.step_k == 3
    assert accumulator.draft_per_pos == [2, 1, 1, 0, 0]
    assert accumulator.accepted_per_pos == [1, 0, 0, 0, 0]
    # a step that verified no drafts (spec_decoding_stats is None): K = 0
    assert accumulator.record(*build_step([StepRequest(last_output=0.05)], now=0.08, num_spec_tokens=5))
    assert accumulator.step_k == 0
    assert accumulator.steps_by_k == [1, 0, 0, 1, 0, 0]


def test_step_time_is_the_shortest_inter_token_latency(vllm_stats):
    accumulator = StepAccumulator(max_k=2)
    requests = [
        StepRequest(drafted=2, accepted=2, last_output=10.000),  # decoded in the previous step
        StepRequest(drafted=2, accepted=0, last_output=9.700),   # skipped a while (e.g. preempted)
        StepRequest(),                                           # prefill finished: TTFT, no ITL
    ]
    assert accumulator.record(*build_step(requests, now=10.035, num_spec_tokens=2))
    assert accumulator.step_seconds == pytest.approx(0.035)
    assert accumulator.step_k == 2


def test_prefill_only_step_and_missing_stats_give_no_time(vllm_stats):
    accumulator = StepAccumulator(max_k=2)
    scheduler_stats, iteration_stats = build_step([StepRequest(), StepRequest()], now=1.0, num_spec_tokens=2)
    assert not accumulator.record(scheduler_stats, iteration_stats)
    assert accumulator.steps_by_k == [1, 0, 0]
    assert not accumulator.record(scheduler_stats, None)  # no outputs this step
    assert not accumulator.record(None, iteration_stats)  # stats went to another API server
    assert accumulator.steps_by_k == [2, 0, 0]


def test_batch_size_counts_requests_that_finished_in_the_step(vllm_stats):
    accumulator = StepAccumulator(max_k=1)
    requests = [StepRequest(drafted=1, accepted=1, last_output=0.0, finished=index < 2) for index in range(5)]
    scheduler_stats, iteration_stats = build_step(requests, now=0.03, num_spec_tokens=1)
    assert scheduler_stats.num_running_reqs == 3
    assert accumulator.record(scheduler_stats, iteration_stats)
    assert accumulator.step_batch_size == 5
    assert batch_size_labels()[accumulator.step_bucket] == "5-6"


def test_more_positions_than_configured_grow_the_totals(vllm_stats):
    accumulator = StepAccumulator(max_k=1)
    accumulator.record(*build_step([StepRequest(drafted=3, accepted=2, last_output=0.0)], now=0.1, num_spec_tokens=3))
    assert accumulator.draft_per_pos == [1, 1, 1]
    assert accumulator.steps_by_k == [0, 0, 0, 1]


def test_observe_matches_record_for_the_same_step(vllm_stats):
    requests = [StepRequest(drafted=2, accepted=1, last_output=0.0),
                StepRequest(drafted=2, accepted=2, last_output=0.0)]
    scheduler_stats, iteration_stats = build_step(requests, now=0.04, num_spec_tokens=3)
    spec = scheduler_stats.spec_decoding_stats
    from_stats, direct = StepAccumulator(max_k=3), StepAccumulator(max_k=3)
    assert from_stats.record(scheduler_stats, iteration_stats)
    assert direct.observe(running=scheduler_stats.num_running_reqs, draft_per_pos=spec.num_draft_tokens_per_pos,
                          accepted_per_pos=spec.num_accepted_tokens_per_pos,
                          inter_token_latencies=list(iteration_stats.inter_token_latencies_iter),
                          time_to_first_tokens=list(iteration_stats.time_to_first_tokens_iter))
    for name in ("draft_per_pos", "accepted_per_pos", "steps_by_k", "step_k", "step_bucket", "step_batch_size"):
        assert getattr(from_stats, name) == getattr(direct, name), name
    assert from_stats.step_seconds == pytest.approx(direct.step_seconds)


def test_batch_size_buckets_cover_every_size_once():
    labels = batch_size_labels()
    table = bucket_lookup()
    assert len(labels) == len(BATCH_SIZE_EDGES) + 1
    for size in range(1, BATCH_SIZE_EDGES[-1] + 1):
        low, high = batch_size_range(labels[table[size]])
        assert low <= size <= high
    assert batch_size_range(labels[-1]) == (BATCH_SIZE_EDGES[-1] + 1, None)
    accumulator = StepAccumulator()
    assert accumulator.bucket(BATCH_SIZE_EDGES[-1] + 500) == len(BATCH_SIZE_EDGES)
    assert accumulator.bucket(0) == accumulator.bucket(1) == 0
