"""Observations built from known engine truth, with counter and timing noise.

The benchmark's closed loop and the policy's tests both need observations whose ground truth is
known: acceptance per position, step time T(B, K), the batch-size mix. This builds the same
`Observation` the tuning loop builds from Prometheus (operator/tuner/pure/observe.py) -- with our
plugin's unbiased series (`signals="specinfer"`) or only vLLM's standard ones (`signals="vllm"`) --
so the policy is exercised through its public interface. Pure: randomness comes from the caller's
Random.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence

from specinfer.operator.tuner.policy import AppliedConfig, DraftConfig, Observation, StepSample
from specinfer.runtime.methods.schedule import effective_k

StepTime = Callable[[int, int], float]


def _count(rng: random.Random | None, n: float, p: float) -> float:
    """Binomial(n, p) by its normal approximation (n is large in any window worth reading)."""
    mean = n * p
    if rng is None or n <= 0:
        return mean
    spread = math.sqrt(max(n * p * (1 - p), 0.0))
    return min(n, max(0.0, rng.gauss(mean, spread)))


def _jitter(rng: random.Random | None, noise: float) -> float:
    return 1.0 if rng is None or noise <= 0 else math.exp(rng.gauss(0.0, noise))


def synthetic_observation(
    *,
    time: float,
    window_seconds: float,
    method: str,
    num_speculative_tokens: int,
    schedule: Sequence[Sequence[int]] | None,
    applied_since: float,
    batch_sizes: Mapping[int, float],
    prefix: Sequence[float],
    step_time: StepTime,
    accepted: Callable[[int, int], Sequence[float]] | None = None,
    adaptive_verification: bool = False,
    signals: str = "specinfer",
    rng: random.Random | None = None,
    timing_noise: float = 0.0,
    busy_fraction: float = 1.0,
    scrape_age: float = 0.0,
    rollout_in_progress: bool = False,
    per_token_p99_seconds: float | None = None,
    ttft_p99_seconds: float | None = None,
    prompt_per_generated: float | None = None,
    prefill_per_token: float = 0.0,
) -> Observation:
    """One window's observation. `batch_sizes` maps batch size -> fraction of engine time.

    `busy_fraction` is the share of the window the engine was decoding (restarts, idle time).
    `accepted(b, K)`: the chance a request's draft at each position is accepted in a step (default `prefix`);
    with vLLM's adaptive verification a draft it did not verify counts as drafted and rejected
    (vllm/v1/core/sched/scheduler.py), as vLLM's counters and the plugin's count it.
    `prompt_per_generated`: the load's prompt tokens per generated token, reported as vLLM's prompt-token
    counter does; each step then also prefills that many per token it generates, at `prefill_per_token`
    seconds each (vLLM schedules a new request's prefill beside the running decodes). None: not reported.
    """
    total_fraction = sum(batch_sizes.values()) or 1.0
    k_top = num_speculative_tokens
    positions = k_top
    drafts = 0.0
    drafts_per_pos = [0.0] * positions
    accepted_per_pos = [0.0] * positions
    sequence_steps = 0.0
    busy_sequence_seconds = 0.0
    tokens = 0.0
    samples = []
    for size, fraction in sorted(batch_sizes.items()):
        if fraction <= 0 or size <= 0:
            continue
        k = effective_k(size, k_top, schedule)
        chances = (list(accepted(size, k)) if accepted is not None else list(prefix[:k])) if k > 0 else []
        step_tokens = 1.0 + sum(chances[:k])
        seconds = step_time(size, k) + prefill_per_token * (prompt_per_generated or 0.0) * size * step_tokens
        steps = window_seconds * busy_fraction * (fraction / total_fraction) / seconds
        seq_steps = steps * size
        sequence_steps += seq_steps
        busy_sequence_seconds += seq_steps * seconds
        if k > 0:
            drafts += seq_steps
            for i in range(k):
                drafts_per_pos[i] += seq_steps
                accepted_per_pos[i] += _count(rng, seq_steps, chances[i] if i < len(chances) else 0.0)
        tokens += seq_steps * step_tokens
        samples.append(StepSample(batch_size=float(size), k=k, count=round(steps, 3),
                                  mean_seconds=seconds * _jitter(rng, timing_noise)))
    # Prefix acceptance is nested: the sampled counts must not rise with position.
    for i in range(1, positions):
        accepted_per_pos[i] = min(accepted_per_pos[i], accepted_per_pos[i - 1])
    mean_step = busy_sequence_seconds / sequence_steps if sequence_steps else 0.0
    distribution = tuple((size, fraction / total_fraction) for size, fraction in sorted(batch_sizes.items())
                         if fraction > 0)
    plugin = signals == "specinfer"
    return Observation(
        time=time,
        window_seconds=window_seconds,
        scrape_time=time - scrape_age,
        rollout_in_progress=rollout_in_progress,
        applied=AppliedConfig(method=method, config=DraftConfig(num_speculative_tokens=k_top,
                                                                schedule=tuple(map(tuple, schedule or ())) or None,
                                                                adaptive_verification=adaptive_verification),
                              since=applied_since),
        drafts=drafts,
        accepted_per_position=tuple(accepted_per_pos) if k_top else (),
        drafts_per_position=(tuple(drafts_per_pos) if k_top else ()) if plugin else None,
        sequence_steps=sequence_steps,
        step_mean_seconds=mean_step * _jitter(rng, timing_noise),
        generated_tokens=tokens,
        step_samples=tuple(samples) if plugin else None,
        batch_size_mean=sum(size * fraction for size, fraction in distribution),
        batch_size_distribution=distribution,
        per_token_p99_seconds=per_token_p99_seconds,
        ttft_p99_seconds=ttft_p99_seconds,
        prompt_tokens=None if prompt_per_generated is None else prompt_per_generated * tokens,
    )
