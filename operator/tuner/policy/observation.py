"""The observation window the policy decides from, and every reason not to trust it.

The tuning loop builds one `Observation` per resource per tick from Prometheus (rates over a
window, operator/tuner/pure/observe.py). `observation_problems` lists every reason not to trust it:
non-finite numbers, a stale scrape, counters that disagree. The policy never acts on an
observation with problems -- it keeps the current config and says why. `parse_observation` reads
the JSON form documented in docs/tuner.md (the stable interface of `decide_json`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from pydantic import ValidationError

from .config import DraftConfig

# Which telemetry the numbers came from: our stat-logger plugin's unbiased series (per-position
# draft counts, step time by batch size and K) or only vLLM's standard series.
SIGNALS_SPECINFER = "specinfer"
SIGNALS_VLLM = "vllm"
# Prompt tokens per generated token beyond this are no workload (a 100,000-token context per 100-token
# answer is 1,000): a broken counter, and not reported.
MAX_PROMPT_PER_GENERATED = 1000.0


def bounded_prompt_ratio(value: Any) -> float | None:
    """A prompt ratio read from Prometheus or a stored state: finite, >= 0 and at most
    MAX_PROMPT_PER_GENERATED, else None."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and 0 <= number <= MAX_PROMPT_PER_GENERATED else None


class ObservationError(ValueError):
    """The observation's JSON form cannot even be read (wrong types, missing sections)."""


@dataclass(frozen=True)
class AppliedConfig:
    """What the engine runs now (K = 0: speculation off) and since when (epoch seconds)."""

    method: str
    config: DraftConfig
    since: float


@dataclass(frozen=True)
class StepSample:
    """Engine steps at one batch size (bucket representative) and effective K."""

    batch_size: float
    k: int
    count: float
    mean_seconds: float


@dataclass(frozen=True)
class Observation:
    time: float
    window_seconds: float
    scrape_time: float
    rollout_in_progress: bool
    applied: AppliedConfig
    drafts: float
    accepted_per_position: tuple[float, ...]
    drafts_per_position: tuple[float, ...] | None
    sequence_steps: float
    step_mean_seconds: float
    generated_tokens: float
    step_samples: tuple[StepSample, ...] | None
    batch_size_mean: float
    batch_size_distribution: tuple[tuple[int, float], ...] | None
    per_token_p99_seconds: float | None
    ttft_p99_seconds: float | None
    prompt_tokens: float | None = None  # prompt tokens prefilled in the window (None: not reported)

    @property
    def signals(self) -> str:
        """specinfer when the unbiased plugin series are present, else vllm."""
        if self.drafts_per_position is not None or self.step_samples is not None:
            return SIGNALS_SPECINFER
        return SIGNALS_VLLM

    @property
    def measured_speed(self) -> float:
        """Tokens per sequence-second: what each running request actually got (1 / mean per-token time)."""
        busy = self.sequence_steps * self.step_mean_seconds
        return self.generated_tokens / busy if busy > 0 else 0.0

    @property
    def throughput(self) -> float:
        """Tokens generated per second of the window, every request together."""
        return self.generated_tokens / self.window_seconds if self.window_seconds > 0 else 0.0

    def batch_distribution(self) -> list[tuple[int, float]]:
        """Fraction of engine time at each batch size; a point mass at the mean when not given."""
        if self.batch_size_distribution:
            total = sum(fraction for _, fraction in self.batch_size_distribution)
            return [(size, fraction / total) for size, fraction in self.batch_size_distribution if fraction > 0]
        return [(max(1, round(self.batch_size_mean)), 1.0)]

    @property
    def prompt_per_generated(self) -> float | None:
        """Prompt tokens prefilled per token generated in the window (None: not reported, nothing generated, or
        beyond any workload).
        In a steady load each finished request is replaced by a new one, so a step that generates n tokens
        prefills about n times this on average."""
        if self.prompt_tokens is None or self.generated_tokens <= 0:
            return None
        return bounded_prompt_ratio(self.prompt_tokens / self.generated_tokens)

    def expected_tokens_at(self, k: int) -> float:
        """Tokens a request gains in a step that drafted `k`, by the window's acceptance per position (1 where
        it measured none)."""
        gained = 1.0
        for i in range(min(k, len(self.accepted_per_position))):
            per_position = self.drafts_per_position
            drafted = per_position[i] if per_position is not None and i < len(per_position) else self.drafts
            gained += min(self.accepted_per_position[i] / drafted, 1.0) if drafted > 0 else 0.0
        return gained


def _optional_number(section: dict[str, Any], key: str, path: str) -> float | None:
    if key not in section or section[key] is None:
        return None
    value = section[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ObservationError(f"{path}.{key} must be a number, got {value!r}")
    return float(value)


def _number(section: dict[str, Any], key: str, path: str) -> float:
    value = _optional_number(section, key, path)
    if value is None:
        raise ObservationError(f"{path}.{key} is missing")
    return value


def _section(data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key)
    if not isinstance(value, dict):
        raise ObservationError(f"observation.{key} is missing or not an object")
    return value


def _applied_config(applied: dict[str, Any]) -> DraftConfig:
    adaptive = applied.get("adaptiveVerification", False)
    if not isinstance(adaptive, bool):  # bool("false") is True: only a JSON boolean says it
        raise ObservationError(f"observation.applied.adaptiveVerification must be true or false, got {adaptive!r}")
    try:
        return DraftConfig(num_speculative_tokens=int(_number(applied, "numSpeculativeTokens", "observation.applied")),
                           schedule=applied.get("schedule"), adaptive_verification=adaptive)
    except (TypeError, ValueError, ValidationError) as error:
        raise ObservationError("observation.applied must be {numSpeculativeTokens, schedule: [[start, end, K], ...]}: "
                               f"{error}") from error


def _trim_idle_positions(values: tuple[float, ...] | None, k: int) -> tuple[float, ...] | None:
    if values is None or len(values) <= k:
        return values
    extra = values[k:]
    return values[:k] if all(v == 0 for v in extra) else values


def parse_observation(data: dict[str, Any]) -> Observation:
    """The JSON form (docs/tuner.md) as an Observation; raises ObservationError naming the field when unreadable."""
    if not isinstance(data, dict):
        raise ObservationError("the observation must be a JSON object")
    applied = _section(data, "applied")
    acceptance = _section(data, "acceptance")
    steps = _section(data, "steps")
    batch = _section(data, "batchSize")
    latency = data.get("latency") or {}
    samples = steps.get("byBatchSize")
    distribution = batch.get("distribution")
    per_pos_drafts = acceptance.get("draftsPerPosition")
    try:
        observation = Observation(
            time=_number(data, "time", "observation"),
            window_seconds=_number(data, "windowSeconds", "observation"),
            scrape_time=_number(data, "scrapeTime", "observation"),
            rollout_in_progress=bool(data.get("rolloutInProgress", False)),
            applied=AppliedConfig(
                method=str(applied.get("method", "")),
                config=_applied_config(applied),
                since=_number(applied, "since", "observation.applied"),
            ),
            drafts=_number(acceptance, "drafts", "observation.acceptance"),
            accepted_per_position=tuple(float(v) for v in acceptance.get("acceptedPerPosition") or ()),
            drafts_per_position=None if per_pos_drafts is None else tuple(float(v) for v in per_pos_drafts),
            sequence_steps=_number(steps, "count", "observation.steps"),
            step_mean_seconds=_number(steps, "meanSeconds", "observation.steps"),
            generated_tokens=_number(steps, "generatedTokens", "observation.steps"),
            step_samples=None
            if samples is None
            else tuple(
                StepSample(float(s["batchSize"]), int(s["k"]), float(s["count"]), float(s["meanSeconds"]))
                for s in samples
            ),
            batch_size_mean=_number(batch, "mean", "observation.batchSize"),
            batch_size_distribution=None
            if not distribution
            else tuple((int(size), float(fraction)) for size, fraction in distribution),
            per_token_p99_seconds=_optional_number(latency, "perTokenP99Seconds", "observation.latency"),
            ttft_p99_seconds=_optional_number(latency, "ttftP99Seconds", "observation.latency"),
            prompt_tokens=_optional_number(steps, "promptTokens", "observation.steps"),
        )
    except (KeyError, TypeError, ValueError) as error:
        if isinstance(error, ObservationError):
            raise
        raise ObservationError(f"observation has a malformed field: {error!r}") from error
    return trim_idle_positions(observation)


def observation_to_json(obs: Observation) -> dict[str, Any]:
    """The JSON form `parse_observation` reads (docs/tuner.md): what a recorded tick replays."""
    steps: dict[str, Any] = {"count": obs.sequence_steps, "meanSeconds": obs.step_mean_seconds,
                             "generatedTokens": obs.generated_tokens}
    if obs.prompt_tokens is not None:
        steps["promptTokens"] = obs.prompt_tokens
    if obs.step_samples is not None:
        steps["byBatchSize"] = [{"batchSize": s.batch_size, "k": s.k, "count": s.count, "meanSeconds": s.mean_seconds}
                                for s in obs.step_samples]
    acceptance: dict[str, Any] = {"drafts": obs.drafts, "acceptedPerPosition": list(obs.accepted_per_position)}
    if obs.drafts_per_position is not None:
        acceptance["draftsPerPosition"] = list(obs.drafts_per_position)
    return {
        "time": obs.time, "windowSeconds": obs.window_seconds, "scrapeTime": obs.scrape_time,
        "rolloutInProgress": obs.rollout_in_progress,
        "applied": {"method": obs.applied.method, "since": obs.applied.since, **obs.applied.config.to_json()},
        "acceptance": acceptance,
        "steps": steps,
        "batchSize": {"mean": obs.batch_size_mean,
                      "distribution": [list(p) for p in obs.batch_size_distribution or ()] or None},
        "latency": {"perTokenP99Seconds": obs.per_token_p99_seconds, "ttftP99Seconds": obs.ttft_p99_seconds},
    }


def trim_idle_positions(observation: Observation) -> Observation:
    """Positions past the applied K that counted nothing are leftovers of the previous pods' series
    (Prometheus keeps them until they go stale): drop them. Non-zero ones stay and are flagged."""
    k = observation.applied.config.num_speculative_tokens
    return replace(observation,
                   accepted_per_position=_trim_idle_positions(observation.accepted_per_position, k) or (),
                   drafts_per_position=_trim_idle_positions(observation.drafts_per_position, k))


def _finite_numbers(obs: Observation) -> list[tuple[str, float]]:
    values: list[tuple[str, float]] = [
        ("time", obs.time),
        ("windowSeconds", obs.window_seconds),
        ("scrapeTime", obs.scrape_time),
        ("applied.since", obs.applied.since),
        ("acceptance.drafts", obs.drafts),
        ("steps.count", obs.sequence_steps),
        ("steps.meanSeconds", obs.step_mean_seconds),
        ("steps.generatedTokens", obs.generated_tokens),
        ("batchSize.mean", obs.batch_size_mean),
    ]
    values += [(f"acceptance.acceptedPerPosition[{i}]", v) for i, v in enumerate(obs.accepted_per_position)]
    values += [(f"acceptance.draftsPerPosition[{i}]", v) for i, v in enumerate(obs.drafts_per_position or ())]
    for i, sample in enumerate(obs.step_samples or ()):
        values += [(f"steps.byBatchSize[{i}].count", sample.count),
                   (f"steps.byBatchSize[{i}].meanSeconds", sample.mean_seconds)]
    values += [(f"batchSize.distribution[{i}]", f) for i, (_, f) in enumerate(obs.batch_size_distribution or ())]
    for name, value in (("latency.perTokenP99Seconds", obs.per_token_p99_seconds),
                        ("latency.ttftP99Seconds", obs.ttft_p99_seconds), ("steps.promptTokens", obs.prompt_tokens)):
        if value is not None:
            values.append((name, value))
    return values


def settling_problem(obs: Observation) -> str | None:
    """The window began before the applied config took effect, so its rates mix two configs."""
    if obs.applied.since > obs.time - obs.window_seconds:
        return (f"the window began {obs.applied.since - (obs.time - obs.window_seconds):.0f}s before the "
                "applied config took effect: waiting for a window of the new config alone")
    return None


# A replaced pod drains for at most its termination grace (api/workload.py, TERMINATION_GRACE_SECONDS; a
# unit test ties the two): its steps in a window that began later than that are no drain.
DRAIN_LIMIT_SECONDS = 135.0


def foreign_series(obs: Observation) -> str | None:
    """What in the window no engine of the applied config makes, or None: drafts while speculation is off,
    or steps at a K above the applied one -- a replaced engine's last steps while it drains (its series stay
    in the window's rates after the rollout ended), so the rates mix two configs."""
    config = obs.applied.config
    if config.off and obs.drafts >= 1:
        return f"the window holds {obs.drafts:.0f} drafts although speculation is off"
    top = max([config.num_speculative_tokens, *(k for *_, k in config.schedule or ())])
    foreign = [sample.k for sample in obs.step_samples or () if sample.k > top and sample.count > 0]
    if foreign:
        return f"the window holds steps at K={max(foreign)} although the applied config drafts at most K={top}"
    return None


def foreign_series_problem(obs: Observation) -> tuple[str, bool] | None:
    """Why the window waits for one of the applied config alone, and whether that is past a drain (the
    series then belong to another engine under this resource's name: a pod stuck terminating, another pod
    with its labels) -- a data fault, not settling."""
    what = foreign_series(obs)
    if what is None:
        return None
    after = obs.time - obs.window_seconds - obs.applied.since
    if after > DRAIN_LIMIT_SECONDS:
        return (f"{what}, in a window that began {after:.0f}s after the applied config took effect, longer than a "
                f"replaced pod drains ({DRAIN_LIMIT_SECONDS:.0f}s): another engine's series under this resource's "
                "name (a pod stuck terminating, or another pod with its labels?)"), True
    return f"{what}: a replaced engine still draining? waiting for a window of the new config alone", False


def observation_problems(obs: Observation, now: float, max_staleness_seconds: float) -> list[str]:
    """Every reason the numbers cannot be trusted this tick; empty when they can."""
    problems = [f"{name} is {value} (NaN, infinite or negative)" for name, value in _finite_numbers(obs)
                if not math.isfinite(value) or value < 0]
    if problems:
        return problems
    age = now - obs.scrape_time
    if age > max_staleness_seconds:
        problems.append(f"the newest scrape is {age:.0f}s old (limit {max_staleness_seconds:.0f}s): stale data")
    k = obs.applied.config.num_speculative_tokens
    if k > 0:
        if len(obs.accepted_per_position) > k:
            problems.append(
                f"acceptance has {len(obs.accepted_per_position)} positions but the applied K is "
                f"{k}: the series belong to another config"
            )
        if obs.drafts > 0 and not obs.accepted_per_position:
            problems.append("acceptance.acceptedPerPosition is empty although drafts were made")
        slack = 1.02  # rate() extrapolation can overshoot by a hair
        for i, accepted in enumerate(obs.accepted_per_position):
            per_position = obs.drafts_per_position
            denominator = per_position[i] if per_position and i < len(per_position) else obs.drafts
            if accepted > denominator * slack + 1:
                problems.append(f"acceptedPerPosition[{i}]={accepted:.0f} exceeds its drafts {denominator:.0f}: "
                                "counter reset or mixed series")
                break
    if obs.step_mean_seconds == 0 and obs.sequence_steps > 0:
        problems.append("steps.meanSeconds is 0 although steps were counted")
    return problems
