"""Step cost T(B, K) learned online: least squares on observed step latencies, anchored by a prior.

The model is the prior's roofline split into terms -- memory-bound floor, compute above the
floor (with the knee at five places), KV reads per request, draft passes, drafted tokens, a
speculative step's K-independent bookkeeping, and the prompts prefilled within decode steps -- each
scaled by a non-negative multiplier theta fitted to the data (PRIOR_THETA reproduces the prior).
Residuals are relative, and the prior's level is first rescaled to the data, so one prior
strength suits any hardware. Only the configured K values are ever observed; the prior keeps
predictions for other K sane until data arrives. The data live in the policy state as
remembered cells (batch size, K) -> mean step time, plain lists.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from specinfer.runtime.methods import CostShape
from specinfer.runtime.methods.drafting import NO_WORK, DraftWork, step_work
from specinfer.runtime.methods.schedule import effective_k

from .inputs import CostPrior
from .observation import bounded_prompt_ratio

if TYPE_CHECKING:
    from .observation import Observation

KNEE_SHIFTS = (4.0, 2.0, 1.0, 0.5, 0.25)  # compute slope x this: the knee earlier, as believed, later
TERMS = 6 + len(KNEE_SHIFTS)
# Where `terms` puts the drafter's terms: draft passes, drafted tokens, a speculative step's bookkeeping.
DRAFTER_TERMS = (TERMS - 4, TERMS - 3, TERMS - 2)
PER_SEQUENCE_TERMS = (1 + len(KNEE_SHIFTS),)  # KV reads per request (and on a CPU engine its own overhead)
# The prompts prefilled in a decode step (vLLM schedules a new request's prefill beside the running decodes).
# Per token generated it does not depend on K, but per step it grows with the tokens a step generates, so
# left out of the fit it was learnt as decode and bent the slope in K (docs/tuner.md, "Prefill").
PREFILL_TERM = TERMS - 1
PRIOR_THETA = np.array([1.0, *(1.0 if s == 1.0 else 0.0 for s in KNEE_SHIFTS), 1.0, 1.0, 1.0, 1.0, 1.0])
MIN_THETA = np.array([0.05, *(0.0 if s != 1.0 else 0.05 for s in KNEE_SHIFTS), 0.05, 0.05, 0.05, 0.05, 0.05])
SAMPLE_CAP = 200.0  # steps beyond this in one cell and window add no more confidence
CELL_MEMORY = 3.0  # a re-observed cell moves by at least 1/4 towards the new window's mean
MAX_CELL_WEIGHT = 10.0  # windows of evidence one cell can hold
MIN_CELL_WEIGHT = 0.05
MAX_CELLS = 64  # keeps the state a few kB (the loop stores it in status)
K0_SPLIT_KEY = "k0Split"  # cells keyed "B:0" are plain decode only ("B:0s": a schedule's K = 0 step)
PRICED_KEY = "prefillPriced"  # every cell's prefill entry was written knowing the prompts (or that none were reported)
PROMPT_MEMORY = 0.5  # a window's prompt tokens per generated token moves the remembered one half way


def draft_passes(k: int, cost_shape: CostShape, speculative: bool = False) -> int:
    """Draft passes in one step of a drafter that follows the step's K (vLLM's Model Runner V1
    proposers): none for a lookup, one for a parallel drafter, K for a sequential one, and a model
    drafter's first pass in a Dynamic SD schedule's K = 0 steps (`speculative`), to keep its KV cache in
    step (vLLM llm_base_proposer.py, `propose`)."""
    return step_work(cost_shape, k, max(k, 1)).passes if (k > 0 or speculative) else 0


def draft_work(prior: CostPrior, k: int, cost_shape: CostShape, speculative: bool = False,
               config_k: int | None = None) -> DraftWork:
    """The drafter's work in a step whose schedule picked `k` (runtime/methods/drafting.py), by the law
    the prior carries. A drafter that drafts its startup K every step drafts the engine's startup K: the
    config's own largest K (`config_k`: its envelope, runtime/contract/live_schedule/envelope.py), or -- a
    K judged alone -- the larger of
    the envelope the engine runs now (`prior.startup_k`) and `k`. Not `speculative` and K = 0: a plain
    decode step, no drafter."""
    if k <= 0 and not speculative:
        return NO_WORK
    startup = max(config_k, 1) if config_k is not None else max(prior.startup_k or 0, k, 1)
    return step_work(cost_shape, k, startup, drafted=prior.drafted_k, zero_step=prior.zero_step)


def terms(prior: CostPrior, batch_size: float, k: int, cost_shape: CostShape, speculative: bool = False,
          config_k: int | None = None, verified_tokens: float | None = None,
          prompt_tokens: float = 0.0) -> np.ndarray:
    """The prior's step time split into the terms the fit scales (at PRIOR_THETA they sum to it).

    The compute-above-the-floor term comes three times, with the knee earlier, where the prior
    puts it, and later: the fit can move the knee, which a roofline estimate often misplaces.
    `speculative`: the engine runs a speculative config, so a K = 0 step (a schedule's) still runs
    what the drafter runs then (`draft_work`); without one, K = 0 is a plain decode step. `config_k`:
    the config's K, for a drafter that drafts its startup K. `verified_tokens`: tokens through the target
    when not B*(K+1) (adaptive verification verifies fewer, policy/adaptive.py). `prompt_tokens`: prompt tokens
    the step prefills (0: a decode step alone, what every prediction prices; `Model.speed` adds the prefill).
    """
    tokens = batch_size * (k + 1) if verified_tokens is None else verified_tokens
    p = prior.knee_sharpness
    excess = [(prior.floor**p + (prior.compute_per_token * shift * tokens) ** p) ** (1.0 / p) - prior.floor
              for shift in KNEE_SHIFTS]
    work = draft_work(prior, k, cost_shape, speculative, config_k)
    return np.array([
        prior.floor,
        *excess,
        prior.kv_per_sequence * batch_size,
        prior.draft_pass * work.passes,
        prior.draft_token * batch_size * work.tokens,  # tokens through the drafter
        speculation_overhead(prior, batch_size) if k > 0 else 0.0,
        prior.prefill_seconds * prompt_tokens,
    ])


def step_times_over_tokens(prior: CostPrior, theta: np.ndarray, batch_size: float, k: int, cost_shape: CostShape,
                           tokens: np.ndarray, speculative: bool = True, config_k: int | None = None) -> np.ndarray:
    """T of one step for each count of tokens through the target (`terms(..., verified_tokens=...)`,
    vectorised): what adaptive verification chooses among (policy/adaptive.py)."""
    base = terms(prior, batch_size, k, cost_shape, speculative, config_k)
    p = prior.knee_sharpness
    counts = np.asarray(tokens, dtype=float)[:, None]
    shifts = np.asarray(KNEE_SHIFTS)[None, :]
    excess = (prior.floor**p + (prior.compute_per_token * shifts * counts) ** p) ** (1.0 / p) - prior.floor
    rows = np.tile(base, (len(counts), 1))
    rows[:, 1:1 + len(KNEE_SHIFTS)] = excess
    return np.asarray(rows[:, :PREFILL_TERM] @ theta[:PREFILL_TERM], dtype=float)  # decode steps: no prompts




def seconds_of(x: np.ndarray, theta: np.ndarray) -> float:
    """x @ theta. A step with no prompts prefilled is priced over the decode terms alone, the sum it was
    before the prefill term existed, to the last digit (a longer dot product may round differently)."""
    if x[PREFILL_TERM] == 0:
        return float(x[:PREFILL_TERM] @ theta[:PREFILL_TERM])
    return float(x @ theta)


def speculation_overhead(prior: CostPrior, batch_size: float) -> float:
    """A speculative step's cost whatever its K (0 on GPU priors)."""
    return prior.speculation_step + prior.speculation_per_sequence * batch_size


def _kind(key: str) -> str:
    """A cell's key without its batch size: "B:K[s][@W]" -> "K[s][@W]", "pooled:B:K:schedule" -> "pooled:K:schedule"."""
    parts = key.split(":")
    return ":".join(["pooled", *parts[2:]]) if parts[0] == "pooled" else ":".join(parts[1:])


@dataclass
class CostModel:
    """Remembered step times per cell (batch size, effective K -- or a pooled config for vLLM's
    series) and the ridge fit over them.

    A cell seen again is updated in place (moving average); cells not seen keep what they said,
    ageing only slowly. So the time of a K that ran an hour ago still constrains the slope in K
    while another K runs -- forgetting it would hand that slope back to the prior.
    """

    prior: CostPrior
    cost_shape: CostShape
    cells: dict[str, list[Any]]  # key -> [term vector, mean seconds, weight]
    prompt_per_generated: float = 0.0  # the workload's prompt tokens per generated token, as last measured
    # cells stored before the prefill term: their steps may hold prefill their vectors do not price
    unpriced: set[str] = field(default_factory=set)

    @staticmethod
    def from_state(data: dict[str, Any] | None, prior: CostPrior, cost_shape: CostShape,
                   prompt_per_generated: float = 0.0) -> CostModel:
        """The model a stored state holds; `prompt_per_generated`: the remembered prompt ratio (kept beside the
        cost state, PolicyState.prompt_per_generated)."""
        cells = (data or {}).get("cells") or {}
        if not isinstance(cells, dict):
            cells = {}
        # A cell written before a term was added has a shorter vector: it is forgotten (relearnt in
        # a window) rather than fitted against the wrong terms. So is a K = 0 cell written before a
        # schedule's K = 0 steps had cells of their own: it may hold such steps priced as plain decode.
        # A cell written before the prefill term is kept, pricing no prompts, until a window reports some:
        # its step may hold prefill its vector does not price, and it is forgotten then (`learn`).
        split = bool((data or {}).get(K0_SPLIT_KEY))
        padded = {key: ([*x, 0.0] if len(x) == PREFILL_TERM else list(x), seconds, weight)
                  for key, (x, seconds, weight) in cells.items()}
        kept = {k: [x, float(s), float(w)] for k, (x, s, w) in padded.items()
                if len(x) == TERMS and (split or not k.endswith(":0"))}
        unpriced = set() if (data or {}).get(PRICED_KEY) else set(kept)
        return CostModel(prior, cost_shape, kept, bounded_prompt_ratio(prompt_per_generated) or 0.0, unpriced)

    def to_state(self) -> dict[str, Any]:
        return {K0_SPLIT_KEY: True, PRICED_KEY: not self.unpriced,
                "cells": {key: ([float(f"{v:.6g}") for v in x], float(f"{seconds:.6g}"), round(weight, 4))
                          for key, (x, seconds, weight) in self.cells.items()}}

    def add(self, key: str, x: Sequence[float] | np.ndarray, seconds: float,
            count: float) -> tuple[float, float] | None:
        """One observed mean step time for cell `key`, worth min(count, cap)/cap of a full window.

        Returns (squared relative deviation from what the cell remembered, its weight) when the cell
        was seen before: a sample of the measurement noise that no model error enters."""
        if seconds <= 0 or count <= 0 or not math.isfinite(seconds):
            return None
        worth = min(count, SAMPLE_CAP) / SAMPLE_CAP
        deviation = None
        if key in self.cells:
            old_x, old_seconds, old_weight = self.cells[key]
            share = worth / (worth + min(old_weight, CELL_MEMORY))
            new_x = list(map(float, x))
            # the prompts prefilled move with the window's load: the cell's mean holds them in the same blend
            new_x[PREFILL_TERM] = old_x[PREFILL_TERM] + share * (new_x[PREFILL_TERM] - old_x[PREFILL_TERM])
            self.cells[key] = [new_x, old_seconds + share * (seconds - old_seconds),
                               min(old_weight + worth, MAX_CELL_WEIGHT)]
            # The remembered mean carries noise too: scale so the sample estimates one window's variance.
            remembered = min(old_weight, CELL_MEMORY)
            deviation = ((seconds / old_seconds - 1) ** 2 * remembered / (remembered + 1), worth * remembered)
        else:
            self.cells[key] = [list(map(float, x)), float(seconds), worth]
        return deviation

    def trim(self, keep: Collection[str] = ()) -> None:
        """At most MAX_CELLS: drop the lightest cell of the most crowded kind (the same K and config at
        other batch sizes), never one in `keep` (this window's) while another is left.

        The lightest cell overall is the newest, so a window's single measurement of another K -- a probe's
        -- went first: in the bench's diurnal day 60 cells of K=1 at batch 141-225 evicted each K = 0 probe's
        cells as they came, and the same probe ran three times in 13 minutes, measuring nothing."""
        while len(self.cells) > MAX_CELLS:
            spare = [key for key in self.cells if key not in keep] or list(self.cells)
            crowd = Counter(_kind(key) for key in self.cells)  # all cells: a window revisits its own kind's
            most = max(crowd[_kind(key)] for key in spare)
            del self.cells[min((key for key in spare if crowd[_kind(key)] == most), key=lambda k: self.cells[k][2])]

    def decay(self, forget: float) -> None:
        for key in list(self.cells):
            self.cells[key][2] *= forget
            if self.cells[key][2] < MIN_CELL_WEIGHT:
                del self.cells[key]

    def _normal_equations(self) -> tuple[np.ndarray, np.ndarray]:
        xtx, xty = np.zeros((TERMS, TERMS)), np.zeros(TERMS)
        for x, seconds, weight in self.cells.values():
            z = np.asarray(x)
            w = weight / seconds**2  # relative residuals
            xtx += w * np.outer(z, z)
            xty += w * z * seconds
        return xtx, xty

    def _term_weights(self) -> np.ndarray:
        """How much each term matters to the prior's predictions (mean squared share of T over a
        grid of batch sizes and K): the ridge holds a term as firmly as it shapes predictions."""
        shares = []
        for batch_size in (1, 4, 16, 64, 256):
            for k in (0, 1, 3, 7):
                x = terms(self.prior, batch_size, k, self.cost_shape)[:PREFILL_TERM]
                shares.append((x / float(x @ PRIOR_THETA[:PREFILL_TERM])) ** 2)
        weights = np.maximum(np.mean(shares, axis=0), 1e-3)
        # The grid prices decode steps alone. Prefill is held as firmly as the prior's most weighty term: the
        # cells give it little leverage of its own (per step it grows with the tokens generated, much as the
        # compute does), so where one K is measured the prior's cost per prompt token decides its share.
        return np.asarray([*weights, float(np.max(weights))], dtype=float)

    @staticmethod
    def _prior_scale(xtx: np.ndarray, xty: np.ndarray, prior_theta: np.ndarray) -> float:
        """The one factor that best fits the prior's level to the data (least squares)."""
        predicted_sq = float(prior_theta @ xtx @ prior_theta)
        scale = float(prior_theta @ xty) / predicted_sq if predicted_sq > 0 else 1.0
        return min(max(scale, 0.1), 10.0)

    def _system(self) -> tuple[np.ndarray, np.ndarray, float, np.ndarray]:
        """The ridge's normal equations a @ theta = b over the terms the cells hold, the prior's scale, and
        the ridge of every term. Without prompts reported no cell holds the prefill term: it rests at the
        prior and the others are solved as they were before it existed."""
        xtx, xty = self._normal_equations()
        fitted = TERMS if np.any(xtx[PREFILL_TERM]) else PREFILL_TERM
        xtx, xty, prior_theta = xtx[:fitted, :fitted], xty[:fitted], PRIOR_THETA[:fitted]
        # The prior's level is often off (another GPU, another model size): rescale it to the data
        # first (least squares on one factor), then let the ridge hold only the prior's *shape*.
        scale = self._prior_scale(xtx, xty, prior_theta)
        ridge = self.prior.strength * self._term_weights() / scale**2
        held = np.diag(ridge[:fitted])
        return xtx + held, xty + held @ (scale * prior_theta), scale, ridge

    def multipliers(self) -> np.ndarray:
        """theta: the posterior mode of the terms' multipliers (ridge towards PRIOR_THETA)."""
        a, b, scale, _ = self._system()
        fitted = len(b)
        lower = MIN_THETA[:fitted] * scale
        # Multipliers cannot be negative (a cost term never saves time): solve, pin the terms that
        # fall below their floor, and solve again for the rest (a small active-set loop).
        pinned = np.zeros(fitted, dtype=bool)
        theta = lower.copy()
        for _ in range(fitted):
            free = ~pinned
            rhs = b[free] - a[np.ix_(free, pinned)] @ lower[pinned]
            theta[free] = np.linalg.solve(a[np.ix_(free, free)], rhs)
            theta[pinned] = lower[pinned]
            below = free & (theta < lower)
            if not below.any():
                break
            pinned |= below
        return np.concatenate([np.maximum(theta, lower), scale * PRIOR_THETA[fitted:]])

    def relative_spread(self, direction: np.ndarray) -> float:
        """Standard deviation of direction @ theta per unit of window noise: the ridge's posterior
        (a^-1 times the relative variance of one window's step time). Large where no data constrains
        the terms that `direction` weighs (batch sizes or K never observed), small near the data."""
        a, _, _, ridge = self._system()
        fitted = len(a)
        variance = float(direction[:fitted] @ np.linalg.solve(a, direction[:fitted]))
        variance += float(np.sum(direction[fitted:] ** 2 / ridge[fitted:]))  # terms no cell holds: the ridge alone
        return math.sqrt(max(variance, 0.0))

    def table(self, max_batch_size: int, k_max: int, theta: np.ndarray, speculative: bool = False,
              config_k: int | None = None) -> np.ndarray:
        """T[b, k] for b in 0..max_batch_size and k in 0..k_max in one vectorised pass (row 0 unused);
        `speculative` as in `terms` (column 0: a schedule's K = 0 step rather than plain decode). A
        drafter that drafts its startup K is priced at `config_k` (a config's largest K), or else at the
        larger of the envelope and the column's K."""
        b = np.arange(max_batch_size + 1, dtype=float)[:, None]
        k = np.arange(k_max + 1, dtype=float)[None, :]
        prior = self.prior
        p = prior.knee_sharpness
        tokens = b * (k + 1)
        works = [draft_work(prior, column, self.cost_shape, speculative, config_k) for column in range(k_max + 1)]
        passes = np.array([[work.passes for work in works]], dtype=float)
        drafted = np.array([[work.tokens for work in works]], dtype=float)
        columns = [np.full_like(tokens, prior.floor)]
        columns += [(prior.floor**p + (prior.compute_per_token * shift * tokens) ** p) ** (1.0 / p) - prior.floor
                    for shift in KNEE_SHIFTS]
        columns += [prior.kv_per_sequence * b + 0 * k, prior.draft_pass * passes + 0 * b,
                    prior.draft_token * b * drafted,
                    np.where(k > 0, prior.speculation_step + prior.speculation_per_sequence * b, 0.0)]
        return np.asarray(sum(theta[i] * column for i, column in enumerate(columns)), dtype=float)

    def step_time(self, batch_size: float, k: int, theta: np.ndarray | None = None, speculative: bool = False,
                  config_k: int | None = None) -> float:
        multipliers = self.multipliers() if theta is None else theta
        return seconds_of(terms(self.prior, batch_size, k, self.cost_shape, speculative, config_k), multipliers)

    def drafts_startup_k(self) -> bool:
        """The drafter drafts its startup K every step: a step's cost depends on the config's K too (a
        lookup's does not: drafting.step_work prices it per scheduled token)."""
        return self.prior.drafted_k == "startup" and self.cost_shape != "lookup"

    def learn(self, obs: Observation, slowdown: float = 1.0) -> float | None:
        """Fold this window's step latencies in; returns the window's measurement noise: the weighted
        mean squared relative deviation of its step times from the cells' memory (None: no cell was
        seen before). `slowdown` is what the applied config adds to every step (PIECEWISE graphs
        under a schedule): the cells remember the engine's own step time without it."""
        deviations: list[tuple[float, float]] = []
        seen: set[str] = set()

        def add(key: str, x: Sequence[float] | np.ndarray, seconds: float, count: float) -> None:
            seen.add(key)
            deviation = self.add(key, x, seconds / slowdown, count)
            if deviation is not None and deviation[1] > 0:
                deviations.append(deviation)

        config_k = obs.applied.config.num_speculative_tokens
        speculative = config_k > 0
        measured = obs.prompt_per_generated
        if measured and self.unpriced:  # prompts reported: the cells stored before the term may hold them
            for key in self.unpriced:
                self.cells.pop(key, None)
            self.unpriced.clear()
        if measured is not None:
            self.prompt_per_generated += (PROMPT_MEMORY if self.prompt_per_generated > 0 else 1.0) * (
                measured - self.prompt_per_generated)
        prompts = self._window_prompts(obs)
        # a drafter that drafts its startup K: the same (B, K) costs more under a larger startup K
        width = f"@{max(config_k, self.prior.startup_k or 0)}" if self.drafts_startup_k() and speculative else ""
        if obs.step_samples:
            for sample in obs.step_samples:
                if sample.count > 0 and sample.mean_seconds > 0:
                    # the window's prompts spread over its steps as the tokens they generate
                    prefilled = prompts * sample.batch_size * obs.expected_tokens_at(sample.k)
                    x = terms(self.prior, sample.batch_size, sample.k, self.cost_shape, speculative, config_k,
                              prompt_tokens=prefilled)
                    # a schedule's K = 0 step is another cell than a plain decode step
                    suffix = "s" if sample.k == 0 and speculative else ""
                    add(f"{round(sample.batch_size)}:{sample.k}{suffix}{width}", x, sample.mean_seconds,
                        sample.count)
        elif obs.sequence_steps > 0 and obs.step_mean_seconds > 0:
            add(self.pooled_key(obs), self.pooled_terms(obs), obs.step_mean_seconds, obs.sequence_steps)
        self.trim(keep=seen)
        total = sum(weight for _, weight in deviations)
        return sum(value * weight for value, weight in deviations) / total if total > 0 else None

    def _window_prompts(self, obs: Observation) -> float:
        """The window's prompt tokens per generated token; a window without the counter (a failed query) still
        prefilled: at the remembered ratio."""
        measured = obs.prompt_per_generated
        return measured if measured is not None else self.prompt_per_generated

    @staticmethod
    def pooled_key(obs: Observation) -> str:
        applied = obs.applied.config
        return f"pooled:{round(obs.batch_size_mean)}:{applied.num_speculative_tokens}:{applied.schedule}"

    def pooled_terms(self, obs: Observation) -> np.ndarray:
        """vLLM's inter-token latency pools every step once per running request: batch size b holds
        a share f(b) of engine time, so f(b)*b/T(b) request-steps per second. The model is linear in
        theta, so the pooled mean is the request-step-weighted mean of the term vectors (weights
        from the current estimate of T)."""
        theta = self.multipliers()
        applied = obs.applied.config
        speculative = applied.num_speculative_tokens > 0
        prompts = self._window_prompts(obs)
        mix = []
        for size, fraction in obs.batch_distribution():
            k = effective_k(size, applied.num_speculative_tokens, applied.schedule)
            x = terms(self.prior, size, k, self.cost_shape, speculative, applied.num_speculative_tokens,
                      prompt_tokens=prompts * size * obs.expected_tokens_at(k))
            mix.append((size * fraction / seconds_of(x, theta), x))
        total = sum(w for w, _ in mix)
        mean_x = np.zeros(TERMS)
        for weight, x in mix:
            mean_x += (weight / total) * x
        return mean_x
