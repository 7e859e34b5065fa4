"""The Service in front of the engine pods (OpenAI API and /metrics on one port)."""

from __future__ import annotations

from typing import Any

from specinfer.operator.render.labels import child_metadata, selector_labels
from specinfer.operator.render.workload import Workload

PORT_NAME = "http"


def build_service(workload: Workload) -> dict[str, Any]:
    port = workload.spec.runtime.port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": child_metadata(workload.name, workload.namespace, workload.owners, child_name=workload.name),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(workload.name),
            "ports": [{"name": PORT_NAME, "port": port, "targetPort": PORT_NAME, "protocol": "TCP"}],
        },
    }
