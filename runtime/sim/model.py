"""The pure engine model behind the simulator, the tuner benchmark and their tests.

Two halves, matching docs/../tuning-theory.md:
- acceptance: per method x workload, the conditional probability that draft
  position i is accepted given position i-1 was (vLLM accepts prefixes only);
- cost: seconds per engine step T(B, K) -- a memory-bound floor (weights read
  once per step), a compute-bound slope in tokens verified per step (B*(K+1)),
  a per-sequence KV-cache read, plus the drafting cost (K sequential draft
  passes for EAGLE-style heads and draft models, about one pass for parallel
  drafters such as DFlash/DSpark, ~0 for n-gram/suffix).

Parameters are calibrated so the published shapes hold (see
tests/unit/test_sim_calibration.py, which prints simulated next to published).
No I/O, no randomness: the simulator adds noise and draws acceptance itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

DraftingStyle = Literal["sequential", "parallel", "none"]

WORKLOADS: tuple[str, ...] = ("chat", "code", "summarization", "math")

# The conditional tail: beyond the explicit tuple each position's conditional
# rate is the previous one times this factor (drafts degrade slowly with depth).
DEFAULT_TAIL_DECAY = 0.97


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


@dataclass(frozen=True)
class CostModel:
    """Seconds per engine step, noise-free. One preset per (accelerator, target model)."""

    name: str
    floor_s: float  # memory-bound floor: the target's weights read once per step
    compute_per_token_s: float  # compute-bound slope per verified token
    kv_per_seq_s: float  # KV-cache read per running sequence (average context)
    draft_pass_s: float  # one sequential draft pass (EAGLE head), memory-bound floor
    draft_per_token_s: float  # draft compute per drafted token
    parallel_pass_s: float  # one parallel-drafting pass (DFlash/DSpark block drafter)
    lookup_per_token_s: float  # n-gram / suffix lookup per drafted token (CPU)
    prefill_per_token_s: float  # prefill compute per prompt token
    restart_s: float  # model load + CUDA graph capture after a restart
    knee_sharpness: float = 3.0  # p of the smooth max between floor and compute
    draft_scale: dict[str, float] = field(default_factory=dict)  # per-method multiplier of draft cost

    def target_time(self, batch_size: int, k: int) -> float:
        """The verification (or plain decode) forward pass over batch_size*(k+1) tokens."""
        if batch_size <= 0:
            return 0.0
        tokens = batch_size * (k + 1)
        p = self.knee_sharpness
        roofline = (self.floor_s**p + (self.compute_per_token_s * tokens) ** p) ** (1.0 / p)
        return roofline + self.kv_per_seq_s * batch_size

    def draft_time(self, batch_size: int, k: int, drafting: DraftingStyle, *, draft_scale: float = 1.0) -> float:
        """Cost of proposing k tokens for each of batch_size requests."""
        if batch_size <= 0 or k <= 0:
            return 0.0
        drafted = batch_size * k
        if drafting == "sequential":
            return draft_scale * k * (self.draft_pass_s + self.draft_per_token_s * batch_size)
        if drafting == "parallel":
            return draft_scale * (self.parallel_pass_s + self.draft_per_token_s * drafted)
        return self.lookup_per_token_s * drafted

    def step_time(self, batch_size: int, k: int, drafting: DraftingStyle, *, draft_scale: float = 1.0) -> float:
        """T(B, K): one engine step; K = 0 is a plain decode step with no drafting."""
        if k <= 0:
            return self.target_time(batch_size, 0)
        return self.target_time(batch_size, k) + self.draft_time(batch_size, k, drafting, draft_scale=draft_scale)

    def prefill_time(self, prompt_tokens: int) -> float:
        """Extra step time when a request's prompt is prefilled in that step."""
        return self.prefill_per_token_s * max(0, prompt_tokens)


# How much heavier than an EAGLE head one draft pass of each method is.
# A separate draft model (~1B for an 8B target) costs several EAGLE-head passes;
# an MTP module is about one decoder layer plus the LM head, like an EAGLE head.
DRAFT_SCALE_BY_METHOD: dict[str, float] = {
    "eagle": 1.0,
    "eagle3": 1.0,
    "mtp": 1.0,
    "draftModel": 3.0,
    "dflash": 1.0,
    "dspark": 1.0,
    "ngram": 1.0,
    "suffix": 1.5,
    "none": 1.0,
}


def draft_scale(method: str) -> float:
    """Multiplier of the preset's draft cost for this method (1.0 when unknown)."""
    return DRAFT_SCALE_BY_METHOD.get(method, 1.0)


COST_MODELS: dict[str, CostModel] = {
    # Llama-3.1-8B bf16 on one H100: ~16 GB of weights at ~3.3 TB/s plus launch overhead.
    "h100-llama8b": CostModel(
        name="h100-llama8b",
        floor_s=0.0070,
        compute_per_token_s=0.000055,
        kv_per_seq_s=0.000030,
        draft_pass_s=0.00085,
        draft_per_token_s=0.000006,
        parallel_pass_s=0.0020,
        lookup_per_token_s=0.000002,
        prefill_per_token_s=0.000040,
        restart_s=75.0,
    ),
    # The EAGLE-3 paper's vLLM chain experiment (Table 5): RTX 3090, 8B target.
    "rtx3090-llama8b": CostModel(
        name="rtx3090-llama8b",
        floor_s=0.0190,
        compute_per_token_s=0.00018,
        kv_per_seq_s=0.000080,
        draft_pass_s=0.0036,
        draft_per_token_s=0.000020,
        parallel_pass_s=0.0055,
        lookup_per_token_s=0.000002,
        prefill_per_token_s=0.00015,
        restart_s=110.0,
    ),
    # Llama-3-70B on 4xH100 (tensor parallel 4), the vLLM blog's draft-model setting.
    "h100x4-llama70b": CostModel(
        name="h100x4-llama70b",
        floor_s=0.0200,
        compute_per_token_s=0.000120,
        kv_per_seq_s=0.000040,
        draft_pass_s=0.0020,
        draft_per_token_s=0.000010,
        parallel_pass_s=0.0050,
        lookup_per_token_s=0.000002,
        prefill_per_token_s=0.00010,
        restart_s=300.0,
    ),
    # An ~80B-total / 3B-active MoE with native MTP layers on 4xH100. Expert routing and
    # all-to-all make step cost grow almost linearly with tokens per step (a soft knee),
    # the setting of the published MTP figures: 1.6x at 1 QPS, ~1.0x by 6-8 QPS.
    "h100x4-moe80b": CostModel(
        name="h100x4-moe80b",
        floor_s=0.0100,
        compute_per_token_s=0.00012,
        kv_per_seq_s=0.000020,
        draft_pass_s=0.0012,
        draft_per_token_s=0.000004,
        parallel_pass_s=0.0030,
        lookup_per_token_s=0.000002,
        prefill_per_token_s=0.000015,
        restart_s=240.0,
        knee_sharpness=1.5,
    ),
    # A tiny model on CPU: slow, compute-bound early; for n-gram smoke tests.
    "cpu-tiny": CostModel(
        name="cpu-tiny",
        floor_s=0.030,
        compute_per_token_s=0.0015,
        kv_per_seq_s=0.0002,
        draft_pass_s=0.010,
        draft_per_token_s=0.0005,
        parallel_pass_s=0.020,
        lookup_per_token_s=0.00001,
        prefill_per_token_s=0.0008,
        restart_s=20.0,
    ),
}

DEFAULT_COST_MODEL = "h100-llama8b"


def cost_model(name: str) -> CostModel:
    """The named preset; unknown names are answered with the known ones."""
    try:
        return COST_MODELS[name]
    except KeyError:
        raise KeyError(f"unknown cost model {name!r}; known: {', '.join(sorted(COST_MODELS))}") from None


def restart_seconds(cost_model_name: str) -> float:
    """Model reload downtime for a restart (method/K/schedule change)."""
    return cost_model(cost_model_name).restart_s


# Conditional acceptance per method and workload. Chat ~ MT-Bench/ShareGPT, code ~
# HumanEval-like editing, summarization ~ CNN/DailyMail (highly repetitive of the
# prompt), math ~ GSM8K. Shapes from the EAGLE-3, DFlash and DSpark papers and the
# vLLM blog (see tuning-theory.md); n-gram's first position is the hard one (a
# match must exist), later positions follow the copied span.
_CONDITIONAL: dict[str, dict[str, tuple[float, ...]]] = {
    "eagle": {
        "chat": (0.70, 0.66, 0.63, 0.61, 0.59),
        "code": (0.76, 0.72, 0.70, 0.68, 0.66),
        "summarization": (0.66, 0.62, 0.60, 0.58, 0.56),
        "math": (0.78, 0.74, 0.72, 0.70, 0.68),
    },
    "eagle3": {
        "chat": (0.80, 0.74, 0.71, 0.69, 0.67, 0.65),
        "code": (0.85, 0.80, 0.78, 0.76, 0.74, 0.72),
        "summarization": (0.74, 0.70, 0.67, 0.65, 0.63, 0.61),
        "math": (0.86, 0.82, 0.80, 0.78, 0.76, 0.74),
    },
    "mtp": {
        "chat": (0.82, 0.62, 0.52, 0.45),
        "code": (0.87, 0.70, 0.60, 0.52),
        "summarization": (0.80, 0.60, 0.50, 0.43),
        "math": (0.88, 0.72, 0.62, 0.55),
    },
    "draftModel": {
        "chat": (0.78, 0.75, 0.73, 0.71, 0.70),
        "code": (0.84, 0.81, 0.79, 0.77, 0.76),
        "summarization": (0.74, 0.71, 0.69, 0.67, 0.66),
        "math": (0.85, 0.82, 0.80, 0.79, 0.78),
    },
    "ngram": {
        "chat": (0.15, 0.55, 0.60, 0.62, 0.62),
        "code": (0.45, 0.75, 0.80, 0.82, 0.82),
        "summarization": (0.56, 0.80, 0.84, 0.86, 0.86),
        "math": (0.30, 0.60, 0.66, 0.68, 0.68),
    },
    "suffix": {
        "chat": (0.28, 0.60, 0.66, 0.68, 0.68),
        "code": (0.55, 0.82, 0.86, 0.88, 0.88),
        "summarization": (0.68, 0.86, 0.89, 0.90, 0.90),
        "math": (0.35, 0.66, 0.70, 0.72, 0.72),
    },
    "dflash": {
        "chat": (0.80, 0.78, 0.76, 0.75, 0.74, 0.73, 0.72, 0.71),
        "code": (0.90, 0.89, 0.88, 0.87, 0.86, 0.85, 0.84, 0.83),
        "summarization": (0.76, 0.74, 0.72, 0.71, 0.70, 0.69, 0.68, 0.67),
        "math": (0.94, 0.93, 0.92, 0.92, 0.91, 0.91, 0.90, 0.90),
    },
    "dspark": {
        "chat": (0.80, 0.76, 0.74, 0.72, 0.71, 0.70, 0.69),
        "code": (0.90, 0.89, 0.88, 0.87, 0.86, 0.85, 0.84),
        "summarization": (0.78, 0.75, 0.73, 0.72, 0.71, 0.70, 0.69),
        "math": (0.94, 0.93, 0.92, 0.92, 0.91, 0.91, 0.90),
    },
}

METHODS: tuple[str, ...] = ("none", *_CONDITIONAL)

# A broken drafter (a draft/target tokenizer mismatch, an attention backend bug after an upgrade):
# the first draft token almost never matches. `specinfer bench tuner`'s collapse scenario and the
# simulator's POST /admin/acceptance {"collapsed": true} use it.
COLLAPSED = AcceptanceProfile(name="collapsed", conditional=(0.02, 0.3))


def acceptance_profile(method: str, workload: str) -> AcceptanceProfile:
    """The default acceptance profile of `method` (spec method name) on `workload`."""
    if workload not in WORKLOADS:
        raise KeyError(f"unknown workload {workload!r}; known: {', '.join(WORKLOADS)}")
    if method == "none":
        return AcceptanceProfile(name=f"none/{workload}", conditional=())
    if method not in _CONDITIONAL:
        raise KeyError(f"unknown method {method!r}; known: {', '.join(METHODS)}")
    return AcceptanceProfile(name=f"{method}/{workload}", conditional=_CONDITIONAL[method][workload])
