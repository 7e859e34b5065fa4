"""The largest K of a drafter that drafts its startup K: chosen for the load that may come, not only today's.

Such a drafter (a draft model, multi-module MTP on Model Runner V2, MTP on Ascend) drafts the config's largest
K on every step: a schedule in place lowers only what is verified, and drafting less is a rollout. At a quiet
load the best envelope is often a K above the peak's (the bench's draft-model-peak: K=2 serves 7% more than
K=1 at batch 8, and 12% less at batch 256). Rolled out in the quiet phase, it is drafted through the peak
unless a rollout at the peak undoes it -- and at the peak a rollout costs the most (restart.py: under Replace,
a replica's full capacity for each reload). The tuner does not know whether the peak comes, so it weighs two
futures of `paybackSeconds` each and takes the envelope whose worse regret is least (minimax regret):

- the load stays at today's batch sizes: an envelope gives up its shortfall against the best one there;
- the load rises to maxBatchSize: an envelope gives up its shortfall there, or -- where that costs less --
  a rollout to the best envelope, priced at that load, and the shortfall until it lands (its onset).

Regrets are tokens (goodput times seconds), so the peak's larger goodput weighs as it will. Where a rollout at
the peak costs goodput (Replace, or any share of a reloading replica lost) and no window measured maxBatchSize,
the peak's shortfall is the worst over the fit and its doubted versions (hedge.py: a K too high there costs far
more than one too low). Under Surge the old pod serves while the new one loads: undoing costs the shortfall
until the rollout lands, judged by the fit alone (with the doubted fits too it gave up mtp-limit's quiet 12% for
an onset's worst case). Today's load near maxBatchSize leaves one future: the best today. maxBatchSize (the
engine's max_num_seqs) is the peak hedged against: an engine whose load never nears it is best told a smaller
one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from .goodput import Distribution, Model, goodput
from .hedge import doubted_models
from .inputs import TuningInput
from .restart import onset_seconds, restart_cost_seconds
from .support import measured_sizes


@dataclass(frozen=True)
class EnvelopeRisk:
    """The two futures' yardsticks at one decision, per replica: the best goodput today and at maxBatchSize, and
    the fits the peak is judged by -- the fit, and where no window measured maxBatchSize the doubted fits too
    (hedge.py: there a K too high costs far more than one too low)."""

    model: Model
    tuning: TuningInput
    distribution: Distribution
    options: Sequence[list[int]]
    best_today: float
    best_at_peak: float
    peak_models: Sequence[Model]

    @property
    def peak_load(self) -> Distribution:
        return [(self.tuning.max_batch_size, 1.0)]

    @cached_property
    def _best_at_peak_by_fit(self) -> list[float]:
        """The best option's goodput at maxBatchSize under each of the peak's fits (computed once per decision)."""
        return [max(goodput(model, option, self.peak_load) for option in self.options) for model in self.peak_models]

    def shortfall_at_peak(self, dense: Sequence[int]) -> float:
        """The largest share of the best option's goodput at maxBatchSize `dense` gives up, over the peak's fits."""
        worst = 0.0
        for model, best in zip(self.peak_models, self._best_at_peak_by_fit, strict=True):
            if best > 0:
                worst = max(worst, 1 - goodput(model, dense, self.peak_load) / best)
        return worst

    def undo_seconds(self, dense: Sequence[int]) -> float:
        """Seconds of the fleet's goodput a rollout from `dense` costs at maxBatchSize (restart.py)."""
        return restart_cost_seconds(self.model, dense, self.peak_load, self.tuning)

    def regret(self, dense: Sequence[int]) -> float:
        """Tokens per replica `dense` gives up in the worse of the two futures."""
        horizon, onset = self.tuning.payback_seconds, onset_seconds(self.tuning)
        stays = max(0.0, self.best_today - goodput(self.model, dense, self.distribution)) * horizon
        shortfall = self.shortfall_at_peak(dense)
        rises = self.best_at_peak * min(shortfall * horizon, self.undo_seconds(dense) + shortfall * onset)
        return max(stays, rises)

    def reduction(self, current: Sequence[int], candidate: Sequence[int]) -> float:
        """The worse future's regret `candidate` removes, as a share of today's best goodput over paybackSeconds
        (comparable with a gain sustained that long)."""
        return (self.regret(current) - self.regret(candidate)) / (self.best_today * self.tuning.payback_seconds)


@dataclass(frozen=True)
class EnvelopeChoice:
    """The envelope taken, the one best at today's batch sizes, and what they risk."""

    chosen: list[int]
    best_today: list[int]
    risk: EnvelopeRisk | None  # None: one future only (today's load near maxBatchSize)

    @property
    def hedged(self) -> bool:
        return self.chosen != self.best_today

    def describe(self) -> str:
        """What the choice gave up and why ("" when it is the best today)."""
        if not self.hedged or self.risk is None:
            return ""
        risk = self.risk
        chosen, best = max(self.chosen[1:]), max(self.best_today[1:])
        more = risk.best_today / max(goodput(risk.model, self.chosen, risk.distribution), 1e-12) - 1
        doubted = " (at worst: the peak is unmeasured)" if len(risk.peak_models) > 1 else ""
        undo = risk.undo_seconds(self.best_today)
        undoing = (f"a rollout costs {undo:.0f}s of the fleet's goodput" if undo > 0 else
                   f"a rollout takes {onset_seconds(risk.tuning):.0f}s on average to land")
        return (f"; drafts at most K={chosen}: K={best} serves {more:.1%} more at today's batch sizes, but drafted "
                f"on every step it may lose {risk.shortfall_at_peak(self.best_today):.1%}{doubted} at batch size "
                f"{risk.tuning.max_batch_size}, where {undoing}")


def choose_envelope(model: Model, tuning: TuningInput, options: Sequence[list[int]],
                    distribution: Distribution) -> EnvelopeChoice:
    """The option (one schedule per largest K, each priced at its own K) of least worst regret."""
    top = tuning.max_batch_size
    today = [goodput(model, option, distribution) for option in options]
    best_index = max(range(len(options)), key=lambda i: today[i])
    best_today = list(options[best_index])
    best_at_peak = max(goodput(model, option, [(top, 1.0)]) for option in options)
    largest_today = max(size for size, _ in distribution)
    if len(options) < 2 or largest_today * 2 ** 0.5 >= top or best_at_peak <= 0 or today[best_index] <= 0:
        return EnvelopeChoice(best_today, best_today, None)
    # Where undoing costs goodput and no window measured maxBatchSize, the peak is also judged by the doubted fits.
    # (Cells fade over hours, so a peak measured yesterday may be judged doubted again; where the doubt alone
    # decides, that is a rollout a day.)
    doubt = not measured_sizes(model.cost, [top]) and restart_cost_seconds(model, best_today, [(top, 1.0)], tuning) > 0
    risk = EnvelopeRisk(model, tuning, distribution, options, today[best_index], best_at_peak,
                        [model, *doubted_models(model)] if doubt else [model])
    regrets = [risk.regret(option) for option in options]
    chosen = min(range(len(options)), key=lambda i: (regrets[i], i != best_index))  # a tie: the best today
    return EnvelopeChoice(list(options[chosen]), best_today, risk)
