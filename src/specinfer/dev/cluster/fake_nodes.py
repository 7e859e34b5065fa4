"""Fake nodes managed by kwok: they accept pods and report them Ready.

Each node advertises the device resource of every accelerator in the catalogue
(`nvidia.com/gpu`, `amd.com/gpu`, `huawei.com/Ascend910`, ...) so that workloads for
every hardware profile can be scheduled on the local control plane.
"""

from __future__ import annotations

import time
from pathlib import Path

from kubernetes import client, config
from kubernetes.client.rest import ApiException

from specinfer.runtime.methods import ACCELERATORS

DEVICES_PER_NODE = "8"
ACCELERATOR_RESOURCES = {a.device_resource: DEVICES_PER_NODE for a in ACCELERATORS.values() if a.device_resource}


def node_manifest(name: str) -> dict:
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "250", "ephemeral-storage": "1Ti", **ACCELERATOR_RESOURCES}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {"type": "kwok", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                       "kubernetes.io/arch": "amd64", "node-role.kubernetes.io/agent": ""},
        },
        "spec": {},
        "status": {"allocatable": capacity, "capacity": capacity},
    }


def _core(kubeconfig: Path) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))


def create_fake_nodes(kubeconfig: Path, *, count: int = 1) -> list[str]:
    api = _core(kubeconfig)
    names = [f"kwok-node-{index}" for index in range(count)]
    for name in names:
        try:
            api.create_node(node_manifest(name))  # type: ignore[arg-type]  # the client takes a manifest dict too
        except ApiException as error:
            if error.status != 409:  # already there from an earlier run: fine
                raise
    return names


def _ready(node: client.V1Node) -> bool:
    conditions = node.status.conditions if node.status is not None else None
    return any(c.type == "Ready" and c.status == "True" for c in conditions or [])


def wait_nodes_ready(kubeconfig: Path, *, count: int, timeout: float) -> None:
    api = _core(kubeconfig)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready = [node for node in api.list_node(label_selector="type=kwok").items if _ready(node)]
        if len(ready) >= count:
            return
        time.sleep(0.5)
    raise TimeoutError(f"kwok did not make {count} fake node(s) Ready within {timeout:.0f}s")
