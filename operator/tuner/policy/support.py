"""Which part of a predicted gain the measurements support, and which rests on the prior alone.

The step-cost model predicts every (batch size, K) -- from measured cells where it has them, from
its roofline prior where it has none. Changing K at a batch size it has measured is an
extrapolation in K from a measured step time, which is what tuning is. Changing K at a batch size
it has never measured, at any K, rests on the prior's shape there -- where the knee between the
memory-bound floor and compute lies -- which a roofline often misplaces (issue 25: +29.8%
predicted for drafting more at batch 64 on the real CPU engine, where drafting loses).

So a predicted gain at such batch sizes does not count towards a change (a predicted loss there
does, in full): the policy holds, the engine runs the current config at the new batch sizes for a
window, and that window measures them. Holding costs one window; acting on the prior's shape is
what went wrong. The fit's posterior spread there (`CostModel.relative_spread`) is reported, not
relied on: it scales with the measured noise of step times, so on a quiet engine it would trust
the prior's shape exactly where the shape is the doubt.

In place (`lowering_counts`) a lower K at such batch sizes counts in full: the schedule there is the
hedged choice (hedge.py), a wrong one costs no restart and is corrected as soon as a window has
measured those batch sizes, and erring towards drafting less is what issue 43 asks of it. A higher K
there still waits for a measurement.

From speculation off, a measured batch size counts only up to DRAFTING_REACH times the largest one
a cell of speculative steps covers (`drafted_up_to`; a schedule's K = 0 is one, its drafter runs): a plain
decode step says nothing of what the drafter and the verification of K + 1 tokens cost, and
extrapolating them upwards is where the prior's knee misleads (the real CPU engine, re-enabling K=4
at batch 62 with plain steps measured there and drafting measured at batch 1 only: predicted
+10.5%, realised -51%, rolled back). Downwards, towards the memory-bound floor the plain steps
measure, the extrapolation is the ordinary one: speculation back on when the load falls below a
peak that switched it off. Far above (drafting measured at batch 1, off at 64, the load at 20) it
holds until the load comes within reach or the drafting cells fade: with none left (hours) the rule
is the plain one, since no window can measure drafting while speculation is off.

A cell measures the batch sizes within SUPPORT_FACTOR of its own; vLLM's pooled series (no
per-batch-size step times) measure a mix of batch sizes around the window's mean, POOLED_SPAN.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .config import differs_at
from .cost import CostModel
from .goodput import Distribution, Model, goodput_contributions, is_speculative

SUPPORT_WEIGHT = 1.0  # a batch size is measured once its cells hold a full window of steps (cost.SAMPLE_CAP)
# Back on, a plain step's batch size counts up to this many times the largest where drafting was measured: as far
# as the look-ahead anticipates a load (lookahead.LOOKAHEAD); beyond, the knee the prior places decides.
DRAFTING_REACH = 4.0
DRAFTING_UNMEASURED = "drafting was measured up to batch size"  # the hold's words (the engine tests read them)
SUPPORT_FACTOR = 2 ** 0.5  # a per-batch-size cell measures the batch sizes within this factor of its own
POOLED_SPAN = 4.0  # a pooled cell (vLLM's series) measures a mix around its mean batch size


def cell_span(key: str) -> tuple[float, float] | None:
    """The batch sizes a cost cell's key measures: "B:K" and "B:Ks" near B, "pooled:B:K:schedule" around B."""
    parts = key.split(":")
    pooled = parts[0] == "pooled"
    try:
        size = float(parts[1] if pooled and len(parts) > 1 else parts[0])
    except ValueError:
        return None
    factor = POOLED_SPAN if pooled else SUPPORT_FACTOR
    return size / factor, size * factor


def plain_decode(key: str) -> bool:
    """A cost cell of speculation off: "B:0", or "pooled:B:0:..." ("B:0s" is a schedule's K = 0, a speculative
    step: the drafter's first pass runs)."""
    parts = key.split(":")
    return parts[2] == "0" if parts[0] == "pooled" and len(parts) > 2 else parts[1:2] == ["0"]


def measured_sizes(cost: CostModel, sizes: Iterable[int]) -> set[int]:
    """The batch sizes among `sizes` that the model's cells have measured, at any K."""
    spans = [(*span, cell[2]) for key, cell in cost.cells.items() if (span := cell_span(key)) is not None]
    wanted = np.asarray(list(sizes), dtype=float)
    if not spans or not wanted.size:
        return set()
    low, high, weight = (np.asarray(column, dtype=float) for column in zip(*spans, strict=True))
    covering = (low[None, :] <= wanted[:, None]) & (wanted[:, None] <= high[None, :])
    support = covering.astype(float) @ weight
    return {int(b) for b, w in zip(wanted, support, strict=True) if w >= SUPPORT_WEIGHT}


def drafted_up_to(cost: CostModel) -> float | None:
    """The largest batch size a cell of speculative steps covers, or None when none is left (cells fade
    over hours: then the prior's drafting cost is all there is, and must not lock speculation out)."""
    highs = [span[1] for key in cost.cells if not plain_decode(key) and (span := cell_span(key)) is not None]
    return max(highs, default=None)


@dataclass(frozen=True)
class SupportedGain:
    gain: float  # what the policy may act on
    prior_part: float  # the part of the predicted gain at batch sizes not measured yet
    unmeasured: tuple[int, ...]  # observed batch sizes whose K would change without a measurement there
    drafting_reach: float | None = None  # back on: drafting counts as measured up to this batch size

    def describe(self) -> str:
        sizes = self.unmeasured
        where = f"batch size {sizes[0]}" if len(sizes) == 1 else f"batch sizes {sizes[0]}-{sizes[-1]}"
        if self.drafting_reach is not None:
            return (f"{self.prior_part:+.1%} of it rests on the step-cost prior at {where}: {DRAFTING_UNMEASURED} "
                    f"{self.drafting_reach:.0f} (speculation off measures no drafting)")
        return f"{self.prior_part:+.1%} of it rests on the step-cost prior at {where}, not measured yet"


def supported_gain(model: Model, current: Sequence[int], best: Sequence[int], distribution: Distribution,
                   max_batch_size: int, *, lowering_counts: bool = False) -> SupportedGain:
    """`best`'s predicted gain over `current` without what it would gain at batch sizes never measured
    (`lowering_counts`: except where it lowers K)."""
    before = goodput_contributions(model, current, distribution)
    after = goodput_contributions(model, best, distribution)
    total = sum(before.values())
    full = sum(after.values()) / total - 1 if total > 0 else 0.0
    clamp = {b: max(1, min(int(b), max_batch_size)) for b in before}
    measured = measured_sizes(model.cost, sorted(set(clamp.values())))
    reach = None
    if not is_speculative(current) and is_speculative(best) and (drafted := drafted_up_to(model.cost)) is not None:
        reach = DRAFTING_REACH * drafted  # back on: not far above where drafting was measured
        measured = {b for b in measured if b <= reach}
    unmeasured = {b for b in before if clamp[b] not in measured and differs_at(best, current, clamp[b])
                  and not (lowering_counts and best[clamp[b]] < current[clamp[b]])}
    if not unmeasured or total <= 0:
        return SupportedGain(full, 0.0, ())
    prior_part = sum(after[b] - before[b] for b in unmeasured) / total
    return SupportedGain(full - max(prior_part, 0.0), prior_part, tuple(sorted({clamp[b] for b in unmeasured})),
                         reach)
