"""Every invalid resource of tests/integration/test_admission_cases.yaml is refused by parse_spec.

The same cases go to the real API server in tests/integration/test_admission.py, so the
CEL rules in the CRD and the Python predicates behind parse_spec are held to the same
messages.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from specinfer.api import InvalidSpecError, parse_spec

pytestmark = pytest.mark.unit

CASES_FILE = Path(__file__).parents[1] / "integration" / "test_admission_cases.yaml"


def deep_merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """`patch` over `base`; a None value deletes the key."""
    merged = copy.deepcopy(base)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def load_cases() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    document = yaml.safe_load(CASES_FILE.read_text())
    cases = [{**case, "spec": deep_merge(document["base"], case["patch"])} for case in document["cases"]]
    return document["base"], cases


BASE, CASES = load_cases()


def test_base_spec_is_valid():
    assert parse_spec(BASE).speculation.method == "eagle3"


def test_there_are_at_least_thirty_distinct_cases():
    names = [case["name"] for case in CASES]
    assert len(names) >= 30
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_parse_spec_refuses_with_the_expected_message(case):
    expected = case.get("parse") or case["message"]
    with pytest.raises(InvalidSpecError) as caught:
        parse_spec(case["spec"])
    assert expected in caught.value.describe_all(), (
        f"{CASES_FILE.relative_to(CASES_FILE.parents[2])} case {case['name']}: parse_spec says "
        f"{caught.value.describe_all()!r}")
    assert str(caught.value).startswith(caught.value.field_path) or caught.value.field_path in str(caught.value)
