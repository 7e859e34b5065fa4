"""Prometheus sinks for the simulated engine: vLLM 0.33.0's series, names, types, labels, buckets.

Names come from specinfer.runtime.telemetry.vllm_metrics (shared with the tuning loop) where it defines them;
names and buckets mirror vllm/v1/metrics/loggers.py, vllm/v1/metrics/buckets.py and
vllm/v1/spec_decode/metrics.py (tests/unit/test_sim_metrics_contract.py compares them
with the wheel). Like vLLM, the pure step statistics (engine.StepStats) are kept apart
from the sinks; a sink is any object with `observe_step(stats)` and
`set_queue(running, waiting)`, so further series (the `specinfer:` telemetry of the
stat-logger plugin) are one more sink in `build_sinks`, not edits here.
Every histogram observes simulated seconds.
"""

from __future__ import annotations

from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from specinfer.runtime.contract.telemetry import vllm_metrics as vm
from specinfer.runtime.pod.telemetry.sim_sink import TelemetrySink
from specinfer.runtime.sim.engine import StepStats

LABELS = [vm.LABEL_MODEL_NAME, vm.LABEL_ENGINE]

# vllm/v1/metrics/buckets.py (0.33.0)
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                           120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
TIME_TO_FIRST_TOKEN_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                               7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
INTER_TOKEN_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                               10.0, 20.0, 40.0, 80.0)
ITERATION_TOKENS_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)

# vllm.v1.engine.FinishReason values, as str(reason) labels them
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")


def request_tokens_buckets(max_model_len: int) -> list[float]:
    """vLLM's 1-2-5 series capped at max_model_len (build_1_2_5_buckets)."""
    buckets: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_model_len:
                return buckets
            buckets.append(value)
        exponent += 1


class Sink(Protocol):
    def observe_step(self, stats: StepStats) -> None: ...
    def set_queue(self, running: int, waiting: int) -> None: ...


class VllmMetrics:
    """The subset of PrometheusStatLogger + SpecDecodingProm a tuner and a dashboard read."""

    def __init__(self, registry: CollectorRegistry, *, model_name: str, engine: str = "0",
                 num_speculative_tokens: int = 0, max_model_len: int = 8192) -> None:
        values = (model_name, engine)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, LABELS, registry=registry).labels(*values)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, LABELS, registry=registry).labels(*values)

        def histogram(name: str, doc: str, buckets) -> Histogram:
            return Histogram(name, doc, LABELS, buckets=list(buckets), registry=registry).labels(*values)

        self.running = gauge(vm.NUM_REQUESTS_RUNNING.name, "Number of requests in model execution batches.")
        self.waiting = gauge(vm.NUM_REQUESTS_WAITING.name, "Number of requests waiting to be processed.")
        self.kv_cache_usage = gauge(vm.KV_CACHE_USAGE_PERC.name, "KV-cache usage. 1 means 100 percent usage.")
        self.prompt_tokens = counter(vm.PROMPT_TOKENS.name, "Number of prefill tokens processed.")
        # no prefix cache here: every prompt token is computed, and this stays 0 as vLLM's does without hits
        self.prompt_tokens_cached = counter(vm.PROMPT_TOKENS_CACHED.name, "Number of cached prompt tokens.")
        self.generation_tokens = counter(vm.GENERATION_TOKENS.name, "Number of generation tokens processed.")
        success = Counter(vm.REQUEST_SUCCESS.name, "Count of successfully processed requests.",
                          [*LABELS, "finished_reason"], registry=registry)
        self.request_success = {reason: success.labels(*values, reason) for reason in FINISH_REASONS}
        token_buckets = request_tokens_buckets(max_model_len)
        self.request_prompt_tokens = histogram("vllm:request_prompt_tokens",
                                               "Number of prefill tokens processed.", token_buckets)
        self.request_generation_tokens = histogram("vllm:request_generation_tokens",
                                                   "Number of generation tokens processed.", token_buckets)
        self.iteration_tokens = histogram("vllm:iteration_tokens_total",
                                          "Histogram of number of tokens per engine_step.", ITERATION_TOKENS_BUCKETS)
        self.ttft = histogram(vm.TIME_TO_FIRST_TOKEN.name,
                              "Histogram of time to first token in seconds.", TIME_TO_FIRST_TOKEN_BUCKETS)
        self.itl = histogram(vm.INTER_TOKEN_LATENCY.name,
                             "Histogram of inter-token latency in seconds.", INTER_TOKEN_LATENCY_BUCKETS)
        self.tpot = histogram(vm.REQUEST_TIME_PER_OUTPUT_TOKEN.name,
                              "Histogram of time_per_output_token_seconds per request.", INTER_TOKEN_LATENCY_BUCKETS)
        self.e2e = histogram(vm.E2E_REQUEST_LATENCY.name,
                             "Histogram of e2e request latency in seconds.", REQUEST_LATENCY_BUCKETS)
        self.queue_time = histogram(vm.REQUEST_QUEUE_TIME.name,
                                    "Histogram of time spent in WAITING phase for request.", REQUEST_LATENCY_BUCKETS)
        self.inference_time = histogram("vllm:request_inference_time_seconds",
                                        "Histogram of time spent in RUNNING phase for request.",
                                        REQUEST_LATENCY_BUCKETS)
        self.prefill_time = histogram("vllm:request_prefill_time_seconds",
                                      "Histogram of time spent in PREFILL phase for request.", REQUEST_LATENCY_BUCKETS)
        self.decode_time = histogram("vllm:request_decode_time_seconds",
                                     "Histogram of time spent in DECODE phase for request.", REQUEST_LATENCY_BUCKETS)

        # SpecDecodingProm: only exists when speculation is configured, like vLLM.
        self.spec_enabled = num_speculative_tokens > 0
        if self.spec_enabled:
            self.num_drafts = counter(vm.SPEC_DECODE_NUM_DRAFTS.name, "Number of spec decoding drafts.")
            self.num_draft_tokens = counter(vm.SPEC_DECODE_NUM_DRAFT_TOKENS.name, "Number of draft tokens.")
            self.num_accepted_tokens = counter(vm.SPEC_DECODE_NUM_ACCEPTED_TOKENS.name, "Number of accepted tokens.")
            per_pos = Counter(vm.SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS.name, "Accepted tokens per draft position.",
                              [*LABELS, vm.LABEL_POSITION], registry=registry)
            self.accepted_per_pos = [per_pos.labels(*values, str(pos)) for pos in range(num_speculative_tokens)]

    def set_queue(self, running: int, waiting: int) -> None:
        self.running.set(running)
        self.waiting.set(waiting)

    def observe_step(self, stats: StepStats) -> None:
        self.set_queue(stats.running, stats.waiting)
        if stats.prompt_tokens:
            self.prompt_tokens.inc(stats.prompt_tokens)
        if stats.generation_tokens:
            self.generation_tokens.inc(stats.generation_tokens)
        self.iteration_tokens.observe(stats.prompt_tokens + stats.generation_tokens)
        for value in stats.time_to_first_tokens:
            self.ttft.observe(value)
        for value in stats.inter_token_latencies:
            self.itl.observe(value)
        if self.spec_enabled and stats.num_drafts:
            self.num_drafts.inc(stats.num_drafts)
            self.num_draft_tokens.inc(stats.num_draft_tokens)
            self.num_accepted_tokens.inc(stats.num_accepted_tokens)
            # a step drafting fewer tokens than configured (a schedule) fills only its first positions
            for counter, accepted in zip(self.accepted_per_pos, stats.accepted_per_pos, strict=False):
                if accepted:
                    counter.inc(accepted)
        for finished in stats.finished:
            self.request_success[finished.finish_reason].inc()
            self.e2e.observe(finished.e2e_latency)
            self.queue_time.observe(finished.queued_time)
            self.prefill_time.observe(finished.prefill_time)
            self.decode_time.observe(finished.decode_time)
            self.inference_time.observe(finished.inference_time)
            self.tpot.observe(finished.mean_time_per_output_token)
            self.request_prompt_tokens.observe(finished.prompt_tokens)
            self.request_generation_tokens.observe(finished.generation_tokens)


def build_sinks(registry: CollectorRegistry, *, model_name: str, engine: str,
                num_speculative_tokens: int, max_model_len: int = 8192,
                live_state_file: str | None = None) -> list[Sink]:
    """Every metrics sink the simulator exports; add new series families here."""
    return [
        VllmMetrics(registry, model_name=model_name, engine=engine,
                    num_speculative_tokens=num_speculative_tokens, max_model_len=max_model_len),
        # the stat-logger plugin's specinfer: series, same accumulator and names (runtime/telemetry)
        TelemetrySink(registry, model_name=model_name, engine=engine, num_speculative_tokens=num_speculative_tokens,
                      live_state_file=live_state_file),
    ]
