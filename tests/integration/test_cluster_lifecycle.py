"""`specinfer cluster` lifecycle: idempotent up, self-healing up, and a down that stops only its own processes."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from specinfer.dev.cluster import processes
from specinfer.dev.cluster.cli import cluster as cluster_cli
from specinfer.dev.cluster.control_plane import COMPONENTS, ClusterError, LocalCluster

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


def test_up_starts_each_component_again_on_new_ports_when_its_ports_are_taken(cluster, second_cluster,
                                                                               lose_reserved_ports):
    """etcd's client port and the API server's port bound by another process between the choice and the start."""
    logged: list[str] = []
    second_cluster.log = logged.append
    stolen = lose_reserved_ports(3)  # up() reserves etcd, etcd_peer and apiserver first, in that order
    second_cluster.up()
    assert second_cluster.is_healthy()
    in_use = set(second_cluster.state().ports.values())
    assert len(stolen) >= 3 and not in_use & set(stolen)
    assert any("etcd: port" in line and "was taken by another process" in line for line in logged), logged
    assert any("kube-apiserver: port" in line and "was taken by another process" in line for line in logged), logged
    kubeconfig = second_cluster.kubeconfig.read_text()
    assert f"127.0.0.1:{second_cluster.state().ports['apiserver']}" in kubeconfig


def test_up_names_the_component_and_port_when_every_attempt_loses_it(cluster, second_cluster, lose_reserved_ports):
    from specinfer.dev.cluster import ports

    lose_reserved_ports(100)  # every port reserved is taken before etcd can bind it
    with pytest.raises(ClusterError, match=r"etcd could not bind 127\.0\.0\.1:\d+: another process took the port "
                                           rf"\({ports.ATTEMPTS} attempts, each on new ports\)"):
        second_cluster.up()
    assert not any(processes.is_running(record) for record in second_cluster.state().processes.values())
