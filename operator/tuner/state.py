"""The policy's memory between ticks, as a plain JSON-serialisable dict.

The tuning loop stores it (e.g. in an annotation or status field) and hands it back next tick;
`None` starts fresh. Everything a guard needs -- when the last change was issued, the restarts
of the past hour, the change being verified, configs recently rolled back, a collapse -- is here,
so the policy itself stays a pure function.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

STATE_VERSION = 1


@dataclass
class PendingChange:
    """A change issued and not yet verified: realised gain is compared with `predicted_gain`."""

    at: float
    config: dict
    previous: dict
    predicted_gain: float
    calibration: float  # measured / modelled speed of the previous config when the change was decided
    prefix: list[float] = field(default_factory=list)  # the model as it was then: acceptance ...
    theta: list[float] = field(default_factory=list)  # ... and step-cost multipliers
    batch_mean: float = 0.0  # load when deciding: verification needs comparable load
    measured_tokens: float = 0.0
    expected_tokens: float = 0.0  # what the previous config would have produced in the same busy time
    windows: int = 0


@dataclass
class PolicyState:
    version: int = STATE_VERSION
    method: str | None = None
    cost: dict | None = None
    acceptance: dict | None = None
    changes: list[float] = field(default_factory=list)  # times changes were issued (restart budget)
    last_change_at: float | None = None
    pending: PendingChange | None = None
    realised_gain: float | None = None
    collapsed_at: float | None = None
    collapsed_config: dict | None = None
    confirmations: int = 0
    rejected: list[dict] = field(default_factory=list)  # [{"config": ..., "until": t, "batchSizes": [...]}]
    calibration: dict | None = None  # {"config": applied, "value": smoothed measured/modelled speed}

    def restarts_within(self, now: float, seconds: float = 3600.0) -> int:
        return sum(1 for t in self.changes if now - seconds < t <= now)

    def record_change(self, now: float) -> None:
        self.changes = [t for t in self.changes if now - t < 3600.0] + [now]
        self.last_change_at = now
        self.confirmations = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(data: dict | None) -> "PolicyState":
        if not data or data.get("version") != STATE_VERSION:
            return PolicyState()
        values = dict(data)
        pending = values.pop("pending", None)
        state = PolicyState(**values)
        state.pending = PendingChange(**pending) if pending else None
        return state
