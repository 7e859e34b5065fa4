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

The cost is expressed in seconds of the fleet's goodput at the load it is judged against, so the
payback guard compares it with a relative gain over `paybackSeconds`. The look-ahead rule judges a
restart now (priced at today's load) against the gain at the larger batch sizes to come.
"""

from __future__ import annotations

from collections.abc import Sequence

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
