"""Method auto, the decisions: when to compare the candidates, what to measure, which one wins. Pure.

One pass reads the resource (its written spec, status.selection, status.metrics, whether its engine
fails) and the comparison it runs -- a SpeculativeInferenceCalibration the controller creates -- and
returns the next status.selection, a calibration to create if one is due, an Event, and when to look
again. The controller (controller.py) does the I/O; rendering serves whatever status.selection names
(api/auto.py).

- A resource with no choice yet is compared at once (what `initial` says serves meanwhile); so is one
  whose candidates or comparison settings were edited since the last comparison.
- A comparison that succeeds picks the candidate with the highest goodput over no speculation (the
  calibration's geometric mean over its batch sizes), unless it beats the one serving by less than
  MIN_SWITCH_GAIN: a method change is a rollout, and a tie is noise.
- A comparison that fails leaves what serves serving, says which candidate and why, leaves a
  candidate whose engine failed out of the next ones (until the spec changes), and is retried after
  a backoff that doubles (RETRY_BASE_SECONDS .. RETRY_MAX_SECONDS).
- A chosen candidate whose engine then fails to serve is replaced by the previous choice (or no
  speculation) and left out too.
- A new comparison starts when the live traffic moves away from what was measured -- the mean batch
  size beyond twice the largest (or below half the smallest) batch size measured, or the serving
  method's first-position acceptance (independent of K) more than ACCEPTANCE_SHIFT (relative) from
  what it was on the live traffic once it served -- for SHIFT_HOLD_SECONDS in a row, at most once
  per reselectIntervalSeconds, never while a rollout or the tuner's verification of a change runs,
  and only on fresh metrics of the method that serves.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from specinfer.api.auto import NO_SPECULATION, candidates_of, find_candidate, initial_candidate
from specinfer.api.base import MAX_TEXT
from specinfer.api.calibration import (
    Candidate,
    CandidateComparison,
    SpeculativeInferenceCalibrationSpec,
    SpeculativeInferenceCalibrationStatus,
    TargetRef,
)
from specinfer.api.spec import SpeculativeInferenceSpec
from specinfer.api.speculation import (
    BASELINE,
    CONFIGURED,
    DEFAULT_RESELECT_INTERVAL_SECONDS,
    AutoCandidate,
    FixedSpeculation,
)
from specinfer.api.status import (
    MAX_SELECTION_HISTORY,
    ExcludedCandidate,
    MetricsStatus,
    SelectionChoice,
    SelectionStatus,
)
from specinfer.api.timestamps import parse_rfc3339, rfc3339
from specinfer.operator.selection.pure import verification
from specinfer.operator.selection.pure.edit import replace_selection
from specinfer.runtime.contract.calibration.analysis import target_fingerprint
from specinfer.runtime.methods import get_method

MIN_SWITCH_GAIN = 0.03
RETRY_BASE_SECONDS = 120.0
RETRY_MAX_SECONDS = 3600.0
SHIFT_HOLD_SECONDS = 300.0
# Relative move of the serving method's first-position acceptance. Small on purpose: an EAGLE-3 head
# going from chat to RAG prompts loses ~8% there, yet it is the only sign the operator sees that
# n-gram may now win by far. A false alarm costs a comparison on spare accelerators, never serving
# speed (the switch margin guards that); the hold and the interval keep noise from repeating it.
ACCEPTANCE_SHIFT = 0.05
ACCEPTANCE_FLOOR = 0.02  # absolute, for acceptances near zero
METRICS_MAX_AGE_SECONDS = 600.0  # older status.metrics (tuning off or paused, Prometheus away) say nothing
BATCH_SIZES = (1, 4, 16)
MAX_BATCH_SIZE = 4096
MAX_BATCH_SIZES = 8  # a calibration's limit
ENGINE_START_ALLOWANCE_SECONDS = 900.0  # per engine of a comparison, before its points are measured
MIN_COMPARISON_SECONDS = 3 * 3600.0  # a comparison still running after its deadline has Jobs that cannot run


@dataclass(frozen=True)
class World:
    """What one pass decides on."""

    name: str
    spec: SpeculativeInferenceSpec           # as written: method auto
    selection: SelectionStatus               # status.selection (empty before the first pass)
    calibration: Mapping[str, Any] | None    # the comparison status.selection names (None: none, or gone)
    metrics: MetricsStatus | None = None     # status.metrics (the tuner's latest window)
    effective_method: str | None = None      # status.effective.method: what the pods run
    engine_failing: str | None = None        # the pods' engine fails to start or serve (why)
    busy: str | None = None                  # why nothing may start now: a rollout, a verification
    rolling_out: bool = False                # a rollout runs: the pods' metrics mix two configs
    window_seconds: float = 0.0              # how far back a status.metrics window reaches (the tuner's)
    now: float = 0.0


@dataclass(frozen=True)
class Step:
    selection: SelectionStatus
    create: tuple[str, SpeculativeInferenceCalibrationSpec] | None = None   # (name, spec) of a comparison
    event: tuple[str, str, str] | None = None                              # (type, reason, message)
    wake_at: float | None = None  # nothing may change before then without an event (the controller's timer)


# -- what is compared ---------------------------------------------------------------------------


def serving_candidate(spec: SpeculativeInferenceSpec, selection: SelectionStatus) -> AutoCandidate:
    return find_candidate(spec, selection.candidate) or initial_candidate(spec)


def fingerprint(spec: SpeculativeInferenceSpec) -> str:
    """What a comparison's result rests on: the candidates, how they are compared, and the model, hardware
    and runtime they run with (an edit of any starts a new comparison)."""
    data = {"candidates": [c.model_dump(mode="json", exclude_none=True) for c in candidates_of(spec)],
            "comparison": spec.speculation.comparison.model_dump(mode="json", exclude_none=True)
            if spec.speculation.comparison else None,
            "target": target_fingerprint(spec)}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def comparison_name(resource: str, number: int) -> str:
    """`<resource>-select-<n>`, cut to a DNS label that leaves room for the calibration's Job suffixes."""
    name = f"{resource}-select-{number}"
    if len(name) <= 40:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:6]
    return f"{resource[:40 - len(digest) - len(str(number)) - 9].rstrip('-')}-{digest}-select-{number}"


def candidate_k(candidate: AutoCandidate, accelerator: str) -> int:
    """The draft length a candidate is compared and starts at: its own, or the method's default there."""
    method = get_method(candidate.method)
    if not method.speculates:
        return 0
    return candidate.num_speculative_tokens or method.default_k(accelerator)


def batch_sizes_to_measure(spec: SpeculativeInferenceSpec, metrics: MetricsStatus | None) -> list[int]:
    """spec.speculation.comparison.batchSizes (default 1, 4, 16) and, when the traffic runs outside them,
    the power of two nearest its mean on that side (taking the place of the far end when 8 are listed)."""
    comparison = spec.speculation.comparison
    sizes = sorted(set(comparison.batch_sizes if comparison is not None and comparison.batch_sizes else BATCH_SIZES))
    mean = metrics.mean_batch_size if metrics is not None else None
    if mean is None or mean <= 0:
        return sizes
    if mean > max(sizes):
        extra, drop = min(MAX_BATCH_SIZE, 1 << max(0, math.ceil(mean) - 1).bit_length()), 0
    elif mean < min(sizes) / 2:
        extra, drop = max(1, 1 << (max(1, math.floor(mean)).bit_length() - 1)), -1
    else:
        return sizes
    if extra in sizes:
        return sizes
    if len(sizes) >= MAX_BATCH_SIZES:
        sizes.pop(drop)
    return sorted({*sizes, extra})


def comparison_spec(world: World) -> SpeculativeInferenceCalibrationSpec:
    """The calibration that compares the candidates on this resource's engine: the one serving is the
    calibration's `configured` (measured as the target's own method), no speculation its baseline."""
    spec, accelerator = world.spec, world.spec.hardware.accelerator
    serving = serving_candidate(spec, world.selection)
    left_out = verification.excluded_now(world.selection, world.now) | {serving.display_name(), BASELINE}
    others = [c for c in candidates_of(spec) if c.display_name() not in left_out and get_method(c.method).speculates]
    candidates = [Candidate(name=c.display_name(),
                            speculation=FixedSpeculation.model_validate(c.model_dump(exclude={"name"})),
                            num_speculative_tokens=[candidate_k(c, accelerator)]) for c in others]
    own_k = [candidate_k(serving, accelerator)] if get_method(serving.method).speculates else None
    how = spec.speculation.comparison
    extra: dict[str, Any] = {}
    if how is not None and how.prompts is not None:
        extra["prompts"] = how.prompts
    if how is not None and how.load is not None:
        extra["load"] = how.load
    return SpeculativeInferenceCalibrationSpec(target_ref=TargetRef(name=world.name), candidates=candidates,
                                               batch_sizes=batch_sizes_to_measure(spec, world.metrics),
                                               num_speculative_tokens=own_k, **extra)


def comparison_deadline(calibration: Mapping[str, Any]) -> float:
    """Seconds a comparison may take: every engine started and measured one after the other, twice over."""
    spec = calibration.get("spec") if isinstance(calibration.get("spec"), Mapping) else {}
    try:
        parsed = SpeculativeInferenceCalibrationSpec.model_validate(spec)
    except ValueError:
        return MIN_COMPARISON_SECONDS
    engines = len(parsed.candidates) + 2
    per_engine = ENGINE_START_ALLOWANCE_SECONDS + len(parsed.batch_sizes) * (
        parsed.load.warmup_seconds + parsed.load.duration_seconds)
    return max(MIN_COMPARISON_SECONDS, 2 * engines * per_engine / parsed.parallelism)


# -- which one wins -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Choice:
    candidate: AutoCandidate
    k: int
    reason: str
    predicted_gain: float | None = None  # over the candidate that served, as measured (None: it was not)


def _label(name: str, method: str) -> str:
    return "no speculation" if name == BASELINE else (method if name == method.lower() else f"{name} ({method})")


def choose(spec: SpeculativeInferenceSpec, serving: AutoCandidate, compared_with: str | None,
           comparison: Sequence[CandidateComparison], batch_sizes: Sequence[int]) -> Choice:
    """The fastest listed candidate over no speculation; the one serving stays unless beaten by MIN_SWITCH_GAIN.

    The calibration's `configured` row is the candidate that served when the comparison started
    (`compared_with`); it is dropped when that one is no longer listed or was no speculation."""
    speedup: dict[str, float] = {}
    methods: dict[str, str] = {}
    for row in comparison:
        name = row.name
        if name == CONFIGURED:
            if compared_with in (None, BASELINE) or find_candidate(spec, compared_with) is None:
                continue
            name = compared_with
        elif name != BASELINE and find_candidate(spec, name) is None:
            continue  # a candidate removed from the spec since
        speedup[name], methods[name] = row.speedup_vs_none, row.method
    speedup.setdefault(BASELINE, 1.0)
    methods.setdefault(BASELINE, "none")
    current = serving.display_name()
    best = max(speedup, key=lambda n: (speedup[n], n == current))
    sizes = ", ".join(str(b) for b in batch_sizes)
    ranked = sorted(speedup, key=lambda n: -speedup[n])
    ranking = ", ".join(f"{_label(n, methods[n])} {speedup[n]:.2f}x" for n in ranked)
    measured = f"at batch sizes {sizes} on the measured prompts ({ranking} of no speculation)"
    now = speedup.get(current)
    if best == current:
        chosen, why = current, f"{_label(current, methods[current])} is the fastest {measured}"
    elif now is not None and now > 0 and speedup[best] / now - 1 < MIN_SWITCH_GAIN:
        chosen, why = current, (f"{_label(best, methods[best])} is within {speedup[best] / now - 1:.0%} of "
                                f"{_label(current, methods[current])}, below the {MIN_SWITCH_GAIN:.0%} a method "
                                f"change must earn: keeping it, {measured}")
    else:
        runner_up = max((n for n in speedup if n != best), key=lambda n: speedup[n])
        gain = speedup[best] / speedup[runner_up] - 1 if speedup[runner_up] > 0 else 0.0
        over = ""
        if now is not None and now > 0 and runner_up != current:
            over = f" and {_label(current, methods[current])}, which served, by {speedup[best] / now - 1:.0%}"
        elif now is None:
            over = f" ({_label(current, methods.get(current, serving.method))}, which served, was not measured)"
        chosen, why = best, (f"{_label(best, methods[best])} beat {_label(runner_up, methods[runner_up])} "
                             f"by {gain:.0%}{over} {measured}")
    candidate = find_candidate(spec, chosen) or NO_SPECULATION
    predicted = verification.predicted_gain(speedup, chosen, current)
    return Choice(candidate, candidate_k(candidate, spec.hardware.accelerator), why, predicted)


# -- the traffic, live --------------------------------------------------------------------------


def _fresh_metrics(world: World) -> MetricsStatus | None:
    """status.metrics when it describes the method that serves now, sampled recently."""
    metrics = world.metrics
    serving = serving_candidate(world.spec, world.selection)
    sampled = parse_rfc3339(metrics.sampled_at) if metrics is not None and metrics.sampled_at else None
    if metrics is None or sampled is None or world.now - sampled > METRICS_MAX_AGE_SECONDS:
        return None
    return metrics if world.effective_method == serving.method else None


def _first_position(metrics: MetricsStatus | None) -> float | None:
    rates = metrics.per_position_acceptance if metrics is not None else None
    return rates[0] if rates else None


def _shift(world: World, metrics: MetricsStatus) -> str | None:
    """Why the live traffic no longer looks like what was measured, or None."""
    selection = world.selection
    sizes = selection.measured_batch_sizes or []
    mean = metrics.mean_batch_size
    if sizes and mean is not None and mean > 0 and (mean > 2 * max(sizes) or mean < min(sizes) / 2) \
            and batch_sizes_to_measure(world.spec, metrics) != sorted(sizes):
        return (f"the mean batch size {mean:.1f} is outside what the last comparison measured "
                f"({min(sizes)}-{max(sizes)})")
    reference, now = selection.measured_acceptance, _first_position(metrics)
    if reference is not None and now is not None and abs(now - reference) > max(ACCEPTANCE_SHIFT * reference,
                                                                                ACCEPTANCE_FLOOR):
        return f"first-position acceptance moved from {reference:.3f} to {now:.3f} on the live traffic"
    return None


# -- steps --------------------------------------------------------------------------------------


def _interval(spec: SpeculativeInferenceSpec) -> float:
    return float(spec.speculation.reselect_interval_seconds or DEFAULT_RESELECT_INTERVAL_SECONDS)


def _start(world: World, why: str, *, fresh: bool = False) -> Step:
    """Create the next comparison. `fresh`: the spec changed, so earlier failures and exclusions go."""
    selection = replace_selection(world.selection, attempts=0, excluded=None) if fresh else world.selection
    world = replace(world, selection=selection)
    number = selection.comparisons + 1
    name = comparison_name(world.name, number)
    spec = comparison_spec(world)
    serving = serving_candidate(world.spec, selection)
    listed = [c.name or "" for c in spec.candidates] + [BASELINE]
    if get_method(serving.method).speculates:
        listed.insert(0, f"{serving.display_name()} (serving)")
    message = (f"{why}: comparing {', '.join(listed)} on this resource's engine ({name}); "
               f"{serving.display_name()} serves meanwhile")
    selection = replace_selection(selection, phase="Measuring", calibration=name, comparisons=number,
                                  compared_with=serving.display_name(), fingerprint=fingerprint(world.spec),
                                  message=message, shift_since=None, baseline=None, verification=None)
    return Step(selection, create=(name, spec), event=("Normal", "SelectionStarted", message[:1024]))


def _measured(world: World, status: SpeculativeInferenceCalibrationStatus) -> Step:
    selection = world.selection
    serving = serving_candidate(world.spec, selection)
    raw_spec = (world.calibration or {}).get("spec")
    sizes = [b for b in (raw_spec.get("batchSizes") or []) if isinstance(b, int)] \
        if isinstance(raw_spec, Mapping) else []
    sizes = sizes or list(BATCH_SIZES)
    choice = choose(world.spec, serving, selection.compared_with, status.comparison or [], sizes)
    name = choice.candidate.display_name()
    switched = name != serving.display_name()
    message = f"switching to {name}: {choice.reason}" if switched else choice.reason
    not_before = world.now + _interval(world.spec)
    # a switch is checked on the live traffic against what served meanwhile (verification.py)
    checking = verification.start(
        candidate=name, previous=serving.display_name(), predicted_gain=choice.predicted_gain,
        predicted_accepted_length=verification.accepted_length(status, name, choice.k),
        baseline=selection.baseline, now=world.now) if switched else None
    entry = SelectionChoice(time=rfc3339(world.now), candidate=name, method=choice.candidate.method,
                            num_speculative_tokens=choice.k, calibration=selection.calibration,
                            reason=choice.reason[:MAX_TEXT],
                            predicted_gain=checking.predicted_gain if checking is not None else None)
    updated = replace_selection(
        selection, candidate=name, method=choice.candidate.method, phase="Chosen", attempts=0, message=message,
        not_before=rfc3339(not_before), measured_batch_sizes=sizes,
        measured_acceptance=None,  # taken again on the live traffic once the choice serves
        history=[entry.model_dump(), *(h.model_dump() for h in selection.history or ())][:MAX_SELECTION_HISTORY],
        shift_since=None, baseline=None, verification=checking)
    return Step(updated, event=("Normal", "MethodSelected" if switched else "MethodKept", message[:1024]),
                wake_at=not_before)


def _failed(world: World, status: SpeculativeInferenceCalibrationStatus | None, why: str) -> Step:
    selection = world.selection
    attempts = min(selection.attempts + 1, 10_000)
    delay = min(RETRY_MAX_SECONDS, RETRY_BASE_SECONDS * 2 ** min(attempts - 1, 10))
    serving = serving_candidate(world.spec, selection).display_name()
    failed = [c for c in (status.candidates or ()) if c.phase == "Failed"] if status is not None else []
    which = "; ".join(f"candidate {c.name}: {c.message}" for c in failed if c.message)
    # an engine that failed in a comparison fails the next one too: leave it out until the spec changes
    # (the one serving -- measured as `configured` -- keeps serving; its pods say how it does)
    excluded = {e.name: e for e in selection.excluded or ()}
    for c in failed:
        if c.name not in (CONFIGURED, BASELINE) and find_candidate(world.spec, c.name) is not None:
            excluded[c.name] = ExcludedCandidate(name=c.name, reason=(c.message or "its engine failed")[:MAX_TEXT])
    left_out = f"; left out of the next comparison: {', '.join(sorted(excluded))}" if excluded else ""
    message = (f"comparison {selection.calibration} failed ({which or why}); {serving} keeps serving; "
               f"retrying after {delay:.0f} s (attempt {attempts}){left_out}")
    updated = replace_selection(selection, phase="Failed", attempts=attempts, message=message,
                                not_before=rfc3339(world.now + delay),
                                excluded=[e.model_dump() for e in excluded.values()][:8] or None)
    return Step(updated, event=("Warning", "SelectionFailed", message[:1024]), wake_at=world.now + delay)


def refused(world: World, why: str) -> Step:
    """The comparison `step` asked for could not be created (quota on custom resources, RBAC, admission):
    a failure like any other, retried with backoff, said in status instead of a silent retry loop."""
    return _failed(world, None, why)


def _engine_failed(world: World) -> Step | None:
    """The chosen candidate's engine fails serving: back to the previous choice (or no speculation)."""
    serving = serving_candidate(world.spec, world.selection)
    if world.engine_failing is None or serving.display_name() == BASELINE \
            or world.effective_method != serving.method:
        return None
    failing = serving.display_name()
    excluded = {e.name: e for e in world.selection.excluded or ()}
    excluded[failing] = ExcludedCandidate(name=failing, reason=f"its engine failed serving: {world.engine_failing}"
                                          [:MAX_TEXT])
    previous = next((h.candidate for h in world.selection.history or ()
                     if h.candidate not in excluded and find_candidate(world.spec, h.candidate) is not None),
                    BASELINE)
    fallback = find_candidate(world.spec, previous) or NO_SPECULATION
    message = (f"{failing} fails serving ({world.engine_failing}): back to {fallback.display_name()}, "
               f"and {failing} is left out of comparisons until the spec changes")
    updated = replace_selection(world.selection, candidate=fallback.display_name(), method=fallback.method,
                                excluded=[e.model_dump() for e in excluded.values()][:8], message=message,
                                measured_acceptance=None, shift_since=None, verification=None)
    return Step(updated, event=("Warning", "SelectionRolledBack", message[:1024]))


def _measuring(world: World) -> Step:
    selection, calibration = world.selection, world.calibration
    if calibration is None:
        return _failed(world, None, "its SpeculativeInferenceCalibration is gone")
    meta = calibration.get("metadata")
    created = parse_rfc3339(meta.get("creationTimestamp")) if isinstance(meta, Mapping) else None
    deadline = (created + comparison_deadline(calibration)) if created is not None else None
    raw = calibration.get("status")
    try:
        status = SpeculativeInferenceCalibrationStatus.model_validate(raw if isinstance(raw, Mapping) else {})
    except ValueError:
        status = None
    if status is not None and status.phase == "Succeeded":
        return _measured(world, status)
    if status is not None and status.phase == "Failed":
        failed = next((c for c in status.conditions or () if c.type == "Failed"), None)
        return _failed(world, status, failed.message if failed is not None and failed.message else "failed")
    if deadline is not None and world.now > deadline:
        hours = (world.now - (created or world.now)) / 3600
        return _failed(world, status, f"not finished after {hours:.1f} h: its Jobs may not be schedulable "
                                      f"(kubectl describe sical {selection.calibration})")
    progress = _progress(status) if status is not None else ""
    base = (selection.message or "").split(" [", 1)[0]
    message = f"{base} [{progress}]" if progress else base
    # what serves meanwhile is measured live: the baseline a switch is verified against
    baseline = selection.baseline if world.rolling_out else verification.fold_baseline(selection.baseline,
                                                                                       _fresh_metrics(world))
    updated = selection if message == selection.message and baseline == selection.baseline \
        else replace_selection(selection, message=message, baseline=baseline)
    return Step(updated, wake_at=deadline)


def _progress(status: SpeculativeInferenceCalibrationStatus) -> str:
    waiting = next((c.message for c in status.conditions or () if c.type == "Progressing" and c.status == "False"
                    and c.message), None)
    parts = [f"{status.progress} engines measured" if status.progress else "",
             f"running {status.running}" if status.running else "", (waiting or "")[:512]]
    return "; ".join(p for p in parts if p)


def _watch_traffic(world: World) -> Step:
    """A choice serves: take its live reference, and compare again when the traffic has moved away for long."""
    selection = world.selection
    metrics = _fresh_metrics(world)
    if metrics is None:
        return Step(selection)
    if selection.measured_acceptance is None:
        first = _first_position(metrics)
        chosen_at = parse_rfc3339(selection.history[0].time) if selection.history else None
        sampled = parse_rfc3339(metrics.sampled_at) if metrics.sampled_at else None
        if first is not None and (chosen_at is None or (sampled is not None and sampled >= chosen_at
                                                        + SHIFT_HOLD_SECONDS)):
            return Step(replace_selection(selection, measured_acceptance=round(first, 4)))
        return Step(selection)
    shift = _shift(world, metrics)
    if shift is None:
        return Step(replace_selection(selection, shift_since=None)) if selection.shift_since else Step(selection)
    since = parse_rfc3339(selection.shift_since) if selection.shift_since else None
    if since is None:
        return Step(replace_selection(selection, shift_since=rfc3339(world.now)),
                    wake_at=world.now + SHIFT_HOLD_SECONDS)
    if world.now - since < SHIFT_HOLD_SECONDS:
        return Step(selection, wake_at=since + SHIFT_HOLD_SECONDS)
    return _due(world, f"{shift} for {world.now - since:.0f} s")


def _due(world: World, why: str, *, fresh: bool = False) -> Step:
    """A comparison is due: start it unless the interval (or backoff) or a rollout holds it back."""
    selection = world.selection
    not_before = parse_rfc3339(selection.not_before) if selection.not_before else None
    if not fresh and not_before is not None and world.now < not_before:
        return Step(selection, wake_at=not_before)
    if world.busy:
        waiting = f"a new comparison is due ({why}) but waits: {world.busy}"
        return Step(selection if selection.message == waiting else replace_selection(selection, message=waiting))
    return _start(world, why, fresh=fresh)


def step(world: World) -> Step:
    selection = world.selection
    rolled_back = _engine_failed(world)
    if rolled_back is not None:
        return rolled_back
    if selection.phase == "Measuring":
        return _measuring(world)
    if selection.phase is None:
        return _start(world, "no comparison yet")
    if selection.fingerprint != fingerprint(world.spec):
        return _due(world, "the candidates, the comparison settings or the model, hardware or runtime changed",
                    fresh=True)
    if selection.phase == "Failed":
        return _due(world, "retrying the comparison")
    if selection.verification is not None:
        return _verify(world)
    return _watch_traffic(world)


def _verify(world: World) -> Step:
    """The last switch, checked on the live traffic (no comparison starts meanwhile)."""
    serving = serving_candidate(world.spec, world.selection)
    alone = world.effective_method == serving.method and not world.rolling_out
    verdict = verification.verify(world.selection, world.spec, metrics=_fresh_metrics(world), serving_alone=alone,
                                  interval_seconds=_interval(world.spec), window_seconds=world.window_seconds,
                                  now=world.now)
    return Step(verdict.selection, event=verdict.event, wake_at=verdict.wake_at)


__all__ = ["World", "Step", "step", "refused", "choose", "candidate_k", "comparison_spec", "comparison_name",
           "fingerprint", "serving_candidate"]
