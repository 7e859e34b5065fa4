"""The real operator against the local control plane: every behaviour of issue 4, item 5."""

from __future__ import annotations

import json
import time

import pytest
from harness_operator import (  # noqa: F401  (fixtures)
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

from specinfer.operator.pure.config import OperatorConfig
from specinfer.operator.render import render

pytestmark = pytest.mark.integration

CHILDREN = (("configmap", "{}-runtime"), ("deployment", "{}"), ("service", "{}"))


def versions(cluster, namespace: str, name: str) -> dict[str, str]:
    out = {}
    for kind, pattern in CHILDREN:
        child = get(cluster, namespace, kind, pattern.format(name))
        out[kind] = child["metadata"]["resourceVersion"]
    resource = get(cluster, namespace, "speculativeinference", name)
    out["status"] = json.dumps(resource["status"], sort_keys=True)
    return out


def test_create_renders_children_and_reports_ready(cluster, namespace, operator):
    apply(cluster, namespace, simulator_resource("llama"))
    cluster.kubectl("wait", "-n", namespace, "--for=condition=Ready", "si/llama", "--timeout=30s")
    resource = get(cluster, namespace, "speculativeinference", "llama")
    status = resource["status"]
    assert status["observedGeneration"] == resource["metadata"]["generation"] == 1
    assert status["readyReplicas"] == status["replicas"] == 1
    assert status["effective"]["method"] == "eagle3" and status["effective"]["numSpeculativeTokens"] == 3
    assert {c["type"]: c["status"] for c in status["conditions"]} == {
        "Ready": "True", "Progressing": "False", "Degraded": "False"}
    # GitOps-clean: no finalizer, no kopf annotations, spec untouched
    assert "finalizers" not in resource["metadata"]
    assert not [a for a in resource["metadata"].get("annotations", {}) if "kopf" in a]

    # children are exactly what `specinfer render` prints (one code path), owned by the resource
    expected = render(resource, OperatorConfig())
    assert status["effective"]["configHash"] == expected.config_hash
    configmap = get(cluster, namespace, "configmap", "llama-runtime")
    assert configmap["data"] == expected.manifest("ConfigMap")["data"]
    deployment = get(cluster, namespace, "deployment", "llama")
    owner = deployment["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("SpeculativeInference", resource["metadata"]["uid"],
                                                                 True)
    pod = get(cluster, namespace, "pods")["items"][0]
    assert pod["metadata"]["labels"]["specinfer.io/method"] == "eagle3"
    assert pod["metadata"]["labels"]["specinfer.io/k"] == "3"
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert pod["spec"]["containers"][0]["command"] == ["specinfer", "runtime"]
    events = get(cluster, namespace, "events")["items"]
    assert {"RolloutStarted", "Ready"} <= {e["reason"] for e in events if e["involvedObject"]["name"] == "llama"}


def test_second_reconcile_writes_nothing(cluster, namespace, start_operator):
    first = start_operator()
    apply(cluster, namespace, simulator_resource("idem"))
    wait_ready(cluster, namespace, "idem")
    time.sleep(2)
    before = versions(cluster, namespace, "idem")
    # an unrelated metadata change triggers a reconcile through the watch
    cluster.kubectl("annotate", "-n", namespace, "si/idem", "example.com/touched=1")
    time.sleep(3)
    assert versions(cluster, namespace, "idem") == before
    # a restarted operator reconciles everything again (resume) and still writes nothing
    first.stop()
    second = start_operator()
    time.sleep(4)
    assert versions(cluster, namespace, "idem") == before
    assert second.count("applied ") == 0, second.log()[-2000:]


def test_drift_is_corrected(cluster, namespace, operator):
    apply(cluster, namespace, simulator_resource("drift"))
    wait_ready(cluster, namespace, "drift")
    original = get(cluster, namespace, "deployment", "drift")["spec"]["template"]["spec"]["containers"][0]["image"]
    cluster.kubectl("set", "image", "-n", namespace, "deployment/drift", "engine=registry.invalid/hacked:1")
    cluster.kubectl("patch", "-n", namespace, "configmap/drift-runtime", "--type=merge",
                    "-p", json.dumps({"data": {"runtime.json": "{}"}}))
    cluster.kubectl("delete", "-n", namespace, "service/drift")
    wait_until(lambda: get(cluster, namespace, "deployment", "drift")["spec"]["template"]["spec"]["containers"][0][
        "image"] == original, what="image restored")
    wait_until(lambda: get(cluster, namespace, "configmap", "drift-runtime")["data"]["runtime.json"] != "{}",
               what="configmap restored")
    wait_until(lambda: get(cluster, namespace, "service", "drift", check=False), what="service recreated")
    wait_ready(cluster, namespace, "drift")


def test_spec_change_rolls_out(cluster, namespace, operator):
    apply(cluster, namespace, simulator_resource("roll", k=3))
    first = wait_ready(cluster, namespace, "roll")
    old_hash = first["status"]["effective"]["configHash"]
    apply(cluster, namespace, simulator_resource("roll", k=5))
    second = wait_ready(cluster, namespace, "roll", generation=2)
    assert second["status"]["effective"]["numSpeculativeTokens"] == 5
    assert second["status"]["effective"]["configHash"] != old_hash
    deployment = get(cluster, namespace, "deployment", "roll")
    strategy = deployment["spec"]["strategy"]["rollingUpdate"]
    assert (strategy["maxUnavailable"], strategy["maxSurge"]) == (0, 1)
    template = deployment["spec"]["template"]["metadata"]
    assert template["labels"]["specinfer.io/k"] == "5"
    assert template["annotations"]["specinfer.io/config-hash"] == second["status"]["effective"]["configHash"]
    replicasets = get(cluster, namespace, "replicasets")["items"]
    assert len(replicasets) == 2  # a rolling update, not a delete-and-recreate
    wait_until(lambda: all(p["metadata"]["labels"]["specinfer.io/k"] == "5"
                           for p in get(cluster, namespace, "pods")["items"] if not p["metadata"].get(
                               "deletionTimestamp")), what="pods with K=5")
    # scaling does not restart pods: the config hash ignores replicas
    apply(cluster, namespace, simulator_resource("roll", k=5, replicas=2))
    third = wait_ready(cluster, namespace, "roll", generation=3)
    assert third["status"]["effective"]["configHash"] == second["status"]["effective"]["configHash"]
    assert third["status"]["readyReplicas"] == 2


def test_update_strategy_replace_and_back_to_surge(cluster, namespace, operator):
    def rolling_update() -> tuple[int, int]:
        strategy = get(cluster, namespace, "deployment", "swap")["spec"]["strategy"]["rollingUpdate"]
        return strategy["maxSurge"], strategy["maxUnavailable"]

    replace = simulator_resource("swap", k=3)
    replace["spec"]["updateStrategy"] = "Replace"
    apply(cluster, namespace, replace)
    first = wait_ready(cluster, namespace, "swap")
    assert rolling_update() == (0, 1)
    # a config change still rolls out with no room for a surge pod
    replace["spec"]["speculation"]["numSpeculativeTokens"] = 5
    apply(cluster, namespace, replace)
    second = wait_ready(cluster, namespace, "swap", generation=2)
    assert second["status"]["effective"]["configHash"] != first["status"]["effective"]["configHash"]
    assert rolling_update() == (0, 1)
    replicasets = len(get(cluster, namespace, "replicasets")["items"])
    # switching the strategy re-renders the Deployment and restarts nothing (not in the config hash)
    surge = simulator_resource("swap", k=5)
    surge["spec"]["updateStrategy"] = "Surge"
    apply(cluster, namespace, surge)
    wait_until(lambda: rolling_update() == (1, 0), what="Deployment re-rendered with maxSurge 1")
    third = wait_ready(cluster, namespace, "swap", generation=3)
    assert third["status"]["effective"]["configHash"] == second["status"]["effective"]["configHash"]
    assert len(get(cluster, namespace, "replicasets")["items"]) == replicasets


def test_delete_garbage_collects_children(cluster, namespace, operator):
    apply(cluster, namespace, simulator_resource("gone"))
    wait_ready(cluster, namespace, "gone")
    cluster.kubectl("delete", "-n", namespace, "si/gone", "--wait=true", "--timeout=30s")
    for kind, pattern in CHILDREN:
        wait_until(lambda kind=kind, pattern=pattern: get(cluster, namespace, kind, pattern.format("gone"),
                                                          check=False) is None,
                   timeout=60, what=f"{kind} garbage-collected")


def test_operator_killed_midway_converges_without_duplicates(cluster, namespace, start_operator):
    names = [f"burst-{i}" for i in range(6)]
    first = start_operator()
    apply(cluster, namespace, *[simulator_resource(n) for n in names])
    time.sleep(0.3)
    first.kill()  # SIGKILL mid-reconcile: some children exist, some statuses unwritten
    second = start_operator()
    for name in names:
        wait_ready(cluster, namespace, name)
    deployments = get(cluster, namespace, "deployments")["items"]
    assert sorted(d["metadata"]["name"] for d in deployments) == names
    assert len(get(cluster, namespace, "services")["items"]) == len(names)
    configmaps = [c for c in get(cluster, namespace, "configmaps")["items"]
                  if c["metadata"]["name"].endswith("-runtime")]
    assert len(configmaps) == len(names)
    assert all(len(d["metadata"]["ownerReferences"]) == 1 for d in deployments)
    assert second.proc.poll() is None


def test_invalid_spec_reports_and_creates_nothing(cluster, namespace, operator):
    bad = simulator_resource("bad")
    bad["spec"]["speculation"]["advanced"] = {"draft_tensor_parallel_size": 3}  # admitted by CEL, not by parse_spec
    apply(cluster, namespace, bad)
    resource = wait_until(lambda: condition(get(cluster, namespace, "si", "bad"), "Ready").get("reason")
                          == "InvalidSpec" and get(cluster, namespace, "si", "bad"), what="InvalidSpec")
    ready = condition(resource, "Ready")
    assert ready["status"] == "False"
    assert "spec.speculation.advanced.draft_tensor_parallel_size" in ready["message"]
    assert condition(resource, "Degraded")["status"] == "True"
    assert resource["status"]["observedGeneration"] == 1
    time.sleep(1)
    assert get(cluster, namespace, "deployment", "bad", check=False) is None
    assert any(e["reason"] == "InvalidSpec" for e in get(cluster, namespace, "events")["items"])


def test_valid_resource_turned_invalid_keeps_its_workload(cluster, namespace, operator):
    apply(cluster, namespace, simulator_resource("keep"))
    before = wait_ready(cluster, namespace, "keep")
    rv = get(cluster, namespace, "deployment", "keep")["metadata"]["resourceVersion"]
    bad = simulator_resource("keep")
    bad["spec"]["speculation"]["advanced"] = {"draft_tensor_parallel_size": 3}
    apply(cluster, namespace, bad)
    resource = wait_until(lambda: condition(get(cluster, namespace, "si", "keep"), "Ready").get("reason")
                          == "InvalidSpec" and get(cluster, namespace, "si", "keep"), what="InvalidSpec")
    assert "keeps running" in condition(resource, "Ready")["message"]
    assert resource["status"]["effective"] == before["status"]["effective"]
    assert resource["status"]["readyReplicas"] == 1
    assert get(cluster, namespace, "deployment", "keep")["metadata"]["resourceVersion"] == rv


def test_second_replica_stays_passive_and_takes_over(cluster, namespace, start_operator):
    active = start_operator()
    passive = start_operator()
    time.sleep(3)  # kopf starts every replica paused; only the highest priority resumes
    assert "Resuming operations" in active.log() and "Resuming operations" not in passive.log()
    apply(cluster, namespace, simulator_resource("peer-a"))
    wait_ready(cluster, namespace, "peer-a")
    time.sleep(1)
    assert active.count("applied ") >= 3 and passive.count("applied ") == 0
    active.kill()
    apply(cluster, namespace, simulator_resource("peer-b"))
    # the dead replica's peering entry expires (lifetime 30 s), then the passive one resumes
    wait_ready(cluster, namespace, "peer-b", timeout=90)
    assert "Resuming operations" in passive.log()
    assert passive.count("applied ") >= 3


def test_the_pod_nudge_annotates_an_existing_pod_and_never_creates_one(cluster, namespace):
    """Why the nudge is a merge patch (operator/plumbing/kube.py annotate), on the real API server: an apply of a pod
    that is gone is a create (refused here only because one annotation is no pod), a merge patch a 404."""
    import asyncio

    from specinfer.operator.plumbing.kube import Kube, annotate, server_side_apply
    from specinfer.operator.pure.errors import ApiError
    from specinfer.operator.render.labels import LIVE_SCHEDULE_ANNOTATION

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "engine", "namespace": namespace}}
    nudge = {**pod, "metadata": {**pod["metadata"], "annotations": {LIVE_SCHEDULE_ANNOTATION: "d1"}}}

    async def attempt(write) -> ApiError | None:
        kube = Kube(cluster.api_client(), qps=50, burst=10)
        try:
            await write(kube)
        except ApiError as error:
            return error
        finally:
            kube.close()
        return None

    manager = OperatorConfig().field_manager
    missing = asyncio.run(attempt(lambda kube: annotate(kube, pod, {LIVE_SCHEDULE_ANNOTATION: "d1"},
                                                        field_manager=manager)))
    assert missing is not None and missing.status == 404
    created = asyncio.run(attempt(lambda kube: server_side_apply(kube, nudge, field_manager=manager)))
    assert created is not None and created.status == 422 and "spec.containers" in created.message
    cluster.kubectl("run", "engine", "-n", namespace, "--image=registry.invalid/engine", "--restart=Never")
    before = get(cluster, namespace, "pod", "engine")
    assert asyncio.run(attempt(lambda kube: annotate(kube, pod, {LIVE_SCHEDULE_ANNOTATION: "d1"},
                                                     field_manager=manager))) is None
    after = json.loads(cluster.kubectl("get", "-n", namespace, "pod", "engine", "--show-managed-fields",
                                       "-o", "json").stdout)
    assert after["metadata"]["annotations"][LIVE_SCHEDULE_ANNOTATION] == "d1"
    assert after["spec"]["containers"] == before["spec"]["containers"]  # the scheduler may bind it meanwhile
    assert after["metadata"]["labels"] == before["metadata"]["labels"]
    ours = [entry for entry in after["metadata"]["managedFields"] if entry["manager"] == manager]
    assert [entry["operation"] for entry in ours] == ["Update"]
    assert f"f:{LIVE_SCHEDULE_ANNOTATION}" in json.dumps(ours[0]["fieldsV1"])
