"""A failing engine pod's container status -> the cause the operator puts in conditions (engine_failures.py)."""

from __future__ import annotations

import pytest

from specinfer.api.status import EffectiveConfig
from specinfer.operator.inference.pure.engine_failures import engine_failure, pod_failure
from specinfer.operator.inference.pure.status import Rollout, workload_status

pytestmark = pytest.mark.unit


def pod(name: str, *, waiting: dict | None = None, terminated: dict | None = None, restarts: int = 0,
        deleting: bool = False) -> dict:
    container = {"name": "engine", "restartCount": restarts, "ready": False,
                 "state": {"waiting": waiting} if waiting else {"running": {"startedAt": "2026-11-30T00:00:00Z"}}}
    if terminated:
        container["lastState"] = {"terminated": terminated}
    meta = {"name": name, "labels": {"specinfer.io/name": "tiny"}}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-30T00:00:00Z"
    return {"kind": "Pod", "metadata": meta, "status": {"containerStatuses": [container]}}


LINE = "specinfer runtime: spec.model.name: the local model directory /models/x does not exist in this container"


def test_crash_loop_reports_exit_code_restarts_and_termination_message():
    failure = pod_failure(pod("tiny-1", waiting={"reason": "CrashLoopBackOff"}, restarts=3,
                              terminated={"exitCode": 2, "reason": "Error", "message": LINE}))
    assert failure is not None and failure.reason == "CrashLoopBackOff"
    assert failure.describe() == f"engine pod tiny-1: CrashLoopBackOff, exit code 2 (3 restarts): {LINE}"


def test_an_image_that_cannot_be_had_reports_the_waiting_message():
    waiting = {"reason": "ErrImageNeverPull", "message": "run specinfer engine install"}
    failure = pod_failure(pod("tiny-1", waiting=waiting))
    assert failure.describe() == "engine pod tiny-1: ErrImageNeverPull: run specinfer engine install"


def test_a_long_log_tail_keeps_its_end_on_one_line():
    tail = "\n".join(f"line {i}" for i in range(500)) + "\nValueError: the real cause"
    failure = pod_failure(pod("p", waiting={"reason": "CrashLoopBackOff"}, restarts=1,
                              terminated={"exitCode": 1, "message": tail}))
    assert failure.message.endswith("ValueError: the real cause") and "\n" not in failure.message
    assert len(failure.message) < 1100


@pytest.mark.parametrize("body", [
    pod("starting"),                                                                 # running, not ready yet
    pod("pulling", waiting={"reason": "ContainerCreating"}),
    pod("gone", waiting={"reason": "CrashLoopBackOff"}, deleting=True),
    {"kind": "Pod", "metadata": {"name": "pending"}, "status": {"phase": "Pending"}},  # no container status
])
def test_pods_that_are_not_failing(body):
    assert pod_failure(body) is None


def test_the_first_failing_pod_by_name_is_reported():
    pods = [pod("b", waiting={"reason": "CrashLoopBackOff"}, terminated={"exitCode": 1, "message": "b"}),
            pod("a", waiting={"reason": "CrashLoopBackOff"}, terminated={"exitCode": 1, "message": "a"}),
            pod("c")]
    assert engine_failure(pods).pod == "a"
    assert engine_failure([pod("c")]) is None


def test_status_says_engine_failing_even_when_the_deployment_looks_available():
    rollout = Rollout(True, False, "Available", "1/1 replicas ready", 1, 1, "h")
    resource = {"metadata": {"name": "tiny", "generation": 1}, "status": {}}
    status = workload_status(resource=resource, effective=EffectiveConfig(method="ngram", config_hash="h"),
                             rollout=rollout, desired_replicas=1, now="2026-11-30T00:00:00Z",
                             engine_failure="engine pod tiny-1: CrashLoopBackOff, exit code 2 (1 restarts): x",
                             ).to_json()
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Ready"]["status"] == "False" and conditions["Ready"]["reason"] == "EngineFailing"
    assert conditions["Degraded"]["status"] == "True" and "exit code 2" in conditions["Degraded"]["message"]


def test_the_store_indexes_engine_pods_by_their_resource_label():
    from specinfer.operator.plumbing.store import Store

    store = Store()
    first, other = pod("tiny-1"), pod("other-1")
    other["metadata"]["labels"] = {"specinfer.io/name": "other"}
    for body in (first, other):
        body["metadata"]["namespace"] = "ns"
        store.put_child(body)
    assert [p["metadata"]["name"] for p in store.pods_of(("ns", "tiny"))] == ["tiny-1"]
    assert not store.children  # pods are not children: the reconciler never applies them
    store.drop_pod(first)
    assert store.pods_of(("ns", "tiny")) == [] and store.pods_of(("ns", "other"))
