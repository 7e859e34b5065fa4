"""The pod runner's readiness probe: only pods whose probe passes serve, as kube-proxy routes only to Ready pods."""

from __future__ import annotations

import http.server
import threading

import pytest

from specinfer.dev.cluster import processes
from specinfer.dev.cluster.pod_runner import LocalPod, probe_readiness

pytestmark = pytest.mark.unit


@pytest.fixture
def health_server():
    """A loopback server whose /health answers `server.answer` (the status code) to every GET."""

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(self.server.answer)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Health)
    server.answer = 503
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


@pytest.fixture
def pod(tmp_path, health_server):
    record = processes.start("engine", ["sleep", "60"], log_dir=tmp_path)
    local = LocalPod(namespace="ns", name="p", uid="u", folder=tmp_path, argv=["sleep", "60"], env={},
                     port=health_server.server_port, labels={}, record=record, readiness_path="/health")
    yield local
    processes.stop(record, timeout=5)


def test_ready_after_the_first_success_unready_after_the_threshold(pod, health_server):
    probe_readiness(pod)
    assert not pod.ready  # the engine is still loading (503)
    health_server.answer = 200
    probe_readiness(pod)
    assert pod.ready
    health_server.answer = 503
    for _ in range(pod.failure_threshold - 1):
        probe_readiness(pod)
        assert pod.ready  # a blip below the failure threshold keeps the pod in the endpoints
    probe_readiness(pod)
    assert not pod.ready


def test_a_stopped_process_is_never_ready(pod, health_server):
    health_server.answer = 200
    probe_readiness(pod)
    assert pod.ready
    processes.stop(pod.record, timeout=5)
    probe_readiness(pod)
    assert not pod.ready


def test_no_probe_means_ready_once_running(pod):
    pod.readiness_path = None
    probe_readiness(pod)
    assert pod.ready


def test_termination_waits_for_the_prestop_sleep_before_sigterm(pod, tmp_path):
    """As the kubelet: the pod leaves the endpoints at once, SIGTERM follows the preStop sleep."""
    import time

    from specinfer.dev.cluster.pod_runner import PodRunner

    runner = PodRunner.__new__(PodRunner)  # no cluster: only the termination path
    runner.prometheus, runner.pods, runner.log = None, {}, lambda *_: None
    pod.ready, pod.prestop_seconds = True, 0.5
    assert runner._terminate(pod) is False
    assert not pod.signalled and processes.is_running(pod.record)  # sleeping its preStop, out of the endpoints
    assert pod.terminating_since is not None
    time.sleep(0.6)
    deadline = time.monotonic() + 10
    while not runner._terminate(pod):
        assert pod.signalled
        assert time.monotonic() < deadline, "SIGTERM did not stop the process"
        time.sleep(0.1)
    assert not processes.is_running(pod.record)
