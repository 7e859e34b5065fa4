"""Workload profiles and each method's simulator profile, as data.

The simulator (runtime/sim/) plays a method from its `SimulatorProfile`: per workload, the
conditional probability that draft position i is accepted given position i-1 was (vLLM accepts
prefixes only), and how heavy one draft pass is. Every method module carries one; registration
refuses a method whose profile misses a workload, so the simulator can never meet a method it
cannot play. Shapes from the EAGLE-3, DFlash and DSpark papers and the vLLM blog
(docs/simulator.md): chat ~ MT-Bench/ShareGPT, code ~ HumanEval-like editing, summarization ~
CNN/DailyMail (highly repetitive of the prompt), math ~ GSM8K.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

WORKLOADS: tuple[str, ...] = ("chat", "code", "summarization", "math")
# Beyond a profile's explicit rates each position's conditional rate is the previous one times this
# (drafts degrade slowly with depth): the simulator's tail, and what the startup schedule assumes.
TAIL_DECAY = 0.97


@dataclass(frozen=True)
class SimulatorProfile:
    # workload -> P(position i accepted | position i-1 accepted), i = 0, 1, ...; beyond the tuple
    # the simulator decays the last rate slowly (runtime/sim/model.py).
    acceptance: Mapping[str, tuple[float, ...]]
    # how much heavier than an EAGLE head one draft pass is (a separate ~1B draft model for an 8B
    # target costs several head passes; an MTP module is about one decoder layer, like a head)
    draft_scale: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "acceptance", MappingProxyType({k: tuple(v) for k, v in self.acceptance.items()}))

    def expected_tokens(self, workload: str, k: int) -> float:
        """Mean tokens a request gains per step at draft length k on `workload` (the bonus token included)."""
        rates = self.acceptance[workload]
        total, running = 1.0, 1.0
        for position in range(max(0, k) if rates else 0):
            extra = position - len(rates) + 1
            running *= rates[position] if extra <= 0 else rates[-1] * TAIL_DECAY**extra
            total += running
        return total

    def problems(self, *, drafts: bool) -> list[str]:
        """What is missing or out of range; `drafts`: the method proposes tokens (rates must exist)."""
        found = []
        missing = [w for w in WORKLOADS if w not in self.acceptance]
        unknown = [w for w in self.acceptance if w not in WORKLOADS]
        if missing:
            found.append(f"no acceptance for workloads {missing}")
        if unknown:
            found.append(f"acceptance for unknown workloads {unknown}; known: {list(WORKLOADS)}")
        for workload, rates in self.acceptance.items():
            if drafts and not rates:
                found.append(f"workload {workload}: a drafting method needs at least one acceptance rate")
            if not drafts and rates:
                found.append(f"workload {workload}: a method that does not draft has no acceptance rates")
            if any(not 0.0 <= rate <= 1.0 for rate in rates):
                found.append(f"workload {workload}: acceptance rates must be in [0, 1], got {list(rates)}")
        if self.draft_scale <= 0:
            found.append(f"draft_scale must be > 0, got {self.draft_scale}")
        return found


NO_DRAFTS = SimulatorProfile(acceptance=dict.fromkeys(WORKLOADS, ()))
