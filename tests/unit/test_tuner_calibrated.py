"""The measured step-cost table as the tuner's prior: the fit, when it applies, and what status.tuning says."""

from __future__ import annotations

import json

import numpy as np
import pytest

from specinfer.api import parse_spec
from specinfer.api.status import CalibrationSummary, StepCostCell, StepCostSource
from specinfer.operator.tuner.policy import CostPrior, PolicyState, TuningInput
from specinfer.operator.tuner.policy.cost import PRIOR_THETA, terms
from specinfer.operator.tuner.pure.calibrated import (
    CALIBRATED_STRENGTH,
    fit_prior,
    forget_step_cost,
    same_prior,
    with_calibration,
)
from specinfer.operator.tuner.pure.target import calibrated_tuning_input, read_target
from specinfer.runtime.contract.calibration.analysis import target_fingerprint
from tests.unit.test_tuner_loop import (  # noqa: F401  (fake_prometheus is a fixture)
    FakeKube,
    apply_back,
    fake_prometheus,
    high_acceptance,
    resource,
    run_tick,
)

pytestmark = pytest.mark.unit

# A deployment unlike the policy's default prior (8B on one H100): slower floor, an earlier knee, costly drafts.
MEASURED = CostPrior(floor=0.021, compute_per_token=0.0009, knee_sharpness=2.0, kv_per_sequence=0.00015,
                     draft_pass=0.004, draft_token=0.00002)


def truth(batch: float, k: int, drafting: str = "sequential") -> float:
    """The policy's own model of T(B, K) at its prior multipliers: what a fitted prior must reproduce."""
    return float(terms(MEASURED, batch, k, drafting) @ PRIOR_THETA)


def table(drafting: str = "sequential", noise: float = 0.0) -> tuple[tuple[float, int, float], ...]:
    rng = np.random.default_rng(0)
    return tuple((float(b), k, truth(b, k, drafting) * (1 + noise * rng.standard_normal()))
                 for b in (1, 4, 16, 64) for k in (0, 1, 2, 3))


@pytest.mark.parametrize("drafting", ["sequential", "parallel", "lookup"])
def test_the_fit_reproduces_the_measured_table(drafting):
    fitted = fit_prior(table(drafting), drafting)
    assert fitted.max_error < 0.01
    assert fitted.prior.strength == CALIBRATED_STRENGTH
    for batch in (2, 8, 32):  # between the measured cells too
        for k in (1, 3, 5):  # K = 5 was never measured: the measured shape extrapolates
            predicted = float(terms(fitted.prior, batch, k, drafting) @ PRIOR_THETA)
            assert predicted == pytest.approx(truth(batch, k, drafting), rel=0.05 if k <= 3 else 0.1)


def test_noise_shows_in_the_fit_error_and_too_few_cells_are_refused():
    assert 0.01 < fit_prior(table(noise=0.05), "sequential").max_error < 0.2
    with pytest.raises(ValueError, match="a fit needs 3"):
        fit_prior(((1.0, 0, 0.02), (4.0, 0, 0.03)), "sequential")


def test_the_fit_finds_a_speculative_steps_k_independent_cost():
    """The real CPU engine's shape (docs/simulator.md): a speculative step pays a fixed cost whatever its K.
    Fitted without that term, the table's K=1 jump is charged to the draft passes and every further
    K looks more costly than it is."""
    cpu_like = CostPrior(floor=0.0022, compute_per_token=1.6e-6, knee_sharpness=1.0, kv_per_sequence=0.0001,
                         draft_pass=0.0013, draft_token=5e-5, speculation_step=0.0021,
                         speculation_per_sequence=0.0002)
    cells = tuple((float(b), k, float(terms(cpu_like, b, k, "sequential") @ PRIOR_THETA))
                  for b in (1, 4, 16, 64) for k in (0, 1, 2, 3))
    fitted = fit_prior(cells, "sequential")
    assert fitted.max_error < 0.02
    assert fitted.prior.speculation_step == pytest.approx(0.0021, rel=0.2)

    def step(batch: int, k: int) -> float:
        return float(terms(fitted.prior, batch, k, "sequential") @ PRIOR_THETA)
    true_extra = float((terms(cpu_like, 1, 8, "sequential") - terms(cpu_like, 1, 4, "sequential")) @ PRIOR_THETA)
    assert step(1, 8) - step(1, 4) == pytest.approx(true_extra, rel=0.1)


SPEC = parse_spec({"model": {"name": "m"}, "speculation": {"method": "eagle3", "draftModel": {"name": "d"}},
                   "hardware": {"accelerator": "nvidia"}})
TUNING = TuningInput(method="eagle3")


def summary(**changes) -> CalibrationSummary:
    values = {"name": "cal", "completed_at": "2026-12-01T10:00:00Z", "fingerprint": target_fingerprint(SPEC),
              "method": "eagle3", "step_cost": [StepCostCell(batch_size=b, num_speculative_tokens=k, seconds=s)
                                                for b, k, s in table()]}
    return CalibrationSummary(**{**values, **changes})


def test_a_current_table_replaces_the_prior_and_says_so():
    tuning, source = with_calibration(TUNING, SPEC, summary())
    assert tuning.cost_prior != TUNING.cost_prior and tuning.cost_prior.strength == CALIBRATED_STRENGTH
    assert source == StepCostSource(source="calibration", calibration="cal", measured_at="2026-12-01T10:00:00Z",
                                    cells=16, fit_error=source.fit_error)
    assert source.fit_error < 0.01


@pytest.mark.parametrize(("changes", "words"), [
    ({"fingerprint": "0000000000000000"}, "calibration cal is stale: spec.model, spec.hardware, spec.runtime or"),
    ({"method": "ngram"}, "calibration cal measured method ngram; the resource now serves eagle3"),
    ({"step_cost": [StepCostCell(batch_size=1, num_speculative_tokens=0, seconds=0.01)]}, "a fit needs 3"),
])
def test_a_table_that_no_longer_applies_is_not_used_and_status_says_why(changes, words):
    tuning, source = with_calibration(TUNING, SPEC, summary(**changes))
    assert tuning == TUNING and source.source == "roofline" and words in source.message


def test_sources_without_a_calibration():
    assert with_calibration(TUNING, SPEC, None)[1].source == "roofline"
    assert with_calibration(TUNING, SPEC, None, configured_prior=True)[1].source == "operatorConfig"
    simulated = parse_spec({**SPEC.model_dump(by_alias=True, exclude_none=True, mode="json"),
                            "runtime": {"engine": "simulator"}})
    assert with_calibration(TUNING, simulated, None)[1].source == "simulatorPreset"


def test_the_step_cost_memory_starts_afresh_when_the_prior_changes():
    roofline, calibrated = StepCostSource(source="roofline"), with_calibration(TUNING, SPEC, summary())[1]
    assert same_prior(None, roofline) and not same_prior(None, calibrated)
    assert same_prior(calibrated, calibrated.model_copy()) and not same_prior(roofline, calibrated)
    state = PolicyState(cost={"cells": {"1:3": ([1.0] * 9, 0.02, 1.0)}}, changes=[1.0])
    fresh = forget_step_cost(state)
    assert fresh.cost is None and fresh.pending is None and fresh.changes == [1.0]


def test_the_loop_tunes_from_the_measured_table_and_reports_it(fake_prometheus):
    fake_prometheus(high_acceptance("a"))
    resources, kube = [resource("a", mode="observe")], FakeKube()
    loop, _ = run_tick(resources, kube)
    assert kube.patches[0][1]["status"]["tuning"]["stepCost"] == {"source": "simulatorPreset"}  # the example simulates
    apply_back(resources, kube)

    spec = read_target(resources[0]).spec
    resources[0]["status"]["calibration"] = summary(fingerprint=target_fingerprint(spec)).to_json()
    target = read_target(resources[0])
    tuning, expected = calibrated_tuning_input(target, TuningInput(method="eagle3"))
    run_tick(resources, kube, loop.clock() + 60, loop)
    status = kube.patches[0][1]["status"]["tuning"]
    assert status["stepCost"] == expected.to_json() and status["stepCost"]["source"] == "calibration"
    cells = json.loads(status["policyState"])["cost"]["cells"]
    # what was learnt under the roofline is gone; the new window's cell is in the calibrated prior's terms
    (x, _, _), = cells.values()
    assert x == pytest.approx(list(terms(tuning.cost_prior, 1.0, 3, "sequential")), rel=1e-4)


def test_a_hold_does_not_hide_a_change_of_prior_from_the_next_decision(fake_prometheus):
    """A hold writes no policy state: were it to report the new prior, the next decision would take the
    old prior's cells for the new one's and never forget them."""
    fake_prometheus(high_acceptance("a"))
    resources, kube = [resource("a", mode="observe")], FakeKube()
    loop, _ = run_tick(resources, kube)
    apply_back(resources, kube)
    spec = read_target(resources[0]).spec
    resources[0]["status"]["calibration"] = summary(fingerprint=target_fingerprint(spec)).to_json()

    fake_prometheus({})  # no series: the loop holds
    run_tick(resources, kube, loop.clock() + 30, loop)
    held = kube.patches[0][1]["status"]["tuning"]
    assert held.get("stepCost", {"source": "simulatorPreset"}) == {"source": "simulatorPreset"}
    apply_back(resources, kube)

    fake_prometheus(high_acceptance("a"))
    run_tick(resources, kube, loop.clock() + 60, loop)
    status = kube.patches[0][1]["status"]["tuning"]
    assert status["stepCost"]["source"] == "calibration"
    tuning, _ = calibrated_tuning_input(read_target(resources[0]), TuningInput(method="eagle3"))
    (x, _, _), = json.loads(status["policyState"])["cost"]["cells"].values()  # relearnt in the new prior's terms
    assert x == pytest.approx(list(terms(tuning.cost_prior, 1.0, 3, "sequential")), rel=1e-4)
