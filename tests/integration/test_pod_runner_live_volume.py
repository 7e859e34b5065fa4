"""A ConfigMap changed in the API server reaches a running local pod's mounted folder, by the kubelet's swap."""

from __future__ import annotations

import os
import threading
import time

import pytest
import yaml

from specinfer.dev.cluster import processes
from specinfer.dev.cluster.atomic_volume import DATA
from specinfer.dev.cluster.pod_runner import PodRunner

pytestmark = pytest.mark.integration


def workload(namespace: str, schedule: str) -> str:
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "live-volume", "namespace": namespace},
              "data": {"schedule.json": schedule}}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "live-volume", "namespace": namespace, "labels": {"specinfer.io/name": "live-volume"}},
           "spec": {"containers": [{"name": "engine", "image": "registry.invalid/specinfer-runtime:test",
                                    "command": ["sleep", "600"],
                                    "volumeMounts": [{"name": "schedule", "mountPath": "/etc/schedule"}]}],
                    "volumes": [{"name": "schedule", "configMap": {"name": "live-volume"}}]}}
    return yaml.safe_dump_all([config, pod])


def wait_for(condition, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError("timed out")


def test_configmap_update_reaches_the_running_pod_without_a_restart(cluster, namespace, tmp_path):
    runner = PodRunner(cluster.kubeconfig, tmp_path, namespaces=(namespace,), log=print)
    stop = threading.Event()
    thread = threading.Thread(target=runner.run, args=(stop,), kwargs={"interval": 0.5}, daemon=True)
    thread.start()
    try:
        cluster.kubectl("apply", "-f", "-", input=workload(namespace, '{"k": 3}'))
        local = wait_for(lambda: next(iter(runner.pods.values()), None))
        wait_for(lambda: local.record is not None and processes.is_running(local.record))
        schedule = local.volumes[0].folder / "schedule.json"
        assert schedule.read_text() == '{"k": 3}'
        data, record = os.readlink(local.volumes[0].folder / DATA), local.record

        cluster.kubectl("apply", "-f", "-", input=workload(namespace, '{"k": 5}'))
        wait_for(lambda: schedule.read_text() == '{"k": 5}', timeout=60)

        assert os.readlink(local.volumes[0].folder / DATA) != data
        assert local.record is record and processes.is_running(record) and local.restarts == 0
    finally:
        stop.set()
        thread.join(timeout=30)
