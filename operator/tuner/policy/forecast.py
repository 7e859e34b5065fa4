"""What the tuner expects an engine to serve at a load it has not decided on yet, and how sure it says it is.

The policy's model (step cost fitted to its windows, acceptance smoothed over them) predicts each request's
speed E_K / T(B, K) at every batch size. Where a window has measured the batch size (support.py) the
prediction is the fit's, to within the model's noise (two standard errors of a window's step times,
verification.model_noise); where none has, it rests on the prior's shape scaled to the data measured
elsewhere, and the policy states a range: the fit and its versions with the target's compute above the
floor or the drafter's terms (the hedge's doubts, hedge.py), or the per-sequence term, DOUBT times dearer
and cheaper -- and every term above the floor DOUBT times dearer at once.

`window_forecast` is that prediction for one window from the state the tuner held before it -- e.g. the
high load's first window from the model the low load left -- which the real-engine test holds against what
the engine served (tests/engine/test_tuning_engine.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .acceptance import extrapolated_prefix, measured_positions
from .config import DraftConfig
from .cost import DRAFTER_TERMS, PER_SEQUENCE_TERMS, PREFILL_TERM, TERMS, CostModel
from .goodput import Distribution, Model, goodput_contributions
from .hedge import COMPUTE_TERMS, DOUBT
from .inputs import TuningInput, tuning_from_json
from .observation import Observation, parse_observation
from .state import PolicyState
from .support import measured_sizes
from .verification import model_noise

# The per-sequence term (cost.PER_SEQUENCE_TERMS) grows with the batch where no window has measured it: the plain
# engine of the real-engine story served 28.7 tokens per request-second at batch ~64 where the fit, doubting
# compute and drafter only, stated 38.7-52.4 (CI, 2026-12-05)
# ... and every term above the memory-bound floor dearer at once: from windows at batch 1-2 the fit stated 39.0
# tokens per request-second at batch 63, one group of terms doubted at a time 15.7-74.3, and the real CPU engine
# served 14.8-15.7 over six windows of one schedule beside other work (CI, 2026-12-05). Only dearer: the
# engine has not been seen faster than the fit where unmeasured
ABOVE_FLOOR_TERMS = tuple(range(1, PREFILL_TERM))  # the decode terms: the prefill is fitted where it runs
# The doubted versions of a fit: which terms, by how much
DOUBTS: tuple[tuple[tuple[int, ...], float], ...] = (
    *((terms, factor) for terms in (COMPUTE_TERMS, DRAFTER_TERMS, PER_SEQUENCE_TERMS) for factor in (DOUBT, 1 / DOUBT)),
    (ABOVE_FLOOR_TERMS, DOUBT))


@dataclass(frozen=True)
class Forecast:
    """Tokens per request-second (the engine's per-token speed, as vLLM's inter-token latency weighs it)."""

    speed: float  # the fit's
    low: float  # the range the policy states for it
    high: float
    unmeasured: tuple[int, ...]  # batch sizes of the load no window has measured

    def holds(self, measured: float) -> bool:
        return self.low <= measured <= self.high

    def describe(self) -> str:
        sizes = self.unmeasured
        where = ("" if not sizes else f"; batch size {sizes[0]} not measured yet" if len(sizes) == 1
                 else f"; {len(sizes)} batch sizes from {sizes[0]} to {sizes[-1]} not measured yet")
        return f"{self.speed:.1f} tokens per request-second ({self.low:.1f}-{self.high:.1f}{where})"


def forecast(model: Model, config: DraftConfig, distribution: Distribution, max_batch_size: int,
             noise: float) -> Forecast:
    """`config`'s speed at `distribution` under `model`, and the range the policy states for it (`noise`: two
    standard errors of a prediction where the batch sizes are measured)."""
    dense = config.dense(max_batch_size)
    sizes = sorted({max(1, min(int(b), max_batch_size)) for b, _ in distribution})
    measured = measured_sizes(model.cost, sizes)
    running = sum(f * b for b, f in distribution)
    fit = goodput_contributions(model, dense, distribution)
    versions = [fit]
    for terms, factor in DOUBTS:
        scale = np.ones(TERMS)
        scale[list(terms)] = factor
        doubted = Model(model.prefix, model.cost, np.asarray(model.theta) * scale, model.schedule_factor,
                        always_scheduled=model.always_scheduled)
        versions.append(goodput_contributions(doubted, dense, distribution))
    low = high = 0.0
    below = max(0.0, 1 - noise)  # a noise above 100% leaves no lower bound, not a negative one
    for b, value in fit.items():
        if max(1, min(int(b), max_batch_size)) in measured:
            low, high = low + value * below, high + value * (1 + noise)
        else:
            low += min(version[b] for version in versions) * below
            high += max(version[b] for version in versions) * (1 + noise)
    speed = sum(fit.values())
    unmeasured = tuple(b for b in sizes if b not in measured)
    if running <= 0:
        return Forecast(0.0, 0.0, 0.0, unmeasured)
    return Forecast(speed / running, low / running, high / running, unmeasured)


def model_of(state: PolicyState, tuning: TuningInput) -> Model | None:
    """The model a stored state holds (None: no acceptance learnt yet), as the policy builds it to decide."""
    if state.acceptance is None or state.method != tuning.method:
        return None
    cost = CostModel.from_state(state.cost, tuning.cost_prior, tuning.cost_shape, state.prompt_per_generated)
    return Model(extrapolated_prefix(state.acceptance, tuning.k_max), cost, cost.multipliers(),
                 tuning.schedule_step_factor, always_scheduled=tuning.in_place_max_k is not None,
                 measured_positions=measured_positions(state.acceptance))


def window_forecast(observation: Observation, tuning: TuningInput, state: PolicyState) -> Forecast | None:
    """What the tuner, holding `state`, expects the window `observation` to serve: its config at its load."""
    model = model_of(state, tuning)
    if model is None:
        return None
    return forecast(model, observation.applied.config, observation.batch_distribution(), tuning.max_batch_size,
                    model_noise(state))


def window_forecast_json(observation: Any, tuning: Any, state: Any) -> Forecast | None:
    """`window_forecast` over the JSON forms a tick record keeps (operator/tuner/recording.py)."""
    return window_forecast(parse_observation(observation), tuning_from_json(tuning), PolicyState.from_json(state))


def measured_speed(observation: Any) -> float:
    """What the engine served in a recorded window: tokens per request-second, from its own counters."""
    return parse_observation(observation).measured_speed

