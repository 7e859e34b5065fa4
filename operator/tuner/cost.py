"""Step cost T(B, K) learned online: least squares on observed step latencies, anchored by a prior.

The model is the prior's roofline split into five terms -- memory-bound floor, compute above the
floor, KV reads per sequence, draft passes, drafted tokens -- each scaled by a multiplier theta
learned from data (theta = 1 is the prior). Residuals are relative, so one prior strength suits
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

TERMS = 5
SAMPLE_CAP = 200.0  # steps beyond this in one cell add no more confidence (noise is not i.i.d.)
MIN_MULTIPLIER = 0.05


def draft_passes(k: int, drafting: str) -> int:
    if k <= 0 or drafting == "none":
        return 0
    return 1 if drafting == "parallel" else k


def terms(prior: CostPrior, batch_size: float, k: int, drafting: str) -> np.ndarray:
    """The prior's step time split into the five terms the fit scales (they sum to the prior T)."""
    tokens = batch_size * (k + 1)
    p = prior.knee_sharpness
    roof = (prior.floor**p + (prior.compute_per_token * tokens) ** p) ** (1.0 / p)
    drafted = batch_size * k if k > 0 else 0.0
    return np.array([
        prior.floor,
        roof - prior.floor,
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

    def multipliers(self) -> np.ndarray:
        """theta: the posterior mode of the prior terms' multipliers (ridge towards 1)."""
        ridge = self.prior.strength * 0.25 * np.eye(TERMS)
        theta = np.linalg.solve(self.xtx + ridge, self.xty + ridge @ np.ones(TERMS))
        return np.maximum(theta, MIN_MULTIPLIER)

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
        # vLLM's inter-token latency pools every step once per running request: its mean is the
        # batch-size-weighted mean of T(b, k(b)); the model is linear in theta, so that is the
        # weighted mean of the term vectors.
        mix = [(size * fraction, size) for size, fraction in obs.batch_distribution()]
        total = sum(w for w, _ in mix)
        applied = obs.applied
        mean_x = np.zeros(TERMS)
        for weight, size in mix:
            k = effective_k(size, applied.num_speculative_tokens, applied.schedule)
            mean_x += (weight / total) * terms(self.prior, size, k, self.drafting)
        self.add(mean_x, obs.step_mean_seconds, obs.sequence_steps)
        return 1
