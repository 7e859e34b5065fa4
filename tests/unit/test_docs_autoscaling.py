"""docs/autoscaling.md: every YAML block parses, and the HPA, KEDA and Argo CD examples point at what
the CRD really serves (group, version, kind, scale subresource, replicas path) and at metrics the
engines really export."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from specinfer.runtime.contract.telemetry.vllm_metrics import NUM_REQUESTS_RUNNING, NUM_REQUESTS_WAITING

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "autoscaling.md"
CRD = ROOT / "crds" / "specinfer.io_speculativeinferences.yaml"


def yaml_blocks() -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S)


def documents() -> list[dict]:
    return [doc for block in yaml_blocks() for doc in yaml.safe_load_all(block) if doc]


def only(kind: str) -> dict:
    (doc,) = [doc for doc in documents() if doc.get("kind") == kind]
    return doc


@pytest.fixture(scope="module")
def crd() -> dict:
    return yaml.safe_load(CRD.read_text())


def scalable_versions(crd: dict) -> set[str]:
    """`group/version` strings a scaleTargetRef may name: served versions with a scale subresource."""
    group = crd["spec"]["group"]
    return {f"{group}/{v['name']}" for v in crd["spec"]["versions"]
            if v["served"] and "scale" in v.get("subresources", {})}


def test_every_yaml_block_parses_to_mappings():
    blocks = yaml_blocks()
    assert len(blocks) == 4, "a yaml fence was added or lost: update this test with the doc"
    for block in blocks:
        docs = list(yaml.safe_load_all(block))
        assert docs and all(isinstance(doc, dict) for doc in docs), block
    # no fence outside ```yaml hides an unchecked manifest
    assert not re.search(r"```(yml|yaml\S)", DOC.read_text())


@pytest.mark.parametrize("kind, api_version", [("HorizontalPodAutoscaler", "autoscaling/v2"),
                                               ("ScaledObject", "keda.sh/v1alpha1")])
def test_autoscalers_target_the_resource_through_its_scale_subresource(crd, kind, api_version):
    autoscaler = only(kind)
    assert autoscaler["apiVersion"] == api_version
    target = autoscaler["spec"]["scaleTargetRef"]
    assert target["apiVersion"] in scalable_versions(crd)
    assert target["kind"] == crd["spec"]["names"]["kind"]  # never the Deployment: the operator reverts that
    assert target["name"] == autoscaler["metadata"]["name"]


def test_hpa_metric_is_what_the_adapter_rule_serves_from_a_vllm_series():
    (rule,) = only_rules()
    series = re.match(r"'?([a-z_:]+)\{", rule["seriesQuery"]).group(1)
    assert series == NUM_REQUESTS_RUNNING.name
    # prometheus-adapter's rename: `matches` is a regex, `as` its replacement with ${1}
    served = re.sub(rule["name"]["matches"], rule["name"]["as"].replace("${1}", r"\1"), series)
    assert ":" not in served
    hpa = only("HorizontalPodAutoscaler")
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods" and metric["pods"]["metric"]["name"] == served
    assert set(rule["resources"]["overrides"]) == {"namespace", "pod"}  # the labels a PodMonitor adds
    assert hpa["spec"]["minReplicas"] >= 1 and hpa["spec"]["maxReplicas"] <= 128  # spec.replicas bounds


def only_rules() -> list[dict]:
    (values,) = [doc for doc in documents() if "rules" in doc]
    return values["rules"]["custom"]


def test_keda_query_uses_exported_series_and_the_tuners_resource_label():
    trigger = only("ScaledObject")["spec"]["triggers"][0]
    assert trigger["type"] == "prometheus"
    query = trigger["metadata"]["query"]
    names = set(re.findall(r"(vllm:[a-z_]+)\{", query))
    assert names == {NUM_REQUESTS_RUNNING.name, NUM_REQUESTS_WAITING.name}
    assert query.count('specinfer_io_name="llama"') == 2  # the PodMonitor's podTargetLabels name
    assert float(trigger["metadata"]["threshold"]) > 0


def test_argo_cd_ignores_exactly_the_scale_subresources_replicas_path(crd):
    app = only("Application")
    (spec_path,) = {v["subresources"]["scale"]["specReplicasPath"] for v in crd["spec"]["versions"] if v["served"]}
    (ignore,) = app["spec"]["ignoreDifferences"]
    assert (ignore["group"], ignore["kind"]) == (crd["spec"]["group"], crd["spec"]["names"]["kind"])
    assert ignore["jsonPointers"] == ["/" + spec_path.lstrip(".").replace(".", "/")] == ["/spec/replicas"]
    # without it Argo CD still writes git's replicas back on every sync
    assert "RespectIgnoreDifferences=true" in app["spec"]["syncPolicy"]["syncOptions"]


def test_gitops_page_links_here():
    assert "(autoscaling.md)" in (ROOT / "docs" / "gitops.md").read_text()
