"""The pure engine model: acceptance arithmetic and the shape of T(B, K)."""

from __future__ import annotations

from itertools import pairwise

import pytest

from specinfer.runtime.sim.model import (
    COST_MODELS,
    METHODS,
    WORKLOADS,
    AcceptanceProfile,
    acceptance_profile,
    cost_model,
    restart_seconds,
)

pytestmark = pytest.mark.unit


def test_prefix_probs_are_cumulative_products_with_a_decaying_tail():
    profile = AcceptanceProfile("t", conditional=(0.8, 0.5), tail_decay=0.5)
    assert profile.prefix_probs(4) == pytest.approx([0.8, 0.4, 0.4 * 0.25, 0.4 * 0.25 * 0.125])
    assert profile.expected_tokens(2) == pytest.approx(1 + 0.8 + 0.4)
    assert profile.expected_tokens(0) == 1.0


def test_rates_outside_unit_interval_are_rejected():
    with pytest.raises(ValueError, match="conditional rates"):
        AcceptanceProfile("bad", conditional=(1.2,))


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("workload", WORKLOADS)
def test_every_profile_is_non_increasing_in_position(method, workload):
    probs = acceptance_profile(method, workload).prefix_probs(16)
    assert all(later <= earlier for earlier, later in pairwise(probs))
    if method == "none":
        assert probs == [0.0] * 16


def test_unknown_names_list_the_known_ones():
    with pytest.raises(KeyError, match="known: .*eagle3"):
        acceptance_profile("medusa", "chat")
    with pytest.raises(KeyError, match="known: chat"):
        acceptance_profile("eagle3", "poetry")
    with pytest.raises(KeyError, match="h100-llama8b"):
        cost_model("tpu")


@pytest.mark.parametrize("name", sorted(COST_MODELS))
def test_step_time_grows_with_batch_and_k_and_has_a_memory_bound_floor(name):
    cost = COST_MODELS[name]
    assert cost.step_time(1, 0, "none") >= cost.floor_s
    # memory-bound: doubling a tiny batch costs far less than double
    assert cost.step_time(2, 0, "none") < 1.2 * cost.step_time(1, 0, "none")
    # compute-bound: at large token counts the slope approaches compute_per_token
    big = cost.step_time(1024, 0, "none")
    assert big > 0.8 * cost.compute_per_token_s * 1024
    for k in range(6):
        assert cost.step_time(8, k + 1, "sequential") > cost.step_time(8, k, "sequential")
        assert cost.step_time(8, k, "sequential") < cost.step_time(16, k, "sequential")


def test_sequential_drafting_costs_more_than_parallel_and_a_lookup_at_large_k():
    cost = COST_MODELS["h100-llama8b"]
    sequential = cost.step_time(4, 8, "sequential")
    parallel = cost.step_time(4, 8, "parallel")
    lookup = cost.step_time(4, 8, "lookup")
    assert sequential > parallel > lookup > cost.step_time(4, 0, None)
    # parallel drafting is ~flat in K, sequential is linear
    assert cost.draft_time(4, 16, "parallel") < 2 * cost.draft_time(4, 2, "parallel")
    assert cost.draft_time(4, 16, "sequential") == pytest.approx(8 * cost.draft_time(4, 2, "sequential"))


def test_k_zero_means_no_drafting_cost():
    cost = COST_MODELS["h100-llama8b"]
    assert cost.step_time(8, 0, "sequential") == cost.step_time(8, 0, None) == cost.step_time(8, 0, "lookup")


@pytest.mark.parametrize("drafting", ["sequential", "parallel"])
def test_a_schedules_k_zero_step_still_runs_the_drafters_first_pass(drafting):
    """vLLM's model drafters run their first pass in a Dynamic SD K = 0 step to keep their KV cache in
    step (llm_base_proposer.py); n-gram/suffix lookups run nothing."""
    cost = COST_MODELS["h100-llama8b"]
    plain = cost.step_time(8, 0, drafting)
    in_schedule = cost.step_time(8, 0, drafting, draft_scale=2.0, speculative=True)
    assert in_schedule == pytest.approx(plain + cost.first_pass_time(8, drafting, draft_scale=2.0))
    assert in_schedule > plain
    assert cost.step_time(8, 0, "lookup", speculative=True) == cost.step_time(8, 0, "lookup")


def test_restart_seconds_per_preset():
    assert restart_seconds("h100x4-llama70b") > restart_seconds("h100-llama8b") > 0
