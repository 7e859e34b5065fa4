"""Points -> comparison, recommendation and the step-cost table, with goodputs chosen so the answers are known."""

from __future__ import annotations

import pytest

from specinfer.api.calibration import CalibrationPoint
from specinfer.api.spec import SpeculativeInferenceSpec
from specinfer.runtime.contract.calibration.analysis import (
    CandidateResult,
    best_by_batch_size,
    compare,
    step_cost_cells,
    target_fingerprint,
)

pytestmark = pytest.mark.unit


def p(k: int, batch: int, goodput: float, step: float = 0.01, mean_batch: float | None = None) -> CalibrationPoint:
    return CalibrationPoint(num_speculative_tokens=k, batch_size=batch,
                            mean_batch_size=batch if mean_batch is None else mean_batch,
                            step_seconds=step, tokens_per_second=goodput, tokens_per_step=1.0, steps=100)


NONE = CandidateResult("none", "none", (p(0, 1, 100), p(0, 16, 1000)))


def test_best_k_per_batch_size_and_ties_go_to_the_smaller_k():
    best = best_by_batch_size([p(1, 1, 150), p(3, 1, 180), p(1, 16, 900), p(3, 16, 900)])
    assert best[1].num_speculative_tokens == 3 and best[16].num_speculative_tokens == 1


def test_comparison_is_the_geometric_mean_of_ratios():
    configured = CandidateResult("configured", "draftModel", (p(2, 1, 200), p(2, 16, 500)))  # x2, x0.5
    ngram = CandidateResult("ngram", "ngram", (p(3, 1, 400), p(1, 3, 1), p(3, 16, 1000)))  # x4, x1
    with pytest.raises(ValueError, match="different batch sizes"):
        compare([NONE, configured, ngram], configured_method="draftModel")
    ngram = CandidateResult("ngram", "ngram", (p(3, 1, 400), p(1, 16, 2000)))  # x4, x2
    rows, recommendation = compare([NONE, configured, ngram], configured_method="draftModel")
    by_name = {row.name: row for row in rows}
    assert by_name["configured"].speedup_vs_none == pytest.approx(1.0)  # sqrt(2 * 0.5)
    assert by_name["ngram"].speedup_vs_none == pytest.approx(8 ** 0.5, rel=1e-3)
    assert by_name["ngram"].gain_vs_configured == pytest.approx(8 ** 0.5 - 1, rel=1e-3)  # sqrt(2 * 4) - 1
    assert [(b.batch_size, b.num_speculative_tokens) for b in by_name["ngram"].best] == [(1, 3), (16, 1)]
    assert recommendation.candidate == "ngram" and recommendation.method == "ngram"
    assert recommendation.gain_vs_configured == pytest.approx(1.8284, rel=1e-3)
    assert recommendation.message.startswith("ngram beats the configured draftModel by 183% at your batch sizes "
                                             "(1, 16)")
    assert "1: K=3, 16: K=1" in recommendation.message and "Not applied" in recommendation.message
    assert recommendation.summary == "ngram K=1 +183%"  # modal K: a tie, the smaller one


def test_when_the_configured_method_is_fastest():
    configured = CandidateResult("configured", "eagle3", (p(3, 1, 300), p(3, 16, 2000)))
    ngram = CandidateResult("ngram", "ngram", (p(2, 1, 150), p(2, 16, 1000)))
    _, recommendation = compare([NONE, configured, ngram], configured_method="eagle3")
    assert recommendation.candidate == "configured" and recommendation.gain_vs_configured == 0.0
    assert recommendation.message.startswith("the configured eagle3 is the fastest at your batch sizes (1, 16): "
                                             "2.45x no speculation")
    assert "next: ngram, -50%" in recommendation.message


def test_when_speculation_does_not_pay_and_the_winner_changes_with_batch_size():
    configured = CandidateResult("configured", "eagle3", (p(3, 1, 150), p(3, 16, 500)))  # x1.5, x0.5
    _, recommendation = compare([NONE, configured], configured_method="eagle3")
    assert recommendation.candidate == "none" and recommendation.num_speculative_tokens == 0
    assert recommendation.message.startswith("no speculation beats the configured eagle3 by 15%")
    assert "fastest per batch size: 1: the configured eagle3, 16: no speculation" in recommendation.message


def test_a_target_without_speculation_compares_against_none():
    ngram = CandidateResult("ngram", "ngram", (p(2, 1, 150), p(2, 16, 1500)))
    rows, recommendation = compare([NONE, ngram], configured_method="none")
    assert recommendation.candidate == "ngram"
    assert recommendation.message.startswith("ngram beats no speculation by 50%")
    assert {row.name: row.gain_vs_configured for row in rows}["none"] == 0.0


def test_step_cost_table_takes_k0_from_the_baseline_and_the_measured_batch_size():
    cells = step_cost_cells([p(2, 4, 300, step=0.02, mean_batch=3.6)], [p(0, 4, 200, step=0.012, mean_batch=3.9),
                                                                       p(0, 1, 80, step=0.01, mean_batch=0.0)])
    assert [(c.num_speculative_tokens, c.batch_size, c.seconds) for c in cells] == [(0, 3.9, 0.012), (2, 3.6, 0.02)]


def test_fingerprint_follows_the_draft_weights_not_k_or_the_schedule():
    base = {"model": {"name": "m"}, "speculation": {"method": "draftModel", "draftModel": {"name": "small"}},
            "hardware": {"accelerator": "cpu"}}
    first = target_fingerprint(SpeculativeInferenceSpec.model_validate(base))
    assert target_fingerprint(SpeculativeInferenceSpec.model_validate(
        {**base, "speculation": {**base["speculation"], "numSpeculativeTokens": 3,
                                 "schedule": [{"minBatchSize": 1, "maxBatchSize": 8, "numSpeculativeTokens": 3}]}})) \
        == first
    assert target_fingerprint(SpeculativeInferenceSpec.model_validate(
        {**base, "speculation": {"method": "draftModel", "draftModel": {"name": "large"}}})) != first


def test_fingerprint_follows_model_hardware_and_runtime_not_speculation_or_tuning():
    base = {"model": {"name": "m"}, "speculation": {"method": "ngram"}, "hardware": {"accelerator": "cpu"}}
    first = target_fingerprint(SpeculativeInferenceSpec.model_validate(base))
    assert target_fingerprint(SpeculativeInferenceSpec.model_validate(
        {**base, "speculation": {"method": "none"}, "tuning": {"mode": "off"}, "replicas": 3})) == first
    assert target_fingerprint(SpeculativeInferenceSpec.model_validate({**base, "model": {"name": "other"}})) != first
    assert target_fingerprint(SpeculativeInferenceSpec.model_validate(
        {**base, "runtime": {"extraArgs": ["--max-model-len", "512"]}})) != first
