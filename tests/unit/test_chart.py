"""The Helm chart: lint, golden renders, CRD identity, restricted pod security, least-privilege RBAC.

Golden files live in tests/unit/golden/chart/; after an intended change regenerate and review them:
    SPECINFER_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/test_chart.py
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from specinfer.dev.cluster.binaries import HELM, binary_path, ensure_built
from tests.support import helm_homes

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "specinfer"
GOLDEN = Path(__file__).parent / "golden" / "chart"
UPDATE = os.environ.get("SPECINFER_UPDATE_GOLDEN") == "1"
RELEASE, NAMESPACE = "specinfer", "specinfer-system"

# name -> helm --set arguments; each is a supported way to install the chart.
CASES: dict[str, list[str]] = {
    "default": [],
    "namespaces": ["watch.namespaces={team-a,team-b}", "replicas=2", "operator.verbose=true",
                   "prometheus.url=http://prometheus.monitoring:9090",
                   "runtime.profiles.amd.nodeSelector.node\\.kubernetes\\.io/instance-type=mi300x",
                   "runtime.modelCachePersistentVolumeClaim=model-cache",
                   "tuning.windowSeconds=300", "tuning.policy.cooldownSeconds=900", "metrics.enabled=false",
                   "networkPolicy.enabled=true", "prometheus.allowedUrls={https://thanos.example/team-a}",
                   "prometheus.authSecrets=true", "runtime.allowedImages={registry.example/specinfer/*}",
                   # helm --set turns 2.5 into a string: decimals need --set-json (or a values file)
                   "cost.currency=EUR", '--set-json=cost.accelerators={"nvidia": 2.5}',
                   '--set-json=cost.products={"NVIDIA-H100-80GB-HBM3": 3.9}', "grafana.dashboard.enabled=false"],
    # a cluster with the Prometheus Operator: its PrometheusRule API exists
    "cluster": ["watch.scope=cluster", "peering.enabled=false", "metrics.enabled=true",
                "metrics.serviceMonitor.enabled=true", "rbac.readSecrets=false", "runtime.engineSecrets=Any",
                "networkPolicy.enabled=true", "--api-versions=monitoring.coreos.com/v1/PrometheusRule",
                "alerts.prometheusRule.labels.release=kube-prometheus-stack",
                "grafana.dashboard.annotations.grafana_folder=specinfer", "grafana.dashboard.namespace=monitoring"],
}


@pytest.fixture(scope="session")
def helm() -> Path:
    ensure_built(HELM)
    return binary_path(HELM, "helm")


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **helm_homes()})


def render(helm: Path, settings: list[str]) -> str:
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    for setting in settings:
        args += [setting] if setting.startswith("--") else ["--set", setting]
    result = run_helm(helm, *args)
    assert result.returncode == 0, f"helm template {settings} failed:\n{result.stderr}"
    return result.stdout


def documents(text: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def of_kind(docs: list[dict], kind: str) -> list[dict]:
    return [doc for doc in docs if doc["kind"] == kind]


@pytest.fixture(scope="module")
def rendered(helm: Path) -> dict[str, list[dict]]:
    return {name: documents(render(helm, settings)) for name, settings in CASES.items()}


def test_helm_lint_strict_passes(helm):
    result = run_helm(helm, "lint", "--strict", str(CHART))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", sorted(CASES))
def test_render_matches_golden(helm, name):
    text = render(helm, CASES[name])
    path = GOLDEN / f"{name}.yaml"
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if not path.exists():
        pytest.fail(f"no golden file {path}: run with SPECINFER_UPDATE_GOLDEN=1 and review it")
    expected = path.read_text()
    if text != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True),
                                            f"golden/{name}.yaml", "helm template", n=2))
        pytest.fail(f"helm template differs from the golden file (SPECINFER_UPDATE_GOLDEN=1 to accept):\n{diff}")


def test_no_stale_golden_files():
    assert {p.stem for p in GOLDEN.glob("*.yaml")} <= set(CASES)


def test_chart_crds_are_identical_to_generated_crds():
    """Helm installs charts/specinfer/crds/; `specinfer crd` writes crds/: they must never drift."""
    generated = {p.name: p.read_bytes() for p in (ROOT / "crds").glob("*.yaml")}
    packaged = {p.name: p.read_bytes() for p in (CHART / "crds").glob("*.yaml")}
    assert generated, "crds/ is empty: run `specinfer crd`"
    assert sorted(packaged) == sorted(generated), "copy crds/*.yaml into charts/specinfer/crds/"
    for name, content in generated.items():
        assert packaged[name] == content, f"charts/specinfer/crds/{name} differs from crds/{name}: copy it again"


@pytest.mark.parametrize("name", sorted(CASES))
def test_operator_pod_meets_restricted_pod_security(rendered, name):
    (deployment,) = of_kind(rendered[name], "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        assert not pod.get(key), key
    assert all("hostPath" not in volume for volume in pod["volumes"])
    for container in pod["containers"] + pod.get("initContainers", []):
        security = container["securityContext"]
        assert security["allowPrivilegeEscalation"] is False, container["name"]
        assert security["readOnlyRootFilesystem"] is True, container["name"]
        assert security["capabilities"] == {"drop": ["ALL"]}, container["name"]
        assert not security.get("privileged"), container["name"]
        assert all("hostPort" not in port for port in container.get("ports", []))


def rules_of(docs: list[dict], kind: str) -> list[dict]:
    return [rule for doc in of_kind(docs, kind) for rule in doc["rules"]]


def grants(rules: list[dict], group: str, resource: str, verb: str) -> bool:
    return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] for r in rules)


@pytest.mark.parametrize("name", sorted(CASES))
def test_rbac_has_no_wildcards_exec_or_secret_listing(rendered, name):
    rules = rules_of(rendered[name], "Role") + rules_of(rendered[name], "ClusterRole")
    assert rules
    for rule in rules:
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[field], rule
        assert not {"pods/exec", "pods/attach", "serviceaccounts/token"} & set(rule["resources"]), rule
        assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), rule
        if "secrets" in rule["resources"]:
            assert set(rule["verbs"]) == {"get"}, "Secrets: get by name only, never list/watch"


def test_default_is_namespaced_with_read_only_cluster_rights(rendered):
    docs = rendered["default"]
    for rule in rules_of(docs, "ClusterRole"):
        assert set(rule["verbs"]) <= {"get", "list", "watch"}, rule
        assert not {"secrets", "deployments", "configmaps"} & set(rule["resources"]), rule
    (role,) = of_kind(docs, "Role")
    (binding,) = of_kind(docs, "RoleBinding")
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == NAMESPACE
    (deployment,) = of_kind(docs, "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--namespace={NAMESPACE}" in args and "--all-namespaces" not in args


@pytest.mark.parametrize("name", sorted(CASES))
def test_rbac_covers_what_the_operator_manages(rendered, name):
    docs = rendered[name]
    rules = rules_of(docs, "ClusterRole" if name == "cluster" else "Role")
    needed = [("specinfer.io", "speculativeinferences", "watch"),
              ("specinfer.io", "speculativeinferences/status", "patch"), ("apps", "deployments", "create"),
              ("apps", "deployments", "patch"), ("", "services", "create"), ("", "configmaps", "create"),
              ("", "events", "create"), ("monitoring.coreos.com", "podmonitors", "create"),
              ("specinfer.io", "speculativeinferencecalibrations", "watch"),
              ("specinfer.io", "speculativeinferencecalibrations/status", "patch"), ("batch", "jobs", "create"),
              ("batch", "jobs", "delete"), ("", "pods", "watch")]
    for group, resource, verb in needed:
        assert grants(rules, group, resource, verb), f"{verb} {group}/{resource} missing"
    cluster_rules = rules_of(docs, "ClusterRole")
    assert grants(cluster_rules, "apiextensions.k8s.io", "customresourcedefinitions", "get")  # PodMonitor CRD
    assert grants(cluster_rules, "apiextensions.k8s.io", "customresourcedefinitions", "watch")  # kopf discovery


@pytest.mark.parametrize("name", sorted(CASES))
def test_operator_can_never_write_a_spec(rendered, name):
    """GitOps: the spec is the user's (tuned values live in status), so no rule allows writing it."""
    rules = rules_of(rendered[name], "Role") + rules_of(rendered[name], "ClusterRole")
    for verb in ("create", "update", "patch", "delete", "deletecollection"):
        assert not grants(rules, "specinfer.io", "speculativeinferences", verb), verb
    # method auto creates its comparisons (docs/selection.md); an existing calibration's spec stays unwritable
    assert grants(rules, "specinfer.io", "speculativeinferencecalibrations", "create")
    for verb in ("update", "patch", "delete", "deletecollection"):
        assert not grants(rules, "specinfer.io", "speculativeinferencecalibrations", verb), verb


def test_namespaced_mode_binds_one_role_per_watched_namespace(rendered):
    docs = rendered["namespaces"]
    assert {r["metadata"]["namespace"] for r in of_kind(docs, "Role")} == {"team-a", "team-b"}
    for binding in of_kind(docs, "RoleBinding"):
        (subject,) = binding["subjects"]
        assert (subject["kind"], subject["namespace"]) == ("ServiceAccount", NAMESPACE)
    assert grants(rules_of(docs, "Role"), "kopf.dev", "kopfpeerings", "create")  # the operator creates them
    (deployment,) = of_kind(docs, "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [a for a in args if a.startswith("--namespace=")] == ["--namespace=team-a", "--namespace=team-b"]
    assert "--peering=specinfer" in args and "--verbose" in args
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"


def test_without_peering_two_operators_never_overlap(rendered):
    (deployment,) = of_kind(rendered["cluster"], "Deployment")
    assert deployment["spec"]["strategy"]["type"] == "Recreate"
    assert "--standalone" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]


def test_probes_and_metrics_target_the_operators_endpoints(rendered):
    (deployment,) = of_kind(rendered["default"], "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert f"--liveness=http://0.0.0.0:{ports['health']}/healthz" in container["args"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert f"--metrics-port={ports['metrics']}" in container["args"]
    (service,) = of_kind(rendered["default"], "Service")
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    (off,) = of_kind(rendered["namespaces"], "Deployment")  # metrics.enabled=false
    assert not [a for a in off["spec"]["template"]["spec"]["containers"][0]["args"] if a.startswith("--metrics")]
    assert not of_kind(rendered["namespaces"], "Service")


def test_cluster_scope_uses_one_cluster_role_and_no_roles(rendered):
    docs = rendered["cluster"]
    assert not of_kind(docs, "Role") and not of_kind(docs, "RoleBinding")
    (deployment,) = of_kind(docs, "Deployment")
    assert not [a for a in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
                if a.startswith("--namespace")], "no --namespace: the operator watches every namespace"
    assert not grants(rules_of(docs, "ClusterRole"), "", "secrets", "get")  # rbac.readSecrets=false
    assert of_kind(docs, "ServiceMonitor") and of_kind(docs, "Service")


def test_cluster_scope_with_peering_may_create_the_cluster_peering(helm):
    docs = documents(render(helm, ["watch.scope=cluster"]))
    assert grants(rules_of(docs, "ClusterRole"), "kopf.dev", "clusterkopfpeerings", "create")


@pytest.mark.parametrize("name", sorted(CASES))
def test_operator_config_is_accepted_by_the_operator(rendered, name):
    from specinfer.operator.pure.config import parse_config

    (configmap,) = [c for c in of_kind(rendered[name], "ConfigMap") if "operator.yaml" in c["data"]]
    config = parse_config(yaml.safe_load(configmap["data"]["operator.yaml"]), source=f"chart ({name})")
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert dict(config.images) == values["runtime"]["images"]
    assert config.prometheus.auth_secrets is (name == "namespaces")  # off unless asked for (issue 15)
    assert config.engine_secrets == ("Any" if name == "cluster" else "Labelled")
    if name == "namespaces":
        assert config.prometheus.allowed_urls == ["https://thanos.example/team-a"]
        assert config.allowed_images == ["registry.example/specinfer/*"]
        assert config.prometheus.url == "http://prometheus.monitoring:9090"
        assert config.profile("amd").node_selector == {"node.kubernetes.io/instance-type": "mi300x"}
        assert config.model_cache.persistent_volume_claim == "model-cache"
        assert config.tuning.window_seconds == 300
        assert config.tuning.policy.model_dump(exclude_unset=True) == {"cooldown_seconds": 900}
        assert config.cost.currency == "EUR" and config.cost.accelerators == {"nvidia": 2.5}
        assert config.cost.products == {"NVIDIA-H100-80GB-HBM3": 3.9}
    else:
        assert config.cost.accelerators == {} and config.cost.products == {}  # no prices: no cost fields
    (deployment,) = of_kind(rendered[name], "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["SPECINFER_OPERATOR_CONFIG"] == f"{mounts['config']}/operator.yaml"
    assert f"--config={env['SPECINFER_OPERATOR_CONFIG']}" in container["args"]


@pytest.mark.parametrize("settings, complaint", [
    (["prometheus.token=abc"], "additional properties 'token' not allowed"),
    (["prometheus.url=http://admin:s3cr3t@prometheus:9090"], "/prometheus/url"),
    (["prometheus.allowedUrls={http://admin:s3cr3t@thanos:9090}"], "/prometheus/allowedUrls/0"),
    (["runtime.engineSecrets=Everything"], "/runtime/engineSecrets"),
    (["networkPolicy.enabeld=true"], "additional properties 'enabeld' not allowed"),
    (["watch.scope=everywhere"], "/watch/scope"),
    (["watch.namespaces={Team_A}"], "/watch/namespaces/0"),
    (["runtime.images.nvidia="], "/runtime/images/nvidia"),
    (["runtime.images.tpu=x"], "additional properties 'tpu' not allowed"),
    (["runtime.profiles.nvidia.shmsize=1Gi"], "additional properties 'shmsize' not allowed"),
    (["operator.workers=0"], "/operator/workers"),
    (["cost.accelerators.nvidia=-1"], "/cost/accelerators/nvidia"),
    (["cost.accelerators.tpu=1"], "additional properties 'tpu' not allowed"),
    (["cost.currency=usd"], "/cost/currency"),
    (["grafana.dashboard.label=not a label"], "/grafana/dashboard/label"),
    (['--set-json=cost.products={"H100 SXM": 1}'], "invalid propertyName 'H100 SXM'"),
])
def test_values_schema_refuses_mistakes_and_inline_credentials(helm, settings, complaint):
    args = ["template", RELEASE, str(CHART)]
    for setting in settings:
        args += [setting] if setting.startswith("--") else ["--set", setting]
    result = run_helm(helm, *args)
    assert result.returncode != 0, f"{settings} was accepted"
    assert complaint in result.stderr, result.stderr


def test_every_value_is_described_by_the_schema():
    """The schema refuses unknown keys, so every default in values.yaml must be in it (or install fails)."""
    import json

    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def walk(value, node, path):
        assert node is not None, f"values.yaml {path or '(root)'} is not in values.schema.json"
        if isinstance(value, dict) and node.get("properties") is not None:
            for key, child in value.items():
                walk(child, node["properties"].get(key), f"{path}.{key}".lstrip("."))

    walk(values, schema, "")


def test_engine_pods_from_the_charts_config_mount_no_token_and_take_credentials_by_reference(rendered):
    """Issue 9's runtime-pod defaults hold for the configuration the chart installs, on every accelerator."""
    from specinfer.operator.pure.config import parse_config
    from specinfer.operator.render import render

    (configmap,) = [c for c in of_kind(rendered["namespaces"], "ConfigMap") if "operator.yaml" in c["data"]]
    config = parse_config(yaml.safe_load(configmap["data"]["operator.yaml"]))
    for accelerator in ("nvidia", "amd", "ascend", "cpu"):
        resource = {"apiVersion": "specinfer.io/v1alpha1", "kind": "SpeculativeInference",
                    "metadata": {"name": "llama", "namespace": "team-a", "generation": 1},
                    "spec": {"model": {"name": "Qwen/Qwen3-8B",
                                       "hubTokenSecretRef": {"name": "hf-token", "key": "token"}},
                             "speculation": {"method": "ngram", "numSpeculativeTokens": 3},
                             "hardware": {"accelerator": accelerator}}}
        deployment = render(resource, config).manifest("Deployment")
        pod = deployment["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False, accelerator
        (engine,) = pod["containers"]
        assert engine["image"] == config.images[accelerator]
        hf = [e for e in engine.get("env", []) if e["name"] == "HF_TOKEN"]
        assert hf == [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}}]
        assert "hf-token" not in " ".join(engine.get("command", []) + engine.get("args", []))


def test_the_grafana_sidecar_finds_the_generated_dashboard(rendered):
    (dashboard,) = [c for c in of_kind(rendered["default"], "ConfigMap") if "specinfer.json" in c["data"]]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"  # kube-prometheus-stack's sidecar default
    assert dashboard["metadata"]["namespace"] == NAMESPACE
    assert json.loads(dashboard["data"]["specinfer.json"]) == json.loads((CHART / "files" / "grafana-dashboard.json")
                                                                        .read_text())
    (moved,) = [c for c in of_kind(rendered["cluster"], "ConfigMap") if "specinfer.json" in c["data"]]
    assert moved["metadata"]["namespace"] == "monitoring"
    assert moved["metadata"]["annotations"] == {"grafana_folder": "specinfer"}
    assert not [c for c in of_kind(rendered["namespaces"], "ConfigMap") if "specinfer.json" in c["data"]]


def test_the_prometheus_rule_needs_the_prometheus_operator_and_carries_the_rules_file(rendered, helm):
    assert not of_kind(rendered["default"], "PrometheusRule")  # no monitoring.coreos.com API: nothing to apply
    (rule,) = of_kind(rendered["cluster"], "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["spec"] == yaml.safe_load((CHART / "files" / "prometheus-rules.yaml").read_text())
    off = documents(render(helm, ["--api-versions=monitoring.coreos.com/v1/PrometheusRule",
                                  "alerts.prometheusRule.enabled=false"]))
    assert not of_kind(off, "PrometheusRule")


def test_the_service_monitor_keeps_the_resources_namespace_label(rendered):
    """The operator's per-resource series carry the resource's namespace; without honorLabels the
    scrape would overwrite it with the operator's own namespace."""
    (monitor,) = of_kind(rendered["cluster"], "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True


def test_network_policies_are_optional(rendered):
    assert not of_kind(rendered["default"], "NetworkPolicy")


def test_network_policy_admits_engine_traffic_from_their_namespace_and_engine_from_only(rendered):
    """Engine pods serve without authentication (issue 15): the policy must select exactly the pods the
    operator renders, on the port they serve, in every watched namespace."""
    from specinfer.operator.pure.config import OperatorConfig
    from specinfer.operator.render import render

    policies = of_kind(rendered["namespaces"], "NetworkPolicy")
    engines = {p["metadata"]["namespace"]: p for p in policies if p["metadata"]["name"].endswith("-engines")}
    assert set(engines) == {"team-a", "team-b"}
    resource = {"apiVersion": "specinfer.io/v1alpha1", "kind": "SpeculativeInference",
                "metadata": {"name": "llama", "namespace": "team-a"},
                "spec": {"model": {"name": "m"}, "speculation": {"method": "ngram"},
                         "hardware": {"accelerator": "cpu"}}}
    template = render(resource, OperatorConfig()).manifest("Deployment")["spec"]["template"]
    for policy in engines.values():
        selector = policy["spec"]["podSelector"]["matchLabels"]
        assert selector.items() <= template["metadata"]["labels"].items()
        (rule,) = policy["spec"]["ingress"]
        assert [p["port"] for p in rule["ports"]] == [template["spec"]["containers"][0]["ports"][0]["name"]]
        assert {"podSelector": {}} in rule["from"] and len(rule["from"]) == 2  # own namespace + engineFrom
        assert policy["spec"]["policyTypes"] == ["Ingress"]
    (operator,) = [p for p in policies if not p["metadata"]["name"].endswith("-engines")]
    (deployment,) = of_kind(rendered["namespaces"], "Deployment")
    assert operator["spec"]["podSelector"]["matchLabels"].items() <= \
        deployment["spec"]["template"]["metadata"]["labels"].items()
    # cluster scope: no namespace to put engine policies in, the operator's own only
    assert [p["metadata"]["name"] for p in of_kind(rendered["cluster"], "NetworkPolicy")] == ["specinfer"]
