"""The operator's own /metrics (prometheus_client): reconciles, errors, tuning decisions, query latency.

One private registry, so tests can read values and importing this module twice (or running
two operators in one test process) never fails on duplicate registration. PromQL examples:

    rate(specinfer_operator_reconciles_total[5m])                      reconcile passes per second
    sum by (reason) (rate(specinfer_operator_errors_total[5m]))       failures by reason
    sum by (action) (increase(specinfer_operator_tuning_decisions_total[1h]))
    histogram_quantile(0.99, rate(specinfer_operator_prometheus_query_seconds_bucket[5m]))

Per-resource series (labels `namespace`, `name`: the SpeculativeInference) are set by the tuning loop
each time it decides for a resource and dropped when the resource is deleted or its tuning turned off;
the dashboard and the alerts read them (docs/observability.md):

    specinfer_operator_tuning_degraded{reason}          1 while TuningDegraded is True (reason = its reason)
    specinfer_operator_tuning_restarts_last_hour         tuner rollouts in the past hour
    specinfer_operator_tuning_restart_budget             spec.tuning.maxRestartsPerHour
    specinfer_operator_tuning_predicted_speedup          predicted goodput of the config in force / no speculation
    specinfer_operator_k_in_force{batch_size}            K the pods run per batch-size range ("1-42", "43+")
    specinfer_operator_tuning_changes_total{action}      changes applied (auto mode)
    specinfer_operator_cost_per_million_tokens{currency}               only with prices configured
    specinfer_operator_cost_last_change_saving_per_million_tokens{currency}
"""

from __future__ import annotations

import logging
import threading
from collections import Counter as Tally
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily

log = logging.getLogger("specinfer.operator.plumbing.metrics")

REGISTRY = CollectorRegistry(auto_describe=True)



class _OperatorCollector:
    """Reconciles, errors and API requests read at scrape time from the controller's own tallies
    (its work queue and API client count them already), plus the tuning loop's errors."""

    def __init__(self) -> None:
        self.controller: Any = None
        self.errors: Tally[tuple[str, str]] = Tally()
        self.lock = threading.Lock()

    def collect(self):
        reconciles = CounterMetricFamily("specinfer_operator_reconciles",
                                         "Reconcile passes (work-queue items processed).")
        errors = CounterMetricFamily("specinfer_operator_errors", "Failures by component and reason.",
                                     labels=["component", "reason"])
        requests = CounterMetricFamily("specinfer_operator_api_requests", "Kubernetes API requests by verb.",
                                       labels=["verb"])
        controller = self.controller
        if controller is not None:
            reconciles.add_metric([], controller.queue.processed)
            errors.add_metric(["reconcile", "ReconcileFailed"], controller.queue.errors)
            for verb, count in sorted(controller.kube.requests.items()):
                requests.add_metric([verb], count)
        else:
            reconciles.add_metric([], 0)
        with self.lock:
            for (component, reason), count in sorted(self.errors.items()):
                errors.add_metric([component, reason], count)
        yield from (reconciles, errors, requests)


_COLLECTOR = _OperatorCollector()
REGISTRY.register(_COLLECTOR)


def bind_controller(controller: Any) -> None:
    """Expose the controller's reconcile, error and request tallies."""
    _COLLECTOR.controller = controller


def record_error(component: str, reason: str) -> None:
    with _COLLECTOR.lock:
        _COLLECTOR.errors[(component, reason)] += 1

TUNING_DECISIONS = Counter("specinfer_operator_tuning_decisions",
                           "Tuning decisions by action (keep, setK, setSchedule, disable, reenable, rollback, "
                           "recommend) and mode.", ["action", "mode"], registry=REGISTRY)
TUNING_TICKS = Counter("specinfer_operator_tuning_ticks", "Tuning loop ticks that queried Prometheus.",
                       registry=REGISTRY)
PROMETHEUS_QUERIES = Counter("specinfer_operator_prometheus_queries",
                             "PromQL queries sent by the tuning loop, by outcome.", ["outcome"], registry=REGISTRY)
PROMETHEUS_QUERY_SECONDS = Histogram(
    "specinfer_operator_prometheus_query_seconds", "Latency of one PromQL query of the tuning loop.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0), registry=REGISTRY)
QUERIES_PER_TICK = Gauge("specinfer_operator_tuning_queries_per_tick",
                         "PromQL queries of the last tuning tick (constant in the number of resources).",
                         registry=REGISTRY)
TUNED_RESOURCES = Gauge("specinfer_operator_tuning_resources", "Resources in the last tuning tick, by mode.",
                        ["mode"], registry=REGISTRY)


def observe_query(name: str, seconds: float, ok: bool) -> None:
    PROMETHEUS_QUERY_SECONDS.observe(seconds)
    PROMETHEUS_QUERIES.labels("ok" if ok else "error").inc()


def serve(port: int, address: str = "0.0.0.0") -> None:
    """Expose REGISTRY at http://address:port/metrics (a daemon thread)."""
    start_http_server(port, addr=address, registry=REGISTRY)
    log.info("operator metrics on http://%s:%d/metrics", address, port)


# ---- per-resource series (issue 17: dashboard, alerts, cost) ------------------------------------
RESOURCE_LABELS = ("namespace", "name")
Key = tuple[str, str]

TUNING_DEGRADED = Gauge("specinfer_operator_tuning_degraded",
                        "1 while the resource's TuningDegraded condition is True, 0 otherwise; reason is the "
                        "condition's reason.", [*RESOURCE_LABELS, "reason"], registry=REGISTRY)
RESTARTS_LAST_HOUR = Gauge("specinfer_operator_tuning_restarts_last_hour",
                           "Rollouts the tuner triggered in the past hour.", RESOURCE_LABELS, registry=REGISTRY)
RESTART_BUDGET = Gauge("specinfer_operator_tuning_restart_budget",
                       "spec.tuning.maxRestartsPerHour (0: in place only).", RESOURCE_LABELS,
                       registry=REGISTRY)
PREDICTED_SPEEDUP = Gauge("specinfer_operator_tuning_predicted_speedup",
                          "The policy's predicted goodput of the config in force over that of no speculation, at "
                          "the observed batch sizes (< 1: speculation slows the engine down).", RESOURCE_LABELS,
                          registry=REGISTRY)
K_IN_FORCE = Gauge("specinfer_operator_k_in_force",
                   "Draft length the pods run, per batch-size range of the effective config (0: no drafting).",
                   [*RESOURCE_LABELS, "batch_size"], registry=REGISTRY)
TUNING_CHANGES = Counter("specinfer_operator_tuning_changes",
                         "Tuning changes applied to a resource, by action (setK, setSchedule, disable, reenable, "
                         "rollback).", [*RESOURCE_LABELS, "action"], registry=REGISTRY)
COST_PER_MILLION_TOKENS = Gauge("specinfer_operator_cost_per_million_tokens",
                                "Cost per million generated tokens at the measured load (status.cost).",
                                [*RESOURCE_LABELS, "currency"], registry=REGISTRY)
COST_SAVING = Gauge("specinfer_operator_cost_last_change_saving_per_million_tokens",
                    "What the tuner's last change saves per million tokens, from its realised gain (< 0: costs).",
                    [*RESOURCE_LABELS, "currency"], registry=REGISTRY)
_PER_RESOURCE = (TUNING_DEGRADED, RESTARTS_LAST_HOUR, RESTART_BUDGET, PREDICTED_SPEEDUP, K_IN_FORCE, TUNING_CHANGES,
                 COST_PER_MILLION_TOKENS, COST_SAVING)
# label values (after namespace, name) each metric holds per resource, so that a resource's old
# series (a reason that cleared, a schedule range that changed) can be removed
_held: dict[Any, dict[Key, set[tuple[str, ...]]]] = {metric: {} for metric in _PER_RESOURCE}
_held_lock = threading.Lock()


def _replace(metric: Any, key: Key, values: dict[tuple[str, ...], float]) -> None:
    """The resource's series of `metric` become exactly `values` (extra label values -> value)."""
    with _held_lock:
        held = _held[metric].setdefault(key, set())
        for extra in held - set(values):
            metric.remove(*key, *extra)
        for extra, value in values.items():
            metric.labels(*key, *extra).set(value)
        _held[metric][key] = set(values)


def publish_resource(namespace: str, name: str, exported: Any) -> None:
    """Set a resource's series from what the tuning loop just recorded (operator/tuner/pure/exports.py)."""
    key = (namespace, name)
    _replace(TUNING_DEGRADED, key, {(exported.degraded_reason,): 1.0 if exported.degraded else 0.0})
    _replace(RESTARTS_LAST_HOUR, key, {(): float(exported.restarts_last_hour)})
    _replace(RESTART_BUDGET, key, {(): float(exported.restart_budget)})
    _replace(K_IN_FORCE, key, {(label,): float(k) for label, k in exported.k_in_force.items()})
    # no model this tick (too few samples, settling, collapse, no decision): no series, since a stale
    # belief would keep an alert firing on a config that has changed
    _replace(PREDICTED_SPEEDUP, key, {} if exported.speedup is None else {(): exported.speedup})
    cost = exported.cost
    _replace(COST_PER_MILLION_TOKENS, key, {(cost.currency,): cost.per_million_tokens}
             if cost is not None and cost.per_million_tokens is not None else {})
    _replace(COST_SAVING, key, {(cost.currency,): cost.last_change_saving_per_million_tokens}
             if cost is not None and cost.last_change_saving_per_million_tokens is not None else {})
    with _held_lock:
        held = _held[TUNING_CHANGES].setdefault(key, set())
        for action in exported.change_actions:  # every action at 0 from the start, so increase() sees the first
            if (action,) not in held:
                TUNING_CHANGES.labels(*key, action)
                held.add((action,))
        if exported.change is not None:
            TUNING_CHANGES.labels(*key, exported.change).inc()
            held.add((exported.change,))




def keep_resources(keys: set[Key]) -> None:
    """Drop every per-resource series of resources not in `keys` (deleted, or tuning off)."""
    with _held_lock:
        for metric, by_key in _held.items():
            for key in [k for k in by_key if k not in keys]:
                for extra in by_key.pop(key):
                    metric.remove(*key, *extra)
