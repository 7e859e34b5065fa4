"""The policy's model: acceptance estimation and extrapolation, the step-cost fit, the objective."""

from __future__ import annotations

import random

import pytest

from specinfer.bench.observations import synthetic_observation
from specinfer.operator.tuner.policy import OFF, CostPrior, DraftConfig, TuningInput
from specinfer.operator.tuner.policy.acceptance import estimate_from, expected_tokens, extrapolated_prefix
from specinfer.operator.tuner.policy.cost import CostModel
from specinfer.operator.tuner.policy.goodput import MAX_RANGES, Model, best_dense, goodput, limit_ranges
from specinfer.operator.tuner.pure.target import simulator_cost_prior
from specinfer.runtime.methods.registry import draft_scale
from specinfer.runtime.methods.schedule import schedule_problems
from specinfer.runtime.sim.model import COST_MODELS, acceptance_profile

pytestmark = pytest.mark.unit

H100 = COST_MODELS["h100-llama8b"]
CHAT = acceptance_profile("eagle3", "chat")
PRIOR = CostPrior(floor=H100.floor_s, compute_per_token=H100.compute_per_token_s, kv_per_sequence=H100.kv_per_seq_s,
                  draft_pass=H100.draft_pass_s, draft_token=H100.draft_per_token_s)


def truth(batch_size: int, k: int) -> float:
    return H100.step_time(batch_size, k, "sequential")


def observation(k: int, schedule=None, batches=None, signals="specinfer", rng=None):
    return synthetic_observation(
        time=600.0, window_seconds=60.0, method="eagle3", num_speculative_tokens=k, schedule=schedule,
        applied_since=0.0, batch_sizes=batches or {4: 1.0}, prefix=CHAT.prefix_probs(k), step_time=truth,
        signals=signals, rng=rng)


def test_acceptance_from_plugin_series_is_exact():
    estimate = estimate_from(observation(4))
    assert estimate.prefix == pytest.approx(CHAT.prefix_probs(4), abs=1e-9)


def test_vllm_series_under_a_schedule_are_corrected_with_the_batch_mix():
    schedule = [[1, 8, 4], [9, 64, 1]]
    mix = {4: 0.5, 32: 0.5}  # half the engine's time at K=4, half at K=1
    plugin = estimate_from(observation(4, schedule, mix))
    standard = observation(4, schedule, mix, signals="vllm")
    corrected = estimate_from(standard, truth)
    naive = [accepted / standard.drafts for accepted in standard.accepted_per_position]
    assert plugin.prefix == pytest.approx(CHAT.prefix_probs(4))
    assert corrected.prefix == pytest.approx(plugin.prefix, rel=1e-6)
    assert naive[3] < 0.5 * plugin.prefix[3]  # what the uncorrected ratio would have believed


def test_tail_extrapolation_follows_the_conditional_rate():
    estimate = estimate_from(observation(3))
    prefix = extrapolated_prefix(estimate, 8)
    true = CHAT.prefix_probs(8)
    assert prefix[:3] == pytest.approx(true[:3])
    assert all(b <= a for a, b in zip(prefix, prefix[1:], strict=False))
    assert prefix[5] == pytest.approx(true[5], rel=0.25)
    assert expected_tokens(prefix, 0) == 1.0


def test_cost_fit_learns_from_step_latencies_and_keeps_the_prior_elsewhere():
    wrong = CostPrior(floor=H100.floor_s * 1.5, compute_per_token=H100.compute_per_token_s * 0.6,
                      kv_per_sequence=H100.kv_per_seq_s, draft_pass=H100.draft_pass_s,
                      draft_token=H100.draft_per_token_s)
    fitted = CostModel.from_state(None, wrong, "sequential")
    seen = (1, 8, 24, 48)

    def worst_error() -> float:
        return max(abs(fitted.step_time(b, 3) / truth(b, 3) - 1) for b in seen)

    before = worst_error()
    rng = random.Random(3)
    for _ in range(20):
        fitted.learn(observation(3, batches={1: 0.2, 8: 0.3, 24: 0.3, 48: 0.2}, rng=rng))
    assert before > 0.2 and worst_error() < 0.06
    untouched = CostModel.from_state(None, PRIOR, "sequential")
    assert untouched.step_time(16, 2) == pytest.approx(truth(16, 2), rel=0.01)


def test_cost_fit_from_vllm_pooled_latency_moves_towards_truth():
    wrong = CostPrior(floor=H100.floor_s * 1.4, compute_per_token=H100.compute_per_token_s,
                      kv_per_sequence=H100.kv_per_seq_s, draft_pass=H100.draft_pass_s,
                      draft_token=H100.draft_per_token_s)
    fitted = CostModel.from_state(None, wrong, "sequential")
    for batch in (1, 2, 4, 8, 16):
        fitted.learn(observation(3, batches={batch: 1.0}, signals="vllm"))
    assert abs(fitted.step_time(4, 3) / truth(4, 3) - 1) < 0.05


# The real vLLM CPU engine with a tiny model (runtime/methods/cost_presets.py `cpu-tiny`): a speculative
# step's K-independent bookkeeping (~0.6 ms) is a fifth of a decode step at batch 1.
CPU_TINY = COST_MODELS["cpu-tiny"]
CPU_PRIOR = CostPrior(floor=CPU_TINY.floor_s, compute_per_token=CPU_TINY.compute_per_token_s,
                      knee_sharpness=CPU_TINY.knee_sharpness, kv_per_sequence=CPU_TINY.kv_per_seq_s,
                      draft_pass=CPU_TINY.draft_pass_s, draft_token=CPU_TINY.draft_per_token_s,
                      speculation_step=CPU_TINY.speculation_step_s,
                      speculation_per_sequence=CPU_TINY.speculation_per_seq_s)


def cpu_truth(batch_size: int, k: int) -> float:
    return CPU_TINY.step_time(batch_size, k, "sequential" if k else "none")


@pytest.mark.parametrize("k", [1, 4, 8])
def test_the_prior_reproduces_a_speculative_steps_k_independent_cost(k):
    cost = CostModel.from_state(None, CPU_PRIOR, "sequential")
    assert cost.step_time(1, k) == pytest.approx(cpu_truth(1, k), rel=1e-6)
    assert cost.step_time(1, 0) == pytest.approx(cpu_truth(1, 0), rel=1e-6)  # no speculation: no overhead


def test_an_always_right_draft_observed_at_one_k_is_lengthened_where_drafting_pays():
    """Seen only at K=4 and batch 1, the overhead must not be charged to the draft passes: with it in
    the prior the fit keeps an extra K at a draft pass's cost, and the longer K wins (the real CPU
    engine's crossover test starts here)."""
    cost = CostModel.from_state(None, CPU_PRIOR, "sequential")
    always_right = [1.0] * 8
    for _ in range(5):
        cost.learn(synthetic_observation(
            time=600.0, window_seconds=15.0, method="draft_model", num_speculative_tokens=4, schedule=None,
            applied_since=0.0, batch_sizes={1: 1.0}, prefix=always_right, step_time=cpu_truth))
    model = Model(always_right, cost, cost.multipliers())
    assert model.step_time(1, 8) - model.step_time(1, 4) == pytest.approx(cpu_truth(1, 8) - cpu_truth(1, 4), rel=0.05)
    dense = best_dense(model, TuningInput(method="draftModel", k_min=1, k_max=8, max_batch_size=64),
                       [0] + [4] * 64, [(1, 1.0)])
    assert dense[1] == 8


def test_step_cost_cells_written_before_a_term_was_added_are_forgotten():
    cost = CostModel.from_state(None, CPU_PRIOR, "sequential")
    cost.learn(observation(3, batches={1: 1.0}))
    stored = cost.to_state()
    # before the speculation term (two terms short): forgotten
    old = {"cells": {key: (x[:-2], seconds, weight) for key, (x, seconds, weight) in stored["cells"].items()}}
    assert CostModel.from_state(stored, CPU_PRIOR, "sequential").cells
    restored = CostModel.from_state(old, CPU_PRIOR, "sequential")
    assert restored.cells == {}
    assert restored.step_time(1, 3) == pytest.approx(cpu_truth(1, 3), rel=1e-6)  # the prior alone, no crash


def test_step_cost_cells_written_before_the_prefill_term_are_kept_with_no_prompt_tokens():
    cost = CostModel.from_state(None, CPU_PRIOR, "sequential")
    cost.learn(observation(3, batches={1: 1.0}))
    stored = cost.to_state()
    old = {"k0Split": True,
           "cells": {key: (x[:-1], seconds, weight) for key, (x, seconds, weight) in stored["cells"].items()}}
    restored = CostModel.from_state(old, CPU_PRIOR, "sequential")
    assert restored.cells.keys() == cost.cells.keys()
    assert all(x[-1] == 0.0 and len(x) == len(cost.cells[key][0]) for key, (x, _, _) in restored.cells.items())
    assert restored.prompt_per_generated == 0.0


def _true_model(k_max: int) -> Model:
    cost = CostModel.from_state(None, PRIOR, "sequential")
    return Model(CHAT.prefix_probs(k_max), cost, cost.multipliers())


def test_best_k_falls_with_batch_size_and_respects_bounds():
    spec = TuningInput(method="eagle3", k_min=2, k_max=6, max_batch_size=256)
    dense = best_dense(_true_model(6), spec, [0] * 257, [(8, 1.0)])
    assert dense[1] >= dense[64] >= dense[256]
    assert all(k == 0 or 2 <= k <= 6 for k in dense[1:])
    config = DraftConfig.from_dense(dense)
    assert schedule_problems(config.schedule, config.num_speculative_tokens) == []
    assert config.dense(256) == dense


def test_k_zero_only_when_allowed():
    costly = CostPrior(floor=0.01, compute_per_token=1e-3, draft_pass=0.01)  # compute-bound at once
    cost = CostModel.from_state(None, costly, "sequential")
    model = Model(CHAT.prefix_probs(8), cost, cost.multipliers())
    allowed = best_dense(model, TuningInput(method="eagle3", max_batch_size=64), [0] * 65, [(32, 1.0)])
    forbidden = best_dense(model, TuningInput(method="eagle3", max_batch_size=64, allow_disable=False),
                           [0] * 65, [(32, 1.0)])
    assert allowed[64] == 0
    assert min(forbidden[1:]) >= 1


def test_single_k_when_schedules_are_not_allowed():
    spec = TuningInput(method="eagle3", max_batch_size=64, allow_schedule=False)
    dense = best_dense(_true_model(8), spec, [0] * 65, [(4, 1.0)])
    assert len(set(dense[1:])) == 1


def test_configs_from_dense():
    assert DraftConfig.from_dense([0, 0, 0]) == OFF
    assert DraftConfig.from_dense([0, 3, 3]) == DraftConfig(num_speculative_tokens=3)
    assert DraftConfig.from_dense([0, 4, 2, 0]).to_json() == {"numSpeculativeTokens": 4,
                                                              "schedule": [[1, 1, 4], [2, 2, 2], [3, 3, 0]]}


def test_schedules_are_capped_to_a_readable_number_of_ranges():
    dense = [0] + [16 - b // 8 for b in range(1, 129)]
    merged = limit_ranges(_true_model(16), dense, MAX_RANGES)
    assert len(DraftConfig.from_dense(merged).schedule) <= MAX_RANGES
    assert set(merged[1:]) <= set(dense[1:])


def test_a_schedules_k_zero_steps_are_learnt_with_the_drafters_first_pass_and_lose_to_speculation_off():
    """The real CPU engine's high-load miss (issue 18): a schedule's K = 0 steps still run the drafter's
    first pass (the target as its own draft: as long as a plain step). Learnt as plain decode steps they
    made plain decode look twice as slow, and K=4 at every batch size looked best. Learnt as their own
    cells, the pass is priced, and where the schedule drafts nothing, speculation off wins."""
    scale = draft_scale("draftModel")

    def engine(batch_size: int, k: int) -> float:  # every observed step runs under the speculative config
        return CPU_TINY.step_time(batch_size, k, "sequential", draft_scale=scale, speculative=True)

    cost = CostModel.from_state(None, simulator_cost_prior("cpu-tiny", "draftModel"), "sequential")
    schedule = [[1, 14, 4], [15, 64, 0]]
    for batches in ({1: 0.5, 2: 0.5}, {40: 0.5, 48: 0.5}, {40: 0.5, 48: 0.5}, {40: 0.5, 48: 0.5}):
        cost.learn(synthetic_observation(
            time=600.0, window_seconds=30.0, method="draft_model", num_speculative_tokens=4, schedule=schedule,
            applied_since=0.0, batch_sizes=batches, prefix=[1.0] * 4, step_time=engine))
    assert {"40:0s", "48:0s"} <= set(cost.cells)
    model = Model([1.0] * 4, cost, cost.multipliers())
    plain = CPU_TINY.step_time(48, 0, "none")
    assert model.step_time(48, 0, speculative=True) == pytest.approx(engine(48, 0), rel=0.05)
    assert model.step_time(48, 0) == pytest.approx(plain, rel=0.05)
    spec = TuningInput(method="draftModel", k_min=1, k_max=4, max_batch_size=64)
    current = [0] + [4] * 14 + [0] * 50
    assert best_dense(model, spec, current, [(44, 1.0)]) == [0] * 65
    low = best_dense(model, spec, current, [(1, 0.5), (2, 0.5)])
    assert low[1] == 4


def test_k0_cells_from_before_the_split_are_forgotten_the_rest_kept():
    """States written before a schedule's K = 0 steps had cells of their own may hold them as plain
    decode ("B:0"): those cells are dropped once, the others kept."""
    cost = CostModel.from_state(None, CPU_PRIOR, "sequential")
    cost.learn(observation(3, schedule=[[1, 8, 3], [9, 64, 0]], batches={4: 0.5, 32: 0.5}))
    stored = cost.to_state()
    assert set(stored["cells"]) == {"4:3", "32:0s"}
    old = {"cells": {"4:3": stored["cells"]["4:3"], "32:0": stored["cells"]["32:0s"]}}  # the old key
    assert set(CostModel.from_state(old, CPU_PRIOR, "sequential").cells) == {"4:3"}
    assert set(CostModel.from_state({**old, "k0Split": True}, CPU_PRIOR, "sequential").cells) == {"4:3", "32:0"}


# -- drafting as the engine's drafter does it (issue 42; runtime/methods/drafters.py) --------------------------

STANDALONE = PRIOR.model_copy(update={"drafted_k": "startup", "zero_step": "startup_k"})


def test_a_drafter_that_drafts_its_startup_k_pays_it_on_every_step_k0_included():
    """vLLM 0.33.0's V2 draft model: a schedule's K only changes what is verified."""
    follows, startup = CostModel(PRIOR, "sequential", {}), CostModel(STANDALONE, "sequential", {})
    theta = follows.multipliers()
    eight = follows.step_time(16, 8, theta)
    assert startup.step_time(16, 8, theta) == pytest.approx(eight)
    # K = 2 under a config of K = 8: eight draft passes, three verified tokens per request
    lowered = startup.step_time(16, 2, theta, speculative=True, config_k=8)
    assert lowered > follows.step_time(16, 2, theta, speculative=True)
    assert lowered - follows.step_time(16, 2, theta, speculative=True) == pytest.approx(
        6 * (PRIOR.draft_pass + 16 * PRIOR.draft_token))
    # K = 0 in that schedule: all eight passes, nothing verified beyond the bonus token
    assert startup.step_time(16, 0, theta, speculative=True, config_k=8) == pytest.approx(
        follows.step_time(16, 0, theta) + 8 * (PRIOR.draft_pass + 16 * PRIOR.draft_token))
    # in place, a K judged alone pays the running envelope; a config pays its own largest K, its envelope
    # (another largest K is another envelope: a rollout, runtime/contract/live_schedule/envelope.py)
    in_place = CostModel(STANDALONE.model_copy(update={"startup_k": 6}), "sequential", {})
    assert in_place.step_time(16, 2, theta, speculative=True) == pytest.approx(
        startup.step_time(16, 2, theta, speculative=True, config_k=6))
    assert in_place.step_time(16, 2, theta, speculative=True, config_k=2) == pytest.approx(
        follows.step_time(16, 2, theta, speculative=True))


def test_a_block_drafter_stores_context_only_at_k0_and_drafts_its_startup_block():
    block = CostModel(PRIOR.model_copy(update={"drafted_k": "startup", "zero_step": "context_only"}), "parallel", {})
    theta = block.multipliers()
    assert block.step_time(8, 0, theta, speculative=True, config_k=15) == pytest.approx(block.step_time(8, 0, theta))
    wide = block.step_time(8, 3, theta, speculative=True, config_k=15)
    narrow = CostModel(PRIOR, "parallel", {}).step_time(8, 3, theta, speculative=True)
    assert wide - narrow == pytest.approx(PRIOR.draft_token * 8 * 12)  # one pass, 15 tokens drafted, not 3


def test_the_objective_prices_a_schedule_under_the_drafters_startup_k():
    """Goodput of a schedule K=4 at low batch, K=0 above: for the draft model the K=0 range still pays 4 passes."""
    follows = CostModel(PRIOR, "sequential", {})
    startup = CostModel(STANDALONE, "sequential", {})
    prefix = CHAT.prefix_probs(8)
    dense = [0] + [4] * 8 + [0] * 56
    mix = [(48, 1.0)]
    cheap = goodput(Model(prefix, follows, follows.multipliers()), dense, mix)
    dear = goodput(Model(prefix, startup, startup.multipliers()), dense, mix)
    assert dear < 0.85 * cheap  # 48 requests pay four eager draft passes they verify nothing of
    off = [0] * 65
    assert goodput(Model(prefix, startup, startup.multipliers()), off, mix) == pytest.approx(
        goodput(Model(prefix, follows, follows.multipliers()), off, mix))


def test_a_probes_single_window_survives_a_memory_full_of_one_k():
    """The memory holds MAX_CELLS cells. Full of K=1 at every batch size of a long peak, one window of a
    schedule's K = 0 at a few of them (a probe) must stay -- through its own window and the K=1 windows
    after it -- or the probe measured nothing and runs again."""
    from specinfer.operator.tuner.policy.cost import MAX_CELLS
    cost = CostModel.from_state(None, PRIOR, "sequential")
    rng = random.Random(4)
    sizes = list(range(100, 100 + MAX_CELLS))
    for _ in range(6):  # heavy, well-measured K=1 cells filling the memory
        cost.learn(observation(1, batches={b: 1 / len(sizes) for b in sizes}, rng=rng))
    assert len(cost.cells) == MAX_CELLS
    probe = ((1, 139, 1), (140, 143, 0), (144, 256, 1))
    cost.learn(observation(1, schedule=probe, batches=dict.fromkeys((140, 141, 142, 143), 0.25), rng=rng))
    probed = {key for key in cost.cells if key.endswith(":0s")}
    assert probed == {f"{b}:0s" for b in (140, 141, 142, 143)}, sorted(cost.cells)
    for _ in range(3):  # the load goes on at K=1, at batch sizes the memory has not seen
        cost.learn(observation(1, batches=dict.fromkeys((170, 171), 0.5), rng=rng))
    assert probed <= set(cost.cells) and len(cost.cells) == MAX_CELLS
    assert {"170:1", "171:1"} <= set(cost.cells)  # this window's cells are kept too: older K=1 ones went
    # a K=1 window over most of the sizes it had and a few new ones: the probe's cells are still the rarer kind
    cost.learn(observation(1, batches=dict.fromkeys([*sizes[4:56], 172, 173, 174, 175], 1 / 56), rng=rng))
    assert probed <= set(cost.cells) and len(cost.cells) == MAX_CELLS
