"""Turn pydantic's JSON Schema into a Kubernetes structural OpenAPI v3 schema.

Kubernetes accepts a subset of OpenAPI v3: no $ref, no `null` types, no `const`,
boolean `exclusiveMinimum`, `x-kubernetes-preserve-unknown-fields` for free-form
values, `x-kubernetes-int-or-string` for quantities. Titles are dropped; docstrings
become descriptions, so `kubectl explain` teaches the API.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from pydantic import BaseModel

_KEEP = {
    "type", "description", "default", "enum", "minimum", "maximum", "minLength", "maxLength", "pattern",
    "minItems", "maxItems", "minProperties", "maxProperties", "required", "format",
    "x-kubernetes-validations", "x-kubernetes-list-type", "x-kubernetes-list-map-keys",
}


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in node:
        target: dict[str, Any] = copy.deepcopy(defs[node["$ref"].split("/")[-1]])
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        target.update(siblings)  # the field's description and default win over the model's
        return target
    return node


def _without_null(options: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [option for option in options if option.get("type") != "null"]


def structural(node: dict[str, Any], defs: dict[str, Any], path: str = "spec") -> dict[str, Any]:
    """Convert one schema node (recursively); `path` names it in generated messages."""
    node = _resolve(node, defs)
    if "anyOf" in node:
        options = _without_null(node["anyOf"])
        outer = {k: v for k, v in node.items() if k not in ("anyOf", "default") or (k == "default" and v is not None)}
        if len(options) == 1:
            return structural({**_resolve(options[0], defs), **outer}, defs, path)
        types = sorted(str(option.get("type")) for option in options)
        if types == ["integer", "string"]:
            int_or_string: dict[str, Any] = {"x-kubernetes-int-or-string": True}
            if "description" in outer:
                int_or_string["description"] = " ".join(outer["description"].split())
            return int_or_string
        raise ValueError(f"cannot express anyOf {types} in a structural schema")
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _KEEP and not (key == "default" and value is None):
            out[key] = copy.deepcopy(value)
    if "description" in out:  # docstrings wrap lines; kubectl explain re-wraps
        out["description"] = " ".join(out["description"].split())
    if "const" in node:
        out["enum"] = [node["const"]]
        out.setdefault("type", "string")
    if "exclusiveMinimum" in node:
        out["minimum"] = node["exclusiveMinimum"]
        out["exclusiveMinimum"] = True
    if "exclusiveMaximum" in node:
        out["maximum"] = node["exclusiveMaximum"]
        out["exclusiveMaximum"] = True
    if "properties" in node:
        out["type"] = "object"
        out["properties"] = {
            name: structural(child, defs, f"{path}.{name}") for name, child in node["properties"].items()
        }
    patterns = node.get("patternProperties")
    if isinstance(patterns, dict) and patterns:
        # pydantic writes dict[ConstrainedKey, V] as patternProperties, which structural schemas
        # lack: the values become additionalProperties and the key pattern a CEL rule.
        if len(patterns) != 1:
            raise ValueError(f"cannot express {len(patterns)} key patterns in a structural schema")
        ((pattern, value),) = patterns.items()
        out["type"] = "object"
        out["additionalProperties"] = structural(value, defs, f"{path}[*]")
        out.setdefault("x-kubernetes-validations", []).append({
            "rule": f"self.all(k, k.matches({json.dumps(pattern)}))",
            "message": f"{path}: every key must match {pattern}",
        })
    additional = node.get("additionalProperties")
    if isinstance(additional, dict):
        out["type"] = "object"
        out["additionalProperties"] = structural(additional, defs, f"{path}[*]") if additional else {
            "x-kubernetes-preserve-unknown-fields": True
        }
    if "items" in node:
        out["items"] = structural(node["items"], defs, f"{path}[]")
    if not out.get("type") and "x-kubernetes-int-or-string" not in out:
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def model_schema(model: type[BaseModel], path: str = "spec") -> dict[str, Any]:
    """Structural schema of a pydantic model, camelCase, validation mode."""
    schema = model.model_json_schema(by_alias=True, mode="validation")
    return structural(schema, schema.get("$defs", {}), path)
