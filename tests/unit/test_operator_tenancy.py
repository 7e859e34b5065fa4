"""What a resource may make the reconciler write (issue 15), on plain data with the fake API of
test_operator_reconcile: no child over an object the resource does not own, no image outside the
operator's allowlist, no pod reading a Secret that has not opted in."""

from __future__ import annotations

import copy

import pytest

from specinfer.operator.inference.reconciler import REJECTED_RETRY_SECONDS, Reconciler
from specinfer.operator.plumbing.store import Store
from specinfer.operator.pure.config import OperatorConfig, parse_config
from specinfer.operator.pure.errors import TemporaryError
from specinfer.operator.render import render
from specinfer.operator.render.labels import ENGINE_SECRET_LABEL
from tests.unit.test_operator_reconcile import RESOURCE, Events, FakeKube, run

pytestmark = pytest.mark.unit

KEY = ("ml", "llama")
SERVICE = "/api/v1/namespaces/ml/services/llama"


def reconciler(spec_patch: dict | None = None, config: OperatorConfig | None = None):
    kube, store = FakeKube(), Store()
    body = copy.deepcopy(RESOURCE)
    for field, value in (spec_patch or {}).items():
        body["spec"][field] = value
    store.put_resource(body)
    rec = Reconciler(kube=kube, store=store, config=config or OperatorConfig(), events=Events(kube),
                     now=lambda: "2026-01-01T00:00:00Z")
    return rec, kube, store


def ready(store: Store) -> dict:
    return next(c for c in store.resources[KEY]["status"]["conditions"] if c["type"] == "Ready")


def refused(rec: Reconciler) -> TemporaryError:
    with pytest.raises(TemporaryError) as caught:
        run(rec.reconcile(KEY))
    assert caught.value.delay == REJECTED_RETRY_SECONDS  # retried, not hot-looped: nothing we watch will tell us
    return caught.value


def foreign_service(**meta) -> dict:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "llama", "namespace": "ml", "uid": "someone-else", **meta},
            "spec": {"selector": {"app": "billing"}, "ports": [{"port": 443}]}}


def test_a_foreign_object_under_a_child_name_is_left_untouched_and_reported():
    rec, kube, store = reconciler()
    kube.objects[SERVICE] = foreign_service()
    refused(rec)
    assert [w for w in kube.writes if w[1] == ""] == [], "no child may be applied, not even the others"
    assert kube.writes == [("SpeculativeInference", "status"), ("Event", "ChildConflict")]
    condition = ready(store)
    assert (condition["status"], condition["reason"]) == ("False", "ChildConflict")
    assert "Service ml/llama already exists" in condition["message"] and "owner: no controller" in condition["message"]


def test_a_cached_child_with_our_labels_but_another_owner_is_not_taken_over():
    rec, kube, store = reconciler()
    bait = render(store.resources[KEY], OperatorConfig()).manifest("ConfigMap")
    bait["metadata"]["ownerReferences"] = [{"apiVersion": "specinfer.io/v1alpha1", "kind": "SpeculativeInference",
                                            "name": "llama", "uid": "an-older-llama", "controller": True}]
    store.put_child(bait)  # carries managed-by=specinfer-operator, so the watch cache holds it
    refused(rec)
    assert [w for w in kube.writes if w[1] == ""] == []
    assert "owner: SpeculativeInference llama" in ready(store)["message"]


def test_an_uncached_child_we_own_is_applied():
    rec, kube, store = reconciler()
    ours = foreign_service(ownerReferences=[{"kind": "SpeculativeInference", "name": "llama", "uid": "u-1",
                                             "controller": True}])
    kube.objects[SERVICE] = ours
    run(rec.reconcile(KEY))
    assert ("Service", "") in kube.writes


def test_the_ownership_check_costs_no_request_once_converged():
    rec, kube, store = reconciler()
    run(rec.reconcile(KEY))
    run(rec.reconcile(KEY))
    kube.gets.clear()
    run(rec.reconcile(KEY))
    assert kube.gets == []


def test_an_image_outside_the_allowlist_creates_nothing():
    rec, kube, store = reconciler({"runtime": {"image": "registry.evil.example/exfiltrate:latest"}})
    run(rec.reconcile(KEY))
    assert kube.writes == [("SpeculativeInference", "status"), ("Event", "ImageNotAllowed")]
    condition = ready(store)
    assert condition["reason"] == "ImageNotAllowed"
    assert "spec.runtime.image registry.evil.example/exfiltrate:latest is not allowed" in condition["message"]
    assert "ghcr.io/specinfer/runtime:" in condition["message"]  # the default allowlist: the profiles' images


@pytest.mark.parametrize("image, allowed", [
    ("ghcr.io/specinfer/runtime:0.1.0-vllm0.33.0-cpu", True),          # a hardware profile's image
    ("registry.example/specinfer/runtime:9", True),                   # a configured pattern
    ("registry.example/other/runtime:9", False),
])
def test_allowed_images_come_from_the_configuration(image, allowed):
    config = parse_config({"allowedImages": ["registry.example/specinfer/*", "ghcr.io/specinfer/runtime:*"]})
    rec, kube, store = reconciler({"runtime": {"image": image}}, config)
    run(rec.reconcile(KEY))
    assert (("Deployment", "") in kube.writes) is allowed


def secret_metadata(name: str, labelled: bool) -> dict:
    return {"metadata": {"name": name, "namespace": "ml", "labels": {ENGINE_SECRET_LABEL: "true"} if labelled else {}},
            "data": {"token": "c2VjcmV0"}}


def hub_token_resource() -> dict:
    return {"model": {"name": "m/x", "hubTokenSecretRef": {"name": "hf", "key": "token"}},
            "runtime": {"env": [{"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}}]}}


def test_pods_may_read_only_secrets_that_opted_in():
    rec, kube, store = reconciler(hub_token_resource())
    kube.objects["/api/v1/namespaces/ml/secrets/hf"] = secret_metadata("hf", True)
    kube.objects["/api/v1/namespaces/ml/secrets/db"] = secret_metadata("db", False)
    refused(rec)
    assert [w for w in kube.writes if w[1] == ""] == []
    condition = ready(store)
    assert condition["reason"] == "EngineSecretNotAllowed"
    assert "Secret ml/db (spec.runtime.env[0].valueFrom.secretKeyRef)" in condition["message"]
    assert f"kubectl label secret -n ml db {ENGINE_SECRET_LABEL}=true" in condition["message"]
    kube.objects["/api/v1/namespaces/ml/secrets/db"] = secret_metadata("db", True)
    run(rec.reconcile(KEY))
    assert ("Deployment", "") in kube.writes


def test_a_missing_secret_is_refused_too():
    rec, kube, store = reconciler(hub_token_resource())
    refused(rec)
    assert "Secret ml/hf (spec.model.hubTokenSecretRef) does not exist" in ready(store)["message"]


def test_engine_secrets_any_skips_the_check():
    rec, kube, store = reconciler(hub_token_resource(), parse_config({"engineSecrets": "Any"}))
    run(rec.reconcile(KEY))
    assert ("Deployment", "") in kube.writes
    assert not [path for path in kube.gets if "/secrets/" in path]


def test_secret_checks_read_metadata_only():
    rec, kube, store = reconciler(hub_token_resource())
    kube.objects["/api/v1/namespaces/ml/secrets/hf"] = secret_metadata("hf", True)
    kube.objects["/api/v1/namespaces/ml/secrets/db"] = secret_metadata("db", True)
    seen = []
    original = kube.get

    async def get(path, *, accept=None, **query):
        seen.append((path, accept))
        return await original(path, accept=accept, **query)

    kube.get = get
    run(rec.reconcile(KEY))
    secret_reads = [accept for path, accept in seen if "/secrets/" in path]
    assert secret_reads and all(accept and "PartialObjectMetadata" in accept for accept in secret_reads)


def test_literal_env_values_stay_in_the_deployment_only():
    """The ConfigMap is read by more people than the Deployment: env is the container's, not runtime.json's;
    the config hash still follows it, so an env edit still rolls the pods."""
    def rendering(value: str):
        body = copy.deepcopy(RESOURCE)
        body["spec"]["runtime"] = {"env": [{"name": "MY_SETTING", "value": value}]}
        return render(body, OperatorConfig())

    first, second = rendering("LITERAL-ONE"), rendering("LITERAL-TWO")
    assert "LITERAL-ONE" not in str(first.manifest("ConfigMap"))
    env = first.manifest("Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "MY_SETTING", "value": "LITERAL-ONE"} in env
    assert first.config_hash != second.config_hash
    plain = render(copy.deepcopy(RESOURCE), OperatorConfig())
    assert "env" not in str(plain.manifest("ConfigMap")["data"])
