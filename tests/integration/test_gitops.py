"""The operator under the chart's least-privilege RBAC, and what a GitOps tool needs from it.

The real `specinfer operator` runs as a local process authenticated with a token of the chart's
ServiceAccount (namespaced mode), configured with the ConfigMap the chart rendered: if any right it
needs is missing, the resource never gets Ready and its log shows the 403.

GitOps tools (Argo CD, Flux) own the spec in git: the operator must never write it, and
`metadata.generation` must only move when git changes. Tuned values live in status (issue 7); until
the tuning loop exists, these tests pin the invariant for everything the operator writes today
(children, status, events, rollouts after a spec edit).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml
from harness_operator import apply, get, simulator_resource, wait_ready, wait_until

from specinfer.dev.cluster.binaries import HELM, binary_path, ensure_built
from specinfer.dev.cluster.ports import free_port
from tests.support import denied_lines, helm_homes

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "specinfer"
SPECINFER = str(Path(sys.executable).parent / "specinfer")
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}


def helm(cluster, *args: str) -> subprocess.CompletedProcess:
    ensure_built(HELM)
    env = {**cluster.env(), **helm_homes()}
    result = subprocess.run([str(binary_path(HELM, "helm")), *args], capture_output=True, text=True,
                            env=env, timeout=240)
    assert result.returncode == 0, f"helm {args[0]} failed:\n{result.stderr}"
    return result


@pytest.fixture
def chart_operator(cluster, tmp_path):
    """Install the chart (namespaced mode) and run the real operator with its ServiceAccount's token."""
    home, watched = (f"t-gitops-{uuid.uuid4().hex[:6]}" for _ in range(2))
    for name, labels in ((home, RESTRICTED), (watched, {})):
        cluster.kubectl("apply", "-f", "-", input=json.dumps(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}))
    release = "si-" + uuid.uuid4().hex[:6]
    helm(cluster, "install", release, str(CHART), "-n", home, "--wait", "--timeout", "180s",
         "--set", f"watch.namespaces={{{watched}}}")
    account = f"{release}-specinfer"

    config = cluster.kubectl("get", "configmap", f"{account}-config", "-n", home,
                             "-o", "jsonpath={.data.operator\\.yaml}").stdout
    (tmp_path / "operator.yaml").write_text(config)
    token = cluster.kubectl("create", "token", account, "-n", home, "--duration", "1h").stdout.strip()
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    server = admin["clusters"][0]["cluster"]
    kubeconfig = {
        "apiVersion": "v1", "kind": "Config", "current-context": "operator",
        "clusters": [{"name": "local", "cluster": server}],
        "users": [{"name": "operator", "user": {"token": token}}],
        "contexts": [{"name": "operator", "context": {"cluster": "local", "user": "operator"}}],
    }
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(kubeconfig))

    # The same arguments the chart's Deployment passes, with free local ports instead of the pod's.
    deployment = json.loads(cluster.kubectl("get", "deployment", account, "-n", home, "-o", "json").stdout)
    args = [a for a in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
            if not a.startswith(("--config=", "--liveness=", "--metrics-port="))]
    assert len(args) < len(deployment["spec"]["template"]["spec"]["containers"][0]["args"]) - 2
    metrics_port, health_port = free_port(), free_port()
    args += [f"--metrics-port={metrics_port}", f"--liveness=http://127.0.0.1:{health_port}/healthz"]
    log_path = tmp_path / "operator.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen([SPECINFER, "operator", f"--config={tmp_path / 'operator.yaml'}", *args],
                                   env={**cluster.env(), "KUBECONFIG": str(tmp_path / "kubeconfig")},
                                   stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: "controller started" in log_path.read_text() or process.poll() is not None, 60,
                   what="operator start")
        assert process.poll() is None, f"operator exited:\n{log_path.read_text()[-3000:]}"
        yield watched, log_path, (metrics_port, health_port)
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
        helm(cluster, "uninstall", release, "-n", home, "--wait", "--timeout", "60s")
        for name in (home, watched):
            cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def forbidden_lines(log_path: Path) -> list[str]:
    return denied_lines(log_path.read_text())


def ready(cluster, namespace: str, name: str, generation: int, log_path: Path) -> dict:
    try:
        return wait_ready(cluster, namespace, name, generation=generation, timeout=120)
    except AssertionError as error:
        resource = get(cluster, namespace, "speculativeinference", name)
        raise AssertionError(f"{error}\nstatus: {json.dumps((resource or {}).get('status'), indent=1)}\n"
                             f"operator log:\n{log_path.read_text()[-4000:]}") from None


def test_operator_works_with_only_the_charts_namespaced_rights(cluster, chart_operator):
    watched, log_path, (metrics_port, health_port) = chart_operator
    apply(cluster, watched, simulator_resource("llama"))
    resource = ready(cluster, watched, "llama", 1, log_path)
    for kind in ("deployment", "service", "configmap"):
        name = "llama-runtime" if kind == "configmap" else "llama"
        assert get(cluster, watched, kind, name) is not None, f"{kind} {name} was not created"
    assert resource["status"]["readyReplicas"] == 1
    assert get(cluster, watched, "kopfpeering", "specinfer") is not None, "peering object not created"
    assert not forbidden_lines(log_path), "\n".join(forbidden_lines(log_path))
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    assert "specinfer_operator_reconciles_total" in metrics
    # the chart's liveness and readiness probes: GET /healthz on the --liveness port
    with urllib.request.urlopen(f"http://127.0.0.1:{health_port}/healthz", timeout=5) as response:
        assert response.status == 200


def gitops_view(resource: dict) -> dict:
    """What a GitOps tool compares: the spec, labels, annotations it applied, and the generation."""
    meta = resource["metadata"]
    return {"spec": resource["spec"], "generation": meta["generation"], "labels": meta.get("labels", {}),
            "annotations": meta.get("annotations", {}), "finalizers": meta.get("finalizers", [])}


def test_reconciling_and_status_writes_never_change_spec_or_generation(cluster, chart_operator):
    watched, log_path, _ = chart_operator
    applied = simulator_resource("llama")
    apply(cluster, watched, applied)
    before = gitops_view(ready(cluster, watched, "llama", 1, log_path))
    # (the API server's CRD defaults fill unset fields; that is admission, not the operator)
    assert before["spec"]["speculation"] == applied["spec"]["speculation"]
    assert before["generation"] == 1 and before["finalizers"] == []

    # Drive more operator writes: drift on a child is corrected, and the periodic status refresh runs.
    cluster.kubectl("scale", "deployment", "llama", "-n", watched, "--replicas=3")
    wait_until(lambda: get(cluster, watched, "deployment", "llama")["spec"]["replicas"] == 1, 30,
               what="drift corrected")
    time.sleep(2)
    after = get(cluster, watched, "speculativeinference", "llama")
    assert gitops_view(after) == before, "the operator changed what git owns"
    assert after["status"]["observedGeneration"] == after["metadata"]["generation"] == 1

    # A spec edit (what git does) is the only thing that moves the generation, by exactly one.
    edited = simulator_resource("llama", k=4)
    apply(cluster, watched, edited)
    final = ready(cluster, watched, "llama", 2, log_path)
    assert final["metadata"]["generation"] == 2
    assert final["spec"]["speculation"]["numSpeculativeTokens"] == 4
    assert final["status"]["effective"]["numSpeculativeTokens"] == 4
    assert not forbidden_lines(log_path)
