"""The ConfigMaps: the pod's RuntimeConfig (/etc/specinfer/runtime.json) and, for an engine retuned in
place, its published schedule (a directory mount the kubelet updates in place: docs/live-schedule.md)."""

from __future__ import annotations

from typing import Any

from specinfer.operator.render.labels import (
    RUNTIME_CONFIG_KEY,
    child_metadata,
    live_schedule_configmap_name,
    runtime_configmap_name,
)
from specinfer.operator.render.workload import Workload
from specinfer.runtime.contract.live_schedule import SCHEDULE_KEY
from specinfer.runtime.contract.live_schedule.published import published_text


def build_configmap(workload: Workload) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_metadata(workload.name, workload.namespace, workload.owners,
                                   child_name=runtime_configmap_name(workload.name)),
        "data": {RUNTIME_CONFIG_KEY: workload.runtime_config_text},
    }


def build_live_schedule_configmap(workload: Workload, ranges: tuple[tuple[int, int, int], ...]) -> dict[str, Any]:
    """The schedule an engine retuned in place follows; a retune changes only this object, never the pod
    template. Kept while a rollout has the pods run without it -- speculation off -- so the resource's
    children stay the same set whatever the tuner chose; the pods being replaced go on reading it."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_metadata(workload.name, workload.namespace, workload.owners,
                                   child_name=live_schedule_configmap_name(workload.name)),
        "data": {SCHEDULE_KEY: published_text(ranges)},
    }
