"""A real Prometheus scrapes a real HTTP /metrics endpoint, read back by PromQL."""

from __future__ import annotations

import socket

import pytest
from prometheus_client import CollectorRegistry, Counter, start_http_server

from specinfer.dev.cluster.ports import free_port
from specinfer.dev.cluster.prometheus import PrometheusServer

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


def test_prometheus_starts_on_a_new_port_when_its_port_is_taken_first(tmp_path, lose_reserved_ports):
    stolen = lose_reserved_ports(1)
    logged: list[str] = []
    server = PrometheusServer(tmp_path, log=logged.append)
    try:
        server.start()
        assert server.is_ready() and server.port not in stolen and len(stolen) == 1
        assert any(f"port {next(iter(stolen))} was taken" in line for line in logged)
    finally:
        server.stop()


def test_a_restarted_prometheus_says_which_port_it_lost(tmp_path, lose_reserved_ports):
    server = PrometheusServer(tmp_path, log=lambda line: None)
    server.start()
    server.stop()
    with socket.socket() as thief:  # a restart keeps its URL: the clients hold it
        thief.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past the readiness checks' TIME_WAITs
        thief.bind(("127.0.0.1", server.port))
        thief.listen()
        with pytest.raises(RuntimeError, match=rf"prometheus could not bind 127.0.0.1:{server.port}"):
            server.start()
