"""The ConfigMap holding the pod's RuntimeConfig (mounted at /etc/specinfer/runtime.json)."""

from __future__ import annotations

from typing import Any

from specinfer.operator.render.labels import RUNTIME_CONFIG_KEY, child_metadata, runtime_configmap_name
from specinfer.operator.render.workload import Workload


def build_configmap(workload: Workload) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_metadata(workload.name, workload.namespace, workload.owners,
                                   child_name=runtime_configmap_name(workload.name)),
        "data": {RUNTIME_CONFIG_KEY: workload.runtime_config_text},
    }
