"""Base model, bounded scalar types and validation rules shared by every API model.

A `Rule` carries a CEL expression (emitted into the CRD as `x-kubernetes-validations`,
so the API server rejects the resource at admission) and the same predicate in Python
(run by pydantic, so `parse_spec`, `specinfer render` and the runtime reject it too,
with the same message). tests/unit/test_api_rules.py runs every rule's examples through
the Python predicate; tests/integration/test_admission.py runs them through the real
API server -- the two must agree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, GetJsonSchemaHandler, model_validator
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError

# Every string, list and map is bounded: the API server estimates the worst-case cost
# of each CEL rule from these bounds and refuses a CRD whose rules could exceed its budget.
Name = Annotated[str, Field(min_length=1, max_length=253)]
ShortText = Annotated[str, Field(min_length=1, max_length=128)]
ModelId = Annotated[str, Field(min_length=1, max_length=256)]
MAX_TEXT = 4096
Text = Annotated[str, Field(max_length=MAX_TEXT)]
Url = Annotated[str, Field(min_length=1, max_length=2048, pattern=r"^https?://")]
# Kubernetes' own name rules for values the operator copies into pod specs: without them a spec
# passes admission and the Deployment is refused later (found by tests/integration/test_fuzz_dryrun.py).
DnsSubdomain = Annotated[str, Field(min_length=1, max_length=253,
                                    pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")]
LabelKey = Annotated[str, Field(min_length=1, max_length=317, pattern=(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"))]
LabelValue = Annotated[str, Field(max_length=63, pattern=r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")]
ConfigKey = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")]
ResourceName = Annotated[str, Field(min_length=1, max_length=128, pattern=(
    r"^(cpu|memory|ephemeral-storage|hugepages-[A-Za-z0-9.]+"
    r"|[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$"))]
Quantity = Annotated[str, Field(min_length=1, max_length=64, pattern=(
    r"^\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[numkMGTPE]|[KMGTPE]i)?$"))]


@dataclass(frozen=True)
class Rule:
    """One validation rule, in CEL for admission and in Python for everything offline.

    `check` gets the model instance and returns True when the rule holds. `field` is the
    field the message is about, relative to the model that declares the rule (CEL's
    `fieldPath`); `message` names the full field path and the fix.
    """

    cel: str
    message: str
    check: Callable[[Any], bool]
    field: str = ""
    # CEL messageExpression and its Python twin, for messages that name the offending value
    message_expression: str | None = None
    python_message: Callable[[Any], str] | None = None

    def message_for(self, model: Any) -> str:
        return self.python_message(model) if self.python_message else self.message

    def to_crd(self) -> dict[str, str]:
        rule = {"rule": self.cel, "message": self.message}
        if self.message_expression:
            rule["messageExpression"] = self.message_expression
        if self.field:
            rule["fieldPath"] = "." + self.field
        return rule


class ApiModel(BaseModel):
    """camelCase on the wire, snake_case in Python, unknown fields refused."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_default=False,
        use_attribute_docstrings=True,
    )
    rules: ClassVar[tuple[Rule, ...]] = ()

    @model_validator(mode="after")
    def _apply_rules(self) -> Self:
        failed = [rule for rule in type(self).rules if not rule.check(self)]
        if failed:
            # pydantic takes one error per validator: the first is the error, the rest ride along in ctx
            # (parse_spec reports them all, as the API server does).
            messages = [rule.message_for(self).replace("{", "(").replace("}", ")") for rule in failed]
            others = [[rule.field, message] for rule, message in zip(failed[1:], messages[1:], strict=True)]
            raise PydanticCustomError("specinfer_rule", messages[0], {"field": failed[0].field, "others": others})
        return self

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        """Carry the rules into the JSON schema, from which the CRD is generated."""
        schema = handler(core_schema)
        target = handler.resolve_ref_schema(schema)
        if cls.rules:
            target["x-kubernetes-validations"] = [rule.to_crd() for rule in cls.rules]
        return schema

    def to_json(self) -> dict[str, Any]:
        """The camelCase JSON form, without unset optional fields."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class StatusModel(ApiModel):
    """Status is written by the operator and read back: tolerate fields from newer versions."""

    model_config = ConfigDict(extra="ignore")


def no_server_default(schema: JsonDict) -> None:
    """Keep a field added after v1alpha1's first release out of stored objects unless a user sets it.

    The API server writes a schema default into every object it reads, and an operator one release
    older (CRD upgraded first, or the operator rolled back) refuses fields it does not know: every
    resource would turn InvalidSpec. parse_spec still fills the default in."""
    schema.pop("default", None)
