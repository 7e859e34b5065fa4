"""The objective: goodput B*E_K/T(B,K) per batch size, the best K per batch size, and configs.

At a fixed batch size the K that maximises goodput also minimises per-token latency (both are
E_K/T(B,K)), so the per-batch-size choice needs no trade-off; the schedule is that choice over
every batch size up to maxBatchSize, compressed into vLLM's Dynamic SD ranges (`DraftConfig`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from specinfer.runtime.methods.schedule import compress

from .acceptance import expected_tokens
from .adaptive import adaptive_step
from .config import AdaptiveDense
from .cost import PREFILL_TERM, CostModel, terms
from .inputs import TuningInput

TABLE_BATCH = 1024  # step times up to this batch size are computed once per decision, vectorised
MAX_RANGES = 8  # a schedule a person can read (the API allows 32); merging costs a fraction of a percent
KEEP_TOLERANCE = 0.01  # within 1% of the best, a batch size keeps its current K (no churn from noise)
Distribution = Sequence[tuple[int, float]]


def prefill_per_token(cost: CostModel, theta: np.ndarray) -> float:
    """Seconds of prefill per generated token: the fitted prefill term at the load's prompt tokens per generated
    token. The same for every K, so at one batch size it ranks no K above another, but every step the engine
    serves holds it, and a gain left without it on both sides is overstated."""
    return float(theta[PREFILL_TERM]) * cost.prior.prefill_seconds * cost.prompt_per_generated


@dataclass(frozen=True)
class Model:
    """Everything the objective needs: extrapolated acceptance and the fitted step-cost multipliers."""

    prefix: Sequence[float]
    cost: CostModel
    theta: np.ndarray
    schedule_factor: float = 1.0  # every step's time while a schedule is configured (PIECEWISE CUDA graphs)
    always_scheduled: bool = False  # retuned in place: every speculative config runs under a schedule
    measured_positions: int | None = None  # draft positions whose acceptance a window measured (None: all)
    _tables: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def step_time(self, batch_size: float, k: int, speculative: bool = False, config_k: int | None = None) -> float:
        """T(B, K); `speculative`: under a speculative config, where K = 0 still runs the drafter's first pass;
        `config_k`: the config's K, which a drafter that drafts its startup K pays on every step."""
        startup = config_k if config_k is not None and self.cost.drafts_startup_k() else None
        if float(batch_size).is_integer() and 0 < batch_size <= TABLE_BATCH and k <= len(self.prefix):
            return float(self.times(speculative, startup)[int(batch_size), k])
        return self.cost.step_time(batch_size, k, self.theta, speculative, startup)

    def times(self, speculative: bool, config_k: int | None = None) -> np.ndarray:
        """T[b, k] up to TABLE_BATCH and the curve's length, computed once per decision (`config_k`: the
        largest K of the config, which a drafter that drafts its startup K pays)."""
        name = ("times-speculative" if speculative else "times") + ("" if config_k is None else f"@{config_k}")
        if name not in self._tables:
            self._tables[name] = self.cost.table(TABLE_BATCH, len(self.prefix), self.theta, speculative, config_k)
        table: np.ndarray = self._tables[name]
        return table

    @property
    def prefill_per_token(self) -> float:
        """Seconds the engine spends prefilling prompts per token it generates (`prefill_per_token`)."""
        return prefill_per_token(self.cost, self.theta)

    def expected(self, k: int) -> float:
        """Tokens a request gains in a step that drafted `k` (cached per decision)."""
        if "expected" not in self._tables:
            self._tables["expected"] = [expected_tokens(self.prefix, j) for j in range(len(self.prefix) + 1)]
        return float(self._tables["expected"][k]) if k <= len(self.prefix) else expected_tokens(self.prefix, k)

    def served_step_time(self, batch_size: float, k: int, speculative: bool = False,
                         config_k: int | None = None) -> float:
        """A step as the engine serves it and a window measures it: the decode (`step_time`) and the prompts of
        the requests that replace those finishing, `expected(k)` tokens gained by each of `batch_size`."""
        prefill = self.prefill_per_token * batch_size * self.expected(k)
        return self.step_time(batch_size, k, speculative, config_k) + prefill

    def speed(self, batch_size: float, k: int, speculative: bool = False, config_k: int | None = None) -> float:
        """Tokens per second for one running request."""
        return self.expected(k) / self.served_step_time(batch_size, k, speculative, config_k)


def _clamp(size: float, max_batch_size: int) -> int:
    return max(1, min(int(size), max_batch_size))


def is_schedule(dense: Sequence[int]) -> bool:
    """The K differs by batch size: the engine runs a Dynamic SD schedule."""
    return any(k != dense[1] for k in dense[2:])


def is_speculative(dense: Sequence[int]) -> bool:
    """The engine runs with a speculative config (a drafter loaded), whatever K a batch size gets."""
    return any(k > 0 for k in dense[1:])


def _slowed(model: Model, dense: Sequence[int]) -> bool:
    """Every step pays the schedule factor: a schedule is configured (always, in place, while drafting)."""
    return model.schedule_factor != 1.0 and (is_schedule(dense) or (model.always_scheduled and is_speculative(dense)))


def goodput(model: Model, dense: Sequence[int], distribution: Sequence[tuple[float, float]]) -> float:
    """Expected tokens/s of the engine, averaged over the batch-size distribution (time fractions;
    fractional batch sizes are a replica's share of a load spread over several)."""
    total = sum(_tokens_per_second(model, dense, distribution))
    return total / model.schedule_factor if _slowed(model, dense) else total


def _tokens_per_second(model: Model, dense: Sequence[int], distribution: Sequence[tuple[float, float]]) -> list[float]:
    """Each batch size's share of the engine's tokens/s, before a schedule's slowdown of every step."""
    top = len(dense) - 1
    speculative = is_speculative(dense)
    config_k = max(dense[1:], default=0)
    if isinstance(dense, AdaptiveDense) and speculative:  # vLLM verifies only the drafts its rule admits
        return [f * b * adaptive_step(model, max(1, round(b)), dense[_clamp(b, top)], config_k).speed
                for b, f in distribution]
    return [f * b * model.speed(b, dense[_clamp(b, top)], speculative, config_k) for b, f in distribution]


def goodput_contributions(model: Model, dense: Sequence[int],
                          distribution: Sequence[tuple[float, float]]) -> dict[float, float]:
    """`goodput`, batch size by batch size (the values sum to it)."""
    factor = model.schedule_factor if _slowed(model, dense) else 1.0
    parts: dict[float, float] = {}
    for (b, _), tokens in zip(distribution, _tokens_per_second(model, dense, distribution), strict=True):
        parts[b] = parts.get(b, 0.0) + tokens / factor
    return parts


def sequence_speed(model: Model, dense: Sequence[int], distribution: Distribution) -> float:
    """Tokens per request-second (1 / mean per-token time), as vLLM's inter-token latency weighs it:
    batch size b holds f(b) of the engine's time with b requests running."""
    running = sum(f * b for b, f in distribution)
    return goodput(model, dense, distribution) / running if running > 0 else 0.0


def best_dense(model: Model, tuning: TuningInput, current: Sequence[int], distribution: Distribution, *,
               one_k_where_observed: bool = False,
               pick_envelope: Callable[[list[list[int]]], list[int]] | None = None) -> list[int]:
    """The best K at each batch size within the method's and the spec's bounds.

    With schedules allowed every batch size picks its own K; otherwise one K for all, chosen on
    the observed batch-size distribution. K = 0 is a candidate only when allowDisable is set; a
    schedule's K = 0 still pays the drafter's first pass, so a schedule must also beat speculation
    off on the observed distribution. `one_k_where_observed` runs one K across today's batch sizes
    (vLLM's series only: see `one_k_over`). A drafter that drafts its startup K has one schedule per
    largest K: `pick_envelope` chooses among them (envelope.py), else the best on the distribution.
    """
    size = tuning.max_batch_size
    if not tuning.allow_schedule:
        single = [0] + [_best_single_k(model, tuning, current, distribution)] * size
        if pick_envelope is None or not model.cost.drafts_startup_k() or not is_speculative(single):
            return single
        # each single K is an envelope: the pick weighs them (speculation off, when best, is no envelope)
        singles = [[0] + [k] * size for k in within_reach(model, tuning.allowed_ks(), current) if k > 0]
        return pick_envelope(singles) if len(singles) > 1 else single
    candidates = within_reach(model, tuning.allowed_ks(), current)
    if model.cost.drafts_startup_k():
        # every step drafts the config's largest K: one schedule per largest K, each priced at it
        # (one K across today's batch sizes within each envelope: a larger one there would be another envelope)
        options = []
        for top in (k for k in candidates if k > 0):
            within = [k for k in candidates if k <= top]
            option = per_size_best(model, within, current, size, config_k=top)
            options.append(one_k_over(model, within, option, current, distribution) if one_k_where_observed
                           else option)
        dense = pick_envelope(options) if pick_envelope is not None else \
            max(options, key=lambda option: goodput(model, option, distribution))
    else:
        dense = per_size_best(model, candidates, current, size)
        if one_k_where_observed:
            dense = one_k_over(model, candidates, dense, current, distribution)
    dense = limit_ranges(model, dense, MAX_RANGES)
    if model.schedule_factor != 1.0 and is_schedule(dense):
        # A schedule slows every step here (PIECEWISE graphs): it must beat the best single K by that much (within
        # the envelope picked, where one was).
        picked = max(dense[1:]) if pick_envelope is not None and model.cost.drafts_startup_k() else None
        single = [0] + [_best_single_k(model, tuning, current, distribution, max_k=picked)] * size
        if goodput(model, single, distribution) >= goodput(model, dense, distribution):
            dense = single
    if 0 in candidates and is_speculative(dense):
        off = [0] * (size + 1)
        if goodput(model, off, distribution) > goodput(model, dense, distribution) * (1 + KEEP_TOLERANCE):
            return off
    return dense


def within_reach(model: Model, ks: Sequence[int], current: Sequence[int]) -> list[int]:
    """The K of `ks` a drafter that drafts its startup K may be rolled out to: up to the K in force, or
    one position beyond those whose acceptance a window measured. Beyond that the gain rests on the
    tail's extrapolation alone (from one measured position the next ones are assumed nearly as good:
    MTP on the bench's MoE, +31% predicted for K=3 over K=1 where K=2 was within 1% of it), and that K
    would be drafted on every step at every batch size until another rollout; one position more is how
    it gets measured. Other drafters keep every K (in place a K is measured within a window)."""
    if not model.cost.drafts_startup_k() or model.measured_positions is None:
        return list(ks)
    reach = max(model.measured_positions + 1, max(current[1:], default=0))
    kept = [k for k in ks if k <= reach]
    drafting = [k for k in ks if k > 0]
    return kept if any(k > 0 for k in kept) or not drafting else [*kept, drafting[0]]


def reach_note(model: Model, tuning: TuningInput, current: Sequence[int], distribution: Distribution,
               chosen: Sequence[int], *, one_k_where_observed: bool = False,
               pick_envelope: Callable[[list[list[int]]], list[int]] | None = None) -> str:
    """What `within_reach` held back from the rollout to `chosen`, for its decision ("" when nothing)."""
    if model.measured_positions is None or within_reach(model, tuning.allowed_ks(), current) == tuning.allowed_ks():
        return ""
    free = best_dense(replace(model, measured_positions=None), tuning, current, distribution,
                      one_k_where_observed=one_k_where_observed, pick_envelope=pick_envelope)
    top = max(free[1:], default=0)
    if top <= max(chosen[1:], default=0):
        return ""
    return (f"; the fit ranks K={top} higher, but this drafter drafts its startup K on every step and is rolled "
            f"out at most one draft position beyond the {model.measured_positions} whose acceptance a window "
            "has measured")


def per_size_best(model: Model, candidates: Sequence[int], current: Sequence[int], size: int, *,
                  config_k: int | None = None) -> list[int]:
    """The K of `candidates` with the best per-request speed at each batch size 1..size (speculating; the
    lower K on a tie; the current K where within KEEP_TOLERANCE of the best)."""
    ks = sorted(candidates)
    top = len(model.prefix)
    columns = [k for k in ks if k <= top]
    if size > TABLE_BATCH or len(columns) < len(ks):  # beyond the tables: one step at a time
        dense = [0]
        for b in range(1, size + 1):
            speeds = {k: model.speed(b, k, True, config_k) for k in ks}
            best = max(speeds, key=lambda k: (speeds[k], -k))
            now = current[b] if b < len(current) else None
            dense.append(now if now in speeds and speeds[now] >= speeds[best] * (1 - KEEP_TOLERANCE) else best)
        return dense
    expected = np.asarray([model.expected(k) for k in ks])
    startup = config_k if config_k is not None and model.cost.drafts_startup_k() else None
    prefill = model.prefill_per_token * np.arange(1, size + 1, dtype=float)[:, None] * expected[None, :]
    speeds = expected[None, :] / (model.times(True, startup)[1 : size + 1, ks] + prefill)  # as Model.speed
    best = speeds.argmax(axis=1)  # ks ascend: a tie goes to the lower K
    index = {k: i for i, k in enumerate(ks)}
    in_force = np.array([index.get(current[b], -1) if b < len(current) else -1 for b in range(1, size + 1)])
    rows = np.arange(size)
    keep = (in_force >= 0) & (speeds[rows, np.maximum(in_force, 0)] >= speeds[rows, best] * (1 - KEEP_TOLERANCE))
    chosen = np.where(keep, in_force, best)
    return [0, *(ks[i] for i in chosen)]


def _best_single_k(model: Model, tuning: TuningInput, current: Sequence[int], distribution: Distribution, *,
                   max_k: int | None = None) -> int:
    """The one K for every batch size with the best goodput on `distribution` (the current K when within 1%;
    none above `max_k`)."""
    size = tuning.max_batch_size
    scored = {k: goodput(model, [0] + [k] * size, distribution)
              for k in within_reach(model, tuning.allowed_ks(), current) if max_k is None or k <= max_k}
    best = max(scored, key=lambda k: (scored[k], -k))
    current_k = current[1] if len(current) > 1 and not is_schedule(current) else None
    if current_k in scored and scored[current_k] >= scored[best] * (1 - KEEP_TOLERANCE):
        return current_k
    return best


def one_k_over(model: Model, candidates: Sequence[int], dense: list[int], current: Sequence[int],
                distribution: Distribution) -> list[int]:
    """The best single K across today's batch sizes (lowest to highest seen), the per-size best elsewhere.

    vLLM's own series pool every step of a window: one inter-token latency and one accepted count
    per position. When the schedule changes K inside the observed range, the policy must split
    them by a batch-size mix known only from five quantiles of the running-requests gauge, and
    its model learns the wrong K's cost and acceptance. One K there keeps each window a clean
    measurement of one config, at a cost of a fraction of a percent (the best K moves slowly with
    the batch size).
    """
    top = len(dense) - 1
    low = _clamp(min(size for size, _ in distribution), top)
    high = _clamp(max(size for size, _ in distribution), top)

    def with_k(k: int) -> list[int]:
        return [*dense[:low], *([k] * (high - low + 1)), *dense[high + 1 :]]

    scored = {k: goodput(model, with_k(k), distribution) for k in candidates}
    best = max(scored, key=lambda k: (scored[k], -k))
    now = set(current[low : high + 1]) if len(current) > high else set()
    if len(now) == 1 and (k_now := now.pop()) in scored and scored[k_now] >= scored[best] * (1 - KEEP_TOLERANCE):
        best = k_now
    return with_k(best)


def limit_ranges(model: Model, dense: Sequence[int], max_ranges: int) -> list[int]:
    """Merge neighbouring ranges, cheapest loss of per-request speed first, until at most max_ranges."""
    ranges = [list(entry) for entry in compress(list(dense))]

    def loss(start: int, end: int, k: int) -> float:
        return sum(1 - model.speed(b, k, speculative=True) / max(model.speed(b, k_b, speculative=True), 1e-12)
                   for b in range(start, end + 1) for k_b in (dense[b],))

    while len(ranges) > max_ranges:
        options = []
        for i in range(len(ranges) - 1):
            start, end = ranges[i][0], ranges[i + 1][1]
            for k in (ranges[i][2], ranges[i + 1][2]):
                options.append((loss(start, end, k), i, k))
        _, i, k = min(options)
        ranges[i : i + 2] = [[ranges[i][0], ranges[i + 1][1], k]]
    merged = [0]
    for start, end, k in ranges:
        merged.extend([k] * (end - start + 1))
    return merged


def anticipated_sizes(distribution: Distribution, max_batch_size: int, lookahead: float) -> list[tuple[int, float]]:
    """The batch sizes to come, above today's largest: steps of sqrt(2) up to `lookahead` times it
    (at most maxBatchSize), each an equal share of time. Empty when today's load is at the top."""
    top = max(size for size, _ in distribution)
    sizes, step = set(), 1
    while 2 ** (step / 2) <= lookahead:
        size = min(max_batch_size, round(top * 2 ** (step / 2)))
        if size > top:
            sizes.add(size)
        step += 1
    return [(size, 1.0 / len(sizes)) for size in sorted(sizes)]


def coverage_gain(model: Model, candidate: Sequence[int], current: Sequence[int], sizes: Distribution) -> float:
    """Gain judged over other batch sizes than today's (`sizes`, e.g. the anticipated ones)."""
    if not sizes:
        return 0.0
    before = goodput(model, current, sizes)
    return goodput(model, candidate, sizes) / before - 1 if before > 0 else 0.0


def goodput_sensitivity(model: Model, dense: Sequence[int], distribution: Distribution) -> np.ndarray:
    """d log(goodput) / d theta, negated: the goodput-weighted mean of each term's share of the step
    time. The difference between two configs' is how a step-cost error moves the gain between them."""
    top = len(dense) - 1
    speculative = is_speculative(dense)
    config_k = max(dense[1:], default=0)
    parts = [(f * b * model.speed(b, dense[_clamp(b, top)], speculative, config_k), b, dense[_clamp(b, top)])
             for b, f in distribution]
    total = sum(weight for weight, _, _ in parts)
    out = np.zeros(len(model.theta))
    if total <= 0:
        return out
    prompts = model.cost.prompt_per_generated
    for weight, size, k in parts:
        step = terms(model.cost.prior, size, k, model.cost.cost_shape, speculative, config_k,
                     prompt_tokens=prompts * size * model.expected(k))  # the step's prompts, as served
        out += (weight / total) * step / model.served_step_time(size, k, speculative, config_k)
    return out
