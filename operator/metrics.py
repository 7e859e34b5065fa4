"""The operator's own /metrics (prometheus_client): reconciles, errors, tuning decisions, query latency.

One private registry, so tests can read values and importing this module twice (or running
two operators in one test process) never fails on duplicate registration. PromQL examples:

    rate(specinfer_operator_reconciles_total[5m])                      reconcile passes per second
    sum by (reason) (rate(specinfer_operator_errors_total[5m]))       failures by reason
    sum by (action) (increase(specinfer_operator_tuning_decisions_total[1h]))
    histogram_quantile(0.99, rate(specinfer_operator_prometheus_query_seconds_bucket[5m]))
"""

from __future__ import annotations

import logging
import threading
from collections import Counter as Tally
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily

log = logging.getLogger("specinfer.operator.metrics")

REGISTRY = CollectorRegistry(auto_describe=True)



class _OperatorCollector:
    """Reconciles, errors and API requests read at scrape time from the controller's own tallies
    (its work queue and API client count them already), plus the tuning loop's errors."""

    def __init__(self) -> None:
        self.controller: Any = None
        self.errors: Tally[tuple[str, str]] = Tally()
        self.lock = threading.Lock()

    def collect(self):
        reconciles = CounterMetricFamily("specinfer_operator_reconciles", "Reconcile passes (work-queue items processed).")
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
