"""Step cost T(B, K) learned online: least squares on observed step latencies, anchored by a prior.

The model is the prior's roofline split into terms -- memory-bound floor, compute above the
floor (with the knee at three places), KV reads per sequence, draft passes, drafted tokens --
each scaled by a multiplier theta learned from data (PRIOR_THETA reproduces the prior). Residuals are relative, so one prior strength suits
any hardware. Only the configured K values are ever observed; the prior keeps predictions for
other K sane until data arrives. Sufficient statistics (X'WX, X'Wy) live in the policy state as
plain lists and decay by a forgetting factor each window.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specinfer.runtime.methods.schedule import effective_k

from .observation import Observation
from .tuning import CostPrior

KNEE_SHIFTS = (4.0, 2.0, 1.0, 0.5, 0.25)  # compute slope x this: the knee earlier, as believed, later
TERMS = 4 + len(KNEE_SHIFTS)
PRIOR_THETA = np.array([1.0, *(1.0 if s == 1.0 else 0.0 for s in KNEE_SHIFTS), 1.0, 1.0, 1.0])
MIN_THETA = np.array([0.05, *(0.0 if s != 1.0 else 0.05 for s in KNEE_SHIFTS), 0.05, 0.05, 0.05])
SAMPLE_CAP = 200.0  # steps beyond this in one cell add no more confidence (noise is not i.i.d.)


def draft_passes(k: int, drafting: str) -> int:
    if k <= 0 or drafting == "none":
        return 0
    return 1 if drafting == "parallel" else k


def terms(prior: CostPrior, batch_size: float, k: int, drafting: str) -> np.ndarray:
    """The prior's step time split into the terms the fit scales (at PRIOR_THETA they sum to it).

    The compute-above-the-floor term comes three times, with the knee earlier, where the prior
    puts it, and later: the fit can move the knee, which a roofline estimate often misplaces.
    """
    tokens = batch_size * (k + 1)
    p = prior.knee_sharpness
    excess = [(prior.floor**p + (prior.compute_per_token * shift * tokens) ** p) ** (1.0 / p) - prior.floor
              for shift in KNEE_SHIFTS]
    drafted = batch_size * k if k > 0 else 0.0
    return np.array([
        prior.floor,
        *excess,
        prior.kv_per_sequence * batch_size,
        prior.draft_pass * draft_passes(k, drafting),
        prior.draft_token * drafted,
    ])


@dataclass
class CostModel:
    prior: CostPrior
    drafting: str
    xtx: np.ndarray
    xty: np.ndarray

    @staticmethod
    def from_state(data: dict | None, prior: CostPrior, drafting: str) -> "CostModel":
        if not data:
            return CostModel(prior, drafting, np.zeros((TERMS, TERMS)), np.zeros(TERMS))
        return CostModel(prior, drafting, np.array(data["xtx"], dtype=float), np.array(data["xty"], dtype=float))

    def to_state(self) -> dict:
        return {"xtx": self.xtx.tolist(), "xty": self.xty.tolist()}

    def add(self, x: Sequence[float], seconds: float, count: float) -> None:
        """One observed mean step time for term vector x, worth min(count, cap) steps."""
        if seconds <= 0 or count <= 0:
            return
        z = np.asarray(x, dtype=float)
        weight = min(count, SAMPLE_CAP) / SAMPLE_CAP / seconds**2
        self.xtx += weight * np.outer(z, z)
        self.xty += weight * z * seconds

    def decay(self, forget: float) -> None:
        self.xtx *= forget
        self.xty *= forget

    def _term_weights(self) -> np.ndarray:
        """How much each term matters to the prior's predictions (mean squared share of T over a
        grid of batch sizes and K): the ridge holds a term as firmly as it shapes predictions."""
        shares = []
        for batch_size in (1, 4, 16, 64, 256):
            for k in (0, 1, 3, 7):
                x = terms(self.prior, batch_size, k, self.drafting)
                shares.append((x / float(x @ PRIOR_THETA)) ** 2)
        return np.maximum(np.mean(shares, axis=0), 1e-3)

    def multipliers(self) -> np.ndarray:
        """theta: the posterior mode of the terms' multipliers (ridge towards PRIOR_THETA)."""
        # The prior's level is often off (another GPU, another model size): rescale it to the data
        # first (least squares on one factor), then let the ridge hold only the prior's *shape*.
        predicted_sq = float(PRIOR_THETA @ self.xtx @ PRIOR_THETA)
        scale = float(PRIOR_THETA @ self.xty) / predicted_sq if predicted_sq > 0 else 1.0
        scale = min(max(scale, 0.1), 10.0)
        ridge = self.prior.strength * np.diag(self._term_weights()) / scale**2
        a = self.xtx + ridge
        b = self.xty + ridge @ (scale * PRIOR_THETA)
        lower = MIN_THETA * scale
        # Multipliers cannot be negative (a cost term never saves time): solve, pin the terms that
        # fall below their floor, and solve again for the rest (a small active-set loop).
        pinned = np.zeros(TERMS, dtype=bool)
        theta = lower.copy()
        for _ in range(TERMS):
            free = ~pinned
            rhs = b[free] - a[np.ix_(free, pinned)] @ lower[pinned]
            theta[free] = np.linalg.solve(a[np.ix_(free, free)], rhs)
            theta[pinned] = lower[pinned]
            below = free & (theta < lower)
            if not below.any():
                break
            pinned |= below
        return np.maximum(theta, lower)

    def table(self, max_batch_size: int, k_max: int, theta: np.ndarray) -> np.ndarray:
        """T[b, k] for b in 0..max_batch_size and k in 0..k_max in one vectorised pass (row 0 unused)."""
        b = np.arange(max_batch_size + 1, dtype=float)[:, None]
        k = np.arange(k_max + 1, dtype=float)[None, :]
        prior = self.prior
        p = prior.knee_sharpness
        tokens = b * (k + 1)
        passes = np.where(k > 0, 1.0 if self.drafting == "parallel" else k, 0.0) if self.drafting != "none" \
            else np.zeros_like(k)
        columns = [np.full_like(tokens, prior.floor)]
        columns += [(prior.floor**p + (prior.compute_per_token * shift * tokens) ** p) ** (1.0 / p) - prior.floor
                    for shift in KNEE_SHIFTS]
        columns += [prior.kv_per_sequence * b + 0 * k, prior.draft_pass * passes + 0 * b, prior.draft_token * b * k]
        return sum(theta[i] * column for i, column in enumerate(columns))

    def step_time(self, batch_size: float, k: int, theta: np.ndarray | None = None) -> float:
        multipliers = self.multipliers() if theta is None else theta
        return float(terms(self.prior, batch_size, k, self.drafting) @ multipliers)

    def learn(self, obs: Observation) -> int:
        """Fold this window's step latencies in; returns how many samples were used."""
        if obs.step_samples:
            used = 0
            for sample in obs.step_samples:
                if sample.count > 0 and sample.mean_seconds > 0:
                    self.add(terms(self.prior, sample.batch_size, sample.k, self.drafting), sample.mean_seconds, sample.count)
                    used += 1
            return used
        if obs.sequence_steps <= 0 or obs.step_mean_seconds <= 0:
            return 0
        # vLLM's inter-token latency pools every step once per running request: batch size b holds
        # a share f(b) of engine time, so f(b)*b/T(b) request-steps per second. The model is linear
        # in theta, so the pooled mean is the request-step-weighted mean of the term vectors
        # (weights from the current estimate of T).
        theta = self.multipliers()
        applied = obs.applied
        mix = []
        for size, fraction in obs.batch_distribution():
            x = terms(self.prior, size, effective_k(size, applied.num_speculative_tokens, applied.schedule), self.drafting)
            mix.append((size * fraction / float(x @ theta), x))
        total = sum(w for w, _ in mix)
        mean_x = np.zeros(TERMS)
        for weight, x in mix:
            mean_x += (weight / total) * x
        self.add(mean_x, obs.step_mean_seconds, obs.sequence_steps)
        return 1
