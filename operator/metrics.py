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

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

log = logging.getLogger("specinfer.operator.metrics")

REGISTRY = CollectorRegistry(auto_describe=True)

RECONCILES = Counter("specinfer_operator_reconciles", "Reconcile passes of SpeculativeInference resources.",
                     registry=REGISTRY)
ERRORS = Counter("specinfer_operator_errors", "Failures by component and reason (reconcile, tuning loop).",
                 ["component", "reason"], registry=REGISTRY)
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
