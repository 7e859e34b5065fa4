"""The vLLM stat-logger plugin, loaded by vLLM 0.33.0's own plugin loader (from the cached wheel)."""

from __future__ import annotations

import dataclasses
import logging
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry

from specinfer.bench.wheel_stats import StepRequest, build_step, vllm_from_wheel
from specinfer.runtime.contract.telemetry.series import DRAFT_TOKENS_PER_POS, ENGINE_STEPS, STEP_DURATION
from specinfer.runtime.pod.telemetry.fields import ENTRY_POINT_NAME, version_problem

pytestmark = [pytest.mark.unit, pytest.mark.wheel]  # vLLM's stats classes, executed from the pinned wheel

PLUGIN_LOGGER = "vllm.specinfer.telemetry"


def vllm_config(model: str = "llama", k: int | None = 3):
    speculative = None if k is None else SimpleNamespace(num_speculative_tokens=k)
    return SimpleNamespace(model_config=SimpleNamespace(served_model_name=model), speculative_config=speculative)


@pytest.fixture
def vllm_modules():
    with vllm_from_wheel() as modules:
        yield modules


@pytest.fixture
def plugin_class(vllm_modules):
    from vllm.v1.metrics.loggers import load_stat_logger_plugin_factories

    factories = load_stat_logger_plugin_factories()  # vLLM's loader: entry point + StatLoggerBase check
    assert [factory.__name__ for factory in factories] == ["SpecinferStatLogger"]
    return factories[0]


def test_vllm_plugins_allow_list_selects_the_plugin_by_name():
    for allowed, expected in (([ENTRY_POINT_NAME], 1), (["some-other-plugin"], 0)):
        with vllm_from_wheel(plugins=allowed):
            from vllm.v1.metrics.loggers import load_stat_logger_plugin_factories

            assert len(load_stat_logger_plugin_factories()) == expected


def test_records_steps_per_engine_under_vllms_labels(plugin_class):
    registry = CollectorRegistry()
    plugin = plugin_class(vllm_config(), [0, 1], registry=registry)
    assert not plugin.disabled
    plugin.log_engine_initialized()
    for engine, accepted in ((0, 2), (1, 0)):
        requests = [StepRequest(drafted=3, accepted=accepted, last_output=1.0) for _ in range(4)]
        scheduler_stats, iteration_stats = build_step(requests, now=1.025, num_spec_tokens=3)
        plugin.record(scheduler_stats, iteration_stats, engine_idx=engine)
    plugin.log()  # vLLM calls it every VLLM_LOG_STATS_INTERVAL: flushes the counters
    labels = {"model_name": "llama", "engine": "1"}
    assert registry.get_sample_value(DRAFT_TOKENS_PER_POS.promql, {**labels, "position": "2"}) == 4.0
    assert registry.get_sample_value(ENGINE_STEPS.promql, {**labels, "k": "3"}) == 1.0
    assert registry.get_sample_value(f"{STEP_DURATION.name}_sum",
                                     {**labels, "batch_size": "4", "k": "3"}) == pytest.approx(0.025)
    # an engine index it was not built for is ignored, not an error
    plugin.record(scheduler_stats, iteration_stats, engine_idx=7)
    assert not plugin.disabled


def test_without_speculation_it_still_times_steps_at_k0(plugin_class):
    registry = CollectorRegistry()
    plugin = plugin_class(vllm_config(k=None), [0], registry=registry)
    plugin.record(*build_step([StepRequest(last_output=0.0)] * 2, now=0.01, num_spec_tokens=0))
    plugin.log()
    labels = {"model_name": "llama", "engine": "0"}
    assert registry.get_sample_value(ENGINE_STEPS.promql, {**labels, "k": "0"}) == 1.0
    assert registry.get_sample_value(f"{STEP_DURATION.name}_count", {**labels, "batch_size": "2", "k": "0"}) == 1.0


def test_a_failure_disables_the_plugin_and_logs_once(plugin_class, caplog):
    plugin = plugin_class(vllm_config(), [0], registry=CollectorRegistry())
    broken = SimpleNamespace(spec_decoding_stats=SimpleNamespace(num_draft_tokens_per_pos=None))
    with caplog.at_level(logging.ERROR, logger=PLUGIN_LOGGER):
        plugin.record(broken, None)  # raises inside: must not reach vLLM
        plugin.record(broken, None)
        plugin.log()
    assert plugin.disabled
    errors = [record for record in caplog.records if record.name == PLUGIN_LOGGER]
    assert len(errors) == 1
    assert "disabled" in errors[0].getMessage() and errors[0].exc_info


def test_a_broken_config_disables_instead_of_raising(plugin_class, caplog):
    class Exploding:
        @property
        def model_config(self):
            raise RuntimeError("boom")

    with caplog.at_level(logging.ERROR, logger=PLUGIN_LOGGER):
        plugin = plugin_class(Exploding(), [0], registry=CollectorRegistry())
    assert plugin.disabled
    plugin.record(None, None)
    plugin.log()
    assert len([r for r in caplog.records if r.name == PLUGIN_LOGGER]) == 1


def test_missing_stats_fields_are_named_and_disable_the_plugin(plugin_class, vllm_modules, monkeypatch, caplog):
    stats = vllm_modules["vllm.v1.metrics.stats"]
    renamed = dataclasses.make_dataclass("SchedulerStats", [("num_running_requests", int, 0),
                                                            ("spec_decoding_stats", object, None)])
    monkeypatch.setattr(stats, "SchedulerStats", renamed)
    with caplog.at_level(logging.ERROR, logger=PLUGIN_LOGGER):
        plugin = plugin_class(vllm_config(), [0], registry=CollectorRegistry())
    assert plugin.disabled
    message = " ".join(record.getMessage() for record in caplog.records if record.name == PLUGIN_LOGGER)
    assert "SchedulerStats.num_running_reqs" in message and "vllm/v1/metrics/stats.py" in message


def test_another_vllm_version_warns_but_runs(plugin_class, vllm_modules, monkeypatch, caplog):
    monkeypatch.setattr(vllm_modules["vllm"], "__version__", "0.34.1")
    with caplog.at_level(logging.WARNING, logger=PLUGIN_LOGGER):
        plugin = plugin_class(vllm_config(), [0], registry=CollectorRegistry())
    assert not plugin.disabled
    assert any("0.34.1" in record.getMessage() for record in caplog.records if record.name == PLUGIN_LOGGER)


def test_version_problem():
    assert version_problem("0.33.0") is None
    assert version_problem("0.33.2") is None
    assert "0.34.0" in version_problem("0.34.0")


def test_recording_retains_no_memory_per_step(plugin_class):
    """Steady state: thousands of steps leave nothing behind (no per-step lists, no new children)."""
    import tracemalloc

    plugin = plugin_class(vllm_config(k=4), [0], registry=CollectorRegistry())
    steps = [build_step([StepRequest(drafted=4, accepted=index % 5, last_output=index * 0.02)
                         for index in range(8)], now=index * 0.02 + 0.02, num_spec_tokens=4) for index in range(50)]
    for scheduler_stats, iteration_stats in steps:  # warm-up creates the histogram cell once
        plugin.record(scheduler_stats, iteration_stats)
    plugin.log()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for _ in range(100):
            for scheduler_stats, iteration_stats in steps:
                plugin.record(scheduler_stats, iteration_stats)
        plugin.log()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    retained = sum(stat.size_diff for stat in after.compare_to(before, "filename")
                   if "telemetry" in stat.traceback[0].filename or "prometheus_client" in stat.traceback[0].filename)
    assert retained < 2048, f"{retained} bytes retained over 5,000 steps"
    assert not plugin.disabled


def test_default_registry_is_what_vllms_metrics_serves_with_one_api_server(plugin_class):
    from prometheus_client import REGISTRY, generate_latest

    model = "default-registry-check"
    for _ in range(2):  # vLLM may build its loggers twice in one process: no duplicate registration
        plugin = plugin_class(vllm_config(model=model, k=2), [0])
        plugin.record(*build_step([StepRequest(drafted=2, accepted=1, last_output=0.0)], now=0.02, num_spec_tokens=2))
        plugin.log()
        assert not plugin.disabled
    assert REGISTRY.get_sample_value(DRAFT_TOKENS_PER_POS.promql,
                                     {"model_name": model, "engine": "0", "position": "1"}) == 2.0
    assert f'model_name="{model}"' in generate_latest(REGISTRY).decode()
