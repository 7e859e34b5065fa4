"""A real Prometheus scrapes a real HTTP /metrics endpoint, read back by PromQL."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, start_http_server

from specinfer.dev.cluster.processes import free_port

pytestmark = pytest.mark.integration


def test_scrape_and_query(prometheus):
    registry = CollectorRegistry()
    requests = Counter("specinfer_test_requests", "Requests served by the test endpoint", ["route"],
                       registry=registry)
    requests.labels(route="/v1/completions").inc(42)
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        prometheus.add_target("test-endpoint", f"127.0.0.1:{port}", {"namespace": "demo", "pod": "sim-0"})
        result = prometheus.wait_for('specinfer_test_requests_total{namespace="demo"}', timeout=60)
        assert float(result[0]["value"][1]) == 42.0
        assert result[0]["metric"]["route"] == "/v1/completions"
        assert result[0]["metric"]["pod"] == "sim-0"

        requests.labels(route="/v1/completions").inc(8)
        prometheus.wait_for('specinfer_test_requests_total{namespace="demo"}',
                            predicate=lambda r: float(r[0]["value"][1]) == 50.0, timeout=30)
    finally:
        server.shutdown()
        prometheus.remove_target("test-endpoint")
