"""What the API server does to a write, read from the generated CRDs on disk (crds/), not from the
pydantic models that generate them: structural pruning drops every field the schema does not
declare, in silence, and a value of the wrong type is refused. Unit tests run every status patch a
writer produces through `schema_problems`, so a misspelt key or a field the CRD lost fails a test
instead of vanishing on a real cluster."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml

CRDS = Path(__file__).resolve().parents[1] / "crds"
FILES = {"SpeculativeInference": "specinfer.io_speculativeinferences.yaml",
         "SpeculativeInferenceCalibration": "specinfer.io_speculativeinferencecalibrations.yaml"}
TYPES: dict[str, tuple[type, ...]] = {"string": (str,), "integer": (int,), "number": (int, float),
                                      "boolean": (bool,), "object": (dict,), "array": (list,)}


@cache
def status_schema(kind: str) -> dict[str, Any]:
    crd = yaml.safe_load((CRDS / FILES[kind]).read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    return schema


def schema_problems(value: Any, schema: dict[str, Any], path: str = "status") -> list[str]:
    """Every field the API server would prune from `value`, and every value of the wrong type."""
    if value is None:
        return [] if schema.get("nullable") else [f"{path}: null where the schema has no nullable"]
    kind = schema.get("type")
    if kind is not None:
        allowed = TYPES[kind]
        if isinstance(value, bool) and bool not in allowed or not isinstance(value, allowed):
            return [f"{path}: {type(value).__name__} where the schema says {kind}"]
    problems: list[str] = []
    if isinstance(value, dict):
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if properties is not None and key in properties:
                problems += schema_problems(item, properties[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                problems += schema_problems(item, extra, f"{path}.{key}")
            elif not schema.get("x-kubernetes-preserve-unknown-fields") and extra is not True:
                problems.append(f"{path}.{key}: not in the CRD's schema (the API server prunes it)")
    elif isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            problems += schema_problems(item, schema["items"], f"{path}[{index}]")
    return problems


def assert_status_in_crd(kind: str, status: dict[str, Any]) -> None:
    problems = schema_problems(status, status_schema(kind))
    assert not problems, "the API server would prune or refuse:\n" + "\n".join(problems)
