"""vLLM's adaptive verification: how many of a step's drafted tokens it verifies. Pure.

With `speculative_config.enable_adaptive_verification` (vLLM 0.33.0, Model Runner V2; vllm#52228) every
drafter drafts as before, and each step vLLM verifies only the draft slots worth it: it scores every
(request, position) slot by its survival probability -- the running product of the request's
per-position confidences -- and admits the best `budget` of them, the budget that maximises expected
tokens per second, (requests sampling + the admitted survival probabilities) / (the drafting cost + the
verification cost of the tokens it then runs). `verification_budget` is that rule, `admitted` the global
top-k that hands the budget to the requests. The simulator and the tuner's step model
(operator/tuner/policy/adaptive.py) use both; tests/contract/test_vllm_adaptive.py holds each line.

vLLM turns it on for every drafter (the base speculator's online acceptance estimator, vllm#52228; the
field's docstring still says "dspark" only) and refuses it -- each in `CONFLICTS`, which admission
repeats (src/specinfer/api/adaptive_rules.py) -- on Model Runner V1 (`EngineRelease.v1_refuses_adaptive`),
without full CUDA graphs, with LoRA, with pipeline parallelism, with routed-experts capture, with sampling
distribution replay, and with use_local_argmax_reduction (except DSpark, whose confidence head needs no
draft logits). vllm-ascend 0.26.0rc1's vLLM has no such field.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from specinfer.runtime.methods.engines import SourceLine

_ADAPTIVE = "vllm/v1/worker/gpu/spec_decode/adaptive_verification.py"
# Every drafter turns the online acceptance estimator on with it (DraftModelSpeculator.__init__)
EVERY_DRAFTER = SourceLine("vllm/v1/worker/gpu/spec_decode/speculator.py", 176,
                           "self.use_acceptance_estimator = self.enable_adaptive_verification")
# The lines the rule follows (vLLM 0.33.0; AdaptiveVerificationManager.get_num_tokens)
SURVIVAL = SourceLine(_ADAPTIVE, 333, "survival_probability = np.cumprod(stale_confidences.astype(np.float64), axis=1)")
BUDGET = SourceLine(_ADAPTIVE, 367, "draft_budget = int(np.argmax(num_tokens_to_estimated_accepted_tokens / costs))")
# ... and the global top-k that admits the slots (`_assign_draft_token_budget`)
TOP_K = SourceLine(_ADAPTIVE, 70, "winners = flat.topk(draft_budget).indices")


_CONFIG = "vllm/config/vllm.py"


@dataclass(frozen=True)
class Conflict:
    """A setting vLLM 0.33.0 refuses adaptive verification with, in its words, at the line it raises."""

    setting: str                 # how the spec sets it: a `vllm serve` flag in extraArgs, or an advanced field
    flags: tuple[str, ...]       # the flag's spellings (empty: an advanced field)
    needs_value_above_one: bool  # the flag is a number and only a value above 1 conflicts
    reason: str                  # vLLM's message
    source: SourceLine


CONFLICTS: tuple[Conflict, ...] = (
    Conflict("--enforce-eager (no CUDA graphs)", ("--enforce-eager",), False,
             "Adaptive verification requires full CUDA graphs",
             SourceLine(_CONFIG, 3167, '"Adaptive verification requires full CUDA graphs. Use cudagraph "')),
    Conflict("--enable-lora", ("--enable-lora",), False, "Adaptive verification is not currently compatible with LoRA",
             SourceLine(_CONFIG, 3162, '"Adaptive verification is not currently compatible with LoRA"')),
    Conflict("--pipeline-parallel-size above 1", ("--pipeline-parallel-size", "-pp"), True,
             "Adaptive verification is not currently compatible with pipeline parallelism",
             SourceLine(_CONFIG, 3178, '"Adaptive verification is not currently compatible "')),
    Conflict("--enable-return-routed-experts", ("--enable-return-routed-experts",), False,
             "--enable-return-routed-experts is incompatible with adaptive speculative verification",
             SourceLine(_CONFIG, 1214, '"--enable-return-routed-experts is incompatible with "')),
    Conflict("--return-sampling-mask (sampling distribution replay)", ("--return-sampling-mask",), False,
             "sampling distribution replay with speculative decoding requires fixed verification boundaries",
             SourceLine(_CONFIG, 1317, '"requires fixed verification boundaries; disable adaptive "')),
)
# advanced.use_local_argmax_reduction: refused for every method but DSpark (vllm/config/speculative.py)
LOCAL_ARGMAX = Conflict("advanced.use_local_argmax_reduction", (), False,
                        "Adaptive verification estimates per-position acceptance from the draft logits, which "
                        "use_local_argmax_reduction never materializes",
                        SourceLine("vllm/config/speculative.py", 1719,
                                   '"Adaptive verification estimates per-position acceptance from "'))
LOCAL_ARGMAX_EXEMPT = ("dspark",)  # the method whose confidence head needs no draft logits (speculative.py:1714)


@dataclass(frozen=True)
class AdaptiveCost:
    """What running adaptive verification costs every step beyond the tokens it verifies (varlen decode
    graphs, the per-step budget on the host, the confidences copied back): a step-time factor."""

    step_time_factor: float
    source: str


# vllm#52362 (the ROCm port): -4.7% to -8.3% tokens/s against a fixed K = 7 at concurrency 4-32, where the
# rule verifies (nearly) every draft anyway -- so about 6% per step; +69.7% at 256. The only published
# figure; the simulator and the tuner's step model apply it.
ADAPTIVE_COST = AdaptiveCost(1.06, "vllm#52362 (ROCm, K = 7: -4.7% to -8.3% at concurrency 4-32)")


def verification_budget(scores: Sequence[float] | np.ndarray, sampling: float,
                        step_seconds: Callable[[np.ndarray], np.ndarray]) -> int:
    """How many drafted slots to verify: the n maximising (sampling + the n best scores) / step_seconds(n),
    where step_seconds maps an array of slot counts to the step's seconds with that many verified."""
    ordered = np.sort(np.asarray(scores, dtype=float))[::-1]
    tokens = np.concatenate(([float(sampling)], float(sampling) + np.cumsum(ordered)))
    seconds = np.asarray(step_seconds(np.arange(len(ordered) + 1)), dtype=float)
    return int(np.argmax(tokens / seconds))


def admitted(survival: np.ndarray, budget: int) -> np.ndarray:
    """Per request (rows), how many of its leading slots the budget admits: the `budget` highest survival
    probabilities over every slot. Survival only falls along a request, so each request's admitted
    slots are a prefix (ties go to the earlier request, as a stable sort keeps them)."""
    rows, width = survival.shape
    if budget <= 0 or rows == 0 or width == 0:
        return np.zeros(rows, dtype=int)
    order = np.argsort(-survival.reshape(-1), kind="stable")[:budget]
    counts = np.bincount(order // width, minlength=rows)
    return np.asarray(counts, dtype=int)
