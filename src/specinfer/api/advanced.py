"""`spec.speculation.advanced`: a typed object built from the catalogue's table of vLLM fields.

Typed (not a free map) so the API server checks types, enums and bounds at admission and
CEL can see the keys; names stay vLLM's snake_case.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import ConfigDict, Field, create_model, model_validator
from pydantic_core import PydanticCustomError

from specinfer.api.base import ApiModel, Rule
from specinfer.runtime.methods import methods_taking
from specinfer.runtime.methods.advanced import ADVANCED_FIELDS, RESERVED_FIELDS, AdvancedField

if TYPE_CHECKING:
    from specinfer.api.speculation import FixedSpeculation


def _annotation(spec: AdvancedField) -> tuple[Any, Any]:
    """(annotation, Field) for create_model; a bound of None is no bound."""
    low, high = spec.minimum, spec.maximum
    if spec.kind == "bool":
        return bool | None, Field(default=None, strict=True, description=spec.doc)
    if spec.kind == "int":
        return int | None, Field(default=None, strict=True, description=spec.doc, ge=low, le=high)
    if spec.kind == "number":
        return float | None, Field(default=None, description=spec.doc, ge=low, le=high)
    if spec.kind == "string":
        return str | None, Field(default=None, min_length=1, max_length=128, description=spec.doc)
    if spec.kind == "enum":
        return Literal[spec.choices] | None, Field(default=None, description=spec.doc)
    if spec.kind == "numberList":
        item = Annotated[float, Field(ge=low, le=high)]
        return list[item] | None, Field(default=None, max_length=64, description=spec.doc)
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


# (annotation, Field) per key, built from the catalogue's table when the module loads
_FIELDS: dict[str, Any] = {key: _annotation(spec) for key, spec in ADVANCED_FIELDS.items()}
Advanced = create_model(
    "Advanced",
    __base__=_AdvancedBase,
    __doc__="Further vLLM SpeculativeConfig fields by their vLLM (snake_case) names; fields owned by typed "
    "fields (method, model, num_speculative_tokens, ...) are not offered.",
    **_FIELDS,
)


def _only_for(key: str, methods: tuple[str, ...]) -> Callable[[FixedSpeculation], bool]:
    return lambda s: s.advanced is None or getattr(s.advanced, key) is None or s.method in methods


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
            check=_only_for(key, methods),
            field=f"advanced.{key}",
        ))
    return rules
