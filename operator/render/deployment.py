"""The engine Deployment: pods that run `specinfer runtime` on the mounted RuntimeConfig.

The runtime turns the config into the exact `vllm serve` command (runtime/contract/argv.py); the
same function fills the pod annotation `specinfer.io/engine-command`, so a review of the
rendered manifests shows the method, draft model, K / schedule, tensor parallel size,
served model name and port that will run.
"""

from __future__ import annotations

import shlex
from typing import Any

from specinfer.api.workload import PRESTOP_SLEEP_SECONDS, TERMINATION_GRACE_SECONDS
from specinfer.operator.pure.hardware import MODEL_CACHE_PATH
from specinfer.operator.render.labels import (
    CONFIG_HASH_ANNOTATION,
    ENGINE_COMMAND_ANNOTATION,
    RUNTIME_CONFIG_KEY,
    child_metadata,
    live_schedule_configmap_name,
    pod_labels,
    runtime_configmap_name,
    selector_labels,
)
from specinfer.operator.render.service import PORT_NAME
from specinfer.operator.render.workload import LIVE_SCHEDULE_DIR, LIVE_STATE_FILE, Workload
from specinfer.runtime.contract.argv import vllm_argv
from specinfer.runtime.contract.live_schedule import SCHEDULE_FILE_ENV, SCHEDULE_KEY, STATE_FILE_ENV
from specinfer.runtime.contract.runtime_config import RUNTIME_CONFIG_ENV

CONTAINER_NAME = "engine"
CONFIG_DIR = "/etc/specinfer"
HEALTH_PATH = "/health"  # vLLM's (and the simulator's) liveness endpoint
STARTUP_PERIOD_SECONDS = 10
RUNTIME_UID = 10001  # the runtime images' USER (docker/runtime-*.Dockerfile); numeric, so runAsNonRoot is checkable
# Writable emptyDirs under a read-only root: HOME holds vLLM's caches (VLLM_CACHE_ROOT and VLLM_CONFIG_ROOT
# default under it in vLLM 0.33's envs.py, as do Triton's and FlashInfer's), /tmp its IPC sockets and
# torch's inductor cache. Bounded, so one pod cannot fill the node's disk.
HOME_DIR = "/home/specinfer"
SCRATCH = (("home", HOME_DIR, "16Gi"), ("tmp", "/tmp", "4Gi"))


def _env(workload: Workload) -> list[dict[str, Any]]:
    """Platform env, then the catalogue's pins, then the user's spec.runtime.env (the user wins)."""
    spec = workload.spec
    values: dict[str, dict[str, Any]] = {}
    for name, value in {**workload.profile.env, **workload.speculation.env}.items():
        values[name] = {"name": name, "value": value}
    values[RUNTIME_CONFIG_ENV] = {"name": RUNTIME_CONFIG_ENV, "value": f"{CONFIG_DIR}/{RUNTIME_CONFIG_KEY}"}
    values["HF_HOME"] = {"name": "HF_HOME", "value": MODEL_CACHE_PATH}
    values["HOME"] = {"name": "HOME", "value": HOME_DIR}
    if workload.live is not None:  # where the scheduler reads the published schedule and reports what runs
        values[SCHEDULE_FILE_ENV] = {"name": SCHEDULE_FILE_ENV, "value": f"{LIVE_SCHEDULE_DIR}/{SCHEDULE_KEY}"}
        values[STATE_FILE_ENV] = {"name": STATE_FILE_ENV, "value": LIVE_STATE_FILE}
    token = spec.model.hub_token_secret_ref
    if token is not None:
        values["HF_TOKEN"] = {"name": "HF_TOKEN",
                              "valueFrom": {"secretKeyRef": {"name": token.name, "key": token.key}}}
    for var in spec.runtime.env or []:
        values[var.name] = var.model_dump(by_alias=True, exclude_none=True, mode="json")
        source = values[var.name].get("valueFrom", {})
        if "configMapKeyRef" in source:
            source["configMapKeyRef"] = dict(source["configMapKeyRef"])
    return [values[name] for name in sorted(values)]


def _resources(workload: Workload) -> dict[str, Any]:
    spec = workload.spec
    user = spec.runtime.resources
    requests = {key: str(value) for key, value in ((user.requests or {}) if user else {}).items()}
    limits = {key: str(value) for key, value in ((user.limits or {}) if user else {}).items()}
    device = workload.profile.device_resource
    if device:
        # extended resources are whole devices, requested == limit
        requests[device] = limits[device] = str(spec.hardware.count)
    out: dict[str, Any] = {}
    if requests:
        out["requests"] = dict(sorted(requests.items()))
    if limits:
        out["limits"] = dict(sorted(limits.items()))
    return out


def _probes(workload: Workload) -> dict[str, Any]:
    def http() -> dict[str, Any]:
        return {"path": HEALTH_PATH, "port": PORT_NAME}

    startup_failures = max(1, workload.profile.startup_seconds // STARTUP_PERIOD_SECONDS)
    return {
        # model download + load: minutes to tens of minutes; liveness only starts after this succeeds
        "startupProbe": {"httpGet": http(), "periodSeconds": STARTUP_PERIOD_SECONDS,
                         "failureThreshold": startup_failures, "timeoutSeconds": 5},
        "readinessProbe": {"httpGet": http(), "periodSeconds": 5, "failureThreshold": 3, "timeoutSeconds": 5},
        "livenessProbe": {"httpGet": http(), "periodSeconds": 15, "failureThreshold": 4, "timeoutSeconds": 10},
    }


def _volumes(workload: Workload) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    cache: dict[str, Any]
    if workload.model_cache.persistent_volume_claim:
        cache = {"persistentVolumeClaim": {"claimName": workload.model_cache.persistent_volume_claim}}
    else:
        cache = {"emptyDir": {"sizeLimit": workload.profile.model_cache_size} if workload.profile.model_cache_size
                 else {}}
    volumes: list[dict[str, Any]] = [
        {"name": "runtime-config", "configMap": {"name": runtime_configmap_name(workload.name),
                                                 "items": [{"key": RUNTIME_CONFIG_KEY, "path": RUNTIME_CONFIG_KEY}]}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": workload.profile.shm_size}},
        {"name": "model-cache", **cache},
        *({"name": name, "emptyDir": {"sizeLimit": size}} for name, _, size in SCRATCH),
    ]
    if workload.live is not None:
        # the whole ConfigMap as a directory: the kubelet updates it in place (a subPath mount never changes)
        volumes.append({"name": "live-schedule", "configMap": {"name": live_schedule_configmap_name(workload.name)}})
    mounts: list[dict[str, Any]] = [
        {"name": "runtime-config", "mountPath": CONFIG_DIR, "readOnly": True},
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "model-cache", "mountPath": MODEL_CACHE_PATH},
        *({"name": name, "mountPath": path} for name, path, _ in SCRATCH),
    ]
    if workload.live is not None:
        mounts.append({"name": "live-schedule", "mountPath": LIVE_SCHEDULE_DIR, "readOnly": True})
    return volumes, mounts


def pod_security_context() -> dict[str, Any]:
    """Kubernetes' restricted Pod Security Standard (issue 15): a numeric non-root user, RuntimeDefault seccomp;
    fsGroup makes a shared model-cache PVC writable for that user."""
    return {"runAsNonRoot": True, "runAsUser": RUNTIME_UID, "runAsGroup": RUNTIME_UID, "fsGroup": RUNTIME_UID,
            "seccompProfile": {"type": "RuntimeDefault"}}


def container_security_context(workload: Workload) -> dict[str, Any]:
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "privileged": False,
            "readOnlyRootFilesystem": workload.profile.read_only_root_filesystem, "runAsNonRoot": True}


def _placement(workload: Workload) -> dict[str, Any]:
    hardware, profile = workload.spec.hardware, workload.profile
    selector = dict(profile.node_selector)
    if hardware.product and profile.product_label:
        selector[profile.product_label] = hardware.product
    selector.update(hardware.node_selector or {})
    tolerations = list(profile.tolerations) + [
        t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in hardware.tolerations or []
    ]
    out: dict[str, Any] = {}
    if selector:
        out["nodeSelector"] = dict(sorted(selector.items()))
    if tolerations:
        out["tolerations"] = tolerations
    return out


def engine_command(workload: Workload) -> str:
    """What the runtime will exec, for reviews (the simulator ignores vLLM flags but takes the same config)."""
    argv = vllm_argv(workload.spec, live_schedule=workload.live is not None)
    prefix = "simulated: " if workload.spec.runtime.engine == "simulator" else ""
    return prefix + shlex.join(argv)


def rollout_strategy(update_strategy: str) -> dict[str, Any]:
    """One pod at a time either way: every restart reloads a model.

    Surge keeps the desired count serving (the old pod serves until its replacement is ready) but
    needs room for one extra pod; Replace frees the old pod's accelerators first, for clusters
    with none to spare, and loses that replica's capacity for the reload."""
    if update_strategy == "Replace":
        return {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
    return {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}


def build_deployment(workload: Workload) -> dict[str, Any]:
    spec, speculation = workload.spec, workload.speculation
    volumes, mounts = _volumes(workload)
    container = {
        "name": CONTAINER_NAME,
        "image": workload.image,
        "command": ["specinfer", "runtime"],
        "args": ["--config", f"{CONFIG_DIR}/{RUNTIME_CONFIG_KEY}"],
        "ports": [{"name": PORT_NAME, "containerPort": spec.runtime.port, "protocol": "TCP"}],
        "env": _env(workload),
        "volumeMounts": mounts,
        "securityContext": container_security_context(workload),
        # `specinfer runtime` writes its one-line failure to /dev/termination-log; when vLLM itself
        # dies the log tail stands in, so a crash-looping pod's lastState says why (the operator
        # copies it into the resource's conditions)
        "terminationMessagePolicy": "FallbackToLogsOnError",
        # Endpoints drop a terminating pod while SIGTERM is already on its way: without a pause a
        # request routed in that instant reaches an engine that is shutting down (a 500). The kubelet
        # sends SIGTERM after the preStop sleep; vLLM then drains what it holds (--shutdown-timeout).
        "lifecycle": {"preStop": {"sleep": {"seconds": PRESTOP_SLEEP_SECONDS}}},
        **_probes(workload),
    }
    resources = _resources(workload)
    if resources:
        container["resources"] = resources
    template_meta = {
        "labels": pod_labels(workload.name, method=speculation.method, k=speculation.num_speculative_tokens),
        "annotations": {
            CONFIG_HASH_ANNOTATION: workload.config_hash,
            ENGINE_COMMAND_ANNOTATION: engine_command(workload),
        },
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": child_metadata(workload.name, workload.namespace, workload.owners, child_name=workload.name),
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": selector_labels(workload.name)},
            "strategy": rollout_strategy(spec.update_strategy),
            "progressDeadlineSeconds": workload.profile.startup_seconds + 600,
            "revisionHistoryLimit": 3,
            "template": {
                "metadata": template_meta,
                "spec": {
                    "automountServiceAccountToken": False,  # the engine never talks to the API server
                    "enableServiceLinks": False,
                    "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,  # preStop + vLLM's drain
                    "securityContext": pod_security_context(),
                    "containers": [container],
                    "volumes": volumes,
                    **_placement(workload),
                },
            },
        },
    }


__all__ = ["RUNTIME_UID", "build_deployment", "container_security_context", "engine_command", "pod_security_context",
           "rollout_strategy"]
