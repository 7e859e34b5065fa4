"""The reconciler's decisions on plain data: a fake API records writes; no cluster, no kopf."""

from __future__ import annotations

import asyncio
import copy

import pytest

from specinfer.api.status import EffectiveConfig
from specinfer.operator.inference.pure.status import rollout_of, status_covered, workload_status
from specinfer.operator.inference.reconciler import Reconciler
from specinfer.operator.plumbing.kube import TokenBucket
from specinfer.operator.plumbing.store import Store
from specinfer.operator.plumbing.workqueue import WorkQueue
from specinfer.operator.pure.compare import covers
from specinfer.operator.pure.conditions import ConditionUpdate, set_conditions
from specinfer.operator.pure.config import OperatorConfig
from specinfer.operator.pure.errors import ApiError
from tests.crd_schema import assert_status_in_crd

pytestmark = pytest.mark.unit

RESOURCE = {
    "apiVersion": "specinfer.io/v1alpha1", "kind": "SpeculativeInference",
    "metadata": {"name": "llama", "namespace": "ml", "uid": "u-1", "generation": 1, "resourceVersion": "10"},
    "spec": {"model": {"name": "m/x"}, "speculation": {"method": "ngram"}, "hardware": {"accelerator": "cpu"}},
}


class FakeKube:
    """Answers applies like the API server: echoes the object, adds defaults and a resourceVersion."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, str]] = []
        self.version = 100
        self.objects: dict[str, dict] = {}   # path -> what a GET answers (objects the cache does not hold)
        self.gets: list[str] = []
        self.managers: set[str] = set()

    async def get(self, path, *, accept=None, **query):
        self.gets.append(path)
        found = self.objects.get(path)
        if found is not None and accept is not None:  # metadata only
            return {"metadata": copy.deepcopy(found["metadata"])}
        return copy.deepcopy(found)

    async def apply(self, manifest, *, field_manager, subresource=None):
        self.version += 1
        self.writes.append((manifest["kind"], subresource or ""))
        self.managers.add(field_manager)
        out = copy.deepcopy(manifest)
        out["metadata"]["resourceVersion"] = str(self.version)
        if manifest["kind"] == "Deployment":
            out["spec"]["template"]["spec"]["dnsPolicy"] = "ClusterFirst"  # a server default
            out["metadata"]["generation"] = 1
        if subresource == "status":
            assert_status_in_crd("SpeculativeInference", manifest["status"])  # what the API server keeps
            out = {**copy.deepcopy(RESOURCE), "status": manifest["status"]}
            out["metadata"]["resourceVersion"] = str(self.version)
        return out

    async def create(self, manifest, *, field_manager=None):
        self.writes.append(("Event", manifest["reason"]))


class Events:
    def __init__(self, kube) -> None:
        self.kube = kube

    async def record(self, resource, *, type_, reason, message):
        await self.kube.create({"reason": reason})


def reconciler() -> tuple[Reconciler, FakeKube, Store]:
    kube, store = FakeKube(), Store()
    store.put_resource(copy.deepcopy(RESOURCE))
    return Reconciler(kube=kube, store=store, config=OperatorConfig(), events=Events(kube),
                      now=lambda: "2026-01-01T00:00:00Z"), kube, store


def run(coro):
    return asyncio.run(coro)


def test_first_pass_creates_children_then_nothing_more():
    rec, kube, store = reconciler()
    requeued = []
    rec.requeue = requeued.append
    run(rec.reconcile(("ml", "llama")))
    # a new workload first: status follows once the Deployment can say something
    assert kube.writes == [("ConfigMap", ""), ("Deployment", ""), ("Service", "")]
    assert requeued == [("ml", "llama")]
    run(rec.reconcile(("ml", "llama")))
    assert kube.writes[3:] == [("SpeculativeInference", "status"), ("Event", "RolloutStarted")]
    assert kube.managers == {"specinfer-operator"}  # "Who writes what", docs/architecture.md
    writes = len(kube.writes)
    run(rec.reconcile(("ml", "llama")))
    assert len(kube.writes) == writes  # converged: a second pass writes nothing


def test_hand_edited_child_is_applied_back():
    rec, kube, store = reconciler()
    run(rec.reconcile(("ml", "llama")))
    run(rec.reconcile(("ml", "llama")))
    deployment = store.child("Deployment", "ml", "llama")
    deployment["spec"]["template"]["spec"]["containers"][0]["image"] = "hacked"
    del store.children[("Service", "ml", "llama")]
    kube.writes.clear()
    run(rec.reconcile(("ml", "llama")))
    assert [w for w in kube.writes if w[1] == ""] == [("Deployment", ""), ("Service", "")]


def test_invalid_spec_writes_only_status():
    rec, kube, store = reconciler()
    bad = copy.deepcopy(RESOURCE)
    bad["spec"]["speculation"] = {"method": "eagle3"}  # needs a draft model
    store.put_resource(bad)
    run(rec.reconcile(("ml", "llama")))
    assert kube.writes == [("SpeculativeInference", "status"), ("Event", "InvalidSpec")]
    ready = next(c for c in store.resources[("ml", "llama")]["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert "spec.speculation.draftModel" in ready["message"]


def test_rollout_states():
    deployment = {"metadata": {"generation": 2},
                  "spec": {"template": {"metadata": {"annotations": {"specinfer.io/config-hash": "h"}}}},
                  "status": {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 2,
                             "availableReplicas": 2}}
    assert rollout_of(deployment, desired_hash="h", desired_replicas=2).done
    assert not rollout_of(deployment, desired_hash="other", desired_replicas=2).done
    surging = copy.deepcopy(deployment)
    surging["status"].update(replicas=3, updatedReplicas=1)
    state = rollout_of(surging, desired_hash="h", desired_replicas=2)
    assert not state.done and state.reason == "RolloutInProgress"
    stuck = copy.deepcopy(deployment)
    stuck["status"]["conditions"] = [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
                                      "message": "too slow"}]
    assert rollout_of(stuck, desired_hash="h", desired_replicas=2).failed


def test_a_stuck_surge_rollout_suggests_replace():
    stuck = {"metadata": {"generation": 2},
             "spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}},
             "status": {"observedGeneration": 2, "replicas": 2, "readyReplicas": 1,
                        "conditions": [{"type": "Progressing", "status": "False",
                                        "reason": "ProgressDeadlineExceeded",
                                        "message": 'ReplicaSet "llama-7c9" has timed out progressing.'}]}}
    surge = rollout_of(stuck, desired_hash="h", desired_replicas=1)
    assert surge.failed and surge.reason == "ProgressDeadlineExceeded"
    assert surge.message.startswith('ReplicaSet "llama-7c9" has timed out progressing.')
    assert "no room for a surge pod" in surge.message and "spec.updateStrategy: Replace" in surge.message
    status = workload_status(resource=RESOURCE, effective=EffectiveConfig(method="eagle3", config_hash="h"),
                             rollout=surge, desired_replicas=1, now="2027-01-01T00:00:00Z").to_json()
    conditions = {c["type"]: c for c in status["conditions"]}
    assert "spec.updateStrategy: Replace" in conditions["Progressing"]["message"]
    assert (conditions["Progressing"]["status"], conditions["Degraded"]["status"]) == ("False", "True")
    # Replace already frees the old pod's accelerators: the hint would be wrong advice
    replace = copy.deepcopy(stuck)
    replace["spec"]["strategy"]["rollingUpdate"] = {"maxUnavailable": 1, "maxSurge": 0}
    assert rollout_of(replace, desired_hash="h", desired_replicas=1).message == \
        'ReplicaSet "llama-7c9" has timed out progressing.'
    # other failures (quota, admission) are not about surge room
    quota = copy.deepcopy(stuck)
    quota["status"]["conditions"] = [{"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
                                      "message": "exceeded quota"}]
    assert rollout_of(quota, desired_hash="h", desired_replicas=1).message == "exceeded quota"


def test_condition_transition_time_moves_only_on_status_change():
    first = set_conditions(None, [ConditionUpdate("Ready", "False", "A", "a")], generation=1, now="t1")
    same = set_conditions(first, [ConditionUpdate("Ready", "False", "B", "b")], generation=2, now="t2")
    flipped = set_conditions(same, [ConditionUpdate("Ready", "True", "C", "c")], generation=2, now="t3")
    assert [c.last_transition_time for c in (first[0], same[0], flipped[0])] == ["t1", "t1", "t3"]
    assert same[0].observed_generation == 2


def test_covers_ignores_server_defaults_but_not_edits():
    desired = {"spec": {"replicas": 1, "ports": [{"port": 8000}], "limits": {"cpu": "8"}}}
    live = {"spec": {"replicas": 1, "ports": [{"port": 8000, "protocol": "TCP"}], "limits": {"cpu": 8}},
            "status": {}}
    assert covers(desired, live)
    assert not covers(desired, {"spec": {"replicas": 2, "ports": [{"port": 8000}], "limits": {"cpu": "8"}}})
    assert not covers(desired, {"spec": {"replicas": 1, "ports": [], "limits": {"cpu": "8"}}})


def test_status_compare_ignores_conditions_owned_by_the_tuner():
    desired = {"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "True"}]}
    live = {"observedGeneration": 1, "conditions": [{"type": "Tuned", "status": "True"},
                                                    {"type": "Ready", "status": "True"}]}
    assert status_covered(desired, live)
    assert not status_covered(desired, {"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "False"}]})


def test_work_queue_retries_conflicts_and_merges_duplicates():
    calls: list[str] = []

    async def process(key):
        calls.append(key)
        if calls.count(key) == 1 and key == "a":
            raise ApiError(409, "PATCH", "/x", "the object has been modified")

    async def main():
        queue = WorkQueue(process, workers=2, base_delay=0.01)
        for key in ("a", "a", "b", "a"):
            queue.add(key)
        queue.start()
        for _ in range(100):
            await asyncio.sleep(0.01)
            if calls.count("a") >= 2:
                break
        await asyncio.sleep(0.05)
        await queue.stop()
        return queue

    queue = run(main())
    assert calls.count("a") == 2 and calls.count("b") == 1  # one retry after the 409, duplicates merged
    assert queue.errors == 1


def test_token_bucket_limits_sustained_rate():
    now = [0.0]
    bucket = TokenBucket(qps=10, burst=5, clock=lambda: now[0])
    delays = [bucket.delay() for _ in range(7)]
    assert delays[:5] == [0.0] * 5 and delays[5] == pytest.approx(0.1) and delays[6] == pytest.approx(0.2)
    now[0] = 10.0
    assert bucket.delay() == 0.0


def test_watch_timeouts_and_peering_are_configured():
    import kopf

    from specinfer.operator.handlers.lifecycle import configure

    settings = kopf.OperatorSettings()
    configure(settings)
    assert settings.watching.server_timeout == 60
    assert settings.watching.client_timeout > settings.watching.server_timeout
    assert settings.watching.inactivity_timeout > settings.watching.server_timeout
    assert settings.peering.lifetime == 30


def test_urgent_keys_are_served_first():
    order: list[str] = []

    async def process(key):
        order.append(key)

    async def main():
        queue = WorkQueue(process, workers=1)
        queue.add("status-a")
        queue.add("status-b")
        queue.add("new-c", urgent=True)
        queue.add("status-b", urgent=True)  # a new generation of b overtakes its status follow-up
        queue.start()
        await asyncio.sleep(0.05)
        await queue.stop()

    run(main())
    assert order == ["new-c", "status-b", "status-a"]


# --- retuning in place (issue 22) ----------------------------------------------------------------

LIVE = {**RESOURCE, "spec": {**RESOURCE["spec"], "tuning": {"mode": "auto", "maxNumSpeculativeTokens": 4}}}


class NudgedKube(FakeKube):
    def __init__(self, refuse: int | None = None) -> None:
        super().__init__()
        self.patches: list[tuple[str, dict]] = []
        self.refuse = refuse

    async def request(self, method, path, *, query=None, body=None, content_type=None, verb=None, accept=None):
        # a merge patch, never an apply (which would create a pod deleted meanwhile: operator/plumbing/kube.py annotate)
        assert (method, content_type, query) == ("PATCH", "application/merge-patch+json",
                                                 [("fieldManager", "specinfer-operator")])
        if self.refuse:
            raise ApiError(self.refuse, method, path, "forbidden")
        self.patches.append((path, body))
        return body


def live_reconciler(kube: NudgedKube) -> tuple[Reconciler, Store]:
    store = Store()
    store.put_resource(copy.deepcopy(LIVE))
    store.put_child({"kind": "Pod", "metadata": {"name": "llama-abc", "namespace": "ml", "resourceVersion": "1",
                                                 "labels": {"specinfer.io/name": "llama"}}})
    rec = Reconciler(kube=kube, store=store, config=OperatorConfig(), events=Events(kube),
                     now=lambda: "2026-01-01T00:00:00Z")
    run(rec.reconcile(("ml", "llama")))
    run(rec.reconcile(("ml", "llama")))
    return rec, store


def retune(store: Store, k: int) -> None:
    resource = copy.deepcopy(store.resources[("ml", "llama")])
    resource["spec"] = copy.deepcopy(LIVE["spec"])  # the fake's status write answers with RESOURCE's spec
    resource["metadata"]["resourceVersion"] = str(int(resource["metadata"]["resourceVersion"]) + 100)
    resource["status"] = {**(resource.get("status") or {}),
                          "tuning": {"applied": {"numSpeculativeTokens": k, "since": "2026-01-01T00:00:00Z"}}}
    store.put_resource(resource)


def test_a_retune_in_place_publishes_the_schedule_and_nudges_the_pods_not_the_deployment():
    kube = NudgedKube()
    rec, store = live_reconciler(kube)
    assert not kube.patches  # a first publish needs no nudge: the pods start with it
    kube.writes.clear()
    retune(store, 2)
    run(rec.reconcile(("ml", "llama")))
    assert [w for w in kube.writes if w[1] == ""] == [("ConfigMap", "")]  # the schedule only
    [(path, body)] = kube.patches
    assert path == "/api/v1/namespaces/ml/pods/llama-abc"
    published = store.child("ConfigMap", "ml", "llama-schedule")["data"]["schedule.json"]
    assert body["metadata"]["annotations"]["specinfer.io/live-schedule"] in published


def test_without_patch_on_pods_the_nudge_stops_and_the_schedule_is_still_published():
    kube = NudgedKube(refuse=403)
    rec, store = live_reconciler(kube)
    retune(store, 2)
    run(rec.reconcile(("ml", "llama")))
    assert not rec.nudge_pods
    assert '"schedule":[[1,65536,2]]' in store.child("ConfigMap", "ml", "llama-schedule")["data"]["schedule.json"]


def test_a_rollout_to_speculation_off_leaves_the_replaced_pods_their_schedule():
    """Issue 43: the pods a switch-off replaces still follow the published schedule until they are gone (under
    Surge, the whole load for a model load): the ConfigMap keeps the tuner's schedule, not the spec's own."""
    kube = NudgedKube()
    rec, store = live_reconciler(kube)
    retune(store, 1)
    run(rec.reconcile(("ml", "llama")))
    tuned = store.child("ConfigMap", "ml", "llama-schedule")["data"]["schedule.json"]
    assert '"schedule":[[1,65536,1]]' in tuned
    kube.writes.clear()
    retune(store, 0)  # speculation off: new pods without a drafter, nothing of theirs reads the schedule
    run(rec.reconcile(("ml", "llama")))
    run(rec.reconcile(("ml", "llama")))  # and again once status.effective says speculation is off
    assert ("Deployment", "") in kube.writes  # the rollout
    assert store.child("ConfigMap", "ml", "llama-schedule")["data"]["schedule.json"] == tuned


def test_the_calibration_caches_keep_a_newer_copy_over_a_late_watch_event():
    from specinfer.operator.plumbing.store import Cache

    cache = Cache()
    newer = {"metadata": {"namespace": "ml", "name": "cal", "resourceVersion": "12"}, "status": {"phase": "Running"}}
    assert cache.put(newer) == ("ml", "cal")
    cache.put({"metadata": {"namespace": "ml", "name": "cal", "resourceVersion": "9"}})  # delivered late
    assert cache[("ml", "cal")]["status"] == {"phase": "Running"}
    cache.put({"metadata": {"namespace": "ml", "name": "cal", "resourceVersion": "13"}})
    assert "status" not in cache[("ml", "cal")]
