"""Turns one engine step's stats into counter increments. Pure: no prometheus_client, no vLLM.

It runs on vLLM's output path once per engine step, so it only adds ints into lists sized
up front and keeps the latest step's figures in attributes: no per-step containers are
built or retained; an exporter reads the totals.

What one step contributes (vLLM 0.33.0 semantics, see docs/metrics.md):
- per-position draft / accepted counts: SpecDecodingStats.num_draft_tokens_per_pos and
  num_accepted_tokens_per_pos, summed over the step's requests by the scheduler;
- effective K: how many positions have a non-zero draft count (the longest draft verified
  in the step; 0 when the step verified none -- spec_decoding_stats is None);
- step time: the shortest IterationStats.inter_token_latencies_iter of the step. Each value
  is engine-core time between a request's previous output and this one; a request that was
  also in the previous step waited exactly one step period, anyone else waited longer, so
  the minimum is this step's period. Steps without a decoding request have no sample.
- batch size: max(SchedulerStats.num_running_reqs, requests with output this step).
  num_running_reqs is counted after the step (finished requests already left); requests with
  output include those that just finished, so the larger of the two is the step's batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from specinfer.runtime.contract.telemetry.series import BATCH_SIZE_EDGES, bucket_lookup


# The fields of vLLM's stats objects read here (vllm/v1/metrics/stats.py, vllm/v1/spec_decode/metrics.py).
class SpecDecodingStatsLike(Protocol):
    num_draft_tokens_per_pos: list[int]
    num_accepted_tokens_per_pos: list[int]


class SchedulerStatsLike(Protocol):
    num_running_reqs: int
    spec_decoding_stats: SpecDecodingStatsLike | None


class IterationStatsLike(Protocol):
    inter_token_latencies_iter: list[float]
    time_to_first_tokens_iter: list[float]


class StepAccumulator:
    """Cumulative per-engine totals; `record` adds one step, `observe` is the stats-free form."""

    def __init__(self, max_k: int = 0, batch_edges: tuple[int, ...] = BATCH_SIZE_EDGES) -> None:
        self.draft_per_pos: list[int] = [0] * max_k
        self.accepted_per_pos: list[int] = [0] * max_k
        self.steps_by_k: list[int] = [0] * (max_k + 1)
        self.batch_edges = batch_edges
        self._bucket_of = bucket_lookup(batch_edges)
        self._open_bucket = len(batch_edges)
        # The latest timed step (valid after record()/observe() returned True).
        self.step_seconds = 0.0
        self.step_batch_size = 0
        self.step_bucket = 0
        self.step_k = 0

    @property
    def max_k(self) -> int:
        return len(self.draft_per_pos)

    def _grow(self, k: int) -> None:
        """More positions than configured (rare: sized from the config); extend once."""
        extra = k - len(self.draft_per_pos)
        self.draft_per_pos.extend([0] * extra)
        self.accepted_per_pos.extend([0] * extra)
        self.steps_by_k.extend([0] * extra)

    def bucket(self, batch_size: int) -> int:
        return self._bucket_of[batch_size] if batch_size < len(self._bucket_of) else self._open_bucket

    def record(self, scheduler_stats: SchedulerStatsLike | None, iteration_stats: IterationStatsLike | None) -> bool:
        """Add one step from vLLM's SchedulerStats / IterationStats; True when it yielded a step time."""
        if scheduler_stats is None:
            return False  # K unknown (stats go to one API server only): nothing to attribute
        spec = scheduler_stats.spec_decoding_stats
        k = 0 if spec is None else self._add_drafts(spec.num_draft_tokens_per_pos, spec.num_accepted_tokens_per_pos)
        self.steps_by_k[k] += 1
        if iteration_stats is None:
            return False
        return self._timed(k, scheduler_stats.num_running_reqs, iteration_stats.inter_token_latencies_iter,
                           iteration_stats.time_to_first_tokens_iter)

    def observe(self, *, running: int, draft_per_pos: Sequence[int], accepted_per_pos: Sequence[int],
                inter_token_latencies: Sequence[float], time_to_first_tokens: Sequence[float]) -> bool:
        """Add one step from plain values (the simulator's StepStats); the same rules as record()."""
        k = self._add_drafts(draft_per_pos, accepted_per_pos)
        self.steps_by_k[k] += 1
        return self._timed(k, running, inter_token_latencies, time_to_first_tokens)

    def _add_drafts(self, drafts: Sequence[int], accepted: Sequence[int]) -> int:
        """Add per-position counts; return the effective K (positions with a non-zero draft count)."""
        if len(drafts) > len(self.draft_per_pos):
            self._grow(len(drafts))
        draft_per_pos = self.draft_per_pos
        accepted_per_pos = self.accepted_per_pos
        k = 0
        for position, count in enumerate(drafts):
            if not count:
                break  # prefix counts: a request drafting n tokens fills positions 0..n-1
            draft_per_pos[position] += count
            accepted_per_pos[position] += accepted[position]
            k = position + 1
        return k

    def _timed(self, k: int, running: int, inter_token_latencies: Sequence[float],
               time_to_first_tokens: Sequence[float]) -> bool:
        """Keep the step's period and batch size; False when no request decoded (no period to read)."""
        if not inter_token_latencies:
            return False
        batch_size = len(inter_token_latencies) + len(time_to_first_tokens)
        if running > batch_size:
            batch_size = running
        self.step_seconds = min(inter_token_latencies)
        self.step_batch_size = batch_size
        self.step_bucket = self.bucket(batch_size)
        self.step_k = k
        return True
