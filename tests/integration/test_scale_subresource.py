"""The scale subresource against the real operator: what an HPA or KEDA reads and writes.

An autoscaler scales the SpeculativeInference (spec.replicas through /scale), never the engine
Deployment: the operator renders the Deployment from spec.replicas and reverts any other replica
count as drift (tests/integration/test_gitops.py scales the Deployment and watches it go back).
"""

from __future__ import annotations

import json
import re

import pytest
import yaml
from harness_operator import (  # noqa: F401  (fixtures)
    REPO,
    apply,
    condition,
    get,
    operator,
    operator_crds,
    simulator_resource,
    start_operator,
    wait_ready,
    wait_until,
)

pytestmark = pytest.mark.integration

DOC = REPO / "docs" / "autoscaling.md"


def scale_of(cluster, namespace: str, name: str) -> dict:
    """The autoscaling/v1 Scale the API server derives through the CRD's scale subresource paths."""
    result = cluster.kubectl("get", "-n", namespace, "speculativeinference", name, "--subresource=scale", "-o", "json")
    return json.loads(result.stdout)


def live_pods(cluster, namespace: str, selector: str | None = None) -> list[dict]:
    args = ["get", "-n", namespace, "pods", "-o", "json"] + (["-l", selector] if selector else [])
    items = json.loads(cluster.kubectl(*args).stdout)["items"]
    return [pod for pod in items if not pod["metadata"].get("deletionTimestamp")]


def pods_of_deployment(cluster, namespace: str, deployment: str) -> set[str]:
    """Pods whose ReplicaSet is owned by the Deployment: the engine pods, found without labels."""
    replicasets = {rs["metadata"]["name"] for rs in get(cluster, namespace, "replicasets")["items"]
                   if any(o["kind"] == "Deployment" and o["name"] == deployment
                          for o in rs["metadata"].get("ownerReferences", []))}
    return {pod["metadata"]["name"] for pod in live_pods(cluster, namespace)
            if any(o["kind"] == "ReplicaSet" and o["name"] in replicasets
                   for o in pod["metadata"].get("ownerReferences", []))}


def test_kubectl_scale_drives_the_deployment_and_the_scale_status(cluster, namespace, operator):
    # a neighbour whose name shares the prefix: the selector must not pick up its pods
    apply(cluster, namespace, simulator_resource("llama"), simulator_resource("llama-b"))
    wait_ready(cluster, namespace, "llama")
    wait_ready(cluster, namespace, "llama-b")

    cluster.kubectl("scale", "-n", namespace, "speculativeinference/llama", "--replicas=2")
    # /scale writes spec.replicas, so the generation moves and Ready must describe the new one
    resource = wait_ready(cluster, namespace, "llama", generation=2)
    assert resource["spec"]["replicas"] == 2
    assert resource["status"]["replicas"] == resource["status"]["readyReplicas"] == 2
    assert get(cluster, namespace, "deployment", "llama")["spec"]["replicas"] == 2

    scale = scale_of(cluster, namespace, "llama")
    assert (scale["apiVersion"], scale["kind"]) == ("autoscaling/v1", "Scale")
    assert scale["spec"]["replicas"] == 2
    assert scale["status"]["replicas"] == 2
    selector = scale["status"]["selector"]
    assert isinstance(selector, str) and selector, scale
    # an HPA counts pods (and reads their metrics) by this selector: exactly llama's engine pods
    selected = {pod["metadata"]["name"] for pod in live_pods(cluster, namespace, selector)}
    engine = wait_until(lambda: (pods := pods_of_deployment(cluster, namespace, "llama")) and len(pods) == 2 and pods,
                        what="two engine pods")
    assert selected == engine
    assert not selected & pods_of_deployment(cluster, namespace, "llama-b")
    assert len(live_pods(cluster, namespace)) == 3  # the neighbour's pod exists and was not selected


def test_scale_to_zero_is_ready_with_no_pods(cluster, namespace, operator):
    apply(cluster, namespace, simulator_resource("idle", replicas=1))
    first = wait_ready(cluster, namespace, "idle")
    config_hash = first["status"]["effective"]["configHash"]

    cluster.kubectl("scale", "-n", namespace, "speculativeinference/idle", "--replicas=0")
    # operator/inference/pure/status.py: a rollout is done when the Deployment has exactly the desired replicas (here
    # none) of the current config hash, so zero replicas is Ready=True, "0/0 replicas ready"
    resource = wait_ready(cluster, namespace, "idle", generation=2)
    ready = condition(resource, "Ready")
    assert ready["reason"] == "Available" and ready["message"].startswith("0/0 replicas ready"), ready
    assert condition(resource, "Progressing")["status"] == "False"
    assert condition(resource, "Degraded")["status"] == "False"
    assert resource["status"]["replicas"] == resource["status"]["readyReplicas"] == 0
    assert resource["status"]["effective"]["configHash"] == config_hash  # replicas are not in the config
    assert get(cluster, namespace, "deployment", "idle")["spec"]["replicas"] == 0
    wait_until(lambda: not pods_of_deployment(cluster, namespace, "idle"), what="engine pods gone")

    scale = scale_of(cluster, namespace, "idle")
    # autoscaling/v1 ScaleSpec.replicas is omitempty: zero is an absent field, not a missing value
    assert (scale["spec"].get("replicas", 0), scale["status"]["replicas"]) == (0, 0), scale
    assert scale["status"]["selector"]  # still set: KEDA reads it to scale back up from zero

    # and back up from zero (what KEDA does on the first request)
    cluster.kubectl("scale", "-n", namespace, "speculativeinference/idle", "--replicas=1")
    resource = wait_ready(cluster, namespace, "idle", generation=3)
    assert resource["status"]["readyReplicas"] == 1
    assert scale_of(cluster, namespace, "idle")["status"]["replicas"] == 1


def documented_hpa() -> dict:
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S)
    (hpa,) = [doc for block in blocks for doc in yaml.safe_load_all(block)
              if doc and doc.get("kind") == "HorizontalPodAutoscaler"]
    return hpa


def test_the_documented_hpa_scales_the_resource(cluster, namespace, operator):
    """kube-controller-manager's real HPA controller, with the HPA from docs/autoscaling.md. There is no
    metrics API here, but an HPA raises a target below minReplicas before it reads any metric, through
    the same /scale call it uses for metric-driven steps."""
    apply(cluster, namespace, simulator_resource("llama", replicas=1))
    wait_ready(cluster, namespace, "llama")
    hpa = documented_hpa()
    hpa["metadata"]["namespace"] = namespace
    hpa["spec"]["minReplicas"] = 2
    # strict server-side field validation: a misspelt field in the doc fails here, not silently
    cluster.kubectl("apply", "--validate=strict", "-n", namespace, "-f", "-", input=yaml.safe_dump(hpa))

    resource = wait_until(lambda: (r := get(cluster, namespace, "speculativeinference", "llama"))["spec"][
        "replicas"] == 2 and r, timeout=90, what="the HPA raising spec.replicas to minReplicas")
    assert get(cluster, namespace, "deployment", "llama")["spec"]["replicas"] == 2
    ready = wait_ready(cluster, namespace, "llama", generation=resource["metadata"]["generation"])
    assert ready["status"]["readyReplicas"] == 2
    # the HPA read the resource's scale (replicas and selector) and wrote it: AbleToScale, not FailedGetScale
    status = wait_until(lambda: (get(cluster, namespace, "hpa", "llama").get("status") or {}).get(
        "currentReplicas") == 2 and get(cluster, namespace, "hpa", "llama")["status"], timeout=60,
        what="the HPA observing 2 replicas")
    able = {c["type"]: c for c in status["conditions"]}["AbleToScale"]
    assert able["status"] == "True", status["conditions"]
