"""Thin Prometheus sink: pushes a StepAccumulator's totals into prometheus_client metrics.

Counters are pushed as deltas on `flush()` (the plugin flushes at most once a second and on
vLLM's periodic `log()`), so a step costs the accumulator's integer adds plus one histogram
observation and one counter increment. Only public prometheus_client API is used, so the
same code works in vLLM's Prometheus multiprocess mode: with PROMETHEUS_MULTIPROC_DIR set
(vLLM sets it when --api-server-count > 1), prometheus_client backs every value with the
shared mmap files that vLLM's /metrics endpoint aggregates; without it, vLLM's /metrics
serves the default REGISTRY, where these families are registered.
"""

from __future__ import annotations

import weakref

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram

from specinfer.runtime.contract.telemetry.accumulator import StepAccumulator
from specinfer.runtime.contract.telemetry.series import (
    ACCEPTED_TOKENS_PER_POS,
    DRAFT_TOKENS_PER_POS,
    ENGINE_STEPS,
    STEP_DURATION,
    STEP_DURATION_BUCKETS,
    STEP_REQUESTS,
    Series,
    batch_size_labels,
)


class TelemetryFamilies:
    """The metric families of one registry; created once and shared by every exporter using it."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def counter(series: Series) -> Counter:
            return Counter(series.name, series.documentation, list(series.labels), registry=registry)

        self.draft_per_pos = counter(DRAFT_TOKENS_PER_POS)
        self.accepted_per_pos = counter(ACCEPTED_TOKENS_PER_POS)
        self.steps = counter(ENGINE_STEPS)
        self.step_requests = counter(STEP_REQUESTS)
        self.step_duration = Histogram(STEP_DURATION.name, STEP_DURATION.documentation, list(STEP_DURATION.labels),
                                       buckets=list(STEP_DURATION_BUCKETS), registry=registry)


# Registering a name twice in one registry raises, and vLLM may build its stat loggers more
# than once per process: families are kept per registry and reused (counters keep counting).
_FAMILIES: weakref.WeakKeyDictionary[CollectorRegistry, TelemetryFamilies] = weakref.WeakKeyDictionary()


def families_for(registry: CollectorRegistry | None = None) -> TelemetryFamilies:
    registry = REGISTRY if registry is None else registry
    families = _FAMILIES.get(registry)
    if families is None:
        families = _FAMILIES[registry] = TelemetryFamilies(registry)
    return families


class EngineExporter:
    """One engine's accumulator, exported under its (model_name, engine) labels."""

    def __init__(self, accumulator: StepAccumulator, *, model_name: str, engine: str,
                 registry: CollectorRegistry | None = None) -> None:
        self.accumulator = accumulator
        self.families = families_for(registry)
        self.labels = (model_name, engine)
        self._bucket_labels = batch_size_labels(accumulator.batch_edges)
        self._draft: list = []
        self._accepted: list = []
        self._steps: list = []
        self._flushed_draft: list[int] = []
        self._flushed_accepted: list[int] = []
        self._flushed_steps: list[int] = []
        self._cells: list[list] = []  # [k][bucket] -> (histogram child, requests child) or None
        self._bind()  # positions and K values of the config exist (at 0) from the start

    def _bind(self) -> None:
        """Create the children for positions / K values the accumulator has and we lack."""
        acc, families = self.accumulator, self.families
        for position in range(len(self._draft), acc.max_k):
            self._draft.append(families.draft_per_pos.labels(*self.labels, str(position)))
            self._accepted.append(families.accepted_per_pos.labels(*self.labels, str(position)))
            self._flushed_draft.append(0)
            self._flushed_accepted.append(0)
        for k in range(len(self._steps), len(acc.steps_by_k)):
            self._steps.append(families.steps.labels(*self.labels, str(k)))
            self._flushed_steps.append(0)
            self._cells.append([None] * len(self._bucket_labels))

    def _cell(self, k: int, bucket: int):
        if k >= len(self._cells):
            self._bind()
        cell = self._cells[k][bucket]
        if cell is None:  # first step of this (batch size bucket, K): created once, then reused
            values = (*self.labels, self._bucket_labels[bucket], str(k))
            cell = self._cells[k][bucket] = (self.families.step_duration.labels(*values),
                                            self.families.step_requests.labels(*values))
        return cell

    def observe_step(self) -> None:
        """Export the accumulator's latest timed step (call after record()/observe() returned True)."""
        acc = self.accumulator
        duration, requests = self._cell(acc.step_k, acc.step_bucket)
        duration.observe(acc.step_seconds)
        requests.inc(acc.step_batch_size)

    def flush(self) -> None:
        """Push the counters' growth since the last flush."""
        acc = self.accumulator
        if len(acc.steps_by_k) > len(self._steps):
            self._bind()
        _push(acc.draft_per_pos, self._flushed_draft, self._draft)
        _push(acc.accepted_per_pos, self._flushed_accepted, self._accepted)
        _push(acc.steps_by_k, self._flushed_steps, self._steps)


def _push(totals: list[int], flushed: list[int], children: list) -> None:
    for index, total in enumerate(totals):
        delta = total - flushed[index]
        if delta:
            children[index].inc(delta)
            flushed[index] = total
