"""The policy's predicted speed-up of the config in force over no speculation, for the dashboard
and the "speculation slower than none" alert (issue 17). Pure.

The decision will carry it as `model.speedupVsNoSpeculation`; until it does, this recomputes it
with the policy's own objective (goodput.py) from what decide() returned: the acceptance curve in
`decision.model`, the step-cost cells in the new state and the observed batch sizes. A stopgap:
once decide() fills the key, only the first lines of `speedup_vs_no_speculation` remain.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from specinfer.operator.tuner.cost import TERMS, CostModel
from specinfer.operator.tuner.goodput import Model, dense_ks, goodput
from specinfer.operator.tuner.observation import ObservationError, parse_observation
from specinfer.operator.tuner.tuning import TuningError, parse_tuning

DECISION_KEY = "speedupVsNoSpeculation"


def speedup_vs_no_speculation(decision: Mapping[str, Any], state: Mapping[str, Any] | None,
                              tuning: dict[str, Any], observation: dict[str, Any] | None) -> float | None:
    """Predicted goodput of the applied config / goodput with no drafting, at the observed batch
    sizes; None when the policy had no model this tick (too few samples, collapse, no acceptance)."""
    summary = decision.get("model") or {}
    given = summary.get(DECISION_KEY)
    if given is not None:
        return _positive(given)
    prefix = summary.get("acceptancePrefix")
    if not prefix or observation is None or state is None:
        return None
    try:
        spec = parse_tuning(tuning)
        obs = parse_observation(observation)
    except (TuningError, ObservationError):
        return None
    cost = CostModel.from_state(state.get("cost"), spec.cost_prior, spec.drafting)
    theta = summary.get("stepCostMultipliers")  # the fit decide() just made (rounded to 0.001): no second solve
    model = _FewBatchSizes([float(p) for p in prefix], cost,
                           np.array(theta, dtype=float) if _fits(theta) else cost.multipliers())
    distribution = obs.batch_distribution()
    size = spec.max_batch_size
    without = goodput(model, [0] * (size + 1), distribution)
    if without <= 0:
        return None
    return _positive(goodput(model, dense_ks(obs.applied.to_config(), size), distribution) / without)


class _FewBatchSizes(Model):
    """The policy's model, evaluated directly: a handful of observed batch sizes do not need the
    1024-row step-time table the optimiser builds (that table was most of this function's cost)."""

    def step_time(self, batch_size: float, k: int) -> float:
        return self.cost.step_time(batch_size, k, self.theta)


def _fits(theta: object) -> bool:
    return isinstance(theta, list) and len(theta) == TERMS and all(
        isinstance(t, (int, float)) and math.isfinite(t) and t >= 0 for t in theta)


def _positive(value: object) -> float | None:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return round(number, 4) if math.isfinite(number) and number > 0 else None
