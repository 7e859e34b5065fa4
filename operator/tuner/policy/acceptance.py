"""Per-position acceptance: estimate from counters, smooth across windows, extrapolate the tail.

`prefix[i]` is P(draft positions 0..i all accepted). vLLM's per-position accepted counter over
the number of drafts gives it exactly while every step drafts the configured K. With a Dynamic SD
schedule some steps draft fewer positions and that ratio is biased low; our plugin's per-position
draft counts remove the bias, and without them we correct it from the batch-size distribution.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from specinfer.runtime.methods.schedule import effective_k

if TYPE_CHECKING:
    from .observation import Observation

TAIL_DECAY = 0.97  # extra decay per extrapolated position: conservative beyond what was observed
MIN_POSITION_WEIGHT = 50.0  # drafts needed at a position before its estimate counts
StepTime = Callable[[int, int], float]


class AcceptanceEstimate(BaseModel):
    """Prefix acceptance per observed position and the effective draft counts behind each."""

    model_config = ConfigDict(frozen=True)

    prefix: tuple[float, ...]
    weights: tuple[float, ...]
    # vLLM-only series under a schedule and no batch distribution to correct them (not remembered)
    biased: bool = Field(default=False, exclude=True)


def _drafting_share(obs: Observation, step_time: StepTime | None) -> list[float]:
    """Fraction of drafts that reached each position, from the schedule and the batch-size mix.

    The mix is a share of engine time; a batch size b makes b drafts per step and 1/T(b, k) steps
    per second, so it weighs f(b)*b/T(b, k(b)) (T from the current cost estimate when given).
    """
    applied = obs.applied.config
    positions = len(obs.accepted_per_position)
    weights = []
    for size, fraction in obs.batch_distribution():
        k = effective_k(size, applied.num_speculative_tokens, applied.schedule)
        weights.append((size * fraction / (step_time(size, k) if step_time else 1.0), k))
    drafting = sum(w for w, k in weights if k > 0)
    if drafting <= 0:
        return [1.0] * positions
    return [sum(w for w, k in weights if k > i) / drafting for i in range(positions)]


def estimate_from(obs: Observation, step_time: StepTime | None = None) -> AcceptanceEstimate | None:
    """This window's prefix acceptance, or None when nothing was drafted."""
    if obs.drafts <= 0 or not obs.accepted_per_position:
        return None
    biased = False
    if obs.drafts_per_position is not None:
        denominators = list(obs.drafts_per_position)
    else:
        schedule = obs.applied.config.schedule
        varying = bool(schedule) and len({k for *_, k in schedule or () if k > 0}) > 1
        biased = varying and obs.batch_size_distribution is None
        denominators = [obs.drafts * share for share in _drafting_share(obs, step_time)]
    prefix: list[float] = []
    weights: list[float] = []
    previous = 1.0
    for accepted, drafts in zip(obs.accepted_per_position, denominators, strict=False):
        if drafts <= 0:
            break
        value = min(previous, max(0.0, accepted / drafts))  # prefix acceptance cannot rise
        prefix.append(value)
        weights.append(drafts)
        previous = value
    if not prefix:
        return None
    return AcceptanceEstimate(prefix=tuple(prefix), weights=tuple(weights), biased=biased)


def blend(memory: AcceptanceEstimate | None, fresh: AcceptanceEstimate | None,
          forget: float) -> AcceptanceEstimate | None:
    """Count-weighted average of the remembered and the new estimate; memory weights decay by `forget`
    at the positions this window measured.

    A short memory follows workload shifts within a few windows and still damps counter noise.
    """
    if fresh is None:
        return memory
    if memory is None:
        return fresh
    length = max(len(memory.prefix), len(fresh.prefix))
    prefix: list[float] = []
    weights: list[float] = []
    previous = 1.0
    for i in range(length):
        # Positions this window did not draft keep their weight: nothing new was learned about them,
        # and forgetting them would hand them back to the (optimistic) extrapolation.
        old_w = (memory.weights[i] * (forget if i < len(fresh.prefix) else 1.0)) if i < len(memory.prefix) else 0.0
        new_w = fresh.weights[i] if i < len(fresh.prefix) else 0.0
        total = old_w + new_w
        if total <= 0:
            break
        old_p = memory.prefix[i] if i < len(memory.prefix) else 0.0
        new_p = fresh.prefix[i] if i < len(fresh.prefix) else 0.0
        value = min(previous, (old_p * old_w + new_p * new_w) / total)
        prefix.append(value)
        weights.append(total)
        previous = value
    return AcceptanceEstimate(prefix=tuple(prefix), weights=tuple(weights), biased=fresh.biased)


def measured_positions(estimate: AcceptanceEstimate) -> int:
    """How many leading draft positions hold enough drafts for their estimate to count."""
    count = 0
    for weight in estimate.weights:
        if weight < MIN_POSITION_WEIGHT:
            break
        count += 1
    return count


def extrapolated_prefix(estimate: AcceptanceEstimate, k_max: int) -> list[float]:
    """prefix[0..k_max-1]: observed where there is enough data, then the tail's conditional rate."""
    trusted = [p for p, w in zip(estimate.prefix, estimate.weights, strict=True) if w >= MIN_POSITION_WEIGHT]
    if not trusted:
        trusted = list(estimate.prefix[:1])
    prefix = list(trusted[:k_max])
    if len(prefix) >= k_max:
        return prefix
    conditionals = [prefix[i] / prefix[i - 1] for i in range(1, len(prefix)) if prefix[i - 1] > 0]
    if conditionals:
        tail = sum(conditionals[-2:]) / len(conditionals[-2:])
    else:
        tail = prefix[0]  # one position seen: assume the next behaves like the first
    tail = min(tail, 0.98)
    while len(prefix) < k_max:
        tail *= TAIL_DECAY
        prefix.append(prefix[-1] * tail)
    return prefix


def expected_tokens(prefix: Sequence[float], k: int) -> float:
    """Tokens a running request gains per step at draft length k: 1 + sum of prefix[0..k-1]."""
    return 1.0 + sum(prefix[:k])
