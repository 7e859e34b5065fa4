"""The pod runner plays kubelet for kwok: a runtime pod's own command serves locally and is scraped."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import yaml

from specinfer.api import effective_spec, parse_spec
from specinfer.dev.cluster import processes
from specinfer.dev.cluster.pod_runner import PodRunner
from specinfer.runtime.contract.runtime_config import RuntimeConfig

pytestmark = pytest.mark.integration


def runtime_config_json(namespace: str) -> str:
    resource = yaml.safe_load(open("examples/specinference.yaml"))
    spec = effective_spec(parse_spec(resource["spec"]))
    config = RuntimeConfig(name="runner-test", namespace=namespace, spec=spec)
    return config.model_dump_json(by_alias=True, exclude_none=True)


def workload(namespace: str) -> str:
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "runner-test", "namespace": namespace},
              "data": {"runtime.json": runtime_config_json(namespace)}}
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "runner-test", "namespace": namespace},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"specinfer.io/name": "runner-test"}},
                 "template": {"metadata": {"labels": {"specinfer.io/name": "runner-test", "specinfer.io/k": "3"}},
                              "spec": {"containers": [{
                                  "name": "engine", "image": "registry.invalid/specinfer-runtime:test",
                                  "command": ["specinfer", "runtime"],
                                  "volumeMounts": [{"name": "config", "mountPath": "/etc/specinfer"}]}],
                                  "volumes": [{"name": "config", "configMap": {"name": "runner-test"}}]}}}}
    return yaml.safe_dump_all([config, deployment])


def test_runs_pod_command_and_registers_it_with_prometheus(cluster, namespace, prometheus, tmp_path):
    runner = PodRunner(cluster.kubeconfig, tmp_path, prometheus=prometheus, namespaces=(namespace,), log=print)
    stop = threading.Event()
    thread = threading.Thread(target=runner.run, args=(stop,), kwargs={"interval": 0.5}, daemon=True)
    thread.start()
    try:
        cluster.kubectl("apply", "-f", "-", input=workload(namespace))
        result = prometheus.wait_for(f'vllm:num_requests_running{{namespace="{namespace}"}}', timeout=90)
        series = result[0]["metric"]
        assert series["specinfer_io_name"] == "runner-test" and series["specinfer_io_k"] == "3"
        assert series["model_name"] == "llama-3.1-8b"
        pods = list(runner.pods.values())
        assert len(pods) == 1 and pods[0].argv[:2] == ["specinfer", "runtime"]  # the pod spec's own command
        record = pods[0].record
        time.sleep(3)  # a few sync rounds: a healthy server is neither restarted nor duplicated
        assert processes.is_running(record) and pods[0].restarts == 0 and pods[0].record is record

        cluster.kubectl("-n", namespace, "delete", "deployment", "runner-test")
        deadline = time.monotonic() + 60
        while runner.pods and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not runner.pods, "the process of a deleted pod kept running"
        assert not processes.is_running(record)
        assert not Path(f"/proc/{record.pid}").exists() or processes._stat_fields(record.pid)[0] == "Z"
        assert not (prometheus.targets_dir / f"{namespace}_{pods[0].name}.json").exists()
    finally:
        stop.set()
        thread.join(timeout=30)
