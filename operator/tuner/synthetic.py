"""Observations built from known engine truth, with counter and timing noise.

The benchmark's closed loop and the policy's tests both need observations whose ground truth is
known: acceptance per position, step time T(B, K), the batch-size mix. This builds exactly the
dict the tuning loop builds from Prometheus -- with our plugin's unbiased series
(`signals="specinfer"`) or only vLLM's standard ones (`signals="vllm"`) -- so the policy is
exercised through its public interface. Pure: randomness comes from the caller's Random.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence

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
    signals: str = "specinfer",
    rng: random.Random | None = None,
    timing_noise: float = 0.0,
    busy_fraction: float = 1.0,
    scrape_age: float = 0.0,
    rollout_in_progress: bool = False,
    per_token_p99_seconds: float | None = None,
    ttft_p99_seconds: float | None = None,
) -> dict:
    """One window's observation dict. `batch_sizes` maps batch size -> fraction of engine time.

    `busy_fraction` is the share of the window the engine was decoding (restarts, idle time).
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
        seconds = step_time(size, k)
        steps = window_seconds * busy_fraction * (fraction / total_fraction) / seconds
        seq_steps = steps * size
        sequence_steps += seq_steps
        busy_sequence_seconds += seq_steps * seconds
        step_tokens = 1.0
        if k > 0:
            drafts += seq_steps
            for i in range(k):
                drafts_per_pos[i] += seq_steps
                accepted = _count(rng, seq_steps, prefix[i] if i < len(prefix) else 0.0)
                accepted_per_pos[i] += accepted
            step_tokens += sum(prefix[:k])
        tokens += seq_steps * step_tokens
        samples.append({"batchSize": size, "k": k, "count": round(steps, 3),
                        "meanSeconds": seconds * _jitter(rng, timing_noise)})
    # Prefix acceptance is nested: the sampled counts must not rise with position.
    for i in range(1, positions):
        accepted_per_pos[i] = min(accepted_per_pos[i], accepted_per_pos[i - 1])
    mean_step = busy_sequence_seconds / sequence_steps if sequence_steps else 0.0
    distribution = [[size, fraction / total_fraction] for size, fraction in sorted(batch_sizes.items()) if fraction > 0]
    mean_batch = sum(size * fraction for size, fraction in distribution)
    observation = {
        "time": time,
        "windowSeconds": window_seconds,
        "scrapeTime": time - scrape_age,
        "rolloutInProgress": rollout_in_progress,
        "applied": {"method": method, "numSpeculativeTokens": k_top,
                    "schedule": [list(e) for e in schedule] if schedule else None, "since": applied_since},
        "acceptance": {"drafts": drafts, "acceptedPerPosition": accepted_per_pos if k_top else []},
        "steps": {"count": sequence_steps, "meanSeconds": mean_step * _jitter(rng, timing_noise),
                  "generatedTokens": tokens},
        "batchSize": {"mean": mean_batch, "distribution": distribution},
        "latency": {"perTokenP99Seconds": per_token_p99_seconds, "ttftP99Seconds": ttft_p99_seconds},
    }
    if signals == "specinfer":
        observation["acceptance"]["draftsPerPosition"] = drafts_per_pos if k_top else []
        observation["steps"]["byBatchSize"] = samples
    return observation
