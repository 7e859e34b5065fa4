"""The policy's output: a decision (action, config, why, which guard held) and what its model believes.

Its JSON form (`Decision.to_json()`, camelCase) is the docs' stable interface (docs/tuner.md).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from .config import DraftConfig

Action = Literal["keep", "setK", "setSchedule", "disable", "reenable", "rollback"]
CHANGES: tuple[Action, ...] = ("setK", "setSchedule", "disable", "reenable", "rollback")
Signals = Literal["specinfer", "vllm", "vllm-biased"]
Path = Literal["inPlace", "rollout"]  # how a change reaches the engine
DEGRADED_COLLAPSE = "AcceptanceCollapsed"


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)


class Degradation(_Out):
    """Surface as the TuningDegraded condition (e.g. AcceptanceCollapsed)."""

    reason: str
    message: str


class Recommendation(_Out):
    """The best config whatever the guards say (what observe mode shows)."""

    config: DraftConfig
    predicted_gain: float
    coverage_gain: float


class ModelSummary(_Out):
    """What the model believes, for status and for people debugging a decision."""

    acceptance_prefix: list[float]
    expected_tokens: dict[str, float]
    step_cost_multipliers: list[float]
    predicted_speed: float
    measured_speed: float
    # predicted goodput of the applied config over that of no speculation, at the observed batch sizes
    speedup_vs_no_speculation: float
    prefill_seconds_per_generated_token: float = 0.0  # the fitted prefill per token generated (cost.py, "Prefill")


class Decision(_Out):
    action: Action
    reason: str
    config: DraftConfig | None = None  # the full config to render, for every action but keep
    path: Path | None = None  # a change: a new published schedule (inPlace) or new pods (rollout)
    predicted_gain: float = 0.0
    guard: str | None = None  # the guard that held (keep only)
    signals: Signals | None = None
    degraded: Degradation | None = None
    recommendation: Recommendation | None = None
    realised_gain: float | None = None
    model: ModelSummary | None = None
    probe: bool = False  # a window in place to measure a K only the prior has judged (probe.py)

    @property
    def is_change(self) -> bool:
        return self.action in CHANGES

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json")


def in_place(current: DraftConfig, new: DraftConfig, max_k: int | None, *, exact: bool = False) -> bool:
    """The engine takes `new` without a restart: it follows a published schedule (`max_k`, the
    startup maximum K, is set), runs a drafter now and keeps one, `new` stays within max_k -- reaches it,
    `exact`, for a drafter that drafts its startup K every step, whose envelope is the config's largest K --
    and verifies as the engine does now (adaptive verification is a setting of the engine's start). Mirrors
    runtime/contract/live_schedule/envelope.py `LiveEnvelope.admits`, which decides how the operator renders it."""
    if max_k is None or current.off or new.off or new.adaptive != current.adaptive:
        return False
    return new.num_speculative_tokens == max_k if exact else new.num_speculative_tokens <= max_k


def path_of(current: DraftConfig, new: DraftConfig, max_k: int | None, *, exact: bool = False) -> Path:
    return "inPlace" if in_place(current, new, max_k, exact=exact) else "rollout"


def action_for(current: DraftConfig, best: DraftConfig) -> Action:
    if best.off:
        return "disable"
    if current.off:
        return "reenable"
    return "setSchedule" if best.schedule else "setK"
