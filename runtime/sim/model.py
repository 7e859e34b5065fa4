"""The pure engine model behind the simulator, the tuner benchmark and their tests.

Two halves, matching docs/simulator.md:
- acceptance: per method x workload, the conditional probability that draft position i is
  accepted given position i-1 was (vLLM accepts prefixes only) -- each method's module in the
  catalogue carries its rates (`MethodSpec.simulator`, runtime/methods/workloads.py);
- cost: seconds per engine step T(B, K) -- the catalogue's step-cost presets
  (runtime/methods/cost_presets.py), re-exported here for the simulator and benchmarks.

No I/O, no randomness: the simulator adds noise and draws acceptance itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from specinfer.runtime.methods import METHOD_NAMES, WORKLOADS, UnknownMethodError, draft_scale, get_method
from specinfer.runtime.methods.cost_presets import (
    COST_MODELS,
    DEFAULT_COST_MODEL,
    CostModel,
    CostShape,
    cost_model,
    restart_seconds,
)
from specinfer.runtime.methods.workloads import TAIL_DECAY

__all__ = [
    "COST_MODELS", "DEFAULT_COST_MODEL", "DEFAULT_TAIL_DECAY", "METHODS", "WORKLOADS", "AcceptanceProfile",
    "CostModel", "CostShape", "acceptance_profile", "cost_model", "draft_scale", "restart_seconds",
]

# Every catalogue method: registration refuses one without a simulator profile for every workload.
METHODS: tuple[str, ...] = METHOD_NAMES

# The conditional tail: beyond the explicit tuple each position's conditional
# rate is the previous one times this factor (drafts degrade slowly with depth).
DEFAULT_TAIL_DECAY = TAIL_DECAY


@dataclass(frozen=True)
class AcceptanceProfile:
    """Per-position conditional acceptance; `prefix_probs` gives vLLM's per-position rates."""

    name: str
    conditional: tuple[float, ...]  # P(pos i accepted | pos i-1 accepted); beyond the tuple the tail decays
    tail_decay: float = DEFAULT_TAIL_DECAY

    def __post_init__(self) -> None:
        for rate in self.conditional:
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"profile {self.name}: conditional rates must be in [0, 1], got {rate}")
        if not 0.0 <= self.tail_decay <= 1.0:
            raise ValueError(f"profile {self.name}: tail_decay must be in [0, 1], got {self.tail_decay}")

    def conditional_at(self, position: int) -> float:
        """P(position accepted | position-1 accepted), 0-based position."""
        if not self.conditional:
            return 0.0
        if position < len(self.conditional):
            return self.conditional[position]
        extra = position - len(self.conditional) + 1
        return self.conditional[-1] * self.tail_decay**extra

    def prefix_probs(self, k: int) -> list[float]:
        """[P(pos 0 accepted), P(pos 0..1 accepted), ...], length k."""
        probs: list[float] = []
        running = 1.0
        for position in range(max(0, k)):
            running *= self.conditional_at(position)
            probs.append(running)
        return probs

    def expected_tokens(self, k: int) -> float:
        """Mean tokens a request gains per step at draft length k (incl. the bonus token)."""
        return 1.0 + sum(self.prefix_probs(k))


def acceptance_profile(method: str, workload: str) -> AcceptanceProfile:
    """The default acceptance profile of `method` (spec method name) on `workload`."""
    if workload not in WORKLOADS:
        raise KeyError(f"unknown workload {workload!r}; known: {', '.join(WORKLOADS)}")
    try:
        profile = get_method(method).simulator
    except UnknownMethodError:
        raise KeyError(f"unknown method {method!r}; known: {', '.join(METHODS)}") from None
    return AcceptanceProfile(name=f"{method}/{workload}", conditional=profile.acceptance[workload])


# A broken drafter (a draft/target tokenizer mismatch, an attention backend bug after an upgrade):
# the first draft token almost never matches. `specinfer bench tuner`'s collapse scenario, the
# simulator's phases[].acceptanceCollapsed and its POST /admin/acceptance use it.
COLLAPSED = AcceptanceProfile(name="collapsed", conditional=(0.02, 0.3))
