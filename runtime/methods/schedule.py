"""vLLM's Dynamic SD batch-size schedule (`num_speculative_tokens_per_batch_size`).

Mirrors the semantics of vllm/v1/spec_decode/dynamic/utils.py in vLLM 0.33.0
(a contract test compares the two): inclusive `[start, end, K]` ranges, the first
starting at 1; gaps inherit the previous range's K; batch sizes past the last
range inherit the last K; every K is capped by `num_speculative_tokens`; K = 0
means "no drafting at this batch size". The simulator, the tuner and validation
share this one implementation.
"""

from __future__ import annotations

from collections.abc import Sequence

ScheduleEntry = tuple[int, int, int]
Schedule = list[ScheduleEntry]


class ScheduleError(ValueError):
    """A schedule vLLM would refuse (or that our API refuses as ambiguous)."""


def schedule_problems(schedule: Sequence[Sequence[int]], num_speculative_tokens: int) -> list[str]:
    """Every reason this schedule is invalid, as sentences naming the fix; empty when valid.

    Stricter than vLLM in one way: vLLM silently sorts the ranges, we ask the
    author to write them sorted so the resource reads the way the engine runs.
    """
    problems: list[str] = []
    if not schedule:
        return ["the schedule must have at least one [start, end, K] range"]
    previous_end = 0
    for index, entry in enumerate(schedule):
        if len(entry) != 3:
            problems.append(f"range {index} must be [start, end, K], got {list(entry)}")
            continue
        start, end, k = (int(value) for value in entry)
        if start <= 0 or end <= 0:
            problems.append(f"range {index} ({start}-{end}): batch sizes start at 1")
        if start > end:
            problems.append(f"range {index} ({start}-{end}): start must be <= end")
        if k < 0:
            problems.append(f"range {index}: K must be >= 0 (0 turns drafting off), got {k}")
        if k > num_speculative_tokens:
            problems.append(
                f"range {index}: K={k} exceeds numSpeculativeTokens={num_speculative_tokens}; "
                "raise numSpeculativeTokens or lower K"
            )
        if index == 0 and start != 1:
            problems.append(f"the first range must start at batch size 1, not {start}")
        if index > 0 and start <= previous_end:
            problems.append(
                f"range {index} ({start}-{end}) overlaps or precedes the range ending at {previous_end}; "
                "ranges must be sorted and non-overlapping"
            )
        previous_end = max(previous_end, end)
    return problems


def dense_schedule(schedule: Sequence[Sequence[int]], num_speculative_tokens: int, max_batch_size: int) -> list[int]:
    """Index b -> K used at batch size b (index 0 unused), exactly as vLLM expands it."""
    problems = schedule_problems(schedule, num_speculative_tokens)
    if problems:
        raise ScheduleError("; ".join(problems))
    if max_batch_size <= 0:
        raise ScheduleError("max_batch_size must be > 0")
    lookup = [0] * (max_batch_size + 1)
    next_batch_size = 1
    last_k: int | None = None
    for start, end, k in schedule:
        if start > next_batch_size and last_k is not None:
            for batch_size in range(next_batch_size, min(start, max_batch_size + 1)):
                lookup[batch_size] = min(num_speculative_tokens, last_k)
        for batch_size in range(max(start, next_batch_size), min(end, max_batch_size) + 1):
            lookup[batch_size] = min(num_speculative_tokens, k)
        next_batch_size = max(next_batch_size, end + 1)
        last_k = k
        if next_batch_size > max_batch_size:
            break
    assert last_k is not None  # schedule_problems refused an empty schedule
    for batch_size in range(next_batch_size, max_batch_size + 1):
        lookup[batch_size] = min(num_speculative_tokens, last_k)
    return lookup


def effective_k(batch_size: int, num_speculative_tokens: int, schedule: Sequence[Sequence[int]] | None) -> int:
    """Draft length the engine uses at `batch_size` (no schedule: always num_speculative_tokens)."""
    if batch_size <= 0 or num_speculative_tokens <= 0:
        return 0
    if not schedule:
        return num_speculative_tokens
    k = num_speculative_tokens
    last_k = None
    for start, end, range_k in schedule:
        if batch_size < start:
            break  # in a gap: inherit the previous range's K
        last_k = range_k
        if batch_size <= end:
            break
    if last_k is not None:
        k = min(num_speculative_tokens, last_k)
    return k


def compress(ks_by_batch_size: Sequence[int]) -> Schedule:
    """Turn a dense list (index 0 unused) into the shortest equivalent list of ranges."""
    schedule: Schedule = []
    for batch_size in range(1, len(ks_by_batch_size)):
        k = ks_by_batch_size[batch_size]
        if schedule and schedule[-1][2] == k:
            schedule[-1] = (schedule[-1][0], batch_size, k)
        else:
            schedule.append((batch_size, batch_size, k))
    return schedule
