"""Every vLLM 0.33 Prometheus metric the project reads or imitates, in one place.

The simulator exports these names, the tuning loop queries them, dashboards plot them;
tests/contract/test_vllm_metrics.py checks each name and type against the wheel's
vllm/v1/metrics/loggers.py and vllm/v1/spec_decode/metrics.py. Counters are exposed by
prometheus_client with a `_total` suffix; histograms as `_bucket`/`_sum`/`_count`.

Derived quantities (vLLM has no acceptance gauge in V1):
    acceptance rate   = rate(SPEC_DECODE_NUM_ACCEPTED_TOKENS_total) / rate(SPEC_DECODE_NUM_DRAFT_TOKENS_total)
    mean accepted len = 1 + rate(SPEC_DECODE_NUM_ACCEPTED_TOKENS_total) / rate(SPEC_DECODE_NUM_DRAFTS_total)
    P(pos i accepted) = rate(SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS_total{position="i"})
                        / rate(SPEC_DECODE_NUM_DRAFTS_total)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MetricKind = Literal["counter", "gauge", "histogram"]

# Labels on every vLLM series (vllm/v1/metrics/loggers.py: labelnames = ["model_name", "engine"]).
LABEL_MODEL_NAME = "model_name"
LABEL_ENGINE = "engine"
# Extra label of the per-position counter: "0" .. str(K - 1).
LABEL_POSITION = "position"


@dataclass(frozen=True)
class VllmMetric:
    name: str          # as passed to prometheus_client, e.g. "vllm:spec_decode_num_drafts"
    kind: MetricKind
    source: str        # wheel file that defines it

    @property
    def series(self) -> str:
        """The name to use in PromQL: counters gain `_total`."""
        return f"{self.name}_total" if self.kind == "counter" else self.name

    @property
    def bucket(self) -> str:
        if self.kind != "histogram":
            raise ValueError(f"{self.name} is a {self.kind}, not a histogram")
        return f"{self.name}_bucket"


_SPEC = "vllm/v1/spec_decode/metrics.py"
_LOGGERS = "vllm/v1/metrics/loggers.py"

SPEC_DECODE_NUM_DRAFTS = VllmMetric("vllm:spec_decode_num_drafts", "counter", _SPEC)
SPEC_DECODE_NUM_DRAFT_TOKENS = VllmMetric("vllm:spec_decode_num_draft_tokens", "counter", _SPEC)
SPEC_DECODE_NUM_ACCEPTED_TOKENS = VllmMetric("vllm:spec_decode_num_accepted_tokens", "counter", _SPEC)
SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS = VllmMetric("vllm:spec_decode_num_accepted_tokens_per_pos", "counter", _SPEC)

NUM_REQUESTS_RUNNING = VllmMetric("vllm:num_requests_running", "gauge", _LOGGERS)   # = current batch size
NUM_REQUESTS_WAITING = VllmMetric("vllm:num_requests_waiting", "gauge", _LOGGERS)
KV_CACHE_USAGE_PERC = VllmMetric("vllm:kv_cache_usage_perc", "gauge", _LOGGERS)
PROMPT_TOKENS = VllmMetric("vllm:prompt_tokens", "counter", _LOGGERS)  # every prompt token, cached or not
# The prompt tokens a prefix-cache hit (or a KV transfer) spared: prompt_tokens minus these were computed.
PROMPT_TOKENS_CACHED = VllmMetric("vllm:prompt_tokens_cached", "counter", _LOGGERS)
GENERATION_TOKENS = VllmMetric("vllm:generation_tokens", "counter", _LOGGERS)
REQUEST_SUCCESS = VllmMetric("vllm:request_success", "counter", _LOGGERS)
TIME_TO_FIRST_TOKEN = VllmMetric("vllm:time_to_first_token_seconds", "histogram", _LOGGERS)
# Per engine STEP, not per token: with speculation one step emits 1..K+1 tokens.
INTER_TOKEN_LATENCY = VllmMetric("vllm:inter_token_latency_seconds", "histogram", _LOGGERS)
# Per request decode time / (n - 1): the per-token latency SLOs refer to.
REQUEST_TIME_PER_OUTPUT_TOKEN = VllmMetric("vllm:request_time_per_output_token_seconds", "histogram", _LOGGERS)
E2E_REQUEST_LATENCY = VllmMetric("vllm:e2e_request_latency_seconds", "histogram", _LOGGERS)
REQUEST_QUEUE_TIME = VllmMetric("vllm:request_queue_time_seconds", "histogram", _LOGGERS)
# Observed once per engine step (tokens computed in it): its _count is the number of steps (calibration).
ITERATION_TOKENS = VllmMetric("vllm:iteration_tokens_total", "histogram", _LOGGERS)

ALL_METRICS: tuple[VllmMetric, ...] = (
    SPEC_DECODE_NUM_DRAFTS,
    SPEC_DECODE_NUM_DRAFT_TOKENS,
    SPEC_DECODE_NUM_ACCEPTED_TOKENS,
    SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS,
    NUM_REQUESTS_RUNNING,
    NUM_REQUESTS_WAITING,
    KV_CACHE_USAGE_PERC,
    PROMPT_TOKENS,
    PROMPT_TOKENS_CACHED,
    GENERATION_TOKENS,
    REQUEST_SUCCESS,
    TIME_TO_FIRST_TOKEN,
    INTER_TOKEN_LATENCY,
    REQUEST_TIME_PER_OUTPUT_TOKEN,
    E2E_REQUEST_LATENCY,
    REQUEST_QUEUE_TIME,
    ITERATION_TOKENS,
)
