"""Measured points -> the step-cost table, the method comparison and the recommendation. Pure.

Every candidate was measured at the same batch sizes; at each one it counts with its fastest K
(its goodput: generated tokens per second with that many requests in flight). Candidates are
compared by the geometric mean over the batch sizes of their goodput ratios, so each batch size
you listed weighs the same whatever its absolute throughput. The recommendation names the
fastest; it is advice in status, never an automatic switch of method.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from specinfer.api.calibration import (
    BASELINE,
    CONFIGURED,
    BestAtBatchSize,
    CalibrationPoint,
    CalibrationRecommendation,
    CandidateComparison,
)
from specinfer.api.spec import SpeculativeInferenceSpec
from specinfer.api.status import StepCostCell


@dataclass(frozen=True)
class CandidateResult:
    name: str
    method: str
    points: tuple[CalibrationPoint, ...]


def best_by_batch_size(points: Iterable[CalibrationPoint]) -> dict[int, CalibrationPoint]:
    """The fastest point (highest goodput) at each batch size; ties go to the smaller K (cheaper to run)."""
    best: dict[int, CalibrationPoint] = {}
    for point in sorted(points, key=lambda p: (p.batch_size, p.num_speculative_tokens)):
        current = best.get(point.batch_size)
        if current is None or point.tokens_per_second > current.tokens_per_second:
            best[point.batch_size] = point
    return best


def geometric_mean(values: Sequence[float]) -> float:
    positive = [v for v in values if v > 0]
    if not positive or len(positive) != len(values):
        return 0.0
    return math.exp(sum(math.log(v) for v in positive) / len(positive))


def ratio(numerator: Mapping[int, CalibrationPoint], denominator: Mapping[int, CalibrationPoint],
          sizes: Sequence[int]) -> float:
    return geometric_mean([numerator[b].tokens_per_second / denominator[b].tokens_per_second
                           if denominator[b].tokens_per_second > 0 else 0.0 for b in sizes])


def describe(result: CandidateResult, configured_method: str) -> str:
    if result.name == CONFIGURED:
        return f"the configured {configured_method}"
    if result.name == BASELINE:
        return "no speculation"
    return result.method if result.name == result.method.lower() else f"{result.name} ({result.method})"


def sizes_text(sizes: Sequence[int]) -> str:
    return ", ".join(str(b) for b in sizes)


def _runs(labels: Sequence[tuple[int, str]]) -> str:
    """[(1, a), (4, a), (16, b)] -> '1-4: a, 16: b' (consecutive batch sizes with the same label merged)."""
    parts: list[str] = []
    start = 0
    for index in range(1, len(labels) + 1):
        if index == len(labels) or labels[index][1] != labels[start][1]:
            first, last = labels[start][0], labels[index - 1][0]
            span = str(first) if first == last else f"{first}-{last}"
            parts.append(f"{span}: {labels[start][1]}")
            start = index
    return ", ".join(parts)


def modal_k(best: Mapping[int, CalibrationPoint]) -> int:
    counts = Counter(point.num_speculative_tokens for point in best.values())
    return min(counts, key=lambda k: (-counts[k], k))


def compare(results: Sequence[CandidateResult], *, configured_method: str
            ) -> tuple[list[CandidateComparison], CalibrationRecommendation]:
    """Every candidate against no speculation and the configured method; the fastest as the recommendation.

    `results` must hold BASELINE and, unless the target runs without speculation, CONFIGURED, all measured
    at the same batch sizes."""
    by_name = {r.name: r for r in results}
    if BASELINE not in by_name:
        raise ValueError("no measurement without speculation to compare with")
    best = {r.name: best_by_batch_size(r.points) for r in results}
    sizes = sorted(best[BASELINE])
    if any(sorted(b) != sizes for b in best.values()):
        raise ValueError("candidates were measured at different batch sizes")
    reference = CONFIGURED if CONFIGURED in by_name else BASELINE
    comparisons = []
    for result in results:
        mine = best[result.name]
        comparisons.append(CandidateComparison(
            name=result.name, method=result.method,
            best=[BestAtBatchSize(batch_size=b, num_speculative_tokens=mine[b].num_speculative_tokens,
                                  tokens_per_second=mine[b].tokens_per_second) for b in sizes],
            speedup_vs_none=round(ratio(mine, best[BASELINE], sizes), 4),
            gain_vs_configured=round(ratio(mine, best[reference], sizes) - 1.0, 4)))
    ranked = sorted(comparisons, key=lambda c: (-c.speedup_vs_none, c.name != reference, c.name))
    winner, runner_up = ranked[0], (ranked[1] if len(ranked) > 1 else None)
    return comparisons, _recommendation(winner, runner_up, by_name, best, sizes, reference, configured_method)


def _recommendation(winner: CandidateComparison, runner_up: CandidateComparison | None,
                    by_name: Mapping[str, CandidateResult], best: Mapping[str, Mapping[int, CalibrationPoint]],
                    sizes: Sequence[int], reference: str, configured_method: str) -> CalibrationRecommendation:
    def name(candidate: str) -> str:
        return describe(by_name[candidate], configured_method)

    at = f"at your batch sizes ({sizes_text(sizes)})"
    per_size = [(b, max(best, key=lambda n: (best[n][b].tokens_per_second, n == reference))) for b in sizes]
    split = "" if len({n for _, n in per_size}) == 1 else \
        f"; fastest per batch size: {_runs([(b, name(n)) for b, n in per_size])}"
    k = modal_k(best[winner.name])
    ks = _runs([(b, f"K={best[winner.name][b].num_speculative_tokens}") for b in sizes])
    if winner.name == reference:
        gap = f"; next: {name(runner_up.name)}, {runner_up.gain_vs_configured:+.0%}" if runner_up else ""
        if reference == BASELINE:
            message = f"no speculation is the fastest {at}{gap}{split}"
        else:
            message = (f"{name(reference)} is the fastest {at}: {winner.speedup_vs_none:.2f}x no speculation "
                       f"({ks}){gap}{split}")
        summary = f"{winner.name} (fastest)"
        gain = 0.0
    else:
        gain = winner.gain_vs_configured
        if winner.name == BASELINE:
            message = (f"no speculation beats {name(reference)} by {gain:.0%} {at}: speculation does not pay "
                       f"here{split}")
        else:
            message = (f"{name(winner.name)} beats {name(reference)} by {gain:.0%} {at} ({ks}; "
                       f"{winner.speedup_vs_none:.2f}x no speculation){split}")
        summary = f"{winner.name} K={k} {gain:+.0%}" if winner.name != BASELINE else f"none {gain:+.0%}"
    return CalibrationRecommendation(candidate=winner.name, method=winner.method,
                                     num_speculative_tokens=k if winner.name != BASELINE else 0,
                                     gain_vs_configured=round(gain, 4), summary=summary[:128],
                                     message=message + ". Not applied: change spec.speculation yourself if you "
                                                       "agree.")


def step_cost_cells(configured: Iterable[CalibrationPoint], baseline: Iterable[CalibrationPoint]) -> list[StepCostCell]:
    """The configured method's step time by (measured) batch size and K, with K = 0 from the baseline."""
    cells = []
    for point in [*baseline, *configured]:
        if point.mean_batch_size > 0:
            cells.append(StepCostCell(batch_size=round(point.mean_batch_size, 3),
                                      num_speculative_tokens=point.num_speculative_tokens,
                                      seconds=point.step_seconds))
    return sorted(cells, key=lambda c: (c.num_speculative_tokens, c.batch_size))


def target_fingerprint(spec: SpeculativeInferenceSpec) -> str:
    """What measured step times depend on besides the method and K: the model, the hardware, the runtime
    (image, engine, arguments, env, resources) and the drafter's own settings (draft weights, n-gram
    window, advanced fields). A table measured under another fingerprint is stale. The method is checked
    on its own (a clearer message); K and the schedule are what the table is measured over."""
    data = spec.model_dump(mode="json", by_alias=True, exclude_none=True, include={"model", "hardware", "runtime"})
    drafter = spec.speculation.model_dump(mode="json", by_alias=True, exclude_none=True,
                                          include={"draft_model", "prompt_lookup", "advanced"})
    if drafter:  # absent for methods without drafter settings: fingerprints from before stay valid
        data["drafter"] = drafter
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]
