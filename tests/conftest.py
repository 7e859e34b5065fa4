"""Session fixtures shared by integration and e2e tests: a real control plane and a real Prometheus.

The cluster: with SPECINFER_TEST_KUBECONFIG set, tests run against that cluster
(any conformant one, e.g. kind); otherwise the local control plane named
"pytest" (or $SPECINFER_TEST_CLUSTER, so several checkouts can test side by side) is
started (and stopped at the end unless it was already running or SPECINFER_KEEP_CLUSTER=1,
which keeps re-runs fast).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

KUBECTL = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or "kubectl"


@dataclass
class ClusterHandle:
    kubeconfig: Path
    local: object | None = None  # the LocalCluster when tests own the control plane (fault tests use it)

    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 60) -> subprocess.CompletedProcess:
        result = subprocess.run([KUBECTL, *args], input=input, capture_output=True, text=True,
                                env=self.env(), timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
        return result

    def api_client(self):
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))


@pytest.fixture(scope="session")
def cluster() -> ClusterHandle:
    given = os.environ.get("SPECINFER_TEST_KUBECONFIG")
    if given:
        yield ClusterHandle(kubeconfig=Path(given))
        return
    from specinfer.devcluster.control_plane import LocalCluster

    local = LocalCluster(os.environ.get("SPECINFER_TEST_CLUSTER", "pytest"), log=lambda message: print(message, file=sys.stderr))
    already_running = local.is_healthy()
    local.up()
    try:
        yield ClusterHandle(kubeconfig=local.kubeconfig, local=local)
    finally:
        if not already_running and os.environ.get("SPECINFER_KEEP_CLUSTER") != "1":
            local.down()


@pytest.fixture
def namespace(cluster: ClusterHandle) -> str:
    """A fresh namespace per test, deleted afterwards (without waiting)."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory):
    from specinfer.devcluster.prometheus import PrometheusServer

    server = PrometheusServer(tmp_path_factory.mktemp("prometheus"), scrape_interval="1s")
    server.start()
    try:
        yield server
    finally:
        server.stop()
