"""What a restart costs, in seconds of the fleet's goodput, at the load of the moment.

A change of K or schedule restarts vLLM: the operator rolls the engine pods one at a time, each
reloading the model for `restartSeconds`. With `Surge` the new pod loads beside the old one, which
keeps serving: nothing is lost. With `Replace` each old pod stops first (`downtimeFraction` is the
share of its capacity that goes) and the load balancer spreads its requests over the other replicas
for that time. Whether that costs anything depends on the load:
- quiet: the others absorb the requests at small batch sizes, where goodput grows almost linearly
  with the batch -- almost nothing is lost;
- at the peak the others are compute-bound (or at maxBatchSize, where requests wait): a whole
  replica's capacity is lost, N times over, i.e. `restartSeconds` of the fleet's full capacity;
- with one replica the whole capacity goes for `restartSeconds` whatever the load.

The cost is expressed in seconds of the fleet's goodput at the load it is judged against. What
repays it is the gain over the time the load stays where the change wins (`Payback`): the rollout
pays back when that time is at least `cost / gain` plus its onset -- each replica gains only once
it runs the new config, on average `restartSeconds x (N + 1) / 2` after the decision. How long the
load will stay is not known; how long it has stayed is: a load that has stayed where the change
wins for t is taken to stay about t more (the median remaining life when nothing else is known) --
or as long as loads here have lasted between moves of 2x, when that is longer -- at most
`paybackSeconds`. So at the start of a peak a rollout waits (the best change in place is
taken meanwhile, decide.py), and once the peak has lasted the computed minimum it goes. Issue 43's
examples (two replicas, Replace, 2-4 minute reload, +45-52% at 400-500 concurrent) pay back when
the peak lasts 7-15 minutes (tests/unit/test_policy_payback.py). The look-ahead rule judges a
restart now (priced at today's load) against the gain at the larger batch sizes to come.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .goodput import Distribution, Model, goodput
from .inputs import TuningInput


def _redistributed(distribution: Distribution, replicas: int, max_batch_size: int) -> list[tuple[float, float]]:
    """The batch sizes of the serving replicas while one of `replicas` reloads: its requests spread over
    the others; beyond maxBatchSize requests wait, so a replica's throughput is that of a full batch."""
    factor = replicas / (replicas - 1)
    return [(min(size * factor, float(max_batch_size)), share) for size, share in distribution]


def lost_share(model: Model, dense: Sequence[int], distribution: Distribution, tuning: TuningInput) -> float:
    """Share of the fleet's goodput lost while one replica reloads, at this load and config."""
    downtime = tuning.downtime_fraction
    if downtime <= 0:
        return 0.0
    replicas = tuning.replicas
    if replicas <= 1:
        return downtime
    full = goodput(model, dense, distribution)
    if full <= 0:
        return downtime
    rest = goodput(model, dense, _redistributed(distribution, replicas, tuning.max_batch_size))
    return downtime * min(1.0, max(0.0, 1.0 - (replicas - 1) * rest / (replicas * full)))


def restart_cost_seconds(model: Model, dense: Sequence[int], distribution: Distribution,
                         tuning: TuningInput) -> float:
    """Seconds of the fleet's goodput (at this load) a rollout of every replica costs."""
    return tuning.replicas * tuning.restart_seconds * lost_share(model, dense, distribution, tuning)


def rollout_seconds(tuning: TuningInput) -> float:
    """How long a rollout takes: one replica after another."""
    return tuning.replicas * tuning.restart_seconds


def onset_seconds(tuning: TuningInput) -> float:
    """Mean time from a rollout's decision until a replica runs the new config: replica i of N runs
    it after (i + 1) x restartSeconds."""
    return tuning.restart_seconds * (tuning.replicas + 1) / 2


def strategy_words(tuning: TuningInput) -> str:
    if tuning.downtime_fraction >= 1:
        return "Replace"
    return "Surge" if tuning.downtime_fraction <= 0 else f"{tuning.downtime_fraction:.0%} of a reloading replica lost"


@dataclass(frozen=True)
class Payback:
    """Whether a rollout repays what it costs, from how long the load has stayed where it wins."""

    cost_seconds: float  # seconds of the fleet's goodput at this load (restart_cost_seconds)
    onset_seconds: float
    lasted_seconds: float  # how long the load has stayed where the change wins
    limit_seconds: float  # paybackSeconds: no load is counted on for longer
    region: tuple[int, int] | None  # the batch sizes (per replica) where the change wins
    setting: str  # replicas, rollout, reload: for the reason
    typical_seconds: float | None = None  # how long loads have lasted here (time between 2x moves)

    @property
    def horizon_seconds(self) -> float:
        """The time the gain is expected to be earned: the load's expected stay, less the onset."""
        return min(max(self.lasted_seconds, self.typical_seconds or 0.0), self.limit_seconds) - self.onset_seconds

    def needed(self) -> float:
        """The gain that repays the rollout over the expected stay (inf: the stay is shorter than the onset)."""
        if self.cost_seconds <= 0:
            return 0.0
        horizon = self.horizon_seconds
        return self.cost_seconds / horizon if horizon > 0 else math.inf

    def minimum_seconds(self, gain: float) -> float:
        """How long the load must stay where the change wins, from the decision, for it to pay back."""
        if self.cost_seconds <= 0:
            return self.onset_seconds
        return self.cost_seconds / gain + self.onset_seconds if gain > 0 else math.inf

    def describe(self, gain: float) -> str:
        low, high = self.region if self.region is not None else (1, _OPEN)
        where = ("this load lasts" if low <= 1 and high >= _OPEN else
                 f"the load stays at batch size {low} or more" if high >= _OPEN else
                 f"the load stays at batch size {high} or less" if low <= 1 else
                 f"the load stays within batch sizes {low}-{high}")
        minimum = self.minimum_seconds(gain)
        lasts = "for ever" if math.isinf(minimum) else f"for {minimum / 60:.1f} min"
        typical = (f", and loads here have lasted {self.typical_seconds / 60:.1f} min between moves of 2x"
                   if self.typical_seconds and self.typical_seconds > self.lasted_seconds else "")
        return (f"the rollout's payback: it costs {self.cost_seconds:.0f}s of the fleet's goodput at this load "
                f"({self.setting}) and pays back at {gain:+.1%} only if {where} {lasts} from now; it has for "
                f"{self.lasted_seconds / 60:.1f} min{typical}")


_OPEN = 10**9  # region end meaning "up to maxBatchSize"


def payback(model: Model, current: Sequence[int], candidate: Sequence[int], distribution: Distribution,
            tuning: TuningInput, loads: Sequence[Sequence[float]], now: float, window_seconds: float, *,
            typical_seconds: float | None = None) -> Payback:
    """The rollout from `current` to `candidate` priced at this load, and how long the load has stayed
    where it wins (`loads`: the recent windows' [time, mean batch size], oldest first)."""
    top = tuning.max_batch_size
    wins = [goodput(model, candidate, [(b, 1.0)]) > goodput(model, current, [(b, 1.0)]) for b in range(top + 1)]
    sizes = [b for b in range(1, top + 1) if wins[b]]
    region = None if not sizes else (sizes[0], _OPEN if sizes[-1] == top else sizes[-1])
    since = None
    for at, mean in reversed(loads):
        if not wins[max(1, min(round(mean), top))]:
            break
        since = at
    # the oldest such window's mean says its load was there for about half of it
    lasted = 0.0 if since is None else now - since + window_seconds / 2
    setting = (f"{tuning.replicas} replica{'s' if tuning.replicas > 1 else ''}, {strategy_words(tuning)}, "
               f"{tuning.restart_seconds:.0f}s reload each")
    return Payback(restart_cost_seconds(model, current, distribution, tuning), onset_seconds(tuning), lasted,
                   tuning.payback_seconds, region, setting, typical_seconds)
