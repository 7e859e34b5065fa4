"""Which changes a ramp does not hold.

A window on a ramp mixes two loads (guards.load_moving_guard), so a choice that depends on the load mix --
one K for all batch sizes, speculation on or off, a rollout priced at today's load -- waits for a window of
one load. A change that wins at every batch size the window saw and at every one the load is moving
towards does not depend on the mix, or on where the ramp stops: on a falling load, speculation back on where
it beats off at every batch size from the window's largest down to 1; on a rising one, drafting less where
that wins from the window's smallest up to maxBatchSize. Such a change is judged like one on a load at rest
(its payback still counts how long the load has been where it wins). With vLLM's pooled series only speculation
back on qualifies (a window at speculation off runs no K to mix). Waiting costs most exactly there: the
peak's end is a ramp down, and off at low load serves a fraction of what speculation does (mtp-slow-peak:
six minutes of a falling load at the old config before the rollout was even decided).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .goodput import Distribution, Model, goodput


@dataclass(frozen=True)
class Ramp:
    """A window on a moving load (guards.load_moving_guard): the guard's words, and the mean batch size of the
    window before it and of this one."""

    why: str
    previous_mean: float
    mean: float
    after_rest: bool = False  # the window before was at rest: the confirmations it left were seen at another load

    @property
    def rising(self) -> bool:
        return self.mean > self.previous_mean

    def followed_by(self, model: Model, current: Sequence[int], candidate: Sequence[int], distribution: Distribution,
                    max_batch_size: int) -> bool:
        """`candidate` serves more than `current` at every batch size from both windows' own (this window's sizes
        and the mean of the one before it: vLLM's gauges give quantiles, not the extremes) to the end the load
        moves towards (maxBatchSize on a rising load, 1 on a falling one)."""
        sizes = [max(1, min(round(size), max_batch_size)) for size, share in distribution if share > 0]
        if not sizes:
            return False
        before = max(1, min(round(self.previous_mean), max_batch_size))
        span = range(min(*sizes, before), max_batch_size + 1) if self.rising else range(1, max(*sizes, before) + 1)
        return all(goodput(model, candidate, [(b, 1.0)]) > goodput(model, current, [(b, 1.0)]) for b in span)
