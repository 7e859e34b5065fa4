"""Method auto, the decisions: when to compare the candidates, what to measure, which one wins. Pure.

One pass reads the resource (its written spec, the candidate serving, status.selection) and the
comparison it runs -- a SpeculativeInferenceCalibration the controller creates -- and returns the
next status.selection, a calibration to create if one is due, and an Event. The controller
(controller.py) does the I/O; rendering serves whatever status.selection names (api/auto.py).

- A resource with no choice yet is compared at once (what `initial` says serves meanwhile).
- A comparison that succeeds picks the candidate with the highest goodput over no speculation
  (the calibration's geometric mean over its batch sizes), unless it beats the one serving by less
  than MIN_SWITCH_GAIN: a method change is a rollout, and a tie is noise.
- A comparison that fails leaves what serves serving, says which candidate and why, and is retried
  after a backoff that doubles (RETRY_BASE_SECONDS .. RETRY_MAX_SECONDS).
- A new comparison starts when the traffic moves away from what the last one measured -- the mean
  batch size beyond twice the largest (or below half the smallest) batch size measured, or the
  serving method's acceptance more than ACCEPTANCE_SHIFT (relative) from what it measured -- for
  SHIFT_HOLD_SECONDS in a row, at most once per reselectIntervalSeconds, and never while a rollout
  or the tuner's verification of a change runs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specinfer.api.auto import candidates_of, find_candidate, initial_candidate
from specinfer.api.calibration import (
    Candidate,
    CandidateComparison,
    CandidateStatus,
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
from specinfer.api.status import MAX_SELECTION_HISTORY, MetricsStatus, SelectionChoice, SelectionStatus
from specinfer.api.timestamps import parse_rfc3339, rfc3339
from specinfer.runtime.methods import get_method

MIN_SWITCH_GAIN = 0.03
RETRY_BASE_SECONDS = 120.0
RETRY_MAX_SECONDS = 3600.0
SHIFT_HOLD_SECONDS = 300.0
# A relative move of the serving method's acceptance: small on its own terms (an EAGLE-3 head going from
# chat to RAG prompts loses ~11%), yet it is the only sign the operator sees that another candidate --
# n-gram on RAG -- may now win by far; the five-minute hold and the interval keep noise from acting.
ACCEPTANCE_SHIFT = 0.10
ACCEPTANCE_FLOOR = 0.03  # absolute, for acceptances near zero
BATCH_SIZES = (1, 4, 16)
MAX_BATCH_SIZE = 4096
MAX_BATCH_SIZES = 8  # a calibration's limit
MAX_COMPARISON_SECONDS = 3 * 3600.0  # a comparison still running then has Jobs that cannot run


@dataclass(frozen=True)
class World:
    """What one pass decides on."""

    name: str
    spec: SpeculativeInferenceSpec           # as written: method auto
    selection: SelectionStatus               # status.selection (empty before the first pass)
    calibration: Mapping[str, Any] | None    # the comparison status.selection names, from the cache
    metrics: MetricsStatus | None = None     # status.metrics (the tuner's latest window)
    busy: str | None = None                  # why nothing may start now: a rollout, a verification
    now: float = 0.0


@dataclass(frozen=True)
class Step:
    selection: SelectionStatus
    create: tuple[str, SpeculativeInferenceCalibrationSpec] | None = None   # (name, spec) of a comparison
    event: tuple[str, str, str] | None = None                              # (type, reason, message)


def serving_name(spec: SpeculativeInferenceSpec, selection: SelectionStatus) -> AutoCandidate:
    return find_candidate(spec, selection.candidate) or initial_candidate(spec)


def comparison_name(resource: str, number: int) -> str:
    """`<resource>-select-<n>`, cut to a DNS label that leaves room for the calibration's Job suffixes."""
    name = f"{resource}-select-{number}"
    if len(name) <= 40:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:6]
    return f"{resource[:40 - len(digest) - len(str(number)) - 9].rstrip('-')}-{digest}-select-{number}"


def _k(candidate: AutoCandidate, accelerator: str) -> int:
    method = get_method(candidate.method)
    if not method.speculates:
        return 0
    return candidate.num_speculative_tokens or method.default_k(accelerator)


def batch_sizes_to_measure(spec: SpeculativeInferenceSpec, metrics: MetricsStatus | None) -> list[int]:
    """spec.speculation.comparison.batchSizes (default 1, 4, 16) and, when the traffic runs larger batches,
    the power of two at or above its mean."""
    comparison = spec.speculation.comparison
    sizes = set(comparison.batch_sizes if comparison is not None and comparison.batch_sizes else BATCH_SIZES)
    mean = metrics.mean_batch_size if metrics is not None else None
    if mean is not None and mean > max(sizes) and len(sizes) < MAX_BATCH_SIZES:
        sizes.add(min(MAX_BATCH_SIZE, 1 << (int(mean) - 1).bit_length()))
    return sorted(sizes)


def comparison_spec(world: World) -> SpeculativeInferenceCalibrationSpec:
    """The calibration that compares the candidates on this resource's engine: the one serving is the
    calibration's `configured` (measured as the target's own method), no speculation its baseline."""
    spec, accelerator = world.spec, world.spec.hardware.accelerator
    serving = serving_name(spec, world.selection)
    others = [c for c in candidates_of(spec)
              if c.display_name() not in (serving.display_name(), BASELINE) and get_method(c.method).speculates]
    candidates = [Candidate(name=c.display_name(),
                            speculation=FixedSpeculation.model_validate(c.model_dump(exclude={"name"})),
                            num_speculative_tokens=[_k(c, accelerator)]) for c in others]
    own_k = [_k(serving, accelerator)] if get_method(serving.method).speculates else None
    how = spec.speculation.comparison
    extra: dict[str, Any] = {}
    if how is not None and how.prompts is not None:
        extra["prompts"] = how.prompts
    if how is not None and how.load is not None:
        extra["load"] = how.load
    return SpeculativeInferenceCalibrationSpec(target_ref=TargetRef(name=world.name), candidates=candidates,
                                               batch_sizes=batch_sizes_to_measure(spec, world.metrics),
                                               num_speculative_tokens=own_k, **extra)


@dataclass(frozen=True)
class Choice:
    candidate: AutoCandidate
    k: int
    reason: str


def _label(name: str, method: str) -> str:
    return "no speculation" if name == BASELINE else (method if name == method.lower() else f"{name} ({method})")


def choose(spec: SpeculativeInferenceSpec, serving: AutoCandidate, comparison: Sequence[CandidateComparison],
           batch_sizes: Sequence[int]) -> Choice:
    """The fastest candidate over no speculation; the one serving stays unless beaten by MIN_SWITCH_GAIN."""
    def own(name: str) -> str:
        return serving.display_name() if name == CONFIGURED else name

    speedup = {own(c.name): c.speedup_vs_none for c in comparison}
    methods = {own(c.name): c.method for c in comparison}
    if not speedup:
        raise ValueError("the comparison measured nothing")
    current = serving.display_name()
    speedup.setdefault(current, 1.0 if current == BASELINE else 0.0)
    best = max(speedup, key=lambda n: (speedup[n], n == current))
    sizes = ", ".join(str(b) for b in batch_sizes)
    ranking = ", ".join(f"{_label(n, methods.get(n, 'none'))} {speedup[n]:.2f}x"
                        for n in sorted(speedup, key=lambda n: -speedup[n]))
    measured = f"at batch sizes {sizes} on the measured prompts ({ranking} of no speculation)"
    if best != current and speedup[current] > 0 and speedup[best] / speedup[current] - 1 < MIN_SWITCH_GAIN:
        gain = speedup[best] / speedup[current] - 1
        chosen, why = current, (f"{_label(best, methods[best])} is within {gain:.0%} of "
                                f"{_label(current, methods.get(current, 'none'))}, below the {MIN_SWITCH_GAIN:.0%} "
                                f"a method change must earn: keeping it, {measured}")
    elif best == current:
        chosen, why = current, f"{_label(current, methods.get(current, 'none'))} is the fastest {measured}"
    else:
        runner_up = max((n for n in speedup if n != best), key=lambda n: speedup[n], default=current)
        gain = speedup[best] / speedup[runner_up] - 1 if speedup[runner_up] > 0 else 0.0
        chosen, why = best, (f"{_label(best, methods[best])} beat {_label(runner_up, methods.get(runner_up, 'none'))} "
                             f"by {gain:.0%} {measured}")
    candidate = find_candidate(spec, chosen) or serving
    return Choice(candidate, _k(candidate, spec.hardware.accelerator), why)


def _acceptance(status: SpeculativeInferenceCalibrationStatus, name: str) -> float | None:
    """Mean acceptance per position the comparison measured for `name` (what status.metrics reports)."""
    found: CandidateStatus | None = next((c for c in status.candidates or () if c.name == name), None)
    rows = found.acceptance if found is not None else None
    if not rows or not rows[0].per_position:
        return None
    return round(sum(rows[0].per_position) / len(rows[0].per_position), 4)


def _shift(world: World) -> str | None:
    """Why the traffic no longer looks like what the last comparison measured, or None."""
    metrics, selection = world.metrics, world.selection
    if metrics is None:
        return None
    sizes = selection.measured_batch_sizes or []
    mean = metrics.mean_batch_size
    if sizes and mean is not None and mean > 0 and (mean > 2 * max(sizes) or mean < min(sizes) / 2):
        return (f"the mean batch size {mean:.1f} is outside what the last comparison measured "
                f"({min(sizes)}-{max(sizes)})")
    measured, now = selection.measured_acceptance, metrics.acceptance_rate
    if measured is not None and now is not None and abs(now - measured) > max(ACCEPTANCE_SHIFT * measured,
                                                                              ACCEPTANCE_FLOOR):
        return f"acceptance moved from {measured:.2f} (measured) to {now:.2f}"
    return None


def _progress(status: SpeculativeInferenceCalibrationStatus) -> str:
    parts = [f"{status.progress} engines measured" if status.progress else "",
             f"running {status.running}" if status.running else ""]
    waiting = next((c.message for c in status.conditions or () if c.type == "Progressing" and c.status == "False"
                    and c.message), None)
    return "; ".join(p for p in (*parts, waiting or "") if p)


def _measuring_message(message: str, progress: str) -> str:
    base = message.split(" [", 1)[0]
    return f"{base} [{progress}]" if progress else base


def _interval(spec: SpeculativeInferenceSpec) -> float:
    return float(spec.speculation.reselect_interval_seconds or DEFAULT_RESELECT_INTERVAL_SECONDS)


def _start(world: World, why: str) -> Step:
    number = world.selection.comparisons + 1
    name = comparison_name(world.name, number)
    spec = comparison_spec(world)
    listed = ", ".join([*(c.name or "" for c in spec.candidates), BASELINE])
    serving = serving_name(world.spec, world.selection).display_name()
    if get_method(serving_name(world.spec, world.selection).method).speculates:
        listed = f"{serving} (serving), {listed}"
    message = f"{why}: comparing {listed} on this resource's engine ({name}); {serving} serves meanwhile"
    selection = replace_selection(world.selection, phase="Measuring", calibration=name, comparisons=number,
                                  message=message, shift_since=None)
    return Step(selection, create=(name, spec), event=("Normal", "SelectionStarted", message))


def replace_selection(selection: SelectionStatus, **fields: Any) -> SelectionStatus:
    return selection.model_copy(update=fields)


def _measured(world: World, status: SpeculativeInferenceCalibrationStatus) -> Step:
    serving = serving_name(world.spec, world.selection)
    calibration_spec = (world.calibration or {}).get("spec") or {}
    sizes = [b for b in calibration_spec.get("batchSizes") or [] if isinstance(b, int)] or list(BATCH_SIZES)
    choice = choose(world.spec, serving, status.comparison or [], sizes)
    name = choice.candidate.display_name()
    measured_name = CONFIGURED if name == serving.display_name() and name != BASELINE else name
    entry = SelectionChoice(time=rfc3339(world.now), candidate=name, method=choice.candidate.method,
                            num_speculative_tokens=choice.k, calibration=world.selection.calibration,
                            reason=choice.reason[:4096])
    history = [entry, *(world.selection.history or [])][:MAX_SELECTION_HISTORY]
    switched = name != serving.display_name()
    message = (f"switching to {name}: {choice.reason}" if switched else choice.reason)
    selection = replace_selection(
        world.selection, candidate=name, method=choice.candidate.method, phase="Chosen", attempts=0,
        message=message[:4096], not_before=rfc3339(world.now + _interval(world.spec)), measured_batch_sizes=sizes,
        measured_acceptance=_acceptance(status, measured_name), history=history, shift_since=None)
    return Step(selection, event=("Normal", "MethodSelected" if switched else "MethodKept", message[:1024]))


def _failed(world: World, status: SpeculativeInferenceCalibrationStatus | None, why: str) -> Step:
    attempts = world.selection.attempts + 1
    delay = min(RETRY_MAX_SECONDS, RETRY_BASE_SECONDS * 2 ** (attempts - 1))
    serving = serving_name(world.spec, world.selection).display_name()
    failed = [c for c in (status.candidates or ()) if c.phase == "Failed"] if status is not None else []
    which = "; ".join(f"candidate {c.name}: {c.message}" for c in failed if c.message)
    message = (f"comparison {world.selection.calibration} failed ({which or why}); {serving} keeps serving; "
               f"retrying after {delay:.0f} s (attempt {attempts})")
    selection = replace_selection(world.selection, phase="Failed", attempts=attempts, message=message[:4096],
                                  not_before=rfc3339(world.now + delay))
    return Step(selection, event=("Warning", "SelectionFailed", message[:1024]))


def refused(world: World, why: str) -> Step:
    """The comparison `step` asked for could not be created (quota on custom resources, RBAC, admission):
    a failure like any other, retried with backoff, said in status instead of a silent retry loop."""
    return _failed(world, None, why)


def step(world: World) -> Step:
    selection = world.selection
    if selection.phase == "Measuring":
        if world.calibration is None:
            return _failed(world, None, "its SpeculativeInferenceCalibration is gone")
        raw = world.calibration.get("status") or {}
        try:
            status = SpeculativeInferenceCalibrationStatus.model_validate(raw)
        except ValueError:
            return Step(selection)  # a status this operator cannot read yet: the calibration controller's to fix
        if status.phase == "Succeeded":
            try:
                return _measured(world, status)
            except ValueError as error:
                return _failed(world, status, str(error))
        if status.phase == "Failed":
            conditions = {c.type: c for c in status.conditions or ()}
            failed = conditions.get("Failed")
            return _failed(world, status, failed.message if failed is not None and failed.message else "failed")
        created = parse_rfc3339((world.calibration.get("metadata") or {}).get("creationTimestamp"))
        if created is not None and world.now - created > MAX_COMPARISON_SECONDS:
            return _failed(world, status, f"not finished after {MAX_COMPARISON_SECONDS / 3600:.0f} h: its Jobs may "
                                          f"not be schedulable (kubectl describe sical {selection.calibration})")
        progress = _progress(status)
        measuring = _measuring_message(selection.message or "", progress)
        return Step(selection) if measuring == selection.message else Step(replace_selection(selection,
                                                                                              message=measuring))
    not_before = parse_rfc3339(selection.not_before) if selection.not_before else None
    due = not_before is None or world.now >= not_before
    if selection.phase is None:
        why = "no comparison yet"
    elif selection.phase == "Failed":
        why = "retrying the comparison" if due else ""
    else:
        shift = _shift(world)
        if shift is None:
            return Step(replace_selection(selection, shift_since=None)) if selection.shift_since else Step(selection)
        since = parse_rfc3339(selection.shift_since) if selection.shift_since else None
        if since is None:
            return Step(replace_selection(selection, shift_since=rfc3339(world.now)))
        why = f"{shift} for {world.now - since:.0f} s" if world.now - since >= SHIFT_HOLD_SECONDS and due else ""
    if not why:
        return Step(selection)
    if world.busy and selection.phase is not None:
        waiting = f"a new comparison is due ({why}) but waits: {world.busy}"
        return Step(selection) if selection.message == waiting else Step(replace_selection(selection, message=waiting))
    return _start(world, why)


__all__ = ["World", "Step", "step", "refused", "choose", "comparison_spec", "comparison_name"]
