"""The step-cost fit's prefill term: prompts prefilled within decode steps are not learnt as decode.

vLLM schedules a new request's prefill beside the running decodes, so a step's time holds the prompts of
the requests that replaced those finishing. Per generated token that prefill is the same for every K, but
per step it grows with the tokens the step generates; a fit without a term for it charged it to the decode
terms and extrapolated them wrongly (docs/tuner.md, "Prefill"). Each test runs with the prompts reported
(vLLM's prompt-token counter) and, as its control, with the same steps and no report.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from specinfer.bench.observations import synthetic_observation
from specinfer.operator.tuner.policy import PolicyState, TuningInput, decide, parse_observation
from specinfer.operator.tuner.policy.acceptance import expected_tokens
from specinfer.operator.tuner.policy.config import DraftConfig
from specinfer.operator.tuner.policy.cost import PREFILL_TERM, CostModel
from specinfer.operator.tuner.policy.goodput import Model, sequence_speed
from specinfer.operator.tuner.policy.observation import observation_to_json
from specinfer.operator.tuner.policy.state import PendingChange
from specinfer.operator.tuner.policy.verification import verify
from specinfer.operator.tuner.pure.target import simulator_cost_prior
from specinfer.runtime.methods.cost_presets import cost_model

TRUTH = cost_model("cpu-small")  # prefill 0.8 ms per prompt token, a K=1 step at batch 8 ~60 ms
PREFIX = (0.75, 0.55, 0.4, 0.3)
RAG = 4.0  # prompt tokens per generated token: 1,024-token contexts, 256-token answers


def drafting_step(batch_size: int, k: int) -> float:
    return TRUTH.step_time(batch_size, k, "sequential", speculative=True)


def true_speed(batch_size: int, k: int, prompts: float) -> float:
    """What a request gets: E(K) tokens per step of decode plus the prefill of its successors' prompts."""
    gained = expected_tokens(PREFIX, k)
    decode = drafting_step(batch_size, k) if k else TRUTH.step_time(batch_size, 0, "sequential")
    return gained / (decode + TRUTH.prefill_per_token_s * prompts * batch_size * gained)


def learnt(prompts: float, *, reported: bool, prior_errors=(1.0, 1.0, 1.0), prefill_error: float = 1.0,
           ks=(2,)) -> CostModel:
    """The fit after three windows each at batch 2, 4 and 8 under each K of `ks` (a quiet phase), from a prior
    whose compute, draft pass and KV reads are `prior_errors` times the truth's, and its prefill
    `prefill_error` times."""
    compute, draft_pass, kv = prior_errors
    prior = simulator_cost_prior("cpu-small", "eagle3")
    prior = prior.model_copy(update={"compute_per_token": prior.compute_per_token * compute,
                                     "draft_pass": prior.draft_pass * draft_pass,
                                     "kv_per_sequence": prior.kv_per_sequence * kv,
                                     "prefill_per_token": TRUTH.prefill_per_token_s * prefill_error})
    cost = CostModel.from_state(None, prior, "sequential")
    now = 1000.0
    for k in ks:
        for batch_size in (2, 4, 8):
            for _ in range(3):
                obs = synthetic_observation(time=now, window_seconds=120, method="eagle3", num_speculative_tokens=k,
                                            schedule=None, applied_since=0, batch_sizes={batch_size: 1.0},
                                            prefix=PREFIX, step_time=drafting_step, prompt_per_generated=prompts,
                                            prefill_per_token=TRUTH.prefill_per_token_s)
                cost.learn(obs if reported else dataclasses.replace(obs, prompt_tokens=None))
                now += 30
    return cost


def gains(cost: CostModel, batch_size: int) -> list[float]:
    model = Model(PREFIX, cost, cost.multipliers())
    return [model.speed(batch_size, k, k > 0) / model.speed(batch_size, 0) - 1 for k in (1, 2, 3)]


def true_gains(batch_size: int, prompts: float) -> list[float]:
    return [true_speed(batch_size, k, prompts) / true_speed(batch_size, 0, prompts) - 1 for k in (1, 2, 3)]


@pytest.mark.parametrize(("prior_errors", "tolerance"), [((1.0, 1.0, 1.0), 0.005), ((0.7, 1.4, 2.0), 0.05)])
def test_long_prompts_do_not_bend_what_the_fit_extrapolates(prior_errors, tolerance):
    # Measured at batch 2-8 only; the schedule for batch 16 and 40 rests on the fit. With the prompts
    # reported, every K's gain over a plain step there is as right as the prior's shape lets it be; without,
    # the prefill was learnt as decode, and the gains came out 9-27 points low.
    for batch_size in (8, 16, 40):
        truth = true_gains(batch_size, RAG)
        reported = gains(learnt(RAG, reported=True, prior_errors=prior_errors), batch_size)
        assert reported == pytest.approx(truth, abs=tolerance)
        control = gains(learnt(RAG, reported=False, prior_errors=prior_errors), batch_size)
        assert max(abs(a - b) for a, b in zip(control, truth, strict=True)) > 0.2


def crossover(gains_at) -> int:
    """The largest batch size (up to 64) at which some K beats a plain step: where switching off starts to pay."""
    return max((b for b in range(1, 65) if max(gains_at(b)) > 0), default=0)


@pytest.mark.parametrize("prior_errors", [(1.0, 1.0, 1.0), (0.7, 1.4, 2.0), (1.3, 0.7, 1.0), (1.2, 1.2, 0.8)])
def test_the_crossover_is_not_pulled_early_by_long_prompts(prior_errors):
    truth = crossover(lambda b: true_gains(b, RAG))
    assert truth == 11
    fit, blind = (learnt(RAG, reported=reported, prior_errors=prior_errors) for reported in (True, False))
    reported, control = crossover(lambda b: gains(fit, b)), crossover(lambda b: gains(blind, b))
    assert abs(reported - truth) <= 3
    assert control <= truth - 3  # without the prompts it stops drafting where drafting pays


@pytest.mark.parametrize("prefill_error", [0.5, 1.0, 1.875, 3.0])
def test_with_several_k_measured_the_prefill_prior_need_not_be_right(prefill_error):
    # K=1, 2 and 3 measured at batch 2-8, as probing in place measures a drafter's neighbouring K: the K the
    # steps differ by separates prefill from decode, so a prefill prior 0.5-3x off (1.875x: the default,
    # computePerTokenSeconds, on cpu-small) still puts the crossover at 11-16. Without the prompts the prefill,
    # learnt as decode, put it at 27: drafting K=1 at batch 16 looked +4% where it loses 4%.
    truth = crossover(lambda b: true_gains(b, RAG))
    cost = learnt(RAG, reported=True, prefill_error=prefill_error, ks=(1, 2, 3))
    assert truth <= crossover(lambda b: gains(cost, b)) <= truth + 5
    control = learnt(RAG, reported=False, ks=(1, 2, 3))
    assert crossover(lambda b: gains(control, b)) >= 2 * truth


def test_with_one_k_measured_the_prefill_prior_decides_the_split():
    # The limit, as docs/tuner.md says: one K measured, prefill per step grows with the batch as the KV reads do,
    # so the prior's cost per prompt token decides how much of the step is prefill. 1.875x too dear (the
    # default on cpu-small) put the crossover at 17 where it is 11.
    cost = learnt(RAG, reported=True, prefill_error=1.875)
    assert crossover(lambda b: gains(cost, b)) == 17


def test_predicted_speed_includes_the_prefill_the_engine_serves():
    cost = learnt(RAG, reported=True)
    model = Model(PREFIX, cost, cost.multipliers())
    assert cost.prompt_per_generated == pytest.approx(RAG)
    assert model.prefill_per_token == pytest.approx(TRUTH.prefill_per_token_s * RAG, rel=0.02)
    for batch_size, k in ((4, 2), (8, 2), (30, 0), (30, 1)):
        assert model.speed(batch_size, k, k > 0) == pytest.approx(true_speed(batch_size, k, RAG), rel=0.02)


def test_without_prompts_reported_nothing_moves():
    # vLLM's series without the prompt counter, and every recorded tick from before it: the term stays at
    # its prior and adds nothing, so the fit and its predictions are the ones without the term.
    cost = learnt(RAG, reported=False)
    assert cost.prompt_per_generated == 0.0
    assert all(x[PREFILL_TERM] == 0.0 for x, _, _ in cost.cells.values())
    assert Model(PREFIX, cost, cost.multipliers()).prefill_per_token == 0.0


def window(now: float, prompts: float | None, batch_size: int = 4):
    return synthetic_observation(time=now, window_seconds=120, method="eagle3", num_speculative_tokens=2,
                                 schedule=None, applied_since=0, batch_sizes={batch_size: 1.0}, prefix=PREFIX,
                                 step_time=drafting_step, prompt_per_generated=prompts,
                                 prefill_per_token=TRUTH.prefill_per_token_s)


def test_the_remembered_prompt_ratio_survives_the_state_and_an_older_release_reads_it():
    tuning = TuningInput(method="eagle3", k_min=1, k_max=4, max_batch_size=64,
                         cost_prior=simulator_cost_prior("cpu-small", "eagle3"))
    _, state = decide(window(1000.0, RAG), tuning, None, 1000.0)
    stored = state.to_json()
    assert stored["prompt_per_generated"] == pytest.approx(RAG)
    # beside the cost state, whose shape a release before the term validates: cells, and flags
    assert all(isinstance(value, dict if key == "cells" else bool) for key, value in stored["cost"].items())
    restored = PolicyState.from_json(stored)
    cost = CostModel.from_state(restored.cost, tuning.cost_prior, "sequential", restored.prompt_per_generated)
    assert cost.prompt_per_generated == pytest.approx(RAG)
    _, later = decide(window(1030.0, 0.5), tuning, restored, 1030.0)
    assert later.prompt_per_generated == pytest.approx((RAG + 0.5) / 2)  # half way to each window's


@pytest.mark.parametrize("hostile", [-1.0, float("nan"), float("inf"), 1e300, "x", None, [4.0]])
def test_a_hostile_stored_prompt_ratio_is_forgotten_and_only_it(hostile):
    stored = PolicyState(method="eagle3", confirmations=2).to_json()
    restored = PolicyState.from_json({**stored, "prompt_per_generated": hostile})
    assert restored.prompt_per_generated == 0.0
    assert restored.method == "eagle3" and restored.confirmations == 2  # not a fresh state
    cost = CostModel.from_state({"cells": {}}, simulator_cost_prior("cpu-small", "eagle3"), "sequential", hostile)
    assert cost.prompt_per_generated == 0.0


def test_cells_stored_before_the_term_are_forgotten_once_prompts_are_reported():
    # Their steps held prefill their vectors did not price: kept while no prompts are reported (what they were
    # fitted as), forgotten by the first window that reports some.
    prior = simulator_cost_prior("cpu-small", "eagle3")
    cost = CostModel.from_state(None, prior, "sequential")
    cost.learn(dataclasses.replace(window(1000.0, RAG, 8), prompt_tokens=None))
    old = {"k0Split": True, "cells": {key: (x[:-1], s, w) for key, (x, s, w) in cost.to_state()["cells"].items()}}
    restored = CostModel.from_state(old, prior, "sequential")
    assert restored.cells.keys() == cost.cells.keys() == {"8:2"}
    restored.learn(dataclasses.replace(window(1030.0, RAG, 4), prompt_tokens=None))
    assert set(restored.cells) == {"8:2", "4:2"}
    assert not restored.to_state()["prefillPriced"]  # the next tick's model still knows it
    restored = CostModel.from_state(restored.to_state(), prior, "sequential")  # as each tick reads the state
    restored.learn(window(1060.0, RAG, 2))
    assert set(restored.cells) == {"2:2"}
    assert restored.to_state()["prefillPriced"]


def test_a_change_pending_from_before_the_term_is_verified_against_the_model_that_decided_it():
    # A release before the term stored a theta of the decode terms alone and calibrated against a model with no
    # prefill: its baseline is that model's, not one with today's prefill multiplier added (which counted the
    # prefill twice and could confirm a losing change). A change pending from this release stores the decode
    # terms where a release before reads all its terms, and the prefill multiplier beside them.
    tuning = TuningInput(method="eagle3", k_min=1, k_max=4, max_batch_size=64, confirmations=3,
                         cost_prior=simulator_cost_prior("cpu-small", "eagle3"))
    cost = learnt(RAG, reported=True)
    model = Model(PREFIX, cost, cost.multipliers())
    assert model.prefill_per_token > 0
    decode = [float(t) for t in model.theta[:PREFILL_TERM]]
    obs = window(1100.0, RAG)  # K=2 applied, as the pending change asks
    baselines = {}
    for prefill_theta in (0.0, float(model.theta[PREFILL_TERM])):
        st = PolicyState(pending=PendingChange(at=1000.0, config=DraftConfig(num_speculative_tokens=2),
                                               previous=DraftConfig(num_speculative_tokens=1), predicted_gain=0.05,
                                               calibration=1.0, prefix=list(PREFIX), theta=decode,
                                               prefill_theta=prefill_theta, batch_mean=4.0))
        verify(obs, tuning, st, model, obs.batch_distribution(), 1100.0, "specinfer", None)
        baselines[prefill_theta] = st.pending.expected_tokens
    busy = obs.sequence_steps * obs.step_mean_seconds
    without = Model(PREFIX, cost, np.asarray([*decode, 0.0]))
    one_k = DraftConfig(num_speculative_tokens=1).dense(64)
    assert baselines[0.0] == pytest.approx(busy * sequence_speed(without, one_k, obs.batch_distribution()))
    assert baselines[float(model.theta[PREFILL_TERM])] < 0.8 * baselines[0.0]  # prefill a large share here


def test_the_prompt_count_travels_in_the_observation_json():
    obs = synthetic_observation(time=5000, window_seconds=120, method="eagle3", num_speculative_tokens=2,
                                schedule=None, applied_since=0, batch_sizes={4: 1.0}, prefix=PREFIX,
                                step_time=drafting_step, prompt_per_generated=RAG,
                                prefill_per_token=TRUTH.prefill_per_token_s)
    data = observation_to_json(obs)
    assert data["steps"]["promptTokens"] == pytest.approx(RAG * obs.generated_tokens)
    assert parse_observation(data).prompt_per_generated == pytest.approx(RAG)
    del data["steps"]["promptTokens"]
    assert parse_observation(data).prompt_tokens is None
