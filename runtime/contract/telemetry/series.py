"""The `specinfer:` series: names, labels and buckets, in one place.

The vLLM stat-logger plugin and the simulator both export these, and docs/metrics.md and
the tuning loop query them, so every string lives here and nowhere else. Labels
`model_name` / `engine` are vLLM's own (vllm/v1/metrics/loggers.py), so a `specinfer:`
series divides cleanly by the matching `vllm:` series. Counters are exposed by
prometheus_client with a `_total` suffix, histograms as `_bucket` / `_sum` / `_count`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

PREFIX = "specinfer:"

LABEL_MODEL_NAME = "model_name"
LABEL_ENGINE = "engine"
LABELS = (LABEL_MODEL_NAME, LABEL_ENGINE)
LABEL_POSITION = "position"          # "0" .. str(K - 1), as vLLM's per-position counter
LABEL_K = "k"                        # effective K of a step: draft positions it verified, "0" = none
LABEL_BATCH_SIZE = "batch_size"      # batch-size bucket of a step: "4", "5-6", ..., "1025+"


@dataclass(frozen=True)
class Series:
    name: str                         # as passed to prometheus_client
    kind: Literal["counter", "histogram", "gauge"]
    labels: tuple[str, ...]
    documentation: str

    @property
    def promql(self) -> str:
        """The name to use in PromQL (`_total` for counters, the base name for histograms)."""
        return f"{self.name}_total" if self.kind == "counter" else self.name


DRAFT_TOKENS_PER_POS = Series(
    f"{PREFIX}spec_decode_num_draft_tokens_per_pos", "counter", (*LABELS, LABEL_POSITION),
    "Draft tokens proposed per draft position (the denominator of per-position acceptance).")
ACCEPTED_TOKENS_PER_POS = Series(
    f"{PREFIX}spec_decode_num_accepted_tokens_per_pos", "counter", (*LABELS, LABEL_POSITION),
    "Draft tokens accepted per draft position (same counts as vLLM's series, flushed with the denominators).")
ENGINE_STEPS = Series(
    f"{PREFIX}engine_steps", "counter", (*LABELS, LABEL_K),
    "Engine steps by effective K (draft positions verified in the step; 0 = no drafts verified).")
STEP_DURATION = Series(
    f"{PREFIX}engine_step_duration_seconds", "histogram", (*LABELS, LABEL_BATCH_SIZE, LABEL_K),
    "Engine step period by batch-size bucket and effective K (the shortest inter-token latency of the step).")
STEP_REQUESTS = Series(
    f"{PREFIX}engine_step_requests", "counter", (*LABELS, LABEL_BATCH_SIZE, LABEL_K),
    "Sum of the batch size over the timed steps; divided by the histogram's _count it is the mean batch size.")

LABEL_DIGEST = "digest"  # the published schedule's digest (runtime/contract/live_schedule/published.py)
LABEL_SCHEDULE = "schedule"  # the same schedule, readable: "1-4:3,5-65536:1"
LABEL_REASON = "reason"  # why a published schedule was refused: missing, unreadable, invalid, aboveMaxK, ...

# Engines retuned in place (runtime/pod/live_schedule/): what the engine runs, not what was published.
LIVE_SCHEDULE_INFO = Series(
    f"{PREFIX}live_schedule_info", "gauge", (*LABELS, LABEL_DIGEST, LABEL_SCHEDULE),
    "1 for the Dynamic SD schedule the engine's scheduler runs now (one series per engine).")
LIVE_SCHEDULE_APPLIED = Series(
    f"{PREFIX}live_schedule_applied_timestamp_seconds", "gauge", LABELS,
    "Unix time at which the schedule in force took effect in the engine.")
LIVE_SCHEDULE_ERRORS = Series(
    f"{PREFIX}live_schedule_errors", "counter", (*LABELS, LABEL_REASON),
    "Published schedules the engine did not take (it keeps the last good one), by reason.")
LIVE_SERIES = (LIVE_SCHEDULE_INFO, LIVE_SCHEDULE_APPLIED, LIVE_SCHEDULE_ERRORS)

ALL_SERIES = (DRAFT_TOKENS_PER_POS, ACCEPTED_TOKENS_PER_POS, ENGINE_STEPS, STEP_DURATION, STEP_REQUESTS,
              *LIVE_SERIES)

# Upper edges (inclusive) of the batch-size buckets; above the last edge is one open bucket.
# Fine where the goodput-optimal K changes fastest (small batches), coarser beyond.
BATCH_SIZE_EDGES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)

# Step period buckets in seconds: a few ms (small model, batch 1) to seconds (huge batches).
STEP_DURATION_BUCKETS = (0.0025, 0.005, 0.0075, 0.01, 0.0125, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05,
                         0.06, 0.08, 0.1, 0.125, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5)


def batch_size_labels(edges: tuple[int, ...] = BATCH_SIZE_EDGES) -> list[str]:
    """Label value of each bucket: "4" (one size), "5-6" (a range), "1025+" (the open bucket)."""
    labels = []
    low = 1
    for edge in edges:
        labels.append(str(edge) if edge == low else f"{low}-{edge}")
        low = edge + 1
    labels.append(f"{low}+")
    return labels


def batch_size_range(label: str) -> tuple[int, int | None]:
    """Inverse of batch_size_labels for one value: (lowest, highest or None for the open bucket)."""
    if label.endswith("+"):
        return int(label[:-1]), None
    low, _, high = label.partition("-")
    return int(low), int(high or low)


def bucket_lookup(edges: tuple[int, ...] = BATCH_SIZE_EDGES) -> list[int]:
    """Bucket index for every batch size 0..edges[-1] (0 counts as 1); larger sizes use len(edges)."""
    table = [0] * (edges[-1] + 1)
    index = 0
    for size in range(1, edges[-1] + 1):
        while size > edges[index]:
            index += 1
        table[size] = index
    return table
