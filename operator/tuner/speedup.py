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

from specinfer.operator.tuner.cost import CostModel
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
    model = Model([float(p) for p in prefix], cost, cost.multipliers())
    distribution = obs.batch_distribution()
    size = spec.max_batch_size
    without = goodput(model, [0] * (size + 1), distribution)
    if without <= 0:
        return None
    return _positive(goodput(model, dense_ks(obs.applied.to_config(), size), distribution) / without)


def _positive(value: object) -> float | None:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return round(number, 4) if math.isfinite(number) and number > 0 else None
