"""`spec.speculation.advanced`: a typed object built from the catalogue's table of vLLM fields.

Typed (not a free map) so the API server checks types, enums and bounds at admission and
CEL can see the keys; names stay vLLM's snake_case.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, create_model, model_validator
from pydantic_core import PydanticCustomError

from specinfer.api.base import ApiModel, Rule
from specinfer.runtime.methods import methods_taking
from specinfer.runtime.methods.advanced import ADVANCED_FIELDS, RESERVED_FIELDS, AdvancedField


def _annotation(spec: AdvancedField) -> Any:
    bounds = {}
    if spec.minimum is not None:
        bounds["ge"] = spec.minimum
    if spec.maximum is not None:
        bounds["le"] = spec.maximum
    if spec.kind == "bool":
        return bool | None, Field(default=None, strict=True, description=spec.doc)
    if spec.kind == "int":
        return int | None, Field(default=None, strict=True, description=spec.doc, **bounds)
    if spec.kind == "number":
        return float | None, Field(default=None, description=spec.doc, **bounds)
    if spec.kind == "string":
        return str | None, Field(default=None, min_length=1, max_length=128, description=spec.doc)
    if spec.kind == "enum":
        return Literal[spec.choices] | None, Field(default=None, description=spec.doc)  # type: ignore[valid-type]
    if spec.kind == "numberList":
        item = float if not bounds else Field(**bounds)
        from typing import Annotated

        return list[Annotated[float, item]] | None, Field(default=None, max_length=64, description=spec.doc)
    raise ValueError(f"unknown advanced field kind {spec.kind}")


class _AdvancedBase(ApiModel):
    """Further vLLM SpeculativeConfig fields, by their vLLM (snake_case) names."""

    model_config = ConfigDict(alias_generator=None)

    @model_validator(mode="before")
    @classmethod
    def _refuse_reserved(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key in data:
                if key in RESERVED_FIELDS:
                    raise PydanticCustomError(
                        "specinfer_rule",
                        f"spec.speculation.advanced.{key} is set by a typed field: use {RESERVED_FIELDS[key]} instead",
                        {"field": key},
                    )
        return data


Advanced = create_model(  # type: ignore[call-overload]
    "Advanced",
    __base__=_AdvancedBase,
    __doc__="Further vLLM SpeculativeConfig fields by their vLLM (snake_case) names; fields owned by typed "
    "fields (method, model, num_speculative_tokens, ...) are not offered.",
    **{key: _annotation(spec) for key, spec in ADVANCED_FIELDS.items()},
)


def method_restriction_rules() -> list[Rule]:
    """CEL on Speculation: an advanced field that applies only to the methods whose modules list it."""
    rules = []
    for key, spec in ADVANCED_FIELDS.items():
        if not spec.method_specific:
            continue
        methods = methods_taking(key)
        allowed = "[" + ", ".join(f"'{m}'" for m in methods) + "]"
        names = " or ".join(methods)
        rules.append(Rule(
            cel=f"!has(self.advanced) || !has(self.advanced.{key}) || self.method in {allowed}",
            message=f"spec.speculation.advanced.{key} applies only to method {names}: remove it",
            check=lambda s, key=key, methods=methods: s.advanced is None
            or getattr(s.advanced, key) is None
            or s.method in methods,
            field=f"advanced.{key}",
        ))
    return rules
