"""One pure helper that sets a kstatus condition (metav1.Condition shape); time is passed in."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

Status = Literal["True", "False", "Unknown"]


@dataclass(frozen=True)
class ConditionUpdate:
    type: str
    status: Status
    reason: str
    message: str


def set_conditions(current: Iterable[Mapping[str, Any]] | None, updates: Iterable[ConditionUpdate], *,
                   generation: int | None, now: str) -> list[dict[str, Any]]:
    """The conditions named in `updates`, in that order; lastTransitionTime moves only when status flips.

    Conditions of other types (e.g. the tuning loop's Tuned) are not returned: each writer
    server-side-applies only its own entries of the list-map keyed by type.
    """
    previous = {c.get("type"): c for c in current or []}
    out = []
    for update in updates:
        before = previous.get(update.type) or {}
        changed = before.get("status") != update.status
        out.append({
            "type": update.type,
            "status": update.status,
            "reason": update.reason,
            "message": update.message,
            "lastTransitionTime": now if changed or not before.get("lastTransitionTime") else before["lastTransitionTime"],
            "observedGeneration": generation,
        })
    return out


def find(conditions: Iterable[Mapping[str, Any]] | None, type_: str) -> Mapping[str, Any] | None:
    return next((c for c in conditions or [] if c.get("type") == type_), None)
