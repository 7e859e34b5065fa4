"""The Prometheus sink: deltas on flush, lazily created step cells, shared families, multiprocess mode."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, multiprocess, values

from specinfer.runtime.contract.telemetry.accumulator import StepAccumulator
from specinfer.runtime.contract.telemetry.series import (
    ACCEPTED_TOKENS_PER_POS,
    DRAFT_TOKENS_PER_POS,
    ENGINE_STEPS,
    STEP_DURATION,
    STEP_REQUESTS,
)
from specinfer.runtime.pod.telemetry.prometheus_sink import EngineExporter

pytestmark = pytest.mark.unit

LABELS = {"model_name": "llama", "engine": "0"}


def step(exporter: EngineExporter, *, batch_size: int, drafts: list[int], accepted: list[int], seconds: float):
    if exporter.accumulator.observe(running=batch_size, draft_per_pos=drafts, accepted_per_pos=accepted,
                                    inter_token_latencies=[seconds], time_to_first_tokens=[]):
        exporter.observe_step()


def value(registry: CollectorRegistry, name: str, **labels) -> float | None:
    return registry.get_sample_value(name, {**LABELS, **labels})


def test_counters_are_pushed_as_deltas_on_flush():
    registry = CollectorRegistry()
    exporter = EngineExporter(StepAccumulator(max_k=2), model_name="llama", engine="0", registry=registry)
    draft = DRAFT_TOKENS_PER_POS.promql
    assert value(registry, draft, position="1") == 0.0  # configured positions exist from the start
    step(exporter, batch_size=3, drafts=[3, 3], accepted=[2, 1], seconds=0.02)
    assert value(registry, draft, position="0") == 0.0  # not flushed yet
    exporter.flush()
    exporter.flush()  # a second flush adds nothing
    assert value(registry, draft, position="0") == 3.0
    assert value(registry, ACCEPTED_TOKENS_PER_POS.promql, position="1") == 1.0
    step(exporter, batch_size=3, drafts=[3, 0], accepted=[3, 0], seconds=0.02)
    exporter.flush()
    assert value(registry, draft, position="0") == 6.0
    assert value(registry, draft, position="1") == 3.0
    assert value(registry, ENGINE_STEPS.promql, k="2") == 1.0
    assert value(registry, ENGINE_STEPS.promql, k="1") == 1.0


def test_step_histogram_and_mean_batch_size_per_cell():
    registry = CollectorRegistry()
    exporter = EngineExporter(StepAccumulator(max_k=3), model_name="llama", engine="0", registry=registry)
    for batch_size, seconds in ((5, 0.03), (6, 0.05), (40, 0.2)):
        step(exporter, batch_size=batch_size, drafts=[batch_size] * 3, accepted=[0] * 3, seconds=seconds)
    cell = {"batch_size": "5-6", "k": "3"}
    assert value(registry, f"{STEP_DURATION.name}_count", **cell) == 2.0
    assert value(registry, f"{STEP_DURATION.name}_sum", **cell) == pytest.approx(0.08)
    assert value(registry, f"{STEP_DURATION.name}_bucket", le="0.04", **cell) == 1.0
    assert value(registry, STEP_REQUESTS.promql, **cell) == 11.0  # mean batch size 5.5
    assert value(registry, f"{STEP_DURATION.name}_count", batch_size="33-48", k="3") == 1.0
    assert value(registry, f"{STEP_DURATION.name}_count", batch_size="1", k="3") is None  # never seen: not exported


def test_exporters_share_families_per_registry_and_keep_counting():
    registry = CollectorRegistry()
    first = EngineExporter(StepAccumulator(max_k=1), model_name="llama", engine="0", registry=registry)
    step(first, batch_size=1, drafts=[1], accepted=[1], seconds=0.01)
    first.flush()
    # vLLM may build its stat loggers again in the same process: no duplicate-registration error
    second = EngineExporter(StepAccumulator(max_k=1), model_name="llama", engine="0", registry=registry)
    other_engine = EngineExporter(StepAccumulator(max_k=1), model_name="llama", engine="1", registry=registry)
    step(second, batch_size=1, drafts=[1], accepted=[0], seconds=0.01)
    step(other_engine, batch_size=1, drafts=[1], accepted=[1], seconds=0.01)
    second.flush()
    other_engine.flush()
    assert value(registry, DRAFT_TOKENS_PER_POS.promql, position="0") == 2.0
    assert registry.get_sample_value(DRAFT_TOKENS_PER_POS.promql,
                                     {"model_name": "llama", "engine": "1", "position": "0"}) == 1.0


def test_series_reach_a_multiprocess_registry_like_vllms_metrics(tmp_path, monkeypatch):
    """vLLM with --api-server-count > 1: values go to PROMETHEUS_MULTIPROC_DIR, /metrics merges the files."""
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    monkeypatch.setattr(values, "ValueClass", values.MultiProcessValue())  # what the import does with the env set
    exporter = EngineExporter(StepAccumulator(max_k=2), model_name="llama", engine="0",
                              registry=CollectorRegistry())  # the registry a process registers in is not served
    step(exporter, batch_size=2, drafts=[2, 1], accepted=[1, 1], seconds=0.03)
    exporter.flush()
    served = CollectorRegistry()  # vllm/v1/metrics/prometheus.py: get_prometheus_registry()
    multiprocess.MultiProcessCollector(served)
    assert served.get_sample_value(DRAFT_TOKENS_PER_POS.promql, {**LABELS, "position": "1"}) == 1.0
    assert served.get_sample_value(f"{STEP_DURATION.name}_count", {**LABELS, "batch_size": "2", "k": "2"}) == 1.0
    assert served.get_sample_value(STEP_REQUESTS.promql, {**LABELS, "batch_size": "2", "k": "2"}) == 2.0
