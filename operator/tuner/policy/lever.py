"""vLLM's adaptive verification as a lever: the tuner turns it on or off -- a rollout, priced like any other.

Where vLLM runs it for the resource (`allowAdaptiveVerification`: the admission rules accept
`speculation.advanced.enable_adaptive_verification` there), the candidate is vLLM's own answer to load,
adaptive verification at its best static K (`adaptive_best_k`), judged with the step model of vLLM's rule
(policy/adaptive.py: the top-k of draft slots by survival probability, adaptive_verification.py:333-367).
It replaces the best config when the model predicts it serves today's load better by more than
KEEP_TOLERANCE; the bar, the payback and the guards of a rollout then decide (decide.py). With it on, the
best config without it is weighed against staying.

On the policy's model every request has the same survival curve, so the rule verifies the first positions
of every request and one more for some: against a per-batch-size schedule that drafts only what it verifies
it saves nothing and pays its overhead (ADAPTIVE_COST). It wins where the engine runs one K at every batch
size -- vLLM drops a schedule with data parallelism, or every change rolls out -- and the load swings
through the crossover: then it verifies less at the peak without a restart.
"""

from __future__ import annotations

from collections.abc import Sequence

from .config import AdaptiveDense, DraftConfig
from .goodput import KEEP_TOLERANCE, Model, goodput, within_reach
from .inputs import TuningInput

# The batch sizes a candidate is judged at: a step of the rule costs ~0.2 ms to model, and goodput moves
# smoothly with the batch size
ADAPTIVE_POINTS = 6


def adaptive_goodput(model: Model, dense: Sequence[int], distribution: Sequence[tuple[float, float]]) -> float:
    """Expected tokens/s of an engine with adaptive verification on, running `dense` (one K per batch size:
    the drafts each step makes), over the batch-size distribution (time fractions)."""
    return goodput(model, AdaptiveDense(dense), distribution)


def adaptive_best_k(model: Model, ks: Sequence[int], distribution: Sequence[tuple[float, float]],
                    max_batch_size: int) -> int:
    """vLLM's own answer to load: adaptive verification at the static K with the best goodput on
    `distribution` (the smaller K on a tie)."""
    scored = {k: adaptive_goodput(model, [0] + [k] * max_batch_size, distribution) for k in ks if k > 0}
    return max(scored, key=lambda k: (scored[k], -k))


def coarse(distribution: Sequence[tuple[float, float]], points: int = ADAPTIVE_POINTS) -> list[tuple[float, float]]:
    """At most `points` batch sizes standing for `distribution`: equal shares of its time, each at the
    time-weighted mean batch size of its share."""
    ordered = sorted((float(size), float(share)) for size, share in distribution if share > 0)
    total = sum(share for _, share in ordered)
    if len(ordered) <= points or total <= 0:
        return [(size, share / total) for size, share in ordered] if total > 0 else []
    out: list[tuple[float, float]] = []
    bin_share, mass, weighted = total / points, 0.0, 0.0
    for size, share in ordered:
        while share > 1e-12:
            take = min(share, bin_share - mass)
            mass, weighted, share = mass + take, weighted + take * size, share - take
            if mass >= bin_share - 1e-12:
                out.append((weighted / mass, mass / total))
                mass, weighted = 0.0, 0.0
    if mass > 1e-12:
        out.append((weighted / mass, mass / total))
    return out


def adaptive_instead(model: Model, tuning: TuningInput, current: DraftConfig, best: list[int],
                     distribution: Sequence[tuple[float, float]], *, max_k: int | None = None) -> list[int]:
    """The best config with the lever considered: adaptive verification at its best static K where it beats
    `best` at today's load by more than KEEP_TOLERANCE; with it on now, staying unless `best` (without it)
    beats it so. `max_k`: the largest K it may draft (an envelope chosen for the load to come, envelope.py)."""
    top = tuning.max_batch_size
    points = coarse(distribution)
    if current.adaptive:
        stay = current.dense(top)
        if max_k is not None and max(stay[1:], default=0) > max_k:
            return best  # drafting above the envelope chosen for the load to come: its own bar judges the change
        return best if goodput(model, best, points) > goodput(model, stay, points) * (1 + KEEP_TOLERANCE) else stay
    if not tuning.allow_adaptive_verification:
        return best
    reach = within_reach(model, tuning.allowed_ks(), current.dense(top))
    ks = [k for k in reach if k > 0 and (max_k is None or k <= max_k)]
    if not ks:
        return best
    k = adaptive_best_k(model, ks, points, top)
    candidate = AdaptiveDense([0] + [k] * top)
    better = goodput(model, candidate, points) > goodput(model, best, points) * (1 + KEEP_TOLERANCE)
    return candidate if better else best
