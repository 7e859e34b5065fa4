"""Names, labels, annotations and ownership shared by every child: applied in one place."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from specinfer.api import API_VERSION, KIND

# Every label key the operator writes or selects by lives here, and nowhere else.
NAME_LABEL = "specinfer.io/name"  # the resource's engine pods (their owner is a ReplicaSet)
METHOD_LABEL = "specinfer.io/method"
K_LABEL = "specinfer.io/k"
CALIBRATION_LABEL = "specinfer.io/calibration"  # a calibration's Jobs, their pods and its ConfigMap
CANDIDATE_LABEL = "specinfer.io/candidate"  # the candidate a calibration Job measures
PROMETHEUS_AUTH_LABEL = "specinfer.io/prometheus-auth"  # a tenant's Secret opts in to Prometheus auth
ENGINE_SECRET_LABEL = "specinfer.io/engine-secret"  # a tenant's Secret opts in to the engine's env
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "specinfer-operator"
CONFIG_HASH_ANNOTATION = "specinfer.io/config-hash"
ENGINE_COMMAND_ANNOTATION = "specinfer.io/engine-command"
RUNTIME_CONFIG_KEY = "runtime.json"
# On engine pods (never the template: that would roll them): the schedule published last, so that the
# kubelet syncs the pod, and its mounted schedule, at once (docs/live-schedule.md, "The annotation nudge").
LIVE_SCHEDULE_ANNOTATION = "specinfer.io/live-schedule"
CHILD_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY}"


def digest(obj: Any, length: int = 16) -> str:
    """Stable short hash of JSON-able data (key order does not matter)."""
    text = obj if isinstance(obj, str) else json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def runtime_configmap_name(name: str) -> str:
    return f"{name}-runtime"


def live_schedule_configmap_name(name: str) -> str:
    """The published schedule of an engine retuned in place (mounted as a directory)."""
    return f"{name}-schedule"


def selector_labels(name: str) -> dict[str, str]:
    """The Deployment/Service selector: immutable on a Deployment, so it holds only the name."""
    return {NAME_LABEL: name}


def common_labels(name: str) -> dict[str, str]:
    """Labels every child carries; the operator watches children by MANAGED_BY_LABEL."""
    return {
        **selector_labels(name),
        "app.kubernetes.io/name": "specinfer",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": "engine",
        MANAGED_BY_LABEL: MANAGED_BY,
    }


def pod_labels(name: str, *, method: str, k: int) -> dict[str, str]:
    """Routers and dashboards select engine pods by method and draft length."""
    return {**common_labels(name), METHOD_LABEL: method, K_LABEL: str(k)}


def owner_references(resource_meta: dict[str, Any]) -> list[dict[str, Any]]:
    """Garbage collection of children; empty offline (`specinfer render` of a file has no uid)."""
    uid = resource_meta.get("uid")
    if not uid:
        return []
    return [{
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": resource_meta["name"],
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }]


def child_metadata(name: str, namespace: str, owners: list[dict[str, Any]], *,
                   child_name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": child_name, "namespace": namespace, "labels": labels or common_labels(name)}
    if owners:
        meta["ownerReferences"] = owners
    return meta
