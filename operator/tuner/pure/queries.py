"""The fixed set of PromQL queries the tuning loop runs each tick, for every resource at once.

Each query aggregates `by` the namespace and resource labels (plus `position`, `batch_size`
or `k` where the observation needs them), so one Prometheus round trip per query answers
for all resources: the number of queries per tick does not grow with the number of
resources (issue 7). Which label carries the namespace and the resource name depends on
the PodMonitor / ServiceMonitor relabelling of the installation, hence `LabelMapping`.

Names come from `specinfer.runtime.contract.telemetry.vllm_metrics` (vLLM's standard series, contract-tested against
the wheel) and `specinfer.runtime.contract.telemetry.series` (our stat-logger plugin's `specinfer:`
series, which the simulator exports too). Pure: builds strings, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from specinfer.runtime.contract.telemetry import series as si
from specinfer.runtime.contract.telemetry import vllm_metrics as vm

# Quantiles of the running-requests gauge over the window: the batch-size distribution when
# the plugin's per-bucket step series are absent (each quantile stands for an equal share of time).
BATCH_QUANTILES = (0.1, 0.3, 0.5, 0.7, 0.9)
QUANTILE_LABEL = "quantile"


@dataclass(frozen=True)
class LabelMapping:
    """Prometheus label names that identify a resource's series (podTargetLabels by default)."""

    namespace: str = "namespace"
    resource: str = "specinfer_io_name"

    def by(self, *extra: str) -> str:
        return ", ".join((self.namespace, self.resource, *extra))


@dataclass(frozen=True)
class Query:
    name: str
    promql: str
    extra_labels: tuple[str, ...] = ()  # labels besides namespace/resource that key the result
    optional: bool = False  # absent series are expected (the plugin is not installed everywhere)


def _increase(metric: str, labels: LabelMapping, window: str, *extra: str) -> str:
    return f"sum by ({labels.by(*extra)}) (increase({metric}[{window}]))"


def _p99(histogram: str, labels: LabelMapping, window: str) -> str:
    return f"histogram_quantile(0.99, sum by ({labels.by('le')}) (rate({histogram}_bucket[{window}])))"


def _batch_quantiles(labels: LabelMapping, window: str) -> str:
    """One query, one series per pod and quantile (label_replace tags each quantile)."""
    parts = [
        f'label_replace(quantile_over_time({q}, {vm.NUM_REQUESTS_RUNNING.series}[{window}]), '
        f'"{QUANTILE_LABEL}", "{q}", "", "")'
        for q in BATCH_QUANTILES
    ]
    return " or ".join(parts)


def window_text(window_seconds: float) -> str:
    return f"{max(1, int(round(window_seconds)))}s"


def build_queries(labels: LabelMapping, window_seconds: float) -> list[Query]:
    """Every query of one tick; evaluated at one instant so the answers form one snapshot."""
    w = window_text(window_seconds)
    itl = vm.INTER_TOKEN_LATENCY.name
    step = si.STEP_DURATION.name
    return [
        Query("scrapeTime", f"max by ({labels.by()}) (timestamp({vm.NUM_REQUESTS_RUNNING.series}))"),
        Query("drafts", _increase(vm.SPEC_DECODE_NUM_DRAFTS.series, labels, w), optional=True),
        Query("draftTokens", _increase(vm.SPEC_DECODE_NUM_DRAFT_TOKENS.series, labels, w), optional=True),
        Query("acceptedPerPosition", _increase(vm.SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS.series, labels, w,
                                               vm.LABEL_POSITION), (vm.LABEL_POSITION,), optional=True),
        Query("draftsPerPosition", _increase(si.DRAFT_TOKENS_PER_POS.promql, labels, w, si.LABEL_POSITION),
              (si.LABEL_POSITION,), optional=True),
        # the plugin's copy of vLLM's accepted counts, flushed together with draftsPerPosition
        Query("pluginAcceptedPerPosition", _increase(si.ACCEPTED_TOKENS_PER_POS.promql, labels, w, si.LABEL_POSITION),
              (si.LABEL_POSITION,), optional=True),
        Query("requestSteps", _increase(f"{itl}_count", labels, w)),
        Query("requestStepSeconds", _increase(f"{itl}_sum", labels, w)),
        Query("generatedTokens", _increase(vm.GENERATION_TOKENS.series, labels, w)),
        # prompt tokens computed inside decode steps, prefix-cache hits left out: the step cost's prefill term
        # (policy/cost.py); an engine without the cached counter counts every prompt token
        Query("promptTokens", f"({_increase(vm.PROMPT_TOKENS.series, labels, w)} - "
                              f"{_increase(vm.PROMPT_TOKENS_CACHED.series, labels, w)}) "
                              f"or {_increase(vm.PROMPT_TOKENS.series, labels, w)}", optional=True),
        Query("stepCount", _increase(f"{step}_count", labels, w, si.LABEL_BATCH_SIZE, si.LABEL_K),
              (si.LABEL_BATCH_SIZE, si.LABEL_K), optional=True),
        Query("stepSeconds", _increase(f"{step}_sum", labels, w, si.LABEL_BATCH_SIZE, si.LABEL_K),
              (si.LABEL_BATCH_SIZE, si.LABEL_K), optional=True),
        Query("stepRequests", _increase(si.STEP_REQUESTS.promql, labels, w, si.LABEL_BATCH_SIZE, si.LABEL_K),
              (si.LABEL_BATCH_SIZE, si.LABEL_K), optional=True),
        Query("batchQuantiles", _batch_quantiles(labels, w), (QUANTILE_LABEL,)),
        Query("perTokenP99", _p99(vm.REQUEST_TIME_PER_OUTPUT_TOKEN.name, labels, w), optional=True),
        # engines retuned in place: the schedule each pod runs (pods per digest), since when, what it refused
        Query("liveSchedulePods", f"count by ({labels.by(si.LABEL_DIGEST)}) ({si.LIVE_SCHEDULE_INFO.name})",
              (si.LABEL_DIGEST,), optional=True),
        Query("liveScheduleSince", f"max by ({labels.by()}) ({si.LIVE_SCHEDULE_APPLIED.name})", optional=True),
        Query("liveScheduleErrors", f"sum by ({labels.by()}) ({si.LIVE_SCHEDULE_ERRORS.promql})", optional=True),
        Query("ttftP99", _p99(vm.TIME_TO_FIRST_TOKEN.name, labels, w), optional=True),
    ]
