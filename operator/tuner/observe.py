"""Query answers -> one policy observation and one `status.metrics` per resource. Pure.

The answers are Prometheus instant vectors (`[{"metric": {...}, "value": [t, "v"]}, ...]`)
keyed by query name (operator/tuner/queries.py). The observation is the dict documented in
docs/tuner.md ("Observation"); when the series a resource needs are absent the result says
which, and the loop holds the current config with TuningDegraded=SeriesMissing.

Signals: our plugin's `specinfer:` series (per-position draft counts, step time by batch-size
bucket and effective K) are used when a resource has them; otherwise vLLM's standard series
only, and the batch-size distribution comes from quantiles of the running-requests gauge.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from specinfer import vllm_metrics as vm
from specinfer.operator.tuner.observation import SIGNALS_SPECINFER, SIGNALS_VLLM
from specinfer.operator.tuner.queries import QUANTILE_LABEL, LabelMapping
from specinfer.runtime.telemetry import series as si

Key = tuple[str, str]  # (namespace, resource name)
Samples = list[tuple[dict[str, str], float]]


@dataclass(frozen=True)
class Target:
    """What the loop knows about one resource from the API server."""

    namespace: str
    name: str
    applied: Mapping[str, Any]  # {method, numSpeculativeTokens, schedule: [[s, e, k]] | None, since: epoch s}
    rollout_in_progress: bool

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)


@dataclass(frozen=True)
class Observed:
    observation: dict[str, Any] | None  # None when series are missing
    missing: str | None  # why there is no observation
    metrics: dict[str, Any] | None  # status.metrics (camelCase); None when nothing was read
    signals: str | None


def index_results(results: Mapping[str, Sequence[Mapping[str, Any]]], labels: LabelMapping) -> dict[Key, dict[str, Samples]]:
    """{(namespace, name): {query name: [(labels, value), ...]}}; series without both labels are skipped."""
    out: dict[Key, dict[str, Samples]] = defaultdict(lambda: defaultdict(list))
    for query, vector in results.items():
        for sample in vector or ():
            metric = sample.get("metric") or {}
            namespace, name = metric.get(labels.namespace), metric.get(labels.resource)
            if not namespace or not name:
                continue
            try:
                value = float(sample["value"][1])
            except (KeyError, IndexError, TypeError, ValueError):
                continue
            out[(namespace, name)][query].append((dict(metric), value))
    return out


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _total(samples: Samples | None) -> float | None:
    if not samples:
        return None
    values = [v for _, v in samples if math.isfinite(v)]
    return sum(values) if values else None


def _by_position(samples: Samples | None, label: str) -> list[float] | None:
    if not samples:
        return None
    counts: dict[int, float] = defaultdict(float)
    for metric, value in samples:
        try:
            counts[int(metric[label])] += value if math.isfinite(value) else 0.0
        except (KeyError, ValueError):
            continue
    if not counts:
        return None
    return [counts.get(i, 0.0) for i in range(max(counts) + 1)]


def _bucket_middle(label: str) -> float:
    low, high = si.batch_size_range(label)
    return float(low if high is None else (low + high) / 2)


def _step_cells(series: Mapping[str, Samples]) -> dict[tuple[str, int], dict[str, float]]:
    """(batch-size bucket, K) -> {count, seconds, requests} from the plugin's step series."""
    cells: dict[tuple[str, int], dict[str, float]] = defaultdict(lambda: {"count": 0.0, "seconds": 0.0, "requests": 0.0})
    for query, field in (("stepCount", "count"), ("stepSeconds", "seconds"), ("stepRequests", "requests")):
        for metric, value in series.get(query) or ():
            try:
                key = (metric[si.LABEL_BATCH_SIZE], int(metric[si.LABEL_K]))
            except (KeyError, ValueError):
                continue
            if math.isfinite(value):
                cells[key][field] += value
    return cells


def _step_samples(cells) -> list[dict[str, Any]]:
    samples = []
    for (bucket, k), cell in sorted(cells.items(), key=lambda item: (_bucket_middle(item[0][0]), item[0][1])):
        if cell["count"] <= 0 or cell["seconds"] <= 0:
            continue
        size = cell["requests"] / cell["count"] if cell["requests"] > 0 else _bucket_middle(bucket)
        samples.append({"batchSize": round(size, 3), "k": k, "count": round(cell["count"], 3),
                        "meanSeconds": cell["seconds"] / cell["count"]})
    return samples


def _merge(points: Sequence[tuple[int, float]]) -> list[list[float]] | None:
    weights: dict[int, float] = defaultdict(float)
    for size, weight in points:
        if weight > 0:
            weights[max(1, int(size))] += weight
    total = sum(weights.values())
    if total <= 0:
        return None
    return [[size, round(weight / total, 6)] for size, weight in sorted(weights.items())]


def _distribution_from_steps(samples: Sequence[dict[str, Any]]) -> list[list[float]] | None:
    """Share of engine time at each batch size (a step's time is count x mean seconds)."""
    return _merge([(round(s["batchSize"]), s["count"] * s["meanSeconds"]) for s in samples])


def _distribution_from_quantiles(samples: Samples | None) -> list[list[float]] | None:
    """Quantiles of the running-requests gauge, idle (0) quantiles dropped: time while decoding."""
    points = []
    for metric, value in samples or ():
        if QUANTILE_LABEL in metric and math.isfinite(value) and value >= 0.5:
            points.append((round(value), 1.0))
    return _merge(points)


def _mean(distribution: Sequence[Sequence[float]] | None) -> float:
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


def rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator or denominator <= 0:
        return None
    return numerator / denominator


def _metrics_status(*, accepted: list[float], drafts: float, draft_tokens: float | None,
                    drafts_per_position: list[float] | None, generated: float, window_seconds: float,
                    mean_batch: float, per_token: float | None, ttft: float | None, now: float) -> dict[str, Any]:
    def r(value: float | None, digits: int = 4) -> float | None:
        return None if value is None else round(value, digits)

    per_position = None
    if accepted and drafts > 0:
        denominators = [drafts_per_position[i] if drafts_per_position and i < len(drafts_per_position) else drafts
                        for i in range(len(accepted))]
        per_position = [r(min(1.0, a / d)) if d > 0 else 0.0 for a, d in zip(accepted, denominators)]
    acceptance = _ratio(sum(accepted), draft_tokens) if accepted else None
    metrics = {
        "acceptanceRate": r(min(1.0, acceptance)) if acceptance is not None else None,
        "meanAcceptedLength": r(1 + sum(accepted) / drafts, 3) if accepted and drafts > 0 else None,
        "perPositionAcceptance": per_position,
        "p99TimePerOutputTokenSeconds": r(per_token, 5),
        "p99TimeToFirstTokenSeconds": r(ttft, 5),
        "meanBatchSize": r(mean_batch, 2),
        "tokensPerSecond": r(generated / window_seconds, 2) if window_seconds > 0 else None,
        "sampledAt": rfc3339(now),
    }
    return {key: value for key, value in metrics.items() if value is not None}


def observe(target: Target, series: Mapping[str, Samples] | None, *, labels: LabelMapping, now: float,
            window_seconds: float) -> Observed:
    """The policy's observation for one resource, or why it cannot be built."""
    series = series or {}
    stamps = [v for _, v in series.get("scrapeTime") or () if math.isfinite(v)]
    if not stamps:
        return Observed(None, _missing(target.key, vm.NUM_REQUESTS_RUNNING.series, labels, series.get("scrapeTime")),
                        None, None)
    scrape = max(stamps)
    request_steps = _total(series.get("requestSteps"))
    if request_steps is None:
        return Observed(None, _missing(target.key, f"{vm.INTER_TOKEN_LATENCY.name}_count", labels,
                                       series.get("requestSteps")), None, None)
    k = int(target.applied.get("numSpeculativeTokens") or 0)
    drafts = _total(series.get("drafts"))
    if k > 0 and drafts is None:
        return Observed(None, _missing(target.key, vm.SPEC_DECODE_NUM_DRAFTS.series, labels, series.get("drafts")),
                        None, None)
    accepted = _by_position(series.get("acceptedPerPosition"), vm.LABEL_POSITION) or []
    drafts_per_position = _by_position(series.get("draftsPerPosition"), si.LABEL_POSITION)
    step_samples = _step_samples(_step_cells(series)) or None
    distribution = (_distribution_from_steps(step_samples) if step_samples else None) \
        or _distribution_from_quantiles(series.get("batchQuantiles"))
    mean_batch = _mean(distribution)
    step_seconds = _total(series.get("requestStepSeconds")) or 0.0
    generated = _total(series.get("generatedTokens")) or 0.0
    per_token = _finite(_total(series.get("perTokenP99")))
    ttft = _finite(_total(series.get("ttftP99")))
    drafts = drafts or 0.0
    observation: dict[str, Any] = {
        "time": now,
        "windowSeconds": window_seconds,
        "scrapeTime": scrape,
        "rolloutInProgress": target.rollout_in_progress,
        "applied": dict(target.applied),
        "acceptance": {"drafts": drafts, "acceptedPerPosition": accepted if k > 0 else []},
        "steps": {"count": request_steps, "meanSeconds": step_seconds / request_steps if request_steps > 0 else 0.0,
                  "generatedTokens": generated},
        "batchSize": {"mean": mean_batch, "distribution": distribution},
        "latency": {"perTokenP99Seconds": per_token, "ttftP99Seconds": ttft},
    }
    if drafts_per_position is not None and k > 0:
        observation["acceptance"]["draftsPerPosition"] = drafts_per_position
    if step_samples is not None:
        observation["steps"]["byBatchSize"] = step_samples
    signals = SIGNALS_SPECINFER if (drafts_per_position is not None or step_samples is not None) else SIGNALS_VLLM
    metrics = _metrics_status(accepted=accepted, drafts=drafts, draft_tokens=_total(series.get("draftTokens")),
                              drafts_per_position=drafts_per_position, generated=generated,
                              window_seconds=window_seconds, mean_batch=mean_batch, per_token=per_token,
                              ttft=ttft, now=now)
    return Observed(observation, None, metrics, signals)
