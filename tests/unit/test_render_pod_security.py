"""Engine pods meet Kubernetes' restricted Pod Security Standard on every method x accelerator (issue 15).

A plain-data mirror of the standard's checks (kubernetes.io/docs/concepts/security/pod-security-standards):
tests/integration/test_pod_security.py has the real API server's PodSecurity admission refuse or admit
the same pods in a namespace labelled `pod-security.kubernetes.io/enforce: restricted`.
"""

from __future__ import annotations

import pytest

from specinfer.operator.pure.config import OperatorConfig, parse_config
from specinfer.operator.render import render
from specinfer.operator.render.deployment import RUNTIME_UID
from specinfer.runtime.methods import ACCELERATORS, get_accelerator
from tests.unit.test_render_golden import PAIRS, resource_for

pytestmark = pytest.mark.unit

RESTRICTED_VOLUME_TYPES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                           "projected", "secret"}


def pod_of(method: str, accelerator: str, config: OperatorConfig | None = None) -> dict:
    deployment = render(resource_for(method, accelerator), config or OperatorConfig()).manifest("Deployment")
    return deployment["spec"]["template"]["spec"]


def restricted_violations(pod: dict) -> list[str]:
    found = []
    security = pod.get("securityContext") or {}
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            found.append(key)
    for volume in pod.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUME_TYPES:
            found.append(f"volume {volume['name']}: {kinds}")
    for container in pod["containers"] + pod.get("initContainers", []):
        context = container.get("securityContext") or {}
        name = container["name"]
        if context.get("privileged"):
            found.append(f"{name}: privileged")
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name}: allowPrivilegeEscalation must be false")
        if "ALL" not in ((context.get("capabilities") or {}).get("drop") or []):
            found.append(f"{name}: capabilities must drop ALL")
        if set((context.get("capabilities") or {}).get("add") or []) - {"NET_BIND_SERVICE"}:
            found.append(f"{name}: adds capabilities")
        if not (context.get("runAsNonRoot") or security.get("runAsNonRoot")):
            found.append(f"{name}: runAsNonRoot")
        if (context.get("runAsUser", security.get("runAsUser")) or 1) == 0:
            found.append(f"{name}: runAsUser 0")
        seccomp = (context.get("seccompProfile") or security.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            found.append(f"{name}: seccompProfile")
        if any(port.get("hostPort") for port in container.get("ports") or []):
            found.append(f"{name}: hostPort")
    return found


@pytest.mark.parametrize(("method", "accelerator"), PAIRS)
def test_engine_pod_meets_the_restricted_standard(method, accelerator):
    pod = pod_of(method, accelerator)
    assert restricted_violations(pod) == []
    assert pod["securityContext"]["runAsUser"] == RUNTIME_UID
    assert pod["automountServiceAccountToken"] is False


@pytest.mark.parametrize(("method", "accelerator"), PAIRS)
def test_every_emptydir_is_bounded_and_the_writable_paths_are_volumes(method, accelerator):
    pod = pod_of(method, accelerator)
    for volume in pod["volumes"]:
        if "emptyDir" in volume:
            assert volume["emptyDir"].get("sizeLimit"), f"{volume['name']} has no sizeLimit"
    (engine,) = pod["containers"]
    mounts = {m["mountPath"] for m in engine["volumeMounts"]}
    env = {e["name"]: e.get("value") for e in engine["env"]}
    assert {"/tmp", "/dev/shm", env["HOME"], env["HF_HOME"]} <= mounts  # where vLLM writes
    read_only = engine["securityContext"]["readOnlyRootFilesystem"]
    assert read_only is get_accelerator(accelerator).pod.read_only_root_filesystem, (
        f"the root filesystem is what runtime/methods/accelerators/{accelerator}.py's pod defaults say")


def test_the_root_is_read_only_where_the_stack_is_known_to_allow_it():
    """vLLM writes only to HOME, /tmp, /dev/shm and the model cache on CUDA and CPU; ROCm's AITER and
    Ascend's CANN write at run time where it was not verified."""
    assert {name: a.pod.read_only_root_filesystem for name, a in ACCELERATORS.items()
            if name in ("nvidia", "amd", "ascend", "cpu")} == {"nvidia": True, "amd": False, "ascend": False,
                                                                "cpu": True}


def test_a_profile_can_turn_the_read_only_root_on_and_the_cache_limit_off():
    config = parse_config({"profiles": {"ascend": {"readOnlyRootFilesystem": True, "modelCacheSize": None}}})
    pod = pod_of("mtp", "ascend", config)
    assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    assert next(v for v in pod["volumes"] if v["name"] == "model-cache")["emptyDir"] == {}


def test_the_mirror_finds_what_the_old_pods_lacked():
    """The checks above can fail: the pod of the previous release (seccomp only) violates the standard."""
    pod = pod_of("eagle3", "nvidia")
    pod["securityContext"] = {"seccompProfile": {"type": "RuntimeDefault"}}
    del pod["containers"][0]["securityContext"]
    assert {"engine: allowPrivilegeEscalation must be false", "engine: capabilities must drop ALL",
            "engine: runAsNonRoot"} <= set(restricted_violations(pod))
