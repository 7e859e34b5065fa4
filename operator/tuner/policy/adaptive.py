"""The step model of vLLM's adaptive verification: what it verifies, what a step then costs. Pure.

With `enable_adaptive_verification` the drafter drafts as before and every step verifies only the draft
slots vLLM's rule admits (runtime/methods/adaptive.py): the budget that maximises expected tokens per
second, over slots ranked by survival probability. The policy knows one survival curve (the acceptance
prefix it estimated), so every request looks alike here: the rule verifies the first positions of every
request, and one more for some. vLLM ranks each request by its own drafter's confidences, which helps
where requests differ and hurts where the confidences are wrong; this is the rule at its best on a
uniform mix. Every step also pays what running the rule costs (`ADAPTIVE_COST`, vllm#52362).

The objective (`goodput.goodput`) reads a config with it on (an `AdaptiveDense`) through `adaptive_step`;
policy/lever.py weighs turning it on or off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from specinfer.runtime.methods.adaptive import ADAPTIVE_COST, verification_budget

from .cost import step_times_over_tokens

if TYPE_CHECKING:  # goodput.py reads an AdaptiveDense through adaptive_step
    from .goodput import Model


@dataclass(frozen=True)
class AdaptiveStep:
    """One decode step of `batch_size` requests that drafted K each, under adaptive verification."""

    verified: float  # drafts verified per request (mean)
    tokens: float    # tokens a request gains (mean, the bonus token included)
    seconds: float   # the step's time, the prompts it prefills included

    @property
    def speed(self) -> float:
        """Tokens per second for one running request."""
        return self.tokens / self.seconds


def adaptive_step(model: Model, batch_size: int, k: int, config_k: int | None = None) -> AdaptiveStep:
    """What the rule verifies when `batch_size` requests drafted `k` each (`config_k`: the config's K, which
    a drafter that drafts its startup K pays), and the step's time with the drafting unchanged -- and the prompts
    it prefills, which the rule does not weigh (`Model.prefill_per_token`)."""
    if k <= 0:
        speculative = bool(config_k)  # a schedule's K = 0 step still runs the rule and the drafter's K = 0 work
        plain = model.step_time(batch_size, 0, speculative, config_k if speculative else None)
        return AdaptiveStep(0.0, 1.0, plain * (ADAPTIVE_COST.step_time_factor if speculative else 1.0)
                            + model.prefill_per_token * batch_size)
    prefix = list(model.prefix[:k]) + [model.prefix[-1]] * max(0, k - len(model.prefix))
    scores = np.repeat(np.asarray(prefix, dtype=float), batch_size)
    cost = model.cost

    def seconds(verified: np.ndarray) -> np.ndarray:
        tokens = batch_size + np.asarray(verified, dtype=float)
        times = step_times_over_tokens(cost.prior, model.theta, batch_size, k, cost.cost_shape, tokens,
                                       speculative=True, config_k=config_k)
        return times * ADAPTIVE_COST.step_time_factor

    budget = verification_budget(scores, batch_size, seconds)
    gained = batch_size + float(np.sum(np.sort(scores)[::-1][:budget]))
    return AdaptiveStep(budget / batch_size, gained / batch_size,
                        float(seconds(np.array([budget]))[0]) + model.prefill_per_token * gained)
