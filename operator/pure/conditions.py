"""One pure helper that sets kstatus conditions (metav1.Condition shape); time is passed in."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from specinfer.api.status import Condition, ConditionStatus, ConditionType


@dataclass(frozen=True)
class ConditionUpdate:
    type: ConditionType
    status: ConditionStatus
    reason: str
    message: str


def set_conditions(current: Iterable[Condition] | None, updates: Iterable[ConditionUpdate], *,
                   generation: int | None, now: str) -> list[Condition]:
    """The conditions named in `updates`, in that order; lastTransitionTime moves only when status flips.

    Conditions of other types (e.g. the tuning loop's Tuned) are not returned: each writer
    server-side-applies only its own entries of the list-map keyed by type.
    """
    previous = {c.type: c for c in current or []}
    out = []
    for update in updates:
        before = previous.get(update.type)
        unchanged = before is not None and before.status == update.status and before.last_transition_time
        out.append(Condition(type=update.type, status=update.status, reason=update.reason,
                             message=update.message[:Condition.MAX_MESSAGE],
                             last_transition_time=before.last_transition_time if unchanged and before else now,
                             observed_generation=generation))
    return out


def find(conditions: Iterable[Condition] | None, type_: str) -> Condition | None:
    return next((c for c in conditions or [] if c.type == type_), None)
