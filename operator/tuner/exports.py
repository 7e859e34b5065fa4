"""What the tuning loop shows of a resource beyond status.tuning: status.cost and the per-resource
series on the operator's /metrics that the dashboard and the alerts read (issue 17). Pure.

Kept apart from record.py: everything here is read from the status the tick just recorded and
the resource as cached, so the loop adds it with one call for status.cost and one for the series.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specinfer.operator.config import CostConfig
from specinfer.operator.pricing import Cost, resource_cost
from specinfer.operator.tuner.record import CHANGES
from specinfer.operator.tuner.target import ResourceTarget, schedule_to_policy
from specinfer.runtime.methods.schedule import compress, effective_k


@dataclass(frozen=True)
class ResourceExport:
    degraded: bool
    degraded_reason: str
    restarts_last_hour: int
    restart_budget: int
    k_in_force: dict[str, int]  # batch-size range ("1-42", "43+") -> K the pods run there
    cost: Cost | None
    change: str | None  # the action, when this tick applied a change
    change_actions: tuple[str, ...] = CHANGES  # every action the changes counter has, from 0


def k_in_force(effective: Mapping[str, Any] | None) -> dict[str, int]:
    """K per batch-size range of status.effective, vLLM's schedule semantics (gaps inherit, the last
    range extends to every larger batch); {} before the reconciler has written it."""
    k = (effective or {}).get("numSpeculativeTokens")
    if not isinstance(k, int) or isinstance(k, bool) or k < 0:
        return {}
    schedule = schedule_to_policy((effective or {}).get("schedule"))
    if not schedule or k == 0:
        return {"1+": k}
    top = max(end for _, end, _ in schedule) + 1  # one past the last range: from here K stays the same
    ranges = compress([0] + [effective_k(b, k, schedule) for b in range(1, top + 1)])
    labels = {}
    for index, (start, end, range_k) in enumerate(ranges):
        last = index == len(ranges) - 1
        labels[f"{start}+" if last else (str(start) if start == end else f"{start}-{end}")] = range_k
    return labels


def cost_of(prices: CostConfig, target: ResourceTarget, status: Mapping[str, Any]) -> Cost | None:
    """status.cost from the status this tick recorded (tokens per second, realised gain); None: unpriced."""
    spec = target.spec
    if spec is None or not (prices.accelerators or prices.products):
        return None
    replicas = target.status.get("replicas")
    hardware = spec.hardware
    return resource_cost(prices, accelerator=hardware.accelerator, product=hardware.product, devices=hardware.count,
                         replicas=spec.replicas if replicas is None else replicas,
                         tokens_per_second=(status.get("metrics") or {}).get("tokensPerSecond"),
                         realised_gain=(status.get("tuning") or {}).get("realisedGain"))


def resource_export(target: ResourceTarget, status: Mapping[str, Any], action: str,
                    cost: Cost | None) -> ResourceExport:
    """The series of one resource after a tick: `status` is what the tick recorded, `action` its decision."""
    degraded = next((c for c in status.get("conditions") or () if c.get("type") == "TuningDegraded"), {})
    spec = target.spec
    return ResourceExport(
        degraded=degraded.get("status") == "True",
        degraded_reason=str(degraded.get("reason") or "Unknown"),
        restarts_last_hour=int((status.get("tuning") or {}).get("restartsLastHour") or 0),
        restart_budget=spec.tuning.max_restarts_per_hour if spec is not None else 0,
        k_in_force=k_in_force(target.status.get("effective")),
        cost=cost,
        change=action if action in CHANGES else None,  # a recommendation repeats each tick: not a change
    )
