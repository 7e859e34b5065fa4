"""status.selection, edited: one place that copies it with new fields and validates the result."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from specinfer.api.base import MAX_TEXT
from specinfer.api.status import SelectionStatus


def replace_selection(selection: SelectionStatus, **fields: Any) -> SelectionStatus:
    """`selection` with `fields` (plain data or models), validated; a message cut to what the CRD stores."""
    if isinstance(fields.get("message"), str):
        fields["message"] = fields["message"][:MAX_TEXT]
    data = selection.model_dump()
    for key, value in fields.items():
        data[key] = value.model_dump() if isinstance(value, BaseModel) else value
    return SelectionStatus.model_validate(data)
