"""Engine pods pass Kubernetes' restricted Pod Security Standard, judged by the real API server (issue 15).

The namespace is labelled `pod-security.kubernetes.io/enforce: restricted`, so the API server's
PodSecurity admission refuses any pod below the profile. Every method x accelerator pod the operator
renders is admitted (server-side dry-run: admission runs, nothing is stored); the previous release's
pod template is refused, which shows the namespace really enforces; and the CPU simulator workload is
applied for real: the ReplicaSet controller creates its pod there and the pod runner (playing the
kubelet for kwok) runs it locally from the rendered spec -- read-only root aside, which a local
process cannot emulate: HOME and /tmp on their emptyDirs, the runtime's own command.
"""

from __future__ import annotations

import copy
import threading
import uuid

import pytest
import yaml

from specinfer.dev.cluster.http_probe import wait_http_ok
from specinfer.dev.cluster.pod_runner import PodRunner
from specinfer.operator.pure.config import OperatorConfig
from specinfer.operator.render import render
from tests.support import wait_for
from tests.unit.test_render_golden import PAIRS, resource_for

pytestmark = pytest.mark.integration

RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted",
              "pod-security.kubernetes.io/enforce-version": "latest"}


@pytest.fixture
def restricted_namespace(cluster):
    name = f"restricted-{uuid.uuid4().hex[:6]}"
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": RESTRICTED}}
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(body))
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def core(cluster):
    from kubernetes import client

    return client.CoreV1Api(cluster.api_client())


def rendered(method: str, accelerator: str, namespace: str) -> dict:
    resource = resource_for(method, accelerator)
    resource["metadata"] = {"name": resource["metadata"]["name"], "namespace": namespace}  # no uid: no owner
    return {m["kind"]: m for m in render(resource, OperatorConfig()).manifests}


def pod_of(deployment: dict) -> dict:
    template = deployment["spec"]["template"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{deployment['metadata']['name']}-probe", "labels": template["metadata"]["labels"]},
            "spec": copy.deepcopy(template["spec"])}


def admission_error(core, namespace: str, pod: dict) -> str | None:
    from kubernetes.client.exceptions import ApiException

    try:
        core.create_namespaced_pod(namespace, pod, dry_run="All")
    except ApiException as error:
        return f"HTTP {error.status}: {error.body}"
    return None


def test_every_rendered_engine_pod_is_admitted_under_restricted(core, restricted_namespace):
    refused = {}
    for method, accelerator in PAIRS:
        error = admission_error(core, restricted_namespace, pod_of(rendered(method, accelerator,
                                                                            restricted_namespace)["Deployment"]))
        if error:
            refused[f"{method}/{accelerator}"] = error
    assert refused == {}


def test_the_previous_releases_pod_is_refused_there(core, restricted_namespace):
    """The test can fail: the template before issue 15 (seccomp only) violates the profile."""
    pod = pod_of(rendered("eagle3", "nvidia", restricted_namespace)["Deployment"])
    pod["spec"]["securityContext"] = {"seccompProfile": {"type": "RuntimeDefault"}}
    del pod["spec"]["containers"][0]["securityContext"]
    error = admission_error(core, restricted_namespace, pod)
    assert error is not None and "HTTP 403" in error and 'violates PodSecurity \\"restricted:latest\\"' in error
    for complaint in ("allowPrivilegeEscalation != false", "unrestricted capabilities", "runAsNonRoot != true"):
        assert complaint in error


def test_the_simulator_workload_runs_in_a_restricted_namespace(cluster, core, restricted_namespace, tmp_path):
    resource = resource_for("ngram", "cpu")
    resource["metadata"] = {"name": "restricted-sim", "namespace": restricted_namespace}
    resource["spec"]["runtime"] = {"engine": "simulator", "simulator": {"timeScale": 10}}
    manifests = render(resource, OperatorConfig()).manifests
    cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(manifests))
    runner = PodRunner(cluster.kubeconfig, tmp_path, namespaces=(restricted_namespace,), log=print)
    stop = threading.Event()
    thread = threading.Thread(target=runner.run, args=(stop,), kwargs={"interval": 0.5}, daemon=True)
    thread.start()
    try:
        def created() -> list:
            return core.list_namespaced_pod(restricted_namespace,
                                            label_selector="specinfer.io/name=restricted-sim").items

        def why() -> str:
            events = core.list_namespaced_event(restricted_namespace).items
            return "; ".join(f"{e.reason}: {e.message}" for e in events if e.type == "Warning")

        (pod,) = wait_for(created, timeout=60, what="the ReplicaSet to create the pod under restricted", why=why)
        assert pod.spec.security_context.run_as_non_root is True
        wait_for(runner.serving_pods, timeout=90, what="the pod runner to run the rendered pod and pass its probe")
        (local,) = runner.serving_pods()
        wait_http_ok(f"http://127.0.0.1:{local.port}/health", timeout=60)
        assert local.env["HOME"].startswith(str(tmp_path)) and local.env["HOME"].endswith("/volumes/home")
    finally:
        stop.set()
        thread.join(timeout=30)
