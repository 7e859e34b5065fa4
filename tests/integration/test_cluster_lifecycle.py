"""`specinfer cluster` lifecycle: idempotent up, self-healing up, and a down that stops only its own processes."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from specinfer.dev.cluster import processes
from specinfer.dev.cluster.cli import cluster as cluster_cli
from specinfer.dev.cluster.control_plane import COMPONENTS, LocalCluster

pytestmark = pytest.mark.integration


@pytest.fixture
def second_cluster(cluster):
    """A second cluster beside the session's one (needs the binaries the session fixture built)."""
    if cluster.local is None:
        pytest.skip("lifecycle tests need the local control plane")
    local = LocalCluster(f"lifecycle-{os.getpid()}", log=lambda message: None)
    yield local
    local.down()


def test_up_is_idempotent_and_down_stops_only_its_processes(cluster, second_cluster):
    runner = CliRunner()
    result = runner.invoke(cluster_cli, ["up", "--name", second_cluster.name])
    assert result.exit_code == 0, result.output
    first_pids = {name: record.pid for name, record in second_cluster.state().processes.items()}
    assert set(first_pids) == set(COMPONENTS)

    result = runner.invoke(cluster_cli, ["up", "--name", second_cluster.name])
    assert result.exit_code == 0 and "already running" in result.output
    assert {n: r.pid for n, r in second_cluster.state().processes.items()} == first_pids

    env = runner.invoke(cluster_cli, ["env", "--name", second_cluster.name])
    assert f"export KUBECONFIG={second_cluster.kubeconfig}" in env.output

    session_records = cluster.local.state().processes
    records = second_cluster.state().processes
    result = runner.invoke(cluster_cli, ["down", "--name", second_cluster.name])
    assert result.exit_code == 0, result.output
    assert not any(processes.is_running(record) for record in records.values())
    assert all(processes.is_running(record) for record in session_records.values()), \
        "down of one cluster touched another cluster's processes"
    assert runner.invoke(cluster_cli, ["status", "--name", second_cluster.name]).exit_code == 1


def test_up_restarts_a_half_dead_cluster(cluster, second_cluster):
    second_cluster.up()
    scheduler = second_cluster.state().processes["kube-scheduler"]
    processes.stop(scheduler)
    assert not second_cluster.is_healthy()
    second_cluster.up()
    assert second_cluster.is_healthy()
    assert second_cluster.state().processes["kube-scheduler"].pid != scheduler.pid
