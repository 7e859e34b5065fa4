"""Every label and annotation key the operator writes or selects by, the label sets, and the ownership of
every object it creates: one place, so a selector can never drift from what the renderer labels.

Pure. `tests/unit/test_architecture_claims.py` fails on a key spelled, or an ownerReferences entry built,
anywhere else in the product, and on a page or docstring naming a key this module does not define.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Protocol

from specinfer.api import API_VERSION, KIND
from specinfer.api.calibration import CALIBRATION_KIND

# -- keys: every label and annotation key the operator writes or selects by -------------------------------
NAME_LABEL = "specinfer.io/name"  # the resource's engine pods (their owner is a ReplicaSet)
METHOD_LABEL = "specinfer.io/method"
K_LABEL = "specinfer.io/k"
CALIBRATION_LABEL = "specinfer.io/calibration"  # a calibration's Jobs, their pods and its ConfigMap
CANDIDATE_LABEL = "specinfer.io/candidate"  # the candidate a calibration Job measures
SELECTION_LABEL = "specinfer.io/selection"  # on a comparison: the resource it compares candidates for
PROMETHEUS_AUTH_LABEL = "specinfer.io/prometheus-auth"  # a tenant's Secret opts in to Prometheus auth
ENGINE_SECRET_LABEL = "specinfer.io/engine-secret"  # a tenant's Secret opts in to the engine's env
APP_NAME_LABEL = "app.kubernetes.io/name"  # Kubernetes' recommended labels
APP_INSTANCE_LABEL = "app.kubernetes.io/instance"
APP_COMPONENT_LABEL = "app.kubernetes.io/component"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"  # the Job controller's, on a Job's pods: selected by, never written
CONFIG_HASH_ANNOTATION = "specinfer.io/config-hash"
ENGINE_COMMAND_ANNOTATION = "specinfer.io/engine-command"
# On engine pods (never the template: that would roll them): the schedule published last, so that the
# kubelet syncs the pod, and its mounted schedule, at once (docs/live-schedule.md, "The annotation nudge").
LIVE_SCHEDULE_ANNOTATION = "specinfer.io/live-schedule"

APP_NAME = "specinfer"
MANAGED_BY = "specinfer-operator"
CHILD_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
RUNTIME_CONFIG_KEY = "runtime.json"


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
        APP_NAME_LABEL: APP_NAME,
        APP_INSTANCE_LABEL: name,
        APP_COMPONENT_LABEL: "engine",
        MANAGED_BY_LABEL: MANAGED_BY,
    }


def pod_labels(name: str, *, method: str, k: int) -> dict[str, str]:
    """Routers and dashboards select engine pods by method and draft length."""
    return {**common_labels(name), METHOD_LABEL: method, K_LABEL: str(k)}


class MeasuredEngine(Protocol):
    """What a calibration Job's labels say of the engine it measures (operator/calibration/pure/render.py Engine)."""

    @property
    def candidate(self) -> str: ...
    @property
    def method(self) -> str: ...
    @property
    def k(self) -> int: ...


def calibration_labels(calibration: str, target: str, engine: MeasuredEngine | None = None) -> dict[str, str]:
    """A calibration's ConfigMap, and with `engine` its Jobs and their pods: never the target's name label, so no
    Service, PodMonitor or Deployment of the target selects them."""
    out = {APP_NAME_LABEL: APP_NAME, APP_COMPONENT_LABEL: "calibration", APP_INSTANCE_LABEL: target,
           MANAGED_BY_LABEL: MANAGED_BY, CALIBRATION_LABEL: calibration}
    if engine is not None:
        out.update({CANDIDATE_LABEL: engine.candidate, K_LABEL: str(engine.k), METHOD_LABEL: engine.method})
    return out


def comparison_labels(resource: str) -> dict[str, str]:
    """A comparison of method auto: the selection controller finds its resource by SELECTION_LABEL."""
    return {MANAGED_BY_LABEL: MANAGED_BY, SELECTION_LABEL: resource}


# -- ownership ------------------------------------------------------------------------------------------

def owner_references(owner: Mapping[str, Any], *, kind: str = KIND,
                     controller: bool = True) -> list[dict[str, Any]]:
    """What garbage-collects an object with `owner` (its metadata): a SpeculativeInference's children, a
    calibration's Jobs and ConfigMap (`kind=CALIBRATION_KIND`), a comparison (`controller=False`). Empty
    without a uid: `specinfer render` of a file is offline."""
    uid = owner.get("uid")
    if not uid:
        return []
    return [{
        "apiVersion": API_VERSION,
        "kind": kind,
        "name": owner["name"],
        "uid": uid,
        "controller": controller,
        "blockOwnerDeletion": controller,
    }]


def calibration_owner_references(calibration: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A calibration's Jobs and ConfigMap: controlled by it (the calibration controller's `controlled_by`)."""
    return owner_references(calibration, kind=CALIBRATION_KIND)


def comparison_owner_references(resource: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A comparison is deleted with its resource but not controlled by it: the calibration controller runs it,
    and what a resource controls is the reconciler's child (store.owner_key)."""
    return owner_references(resource, controller=False)


def child_metadata(name: str, namespace: str | None, owners: list[dict[str, Any]], *,
                   child_name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """metadata of an object the operator creates: `labels` (default: `name`'s children's) and `owners`."""
    meta: dict[str, Any] = {"name": child_name, "namespace": namespace, "labels": labels or common_labels(name)}
    if owners:
        meta["ownerReferences"] = owners
    return meta
