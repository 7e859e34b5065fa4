"""A calibration's measured step-cost table as the tuner's prior (docs/calibration.md). Pure.

The policy's step-cost model T(B, K) starts from a `CostPrior` -- a roofline: a memory-bound floor
with a smooth knee into a compute slope in tokens per step, KV reads per request, draft passes,
drafted tokens and a speculative step's K-independent cost -- and fits multipliers of its terms to
live step times. Without a calibration the prior is a guess (an 8B model on one H100, or the
simulator's preset). With one, the prior is fitted to the table measured on this resource's own
model, hardware and runtime (status.calibration.stepCost), so K values the live traffic never ran
are predicted from measurements rather than from a datasheet, and the prior is held more firmly
(its shape was measured, not assumed). The fit is least squares on relative errors: a grid over
the knee's position and sharpness, non-negative linear terms at each grid point.

The table is used only while it describes what runs: the same method, and the same model,
hardware and runtime (the fingerprint); `status.tuning.stepCost` says which prior is in force
and why a calibration is not used. When the prior changes, the step-cost memory in the policy
state (cells whose term vectors were computed with the old prior, the ratio of measured to
modelled speed and the change being verified) starts afresh; acceptance is kept.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from specinfer.api.spec import SpeculativeInferenceSpec
from specinfer.api.status import CalibrationSummary, StepCostSource
from specinfer.operator.tuner.policy import CostPrior, PolicyState, TuningInput
from specinfer.operator.tuner.policy.cost import draft_passes
from specinfer.runtime.contract.calibration.analysis import target_fingerprint
from specinfer.runtime.methods import CostShape

CALIBRATED_STRENGTH = 0.5  # 10x the policy's default: the prior's shape was measured on this deployment
KNEE_SHARPNESS = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
KNEE_TOKENS = tuple(float(n) for n in np.geomspace(1.0, 16384.0, 43))  # where compute overtakes the floor
MIN_CELLS = 3
Cell = tuple[float, int, float]  # (batch size, K, seconds)


@dataclass(frozen=True)
class FittedPrior:
    prior: CostPrior
    max_error: float  # largest |predicted - measured| / measured over the cells


COLUMNS = 6  # floor x knee curve, KV per request, draft passes, drafted tokens, speculation per step and per request


def _features(cells: tuple[Cell, ...], cost_shape: CostShape, knee_tokens: float, sharpness: float) -> np.ndarray:
    """The COLUMNS per cell; the last two only where the cell speculates (K > 0)."""
    rows = []
    for batch, k, _ in cells:
        tokens = batch * (k + 1)
        curve = (1.0 + (tokens / knee_tokens) ** sharpness) ** (1.0 / sharpness)
        speculating = 1.0 if k > 0 else 0.0
        rows.append([curve, batch, draft_passes(k, cost_shape), batch * k * speculating, speculating,
                     batch * speculating])
    return np.array(rows, dtype=float)


def _nonnegative_solve(a: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float] | None:
    """Least squares with the floor > 0 and the other terms >= 0: every subset of the optional terms."""
    best: tuple[np.ndarray, float] | None = None
    usable = [j for j in range(1, COLUMNS) if np.any(a[:, j] != 0)]
    for size in range(len(usable) + 1):
        for subset in itertools.combinations(usable, size):
            columns = [0, *subset]
            solution, *_ = np.linalg.lstsq(a[:, columns], y, rcond=None)
            if solution[0] <= 0 or np.any(solution[1:] < 0):
                continue
            coefficients = np.zeros(COLUMNS)
            coefficients[columns] = solution
            residual = float(np.sum((a @ coefficients - y) ** 2))
            if best is None or residual < best[1]:
                best = (coefficients, residual)
    return best


@functools.lru_cache(maxsize=256)
def fit_prior(cells: tuple[Cell, ...], cost_shape: CostShape) -> FittedPrior:
    """The roofline prior closest (relative error) to the measured cells. Raises ValueError when fewer than
    MIN_CELLS usable cells are given."""
    usable = tuple(cell for cell in cells if cell[0] > 0 and cell[2] > 0)
    if len(usable) < MIN_CELLS:
        raise ValueError(f"{len(usable)} usable cells; a fit needs {MIN_CELLS}")
    seconds = np.array([cell[2] for cell in usable])
    best: tuple[float, float, float, np.ndarray] | None = None

    def search(sharpnesses: Iterable[float], knees: Iterable[float]) -> None:
        nonlocal best
        for sharpness in sharpnesses:
            for knee in knees:
                features = _features(usable, cost_shape, knee, sharpness) / seconds[:, None]  # relative residuals
                solved = _nonnegative_solve(features, np.ones(len(usable)))
                if solved is not None and (best is None or solved[1] < best[0]):
                    best = (solved[1], sharpness, knee, solved[0])

    search(KNEE_SHARPNESS, KNEE_TOKENS)
    if best is None:
        raise ValueError("no roofline with a positive floor fits the cells")
    step = KNEE_TOKENS[1] / KNEE_TOKENS[0]
    search(np.geomspace(best[1] / 1.25, best[1] * 1.25, 7), np.geomspace(best[2] / step, best[2] * step, 15))
    _, sharpness, knee, coefficients = best
    floor, kv, draft_pass, draft_token, speculation_step, speculation_per_sequence = coefficients
    prior = CostPrior(floor=float(floor), compute_per_token=float(floor / knee), knee_sharpness=float(sharpness),
                      kv_per_sequence=float(kv), draft_pass=float(draft_pass), draft_token=float(draft_token),
                      speculation_step=float(speculation_step),
                      speculation_per_sequence=float(speculation_per_sequence), strength=CALIBRATED_STRENGTH)
    predicted = _features(usable, cost_shape, knee, sharpness) @ coefficients
    return FittedPrior(prior=prior, max_error=float(np.max(np.abs(predicted - seconds) / seconds)))


def unusable(summary: CalibrationSummary, spec: SpeculativeInferenceSpec) -> str | None:
    """Why the calibration's table does not describe what runs now (None: it does)."""
    if summary.method != spec.speculation.method:
        # `spec` is what serves: with method auto, the candidate the selection chose, not the spec's own word
        return (f"calibration {summary.name} measured method {summary.method}; the resource now serves "
                f"{spec.speculation.method}: run a new calibration")
    if summary.fingerprint != target_fingerprint(spec):
        return (f"calibration {summary.name} is stale: spec.model, spec.hardware, spec.runtime or the drafter's "
                "settings (spec.speculation draftModel, promptLookup, advanced) changed since it ran; run a new "
                "calibration")
    return None


def uncalibrated_source(spec: SpeculativeInferenceSpec, configured_prior: bool,
                        message: str | None = None) -> StepCostSource:
    if configured_prior:
        source = "operatorConfig"
    elif spec.runtime.engine == "simulator":
        source = "simulatorPreset"
    else:
        source = "roofline"
    return StepCostSource(source=source, message=message)


def with_calibration(tuning: TuningInput, spec: SpeculativeInferenceSpec, summary: CalibrationSummary | None, *,
                     configured_prior: bool = False) -> tuple[TuningInput, StepCostSource]:
    """The tuning input with the measured table as its cost prior where it applies, and what status.tuning
    reports about the prior in force."""
    if summary is None:
        return tuning, uncalibrated_source(spec, configured_prior)
    problem = unusable(summary, spec)
    if problem is not None:
        return tuning, uncalibrated_source(spec, configured_prior, problem)
    cells = tuple((c.batch_size, c.num_speculative_tokens, c.seconds) for c in summary.step_cost)
    try:
        fitted = fit_prior(cells, tuning.cost_shape)
    except ValueError as error:
        return tuning, uncalibrated_source(spec, configured_prior,
                                           f"calibration {summary.name}: its table cannot be used: {error}")
    source = StepCostSource(source="calibration", calibration=summary.name, measured_at=summary.completed_at,
                            cells=len(cells), fit_error=round(fitted.max_error, 4))
    return tuning.model_copy(update={"cost_prior": fitted.prior}), source


def same_prior(before: StepCostSource | None, after: StepCostSource) -> bool:
    """Whether the prior in force is the one the stored policy state was learnt with."""
    if before is None:
        return after.source != "calibration"  # states from before this field existed used an uncalibrated prior
    return (before.source, before.calibration, before.measured_at) == (after.source, after.calibration,
                                                                       after.measured_at)


def forget_step_cost(state: PolicyState | None) -> PolicyState | None:
    """The policy state without what was learnt under another prior: cost cells hold that prior's term
    vectors, and the measured/modelled speed ratio and the change being verified were computed with it."""
    if state is None:
        return None
    return state.model_copy(update={"cost": None, "calibration": None, "pending": None})
