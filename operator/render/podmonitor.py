"""A Prometheus Operator PodMonitor, rendered only when its CRD exists in the cluster.

Per-pod scraping (not a ServiceMonitor) keeps the `specinfer_io_method` / `_k` pod labels
on every series, which the tuning loop groups by.
"""

from __future__ import annotations

from typing import Any

from specinfer.operator.render.labels import K_LABEL, METHOD_LABEL, NAME_LABEL, child_metadata, selector_labels
from specinfer.operator.render.service import PORT_NAME
from specinfer.operator.render.workload import Workload

PODMONITOR_API_VERSION = "monitoring.coreos.com/v1"
PODMONITOR_CRD = "podmonitors.monitoring.coreos.com"


def build_podmonitor(workload: Workload) -> dict[str, Any]:
    return {
        "apiVersion": PODMONITOR_API_VERSION,
        "kind": "PodMonitor",
        "metadata": child_metadata(workload.name, workload.namespace, workload.owners, child_name=workload.name),
        "spec": {
            "selector": {"matchLabels": selector_labels(workload.name)},
            "podTargetLabels": [NAME_LABEL, METHOD_LABEL, K_LABEL],
            "podMetricsEndpoints": [{"port": PORT_NAME, "path": "/metrics", "interval": "15s"}],
        },
    }
