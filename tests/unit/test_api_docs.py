"""docs/api.md keeps up with the models and the catalogue."""

from __future__ import annotations

from pathlib import Path

import pytest

from specinfer.api.crd import build_crd
from specinfer.runtime.methods.advanced import ADVANCED_FIELDS
from specinfer.runtime.methods.cli import methods_table

pytestmark = pytest.mark.unit

DOC = (Path(__file__).parents[2] / "docs" / "api.md").read_text()


def spec_paths(node, path="spec", depth=0):
    for name, child in (node.get("properties") or {}).items():
        yield f"{path}.{name}"
        if depth < 2 and name != "advanced":
            inner = child["items"] if child.get("type") == "array" else child
            yield from spec_paths(inner, f"{path}.{name}" + ("[]" if child.get("type") == "array" else ""), depth + 1)


def test_every_spec_field_is_documented():
    schema = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    missing = [path for path in spec_paths(schema) if f"`{path}`" not in DOC]
    assert missing == []


def test_every_advanced_field_is_documented():
    assert [key for key in ADVANCED_FIELDS if f"`{key}`" not in DOC] == []


def test_catalogue_table_is_current():
    assert methods_table() in DOC, "docs/api.md: paste the output of `specinfer methods`"
