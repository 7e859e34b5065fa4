"""docs/gitops.md: the Argo CD health check runs (in Lua, as Argo CD runs it) on every resource state,
and the Flux and Argo CD manifests are valid and agree with the chart and the API."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from specinfer.api import API_VERSION, GROUP, KIND

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
GITOPS = ROOT / "docs" / "gitops.md"
HEALTH_KEY = f"resource.customizations.health.{GROUP}_{KIND}"


def yaml_blocks() -> list[dict]:
    blocks = re.findall(r"```yaml\n(.*?)```", GITOPS.read_text(), re.S)
    return [doc for block in blocks for doc in yaml.safe_load_all(block) if doc]


def by_kind(kind: str) -> list[dict]:
    return [doc for doc in yaml_blocks() if doc.get("kind") == kind]


@pytest.fixture(scope="module")
def health():
    from lupa import LuaRuntime

    (config_map,) = [doc for doc in by_kind("ConfigMap") if doc["metadata"]["name"] == "argocd-cm"]
    script = config_map["data"][HEALTH_KEY]
    lua = LuaRuntime(unpack_returned_tuples=True)
    # Argo CD runs the script with the object bound to the global `obj`.
    check = lua.eval(f"function(obj)\n{script}\nend")

    def run(obj: dict) -> tuple[str, str]:
        result = check(lua.table_from(obj, recursive=True))
        assert result is not None, "the health script returned nothing"
        return result["status"], result["message"]

    return run


def resource(*, generation: int = 2, observed: int | None = 2, conditions: list[dict] | None = None) -> dict:
    obj: dict = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "llama", "generation": generation},
                 "spec": {}}
    if observed is not None or conditions is not None:
        obj["status"] = {"conditions": conditions or []}
        if observed is not None:
            obj["status"]["observedGeneration"] = observed
    return obj


def cond(type_: str, status: str, reason: str = "", message: str = "", generation: int = 2) -> dict:
    return {"type": type_, "status": status, "reason": reason or type_, "message": message,
            "observedGeneration": generation, "lastTransitionTime": "2026-01-01T00:00:00Z"}


READY = cond("Ready", "True", "Available", "1/1 replicas ready")
NOT_PROGRESSING = cond("Progressing", "False", "Complete")
NOT_DEGRADED = cond("Degraded", "False", "AsExpected")


@pytest.mark.parametrize("obj, status, in_message", [
    (resource(observed=None), "Progressing", "operator"),
    (resource(observed=1, conditions=[READY, NOT_PROGRESSING, NOT_DEGRADED]), "Progressing", "generation 2"),
    (resource(conditions=[READY, NOT_PROGRESSING, NOT_DEGRADED]), "Healthy", "1/1 replicas ready"),
    (resource(conditions=[cond("Ready", "False", "RolloutInProgress"), cond("Progressing", "True", "RolloutInProgress",
                                                                         "new config hash"), NOT_DEGRADED]),
     "Progressing", "RolloutInProgress: new config hash"),
    (resource(conditions=[cond("Ready", "False", "InvalidSpec"), NOT_PROGRESSING,
                          cond("Degraded", "True", "InvalidSpec", "spec.speculation.draftModel is required")]),
     "Degraded", "InvalidSpec: spec.speculation.draftModel is required"),
    # a Degraded written for generation 1 does not condemn generation 2
    (resource(conditions=[READY, NOT_PROGRESSING, cond("Degraded", "True", "InvalidSpec", generation=1)]),
     "Healthy", "1/1"),
    (resource(conditions=[cond("Ready", "False", "PodsNotReady", "0/1 replicas ready"), NOT_PROGRESSING,
                          NOT_DEGRADED]), "Progressing", "PodsNotReady"),
    (resource(conditions=[READY, NOT_PROGRESSING, NOT_DEGRADED,
                          cond("TuningDegraded", "True", "PrometheusUnreachable")]),
     "Healthy", "tuning holds: PrometheusUnreachable"),
])
def test_argocd_health_check(health, obj, status, in_message):
    got_status, message = health(obj)
    assert got_status == status, message
    assert in_message in message


def test_health_check_names_only_conditions_the_api_defines():
    from typing import get_args

    from specinfer.api.status import ConditionType

    (config_map,) = [doc for doc in by_kind("ConfigMap") if doc["metadata"]["name"] == "argocd-cm"]
    named = set(re.findall(r'conditions\["(\w+)"\]', config_map["data"][HEALTH_KEY]))
    assert named and named <= set(get_args(ConditionType))


def test_flux_health_expressions_name_the_api_and_its_conditions():
    from typing import get_args

    from specinfer.api.status import ConditionType

    (kustomization,) = by_kind("Kustomization")
    (expr,) = kustomization["spec"]["healthCheckExprs"]
    assert (expr["apiVersion"], expr["kind"]) == (API_VERSION, KIND)
    assert set(expr) == {"apiVersion", "kind", "current", "inProgress", "failed"}
    for field in ("current", "inProgress", "failed"):
        types = set(re.findall(r"c\.type == '(\w+)'", expr[field]))
        assert types and types <= set(get_args(ConditionType)), field
    assert "metadata.generation" in expr["current"] and "observedGeneration" in expr["current"]


def test_gitops_manifests_install_this_chart_with_valid_values():
    chart = yaml.safe_load((ROOT / "charts" / "specinfer" / "Chart.yaml").read_text())
    schema_keys = set(yaml.safe_load((ROOT / "charts" / "specinfer" / "values.yaml").read_text()))
    (release,) = by_kind("HelmRelease")
    assert release["spec"]["chart"]["spec"]["chart"] == "charts/specinfer"
    assert release["spec"]["install"]["crds"] == release["spec"]["upgrade"]["crds"] == "CreateReplace"
    assert set(release["spec"]["values"]) <= schema_keys
    (source,) = by_kind("GitRepository")
    assert source["spec"]["ref"]["tag"] == f"v{chart['version']}"
    operator_app = next(app for app in by_kind("Application")
                        if app["spec"]["source"].get("path") == "charts/specinfer")
    assert operator_app["spec"]["source"]["targetRevision"] == f"v{chart['version']}"
    assert set(operator_app["spec"]["source"]["helm"]["valuesObject"]) <= schema_keys


@pytest.mark.binaries
def test_gitops_values_pass_the_charts_schema(tmp_path):
    import subprocess

    from specinfer.dev.cluster.binaries import HELM, binary_path, ensure_built

    ensure_built(HELM)
    (release,) = by_kind("HelmRelease")
    operator_app = next(app for app in by_kind("Application")
                        if app["spec"]["source"].get("path") == "charts/specinfer")
    for name, values in (("flux", release["spec"]["values"]),
                         ("argocd", operator_app["spec"]["source"]["helm"]["valuesObject"])):
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(values))
        result = subprocess.run([str(binary_path(HELM, "helm")), "template", "specinfer",
                                 str(ROOT / "charts" / "specinfer"), "-f", str(path)],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, f"{name} values: {result.stderr}"
