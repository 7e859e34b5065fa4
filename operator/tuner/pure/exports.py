"""What the tuning loop shows of a resource beyond status.tuning: status.cost and the per-resource
series on the operator's /metrics that the dashboard and the alerts read (issue 17). Pure.

Kept apart from record.py: everything here is read from the tick, the status it recorded and the
resource as cached, so the loop adds it with one call for status.cost and one for the series.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from specinfer.api.status import EffectiveConfig, SpeculativeInferenceStatus
from specinfer.operator.pure.config import CostConfig
from specinfer.operator.tuner.policy import CHANGES
from specinfer.operator.tuner.pure.pricing import Cost, resource_cost
from specinfer.operator.tuner.pure.record import Outcome, Tick
from specinfer.operator.tuner.pure.target import ResourceTarget
from specinfer.runtime.methods.schedule import compress, effective_k


@dataclass(frozen=True)
class ResourceExport:
    degraded: bool
    degraded_reason: str
    restarts_last_hour: int
    restart_budget: int
    k_in_force: dict[str, int]  # batch-size range ("1-42", "43+") -> K the pods run there
    speedup: float | None  # the policy's predicted goodput over no speculation; None: no model this tick
    cost: Cost | None
    change: str | None  # the action, when this tick applied a change
    change_actions: tuple[str, ...] = CHANGES  # every action the changes counter has, from 0


def k_in_force(effective: EffectiveConfig | None) -> dict[str, int]:
    """K per batch-size range of status.effective, vLLM's schedule semantics (gaps inherit, the last
    range extends to every larger batch); {} before the reconciler has written it."""
    if effective is None or effective.num_speculative_tokens is None:
        return {}
    k = effective.num_speculative_tokens
    schedule = [(e.min_batch_size, e.max_batch_size, e.num_speculative_tokens) for e in effective.schedule or ()]
    if not schedule or k == 0:
        return {"1+": k}
    top = max(end for _, end, _ in schedule) + 1  # one past the last range: from here K stays the same
    ranges = compress([0] + [effective_k(b, k, schedule) for b in range(1, top + 1)])
    labels = {}
    for index, (start, end, range_k) in enumerate(ranges):
        last = index == len(ranges) - 1
        labels[f"{start}+" if last else (str(start) if start == end else f"{start}-{end}")] = range_k
    return labels


def cost_of(prices: CostConfig, target: ResourceTarget, status: SpeculativeInferenceStatus) -> Cost | None:
    """status.cost from the status this tick recorded (tokens per second, realised gain); None: unpriced."""
    spec = target.spec
    if spec is None or not (prices.accelerators or prices.products):
        return None
    replicas = target.status.replicas
    hardware = spec.hardware
    return resource_cost(prices, accelerator=hardware.accelerator, product=hardware.product, devices=hardware.count,
                         replicas=spec.replicas if replicas is None else replicas,
                         tokens_per_second=status.metrics.tokens_per_second if status.metrics else None,
                         realised_gain=status.tuning.realised_gain if status.tuning else None)


def with_cost(outcome: Outcome, cost: Cost | None) -> Outcome:
    """The outcome whose status also carries `cost` (unchanged when unpriced: no cost fields at all)."""
    if cost is None:
        return outcome
    return dataclasses.replace(outcome, status=outcome.status.model_copy(update={"cost": cost.to_status()}))


def resource_export(target: ResourceTarget, tick: Tick, outcome: Outcome) -> ResourceExport:
    """The series of one resource after a tick: `outcome` is what the tick recorded."""
    status = outcome.status
    degraded = next((c for c in status.conditions or () if c.type == "TuningDegraded"), None)
    spec = target.spec
    model = tick.decision.model if tick.decision is not None else None
    return ResourceExport(
        degraded=degraded is not None and degraded.status == "True",
        degraded_reason=(degraded.reason if degraded is not None else None) or "Unknown",
        restarts_last_hour=(status.tuning.restarts_last_hour if status.tuning else None) or 0,
        restart_budget=spec.tuning.max_restarts_per_hour if spec is not None else 0,
        k_in_force=k_in_force(target.status.effective),
        speedup=model.speedup_vs_no_speculation if model is not None else None,
        cost=Cost.from_status(status.cost) if status.cost is not None else None,
        change=outcome.action if outcome.applied_changed else None,  # a recommendation repeats each tick
    )
