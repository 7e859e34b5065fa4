"""The committed CRD is exactly what the models generate, and it is fit for the API server."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from specinfer.api import SHORT_NAMES
from specinfer.api.crd import CRD_FILE, build_crd, render_crd

pytestmark = pytest.mark.unit

ROOT = Path(__file__).parents[2]


def schema():
    return build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def walk(node, path="", parent_is_properties=False):
    """Yield (path, node) for every schema node."""
    yield path, node
    for name, child in (node.get("properties") or {}).items():
        yield from walk(child, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[]")


def test_committed_crd_matches_the_models():
    committed = (ROOT / CRD_FILE).read_text()
    assert committed == render_crd(), "crds/ is stale: run `specinfer crd`"


def test_every_field_is_described():
    undescribed = [
        path for path, node in walk(schema())
        if path and not path.endswith(("{}", "[]")) and path not in (".apiVersion", ".kind", ".metadata")
        and not node.get("description")
    ]
    assert undescribed == []


def test_every_string_list_and_map_is_bounded_for_cel_cost():
    unbounded = []
    for path, node in walk(schema()):
        kind = node.get("type")
        if kind == "string" and "maxLength" not in node and "enum" not in node and "format" not in node:
            unbounded.append(path)
        if kind == "array" and "maxItems" not in node:
            unbounded.append(path)
        if kind == "object" and "additionalProperties" in node and "maxProperties" not in node:
            unbounded.append(path)
    # status times are read by people, not by CEL; spec must be fully bounded
    assert [path for path in unbounded if path.startswith(".spec")] == []


def test_schema_is_structural():
    for path, node in walk(schema()):
        assert "$ref" not in node and "anyOf" not in node and "const" not in node, path
        assert node.get("type") or node.get("x-kubernetes-int-or-string") or node.get(
            "x-kubernetes-preserve-unknown-fields"
        ), f"{path} has no type"


def test_names_columns_and_subresources():
    crd = build_crd()
    assert crd["metadata"]["name"] == "speculativeinferences.specinfer.io"
    assert crd["spec"]["names"]["shortNames"] == list(SHORT_NAMES) == ["specinf", "si"]
    version = crd["spec"]["versions"][0]
    assert version["subresources"]["status"] == {}
    columns = {column["name"]: column["jsonPath"] for column in version["additionalPrinterColumns"]}
    assert columns["Model"] == ".spec.model.name"
    assert columns["K"] == ".status.effective.numSpeculativeTokens"
    assert columns["Acceptance"] == ".status.metrics.acceptanceRate"
    assert columns["Ready"] == '.status.conditions[?(@.type=="Ready")].status'
    assert {"Method", "Age"} <= set(columns)


def test_cel_rules_carry_messages_that_name_a_spec_field():
    rules = [rule for _, node in walk(schema()) for rule in node.get("x-kubernetes-validations", [])]
    assert len(rules) >= 30
    for rule in rules:
        assert rule["message"].startswith("spec."), rule


def test_rendered_yaml_round_trips():
    assert yaml.safe_load(render_crd()) == build_crd()
