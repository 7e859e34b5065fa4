"""Query answers -> one policy `Observation` and one `status.metrics` per resource. Pure.

The answers are Prometheus instant vectors (`[{"metric": {...}, "value": [t, "v"]}, ...]`) keyed
by query name (operator/tuner/pure/queries.py). Everything in them is treated as hostile: a tenant
controls what its own pods export and may name its own Prometheus. So every label that becomes an
index or a size is parsed and bounded (positions and K below the API's K ceiling, batch sizes below
its maximum, only the known bucket and quantile labels), every value must be a finite number, and a
resource with a malformed series gets no observation -- only a message naming the series -- while
every other resource in the same answers is observed as usual.

Signals: our plugin's `specinfer:` series (per-position draft counts, step time by batch-size
bucket and effective K) are used when a resource has them; otherwise vLLM's standard series
only, and the batch-size distribution comes from quantiles of the running-requests gauge.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from specinfer.api.speculation import K_CEILING, MAX_BATCH_SIZE
from specinfer.api.status import MetricsStatus
from specinfer.api.timestamps import rfc3339
from specinfer.operator.tuner.policy import AppliedConfig, Observation, StepSample
from specinfer.operator.tuner.policy.observation import trim_idle_positions
from specinfer.operator.tuner.pure.queries import BATCH_QUANTILES, QUANTILE_LABEL, LabelMapping
from specinfer.runtime.contract.telemetry import series as si
from specinfer.runtime.contract.telemetry import vllm_metrics as vm

Key = tuple[str, str]  # (namespace, resource name)
Samples = list[tuple[dict[str, str], float]]
BUCKETS = {label: si.batch_size_range(label) for label in si.batch_size_labels()}
QUANTILES = {str(q) for q in BATCH_QUANTILES}
MAX_LABEL_LENGTH = 253  # longer label values are refused (names, namespaces: DNS subdomains at most)


class MalformedSeries(ValueError):
    """A series whose labels or value cannot be what our engines export; the message names it."""


@dataclass(frozen=True)
class Target:
    """What the loop knows about one resource from the API server."""

    namespace: str
    name: str
    applied: AppliedConfig
    rollout_in_progress: bool

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)


SERIES_MISSING = "SeriesMissing"
SERIES_MALFORMED = "SeriesMalformed"


@dataclass(frozen=True)
class Observed:
    observation: Observation | None  # None when series are missing or malformed
    missing: str | None  # why there is no observation
    metrics: MetricsStatus | None  # None when nothing was read
    signals: str | None
    reason: str = SERIES_MISSING  # TuningDegraded reason when there is no observation


def _label(metric: Mapping[str, object], name: str) -> str | None:
    value = metric.get(name)
    return value if isinstance(value, str) and 0 < len(value) <= MAX_LABEL_LENGTH else None


def _value(sample: Mapping[str, object]) -> float | None:
    """The sample's value, or None when it is not `[time, "<number>"]` (Prometheus' instant-vector form)."""
    pair = sample.get("value")
    if not isinstance(pair, (list, tuple)) or len(pair) != 2 or not isinstance(pair[1], str) or len(pair[1]) > 64:
        return None
    try:
        return float(pair[1])
    except ValueError:
        return None


def index_results(results: Mapping[str, object], labels: LabelMapping) -> dict[Key, dict[str, Samples]]:
    """{(namespace, name): {query name: [(labels, value), ...]}}; anything not shaped like a sample of a
    resource (wrong types, missing labels, a value that is not a number) is skipped."""
    out: dict[Key, dict[str, Samples]] = defaultdict(lambda: defaultdict(list))
    for query, vector in results.items():
        if not isinstance(vector, list):
            continue
        for sample in vector:
            if not isinstance(sample, Mapping) or not isinstance(sample.get("metric"), Mapping):
                continue
            metric = sample["metric"]
            namespace, name = _label(metric, labels.namespace), _label(metric, labels.resource)
            value = _value(sample)
            if namespace is None or name is None or value is None:
                continue
            clean = {k: v for k, v in metric.items() if isinstance(k, str) and isinstance(v, str)}
            out[(namespace, name)][query].append((clean, value))
    return out


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _count_or_none(value: float | None) -> float | None:
    """An optional counter's increase: a NaN, infinite or negative one is not reported, not a broken window."""
    return value if value is not None and math.isfinite(value) and value >= 0 else None


def _total(samples: Samples | None) -> float | None:
    if not samples:
        return None
    values = [v for _, v in samples if math.isfinite(v)]
    return sum(values) if values else None


def _index(metric: Mapping[str, str], label: str, limit: int, series: str) -> int:
    """A small non-negative integer label (a position, a K), or MalformedSeries naming it."""
    text = metric.get(label, "")
    if not text.isdigit() or int(text) >= limit:
        raise MalformedSeries(f"{series} has {label}={text[:40]!r}: expected an integer 0..{limit - 1}")
    return int(text)


def _by_position(samples: Samples | None, label: str, series: str) -> list[float] | None:
    if not samples:
        return None
    counts: dict[int, float] = defaultdict(float)
    for metric, value in samples:
        counts[_index(metric, label, K_CEILING, series)] += value if math.isfinite(value) else 0.0
    return [counts.get(i, 0.0) for i in range(max(counts) + 1)]


def _bucket_middle(label: str) -> float:
    low, high = BUCKETS[label]
    return float(low if high is None else (low + high) / 2)


def _step_cells(series: Mapping[str, Samples]) -> dict[tuple[str, int], dict[str, float]]:
    """(batch-size bucket, K) -> {count, seconds, requests} from the plugin's step series."""
    cells: dict[tuple[str, int], dict[str, float]] = defaultdict(
        lambda: {"count": 0.0, "seconds": 0.0, "requests": 0.0})
    for query, field, name in (("stepCount", "count", si.STEP_DURATION.name), ("stepSeconds", "seconds",
                               si.STEP_DURATION.name), ("stepRequests", "requests", si.STEP_REQUESTS.promql)):
        for metric, value in series.get(query) or ():
            bucket = metric.get(si.LABEL_BATCH_SIZE, "")
            if bucket not in BUCKETS:
                raise MalformedSeries(f"{name} has {si.LABEL_BATCH_SIZE}={bucket[:40]!r}: not one of our buckets")
            key = (bucket, _index(metric, si.LABEL_K, K_CEILING + 1, name))
            if math.isfinite(value):
                cells[key][field] += value
    return cells


def _step_samples(cells: Mapping[tuple[str, int], Mapping[str, float]]) -> list[StepSample]:
    samples = []
    for (bucket, k), cell in sorted(cells.items(), key=lambda item: (_bucket_middle(item[0][0]), item[0][1])):
        if cell["count"] <= 0 or cell["seconds"] <= 0:
            continue
        size = cell["requests"] / cell["count"] if cell["requests"] > 0 else _bucket_middle(bucket)
        samples.append(StepSample(batch_size=round(min(size, MAX_BATCH_SIZE), 3), k=k, count=round(cell["count"], 3),
                                  mean_seconds=cell["seconds"] / cell["count"]))
    return samples


def _merge(points: Sequence[tuple[int, float]]) -> tuple[tuple[int, float], ...] | None:
    weights: dict[int, float] = defaultdict(float)
    for size, weight in points:
        if weight > 0 and math.isfinite(weight):
            weights[max(1, min(int(size), MAX_BATCH_SIZE))] += weight
    total = sum(weights.values())
    if total <= 0:
        return None
    return tuple((size, round(weight / total, 6)) for size, weight in sorted(weights.items()))


def _distribution_from_steps(samples: Sequence[StepSample]) -> tuple[tuple[int, float], ...] | None:
    """Share of engine time at each batch size (a step's time is count x mean seconds)."""
    return _merge([(round(s.batch_size), s.count * s.mean_seconds) for s in samples])


def _distribution_from_quantiles(samples: Samples | None) -> tuple[tuple[int, float], ...] | None:
    for metric, _ in samples or ():
        if metric.get(QUANTILE_LABEL) not in QUANTILES:
            raise MalformedSeries(f"{vm.NUM_REQUESTS_RUNNING.series} quantiles carry "
                                  f"{QUANTILE_LABEL}={metric.get(QUANTILE_LABEL, '')[:40]!r}")
    return distribution_from_quantiles([value for _, value in samples or ()])


def distribution_from_quantiles(values: Sequence[float]) -> tuple[tuple[int, float], ...] | None:
    """Quantiles of the running-requests gauge (every pod's), each an equal share of time; idle (0)
    quantiles dropped: the distribution while decoding. The benchmark builds vLLM-only windows with it."""
    return _merge([(round(min(value, MAX_BATCH_SIZE)), 1.0) for value in values
                   if math.isfinite(value) and value >= 0.5])


def _mean(distribution: Sequence[tuple[int, float]] | None) -> float:
    return sum(size * share for size, share in distribution) if distribution else 0.0


def _missing(key: Key, what: str, labels: LabelMapping, samples: Samples | None = None) -> str:
    """Why `what` is unusable: no series at all (a scrape or label-mapping problem) or series whose
    every value is NaN (they exist, but the window held too few samples for a rate)."""
    where = f"{labels.namespace}={key[0]!r}, {labels.resource}={key[1]!r}"
    if samples:
        return (f"{what} is NaN for {where} (the series exist but the window holds too few samples, e.g. after "
                "a scrape gap or a restart): holding until the window fills")
    return (f"{what} has no series with {where}: check that Prometheus scrapes the engine pods and that the "
            "operator's label mapping matches the scrape config")


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator or denominator <= 0:
        return None
    return numerator / denominator


def _metrics_status(*, accepted: list[float], drafts: float, draft_tokens: float | None,
                    drafts_per_position: list[float] | None, generated: float, window_seconds: float,
                    mean_batch: float, request_step_seconds: float, per_token: float | None, ttft: float | None,
                    now: float) -> MetricsStatus:
    def r(value: float | None, digits: int = 4) -> float | None:
        return None if value is None or not math.isfinite(value) or value < 0 else round(value, digits)

    per_position = None
    if accepted and drafts > 0:
        denominators = [drafts_per_position[i] if drafts_per_position and i < len(drafts_per_position) else drafts
                        for i in range(len(accepted))]
        per_position = [min(1.0, max(0.0, round(a / d, 4))) if d > 0 else 0.0
                        for a, d in zip(accepted, denominators, strict=True)]
    acceptance = _ratio(sum(accepted), draft_tokens) if accepted else None
    return MetricsStatus(
        acceptance_rate=r(min(1.0, acceptance)) if acceptance is not None else None,
        mean_accepted_length=r(1 + sum(accepted) / drafts, 3) if accepted and drafts > 0 else None,
        per_position_acceptance=per_position,
        p99_time_per_output_token_seconds=r(per_token, 5),
        p99_time_to_first_token_seconds=r(ttft, 5),
        mean_batch_size=r(mean_batch, 2),
        tokens_per_second=r(generated / window_seconds, 2) if window_seconds > 0 else None,
        tokens_per_request_second=r(_ratio(generated, request_step_seconds), 3),
        sampled_at=rfc3339(now),
    )


def observe(target: Target, series: Mapping[str, Samples] | None, *, labels: LabelMapping, now: float,
            window_seconds: float) -> Observed:
    """The policy's observation for one resource, or why it cannot be built."""
    try:
        return _observe(target, series or {}, labels=labels, now=now, window_seconds=window_seconds)
    except MalformedSeries as error:
        return Observed(None, f"refusing this resource's series: {error} (is something other than a vLLM engine "
                              "with the specinfer plugin exporting them?)", None, None, SERIES_MALFORMED)


def _observe(target: Target, series: Mapping[str, Samples], *, labels: LabelMapping, now: float,
             window_seconds: float) -> Observed:
    stamps = [v for _, v in series.get("scrapeTime") or () if math.isfinite(v)]
    if not stamps:
        return Observed(None, _missing(target.key, vm.NUM_REQUESTS_RUNNING.series, labels, series.get("scrapeTime")),
                        None, None)
    request_steps = _total(series.get("requestSteps"))
    if request_steps is None:
        return Observed(None, _missing(target.key, f"{vm.INTER_TOKEN_LATENCY.name}_count", labels,
                                       series.get("requestSteps")), None, None)
    k = target.applied.config.num_speculative_tokens
    drafts = _total(series.get("drafts"))
    if k > 0 and drafts is None:
        return Observed(None, _missing(target.key, vm.SPEC_DECODE_NUM_DRAFTS.series, labels, series.get("drafts")),
                        None, None)
    accepted = _by_position(series.get("acceptedPerPosition"), vm.LABEL_POSITION,
                            vm.SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS.series) or []
    drafts_per_position = _by_position(series.get("draftsPerPosition"), si.LABEL_POSITION,
                                       si.DRAFT_TOKENS_PER_POS.promql)
    plugin_accepted = _by_position(series.get("pluginAcceptedPerPosition"), si.LABEL_POSITION,
                                   si.ACCEPTED_TOKENS_PER_POS.promql)
    if drafts_per_position is not None and plugin_accepted is not None:
        # The plugin flushes its draft counts at most once a second; vLLM's accepted counter runs ahead
        # of them, so an always-right draft showed more accepted than drafted (the real CPU engine did).
        # Numerators and denominators from the same flush instead.
        accepted = plugin_accepted
    step_samples = _step_samples(_step_cells(series)) or None
    distribution = (_distribution_from_steps(step_samples) if step_samples else None) \
        or _distribution_from_quantiles(series.get("batchQuantiles"))
    mean_batch = _mean(distribution)
    step_seconds = _total(series.get("requestStepSeconds")) or 0.0
    generated = _total(series.get("generatedTokens")) or 0.0
    per_token = _finite(_total(series.get("perTokenP99")))
    ttft = _finite(_total(series.get("ttftP99")))
    drafts = drafts or 0.0
    plugin = drafts_per_position is not None or step_samples is not None
    observation = trim_idle_positions(Observation(
        time=now,
        window_seconds=window_seconds,
        scrape_time=max(stamps),
        rollout_in_progress=target.rollout_in_progress,
        applied=target.applied,
        drafts=drafts,
        accepted_per_position=tuple(accepted) if k > 0 else (),
        drafts_per_position=tuple(drafts_per_position) if drafts_per_position is not None and k > 0 else None,
        sequence_steps=request_steps,
        step_mean_seconds=step_seconds / request_steps if request_steps > 0 else 0.0,
        generated_tokens=generated,
        step_samples=tuple(step_samples) if step_samples is not None else None,
        batch_size_mean=mean_batch,
        batch_size_distribution=distribution,
        per_token_p99_seconds=per_token,
        ttft_p99_seconds=ttft,
        prompt_tokens=_count_or_none(_total(series.get("promptTokens"))),
    ))
    metrics = _metrics_status(accepted=accepted, drafts=drafts, draft_tokens=_total(series.get("draftTokens")),
                              drafts_per_position=drafts_per_position, generated=generated,
                              window_seconds=window_seconds, mean_batch=mean_batch,
                              request_step_seconds=step_seconds, per_token=per_token, ttft=ttft, now=now)
    return Observed(observation, None, metrics, "specinfer" if plugin else "vllm")
