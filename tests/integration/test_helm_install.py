"""`helm install` of charts/specinfer into a real API server, as a newcomer does it.

The release namespace enforces the restricted Pod Security Standard, so the operator pod being
created at all proves its security context; the kwok node makes the pod Ready, so the Deployment
reaching Available proves the whole chain (ServiceAccount, ConfigMap, RBAC, scheduling).
RBAC is checked with `kubectl auth can-i --as` the operator's ServiceAccount.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

from specinfer.dev.cluster.binaries import HELM, binary_path, ensure_built
from tests.support import helm_homes

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "specinfer"
RESTRICTED = {f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "warn", "audit")}


@pytest.fixture(scope="module")
def helm(cluster):
    ensure_built(HELM)
    path = binary_path(HELM, "helm")

    def run(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
        env = {**cluster.env(), **helm_homes()}
        return subprocess.run([str(path), *args], capture_output=True, text=True, env=env, timeout=timeout)

    return run


def make_namespace(cluster, labels: dict[str, str] | None = None) -> str:
    name = f"t-helm-{uuid.uuid4().hex[:6]}"
    manifest = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    return name


@pytest.fixture
def namespaces(cluster):
    """Factory of fresh namespaces, deleted afterwards (without waiting)."""
    created: list[str] = []

    def make(labels: dict[str, str] | None = None) -> str:
        created.append(make_namespace(cluster, labels))
        return created[-1]

    yield make
    for name in created:
        cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def install(helm, cluster):
    """helm install (--wait) a release; uninstalled afterwards so cluster-scoped RBAC does not pile up."""
    releases: list[tuple[str, str]] = []

    def run(namespace: str, *settings: str) -> tuple[str, subprocess.CompletedProcess]:
        release = f"si-{uuid.uuid4().hex[:6]}"
        args = ["install", release, str(CHART), "--namespace", namespace, "--wait", "--timeout", "180s"]
        for setting in settings:
            args += ["--set", setting]
        result = helm(*args)
        releases.append((release, namespace))
        assert result.returncode == 0, f"helm install failed:\n{result.stdout}\n{result.stderr}\n" + \
            describe(cluster, namespace)
        return release, result

    yield run
    for release, namespace in releases:
        helm("uninstall", release, "--namespace", namespace, "--wait", "--timeout", "60s")


def describe(cluster, namespace: str) -> str:
    events = cluster.kubectl("get", "events", "-n", namespace, "-o", "wide", check=False).stdout
    return f"events in {namespace}:\n{events}"


def deployment_available(cluster, namespace: str, name: str) -> bool:
    deployment = json.loads(cluster.kubectl("get", "deployment", name, "-n", namespace, "-o", "json").stdout)
    conditions = {c["type"]: c["status"] for c in deployment.get("status", {}).get("conditions", [])}
    return conditions.get("Available") == "True"


def can_i(cluster, service_account: str, verb: str, resource: str, namespace: str | None = None) -> bool:
    """A SubjectAccessReview: exact even for resources the API server does not serve (PodMonitors)."""
    name, _, subresource = resource.partition("/")
    resource, _, group = name.partition(".")
    account_namespace = service_account.split(":")[2]
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
              "spec": {"user": service_account,
                       "groups": ["system:serviceaccounts", f"system:serviceaccounts:{account_namespace}",
                                  "system:authenticated"],
                       "resourceAttributes": {"verb": verb, "group": group, "resource": resource,
                                              "subresource": subresource, "namespace": namespace or ""}}}
    result = cluster.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(review))
    return json.loads(result.stdout)["status"].get("allowed", False)


def test_restricted_namespace_refuses_a_privileged_pod(cluster, namespaces):
    """Control: the namespace label is enforced, so an accepted operator pod really is restricted."""
    namespace = namespaces(RESTRICTED)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "root", "namespace": namespace},
           "spec": {"containers": [{"name": "c", "image": "busybox:1.36", "securityContext": {"privileged": True}}]}}
    result = cluster.kubectl("apply", "-f", "-", input=json.dumps(pod), check=False)
    assert result.returncode != 0 and "violates PodSecurity" in result.stderr, result.stderr


def test_install_into_restricted_namespace_every_object_accepted_and_operator_available(
        cluster, helm, install, namespaces):
    namespace = namespaces(RESTRICTED)
    release, result = install(namespace)
    assert f"is installed in namespace {namespace}" in result.stdout, "NOTES.txt was not shown"
    assert "would violate PodSecurity" not in result.stderr, result.stderr

    manifest = helm("get", "manifest", release, "--namespace", namespace).stdout
    objects = [doc for doc in yaml.safe_load_all(manifest) if doc]
    assert {o["kind"] for o in objects} >= {"ServiceAccount", "ConfigMap", "Role", "RoleBinding", "ClusterRole",
                                            "ClusterRoleBinding", "Service", "Deployment"}
    for obj in objects:
        ns = obj["metadata"].get("namespace")
        args = ["get", obj["kind"].lower(), obj["metadata"]["name"], "-o", "name"] + (["-n", ns] if ns else [])
        cluster.kubectl(*args)  # raises when the object is missing

    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    name = deployment["metadata"]["name"]
    assert deployment_available(cluster, namespace, name), describe(cluster, namespace)
    pods = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)["items"]
    (pod,) = [p for p in pods if p["metadata"]["name"].startswith(name)]
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert pod["spec"]["serviceAccountName"] == name
    failed = cluster.kubectl("get", "events", "-n", namespace, "--field-selector", "reason=FailedCreate",
                             "-o", "name").stdout
    assert not failed.strip(), describe(cluster, namespace)
    crd = cluster.kubectl("get", "crd", "speculativeinferences.specinfer.io", "-o", "name").stdout
    assert crd.strip() == "customresourcedefinition.apiextensions.k8s.io/speculativeinferences.specinfer.io"


def test_namespaced_rbac_allows_only_the_watched_namespaces(cluster, install, namespaces):
    home = namespaces(RESTRICTED)
    watched = namespaces()
    elsewhere = namespaces()
    release, _ = install(home, f"watch.namespaces={{{watched}}}")
    account = f"system:serviceaccount:{home}:{release}-specinfer"

    for verb, resource in [("watch", "speculativeinferences.specinfer.io"),
                           ("patch", "speculativeinferences.specinfer.io/status"),
                           ("create", "deployments.apps"), ("patch", "deployments.apps"),
                           ("create", "services"), ("patch", "configmaps"), ("create", "events"),
                           ("create", "podmonitors.monitoring.coreos.com"), ("get", "secrets"),
                           ("create", "kopfpeerings.kopf.dev")]:
        assert can_i(cluster, account, verb, resource, watched), f"cannot {verb} {resource} in {watched}"
    for verb, resource, namespace in [("create", "deployments.apps", elsewhere), ("get", "secrets", elsewhere),
                                      ("watch", "speculativeinferences.specinfer.io", elsewhere),
                                      ("create", "deployments.apps", home),  # home is not watched here
                                      ("list", "secrets", watched), ("create", "pods", watched),
                                      ("create", "pods/exec", watched),
                                      ("patch", "speculativeinferences.specinfer.io", watched),
                                      ("update", "speculativeinferences.specinfer.io", watched),
                                      ("delete", "deployments.apps", watched),
                                      ("create", "rolebindings.rbac.authorization.k8s.io", watched)]:
        assert not can_i(cluster, account, verb, resource, namespace), f"can {verb} {resource} in {namespace}"
    assert can_i(cluster, account, "watch", "customresourcedefinitions.apiextensions.k8s.io")
    assert not can_i(cluster, account, "create", "customresourcedefinitions.apiextensions.k8s.io")
    assert not can_i(cluster, account, "create", "clusterroles.rbac.authorization.k8s.io")
    assert not can_i(cluster, account, "delete", "namespaces")


def test_cluster_scope_install_is_available_and_reaches_every_namespace(cluster, install, namespaces):
    home = namespaces(RESTRICTED)
    release, _ = install(home, "watch.scope=cluster", "rbac.readSecrets=false")
    account = f"system:serviceaccount:{home}:{release}-specinfer"
    assert deployment_available(cluster, home, f"{release}-specinfer")
    assert can_i(cluster, account, "create", "deployments.apps", namespaces())
    assert not can_i(cluster, account, "get", "secrets", home)
    assert not can_i(cluster, account, "create", "pods", home)


def test_upgrade_with_changed_config_rolls_the_operator(cluster, helm, install, namespaces):
    """The operator reads its configuration once; a config change must restart it (checksum annotation)."""
    namespace = namespaces(RESTRICTED)
    release, _ = install(namespace)
    name = f"{release}-specinfer"

    def checksum() -> str:
        deployment = json.loads(cluster.kubectl("get", "deployment", name, "-n", namespace, "-o", "json").stdout)
        return deployment["spec"]["template"]["metadata"]["annotations"]["checksum/config"]

    before = checksum()
    result = helm("upgrade", release, str(CHART), "--namespace", namespace, "--reuse-values", "--wait",
                  "--timeout", "180s", "--set", "prometheus.url=http://prometheus.monitoring:9090")
    assert result.returncode == 0, result.stderr
    assert checksum() != before
    config = cluster.kubectl("get", "configmap", f"{name}-config", "-n", namespace,
                             "-o", "jsonpath={.data.operator\\.yaml}").stdout
    assert yaml.safe_load(config)["prometheus"]["url"] == "http://prometheus.monitoring:9090"
    assert deployment_available(cluster, namespace, name)

