"""The schedule an engine retuned in place runs: the best K at every batch size up to maxBatchSize,
hedged where the step cost has not been measured.

In place a schedule costs nothing to publish, so it covers every batch size the engine may meet,
not only today's (issue 43: a quiet phase found K=0 above the crossover, +30-50% at the peak, and
never published it). At a batch size no window has measured, the step-cost fit is its prior's shape
scaled to the data measured elsewhere, and a roofline misplaces the knee where the target turns
compute-bound (the bench's peak-wrong-prior: 3x) or the drafter's cost (the real CPU engine's
EAGLE-3 head: ~3x). The errors are not symmetric: at batch 200 a K too high costs far more than one
too low. So there the policy takes the K whose worst relative loss is least (minimax regret) over the
fit and four doubted versions of it -- the compute above the memory-bound floor, and the drafter's
terms, DOUBT times dearer and cheaper. Where they agree this is the fit's own choice; where they
disagree it drafts less. Measured batch sizes (support.py) follow the fit alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .acceptance import expected_tokens
from .cost import DRAFTER_TERMS, KNEE_SHIFTS, TERMS
from .goodput import (
    KEEP_TOLERANCE,
    MAX_RANGES,
    Distribution,
    Model,
    is_speculative,
    limit_ranges,
    one_k_over,
    prefill_per_token,
)
from .inputs import TuningInput
from .support import measured_sizes

DOUBT = 3.0  # how far the prior's compute slope or drafter cost may be off (peak-wrong-prior: 3.1x, CPU head: ~3x)
COMPUTE_TERMS = tuple(range(1, 1 + len(KNEE_SHIFTS)))  # cost.terms: the compute above the floor, knee shifts


def in_place_ks(tuning: TuningInput) -> list[int]:
    """The K a batch size may run in place: the spec's bounds within the engine's startup maximum (0
    only with allowDisable: a schedule's K = 0 still runs a model drafter's first pass)."""
    top = tuning.in_place_max_k if tuning.in_place_max_k is not None else tuning.k_max
    return [k for k in tuning.allowed_ks() if k <= top]


@dataclass
class Hedge:
    """One decision's view of the schedule in place: the fit's speeds, each (b, K)'s worst regret over
    the doubted fits, and which batch sizes are measured."""

    model: Model
    tuning: TuningInput
    ks: list[int]
    fit: np.ndarray  # [b, i]: speed of ks[i] at b under the fit
    regret: np.ndarray  # [b, i]: worst share of the best speed ks[i] gives up, fit or doubted
    measured: set[int]
    _cache: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    @staticmethod
    def of(model: Model, tuning: TuningInput) -> Hedge:
        size, ks = tuning.max_batch_size, in_place_ks(tuning)
        return Hedge(model, tuning, ks, _speeds(model, size, ks, model.theta), _worst_regret(model, size, ks),
                     measured_sizes(model.cost, range(1, size + 1)))

    def losses(self) -> np.ndarray:
        """[b, i]: share of the best speed ks[i] gives up at b -- the fit's where measured, the worst
        case elsewhere (row 0 unused)."""
        if "losses" not in self._cache:
            fit_loss = 1.0 - self.fit / np.maximum(self.fit.max(axis=1, keepdims=True), 1e-12)
            measured = np.zeros(len(self.fit), dtype=bool)
            measured[[b for b in self.measured if b < len(self.fit)]] = True
            self._cache["losses"] = np.where(measured[:, None], fit_loss, self.regret)
        return self._cache["losses"]

    def loss(self, b: int, k: int) -> float:
        """`losses` at (b, K); a K the engine cannot run in place loses everything."""
        return float(self.losses()[b][self.ks.index(k)]) if k in self.ks else 1.0

    def dense(self, current: Sequence[int], distribution: Distribution, *,
              one_k_where_observed: bool = False) -> list[int]:
        """The in-place schedule: the least loss at each batch size (the current K within KEEP_TOLERANCE),
        at most MAX_RANGES ranges, and a drafter kept somewhere (K > 0 at some batch size)."""
        size = self.tuning.max_batch_size
        losses = self.losses()[1 : size + 1]
        best = losses.argmin(axis=1)  # ks ascend: a tie goes to the lower K
        now = np.array([self.ks.index(current[b]) if b < len(current) and current[b] in self.ks else -1
                        for b in range(1, size + 1)])
        rows = np.arange(size)
        keep = (now >= 0) & (losses[rows, np.maximum(now, 0)] <= losses[rows, best] + KEEP_TOLERANCE)
        chosen = np.where(keep, now, best)
        dense = [0, *(self.ks[i] for i in chosen)]
        if one_k_where_observed:
            dense = one_k_over(self.model, self.ks, dense, current, distribution)
        dense = limit_ranges(self.model, dense, MAX_RANGES)
        if not is_speculative(dense):  # in place needs a drafter: the cheapest K where it loses least
            lowest = min(k for k in self.ks if k > 0)
            column = losses[:, self.ks.index(lowest)]
            dense[int(column.argmin()) + 1] = lowest
        envelope = self.tuning.in_place_max_k
        if self.tuning.drafts_startup_k() and envelope in self.ks and max(dense[1:]) < envelope:
            # a drafter that drafts its startup K keeps its envelope in place (its largest K), where that loses least
            column = losses[:, self.ks.index(envelope)]
            dense[int(column.argmin()) + 1] = envelope
        return dense

    def avoided(self, current: Sequence[int], candidate: Sequence[int], sizes: Sequence[int]) -> float:
        """How much of the worst-case loss `candidate` avoids over `sizes`, each weighted by its batch size."""
        total = sum(sizes)
        if total <= 0:
            return 0.0
        return sum(b * (self.loss(b, current[b]) - self.loss(b, candidate[b])) for b in sizes) / total


def unvisited_sizes(distribution: Distribution, max_batch_size: int) -> list[int]:
    """Batch sizes the engine does not serve now: steps of sqrt(2) over 1..maxBatchSize, and maxBatchSize
    itself, outside today's range."""
    low = max(1, min(int(size) for size, _ in distribution))
    high = min(max_batch_size, max(int(size) for size, _ in distribution))
    grid = {min(max_batch_size, round(2 ** (step / 2))) for step in range(2 * max_batch_size.bit_length() + 1)}
    return sorted(b for b in grid | {max_batch_size} if not low <= b <= high)


def _speeds(model: Model, size: int, ks: Sequence[int], theta: np.ndarray) -> np.ndarray:
    """Per-request speed E_K / (T(b, K) + prefill) for b in 0..size and each K of `ks` (row 0 unused), speculating
    (goodput.Model.speed)."""
    times = model.cost.table(size, max(ks), theta, speculative=True)[:, list(ks)]
    expected = np.array([expected_tokens(model.prefix, k) for k in ks])
    times += prefill_per_token(model.cost, theta) * np.arange(size + 1, dtype=float)[:, None] * expected[None, :]
    times[0] = 1.0
    return np.asarray(expected[None, :] / times, dtype=float)


def doubted_thetas(theta: np.ndarray) -> list[np.ndarray]:
    """The fit's multipliers with the compute above the floor, then the drafter's terms, DOUBT times dearer
    and cheaper."""
    out = []
    for terms, factor in ((COMPUTE_TERMS, DOUBT), (COMPUTE_TERMS, 1 / DOUBT), (DRAFTER_TERMS, DOUBT),
                          (DRAFTER_TERMS, 1 / DOUBT)):
        scale = np.ones(TERMS)
        scale[list(terms)] = factor
        out.append(np.array(theta, dtype=float) * scale)
    return out


def doubted_models(model: Model) -> list[Model]:
    """`model` under each of `doubted_thetas` (the acceptance and the cells as they are)."""
    return [Model(model.prefix, model.cost, theta, model.schedule_factor, always_scheduled=model.always_scheduled,
                  measured_positions=model.measured_positions) for theta in doubted_thetas(model.theta)]


def _worst_regret(model: Model, size: int, ks: Sequence[int]) -> np.ndarray:
    """For each (b, K): the largest share of the best speed K gives up under the fit or a doubted fit."""
    worst = np.zeros((size + 1, len(ks)))
    for theta in [*doubted_thetas(model.theta), np.array(model.theta, dtype=float)]:
        speeds = _speeds(model, size, ks, theta)
        worst = np.maximum(worst, 1.0 - speeds / np.maximum(speeds.max(axis=1, keepdims=True), 1e-12))
    return worst
