"""What the Jobs and their pods say -> the calibration's next status, the Jobs to start or stop, the Events. Pure.

The status is the record: an engine's points are copied into `status.candidates[].points` the
moment its Job succeeds, so a result survives the Job's TTL and an operator restart, and an
engine whose K is in `measured` is never run again. A Job's result is its pod's termination
message, decoded as hostile input (`specinfer.runtime.contract.calibration.measurement.decode`). One failed engine
fails the run: the remaining Jobs are stopped (they hold accelerators) and the Failed condition
names the engine and the cause, in the engine's own words where it left some.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from specinfer.api.calibration import (
    BASELINE,
    CONFIGURED,
    CandidateStatus,
    SpeculativeInferenceCalibrationSpec,
    SpeculativeInferenceCalibrationStatus,
)
from specinfer.api.status import CalibrationSummary
from specinfer.operator.calibration.pure.render import Engine, Plan
from specinfer.operator.pure.conditions import ConditionUpdate, set_conditions
from specinfer.runtime.contract.calibration.analysis import CandidateResult, compare, step_cost_cells
from specinfer.runtime.contract.calibration.measurement import ReportError, acceptance_rows, decode, unexpected

TERMINAL = ("Succeeded", "Failed")
# Waiting reasons after which a never-restarting container will not start without a change.
CANNOT_START = frozenset({"ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName",
                          "CreateContainerConfigError", "CreateContainerError", "RunContainerError"})
MESSAGE_LIMIT = 1500
EngineState = Literal["pending", "running", "succeeded", "failed"]
Event = tuple[str, str, str]  # type, reason, message


@dataclass(frozen=True)
class EngineOutcome:
    state: EngineState
    message: str | None = None
    report_text: str | None = None


@dataclass(frozen=True)
class Step:
    status: SpeculativeInferenceCalibrationStatus
    start: tuple[Engine, ...] = ()
    stop: tuple[Engine, ...] = ()
    events: tuple[Event, ...] = ()
    summary: CalibrationSummary | None = None  # for the target's status.calibration, once the run succeeded
    target_event: Event | None = None


def _tail(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MESSAGE_LIMIT else "..." + text[-MESSAGE_LIMIT:]


def _condition(obj: Mapping[str, Any] | None, type_: str) -> Mapping[str, Any] | None:
    for condition in ((obj or {}).get("status") or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == type_ and condition.get("status") == "True":
            found: Mapping[str, Any] = condition
            return found
    return None


def _container(pod: Mapping[str, Any] | None) -> Mapping[str, Any]:
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
    return statuses[0] if statuses else {}


def engine_outcome(job: Mapping[str, Any] | None, pod: Mapping[str, Any] | None) -> EngineOutcome:
    """One engine's Job and pod -> pending (no Job), running, succeeded (with the report text) or failed."""
    if job is None:
        return EngineOutcome("pending")
    state = _container(pod).get("state") or {}
    terminated = state.get("terminated") or {}
    waiting = state.get("waiting") or {}
    failed = _condition(job, "Failed")
    if terminated:
        code = terminated.get("exitCode")
        message = str(terminated.get("message") or "")
        if code == 0:
            if _condition(job, "Complete"):
                return EngineOutcome("succeeded", report_text=message)
            if failed is None:
                return EngineOutcome("running")  # the Job controller has not counted it yet
            # the pod finished, but the Job gave up first (its deadline): the report is not to be trusted
            return EngineOutcome("failed", f"the Job failed ({failed.get('reason') or 'Failed'}) although its "
                                           f"pod exited 0: {_tail(str(failed.get('message') or ''))}")
        return EngineOutcome("failed", _tail(message) or f"the pod exited with code {code} "
                                                        f"({terminated.get('reason') or 'Error'}) and left no message")
    if waiting.get("reason") in CANNOT_START:
        return EngineOutcome("failed", f"{waiting['reason']}: {_tail(str(waiting.get('message') or 'no message'))}")
    if failed is not None:
        return EngineOutcome("failed", f"the Job failed ({failed.get('reason') or 'Failed'}): "
                                       f"{_tail(str(failed.get('message') or ''))}")
    return EngineOutcome("running")


def _updates(phase: str, reason: str, message: str) -> list[ConditionUpdate]:
    return [
        ConditionUpdate("Progressing", "True" if phase == "Running" else "False", reason, message),
        ConditionUpdate("Complete", "True" if phase == "Succeeded" else "False", reason, message),
        ConditionUpdate("Failed", "True" if phase == "Failed" else "False", reason, message),
    ]


def _status(current: SpeculativeInferenceCalibrationStatus, phase: str, reason: str, message: str, *,
            generation: int | None, now: str, **fields: Any) -> SpeculativeInferenceCalibrationStatus:
    values = current.model_dump()
    values.update(fields)
    values.update(phase=phase, observed_generation=generation,
                  conditions=set_conditions(current.conditions, _updates(phase, reason, message),
                                            generation=generation, now=now))
    if phase in TERMINAL and not values.get("completion_time"):
        values["completion_time"] = now
    if phase != "Running":
        values["running"] = None
    return SpeculativeInferenceCalibrationStatus.model_validate(values)


def waiting(current: SpeculativeInferenceCalibrationStatus, reason: str, message: str, *, generation: int | None,
            now: str) -> Step:
    """Nothing can start yet (the target or the prompts are missing); retried until they appear."""
    status = _status(current, "Pending", reason, message, generation=generation, now=now)
    announce = current.phase != "Pending" or _reason(current) != reason
    return Step(status=status, events=(("Warning", reason, message),) if announce else ())


def failed(current: SpeculativeInferenceCalibrationStatus, reason: str, message: str, *, generation: int | None,
           now: str, stop: Sequence[Engine] = ()) -> Step:
    status = _status(current, "Failed", reason, message, generation=generation, now=now)
    return Step(status=status, stop=tuple(stop), events=(("Warning", reason, message),))


def _reason(status: SpeculativeInferenceCalibrationStatus) -> str | None:
    return next((c.reason for c in status.conditions or [] if c.type == "Progressing"), None)


@dataclass
class _Record:
    """The candidates' status as it is rebuilt this pass."""

    by_name: dict[str, CandidateStatus] = field(default_factory=dict)

    def measured(self, engine: Engine) -> bool:
        candidate = self.by_name.get(engine.candidate)
        return candidate is not None and engine.k in (candidate.measured or [])


def _candidates(the_plan: Plan, current: SpeculativeInferenceCalibrationStatus) -> _Record:
    previous = {c.name: c for c in current.candidates or []}
    record = _Record()
    for planned in the_plan.candidates:
        before = previous.get(planned.name)
        record.by_name[planned.name] = before.model_copy(update={"num_speculative_tokens": list(planned.ks)}) \
            if before is not None else CandidateStatus(name=planned.name, method=planned.method,
                                                       draft_model=planned.draft_model,
                                                       num_speculative_tokens=list(planned.ks))
    return record


def step(*, spec: SpeculativeInferenceCalibrationSpec, current: SpeculativeInferenceCalibrationStatus,
         the_plan: Plan, outcomes: Mapping[str, EngineOutcome], generation: int | None, now: str,
         calibration: str) -> Step:
    """One pass of a run in progress: record finished engines, start the next ones, finish or fail."""
    if current.target_fingerprint and current.target_fingerprint != the_plan.fingerprint:
        return failed(current, "TargetChanged", "the target's spec.model, spec.hardware or spec.runtime changed "
                      "while the calibration ran: the results would mix two configurations; create a new "
                      "calibration", generation=generation, now=now,
                      stop=[e for e in the_plan.engines
                            if outcomes.get(e.key, EngineOutcome("pending")).state == "running"])
    record = _candidates(the_plan, current)
    events: list[Event] = []
    running: list[Engine] = []
    pending: list[Engine] = []
    for engine in the_plan.engines:
        if record.measured(engine):
            continue
        outcome = outcomes.get(engine.key, EngineOutcome("pending"))
        if outcome.state == "failed":
            others = [e for e in the_plan.engines if e.key != engine.key
                      and outcomes.get(e.key, EngineOutcome("pending")).state == "running"]
            return failed(current, "EngineFailed", f"engine {engine.describe()} ({engine.method}): {outcome.message}",
                          generation=generation, now=now, stop=others)
        if outcome.state == "succeeded":
            problem = _record(record, engine, outcome.report_text or "", spec.batch_sizes)
            if problem is not None:
                return failed(current, "InvalidReport", f"engine {engine.describe()}: {problem}",
                              generation=generation, now=now)
            points = [p for p in record.by_name[engine.candidate].points or [] if p.num_speculative_tokens == engine.k]
            events.append(("Normal", "EngineMeasured", f"{engine.describe()}: " + "; ".join(
                f"batch size {p.batch_size}: step {1000 * p.step_seconds:.1f} ms, {p.tokens_per_second:.1f} "
                "tokens/s" for p in points)))
        elif outcome.state == "running":
            running.append(engine)
        else:
            pending.append(engine)
    start = tuple(pending[:max(0, spec.parallelism - len(running))])
    total = len(the_plan.engines)
    done = sum(1 for e in the_plan.engines if record.measured(e))
    candidates = [_phase(record.by_name[p.name], the_plan, running, start) for p in the_plan.candidates]
    fields: dict[str, Any] = {"progress": f"{done}/{total}", "candidates": candidates,
                              "target_fingerprint": the_plan.fingerprint,
                              "start_time": current.start_time or (now if start or running else None)}
    if done < total:
        active = [*running, *start]
        fields["running"] = ", ".join(e.describe() for e in active)[:128] or None
        message = f"{done}/{total} engines measured; running {fields['running'] or 'none'}"
        status = _status(current, "Running", "Measuring", message, generation=generation, now=now, **fields)
        return Step(status=status, start=start, events=tuple(events))
    return _finish(current, the_plan, record, events, fields, generation=generation, now=now, calibration=calibration)


def _record(record: _Record, engine: Engine, text: str, batch_sizes: Sequence[int]) -> str | None:
    try:
        report = decode(text)
    except ReportError as error:
        return f"its result cannot be read: {error}"
    problem = unexpected(report, engine.k, batch_sizes)
    if problem is not None:
        return problem
    candidate = record.by_name[engine.candidate]
    points = [p for p in candidate.points or [] if p.num_speculative_tokens != engine.k] + report.points()
    acceptance = [a for a in candidate.acceptance or [] if a.num_speculative_tokens != engine.k]
    acceptance += acceptance_rows(report.measurements)
    record.by_name[engine.candidate] = candidate.model_copy(update={
        "points": sorted(points, key=lambda p: (p.num_speculative_tokens, p.batch_size)),
        "acceptance": sorted(acceptance, key=lambda a: a.num_speculative_tokens) or None,
        "measured": sorted({*(candidate.measured or []), engine.k})})
    return None


def _phase(candidate: CandidateStatus, the_plan: Plan, running: Sequence[Engine],
           start: Sequence[Engine]) -> CandidateStatus:
    ks = [e.k for e in the_plan.engines if e.candidate == candidate.name]
    if set(ks) <= set(candidate.measured or []):
        phase = "Succeeded"
    elif any(e.candidate == candidate.name for e in [*running, *start]):
        phase = "Running"
    else:
        phase = "Pending" if not candidate.measured else "Running"
    return candidate.model_copy(update={"phase": phase})


def _finish(current: SpeculativeInferenceCalibrationStatus, the_plan: Plan, record: _Record, events: list[Event],
            fields: dict[str, Any], *, generation: int | None, now: str, calibration: str) -> Step:
    results = [CandidateResult(name=c.name, method=c.method, points=tuple(c.points or []))
               for c in record.by_name.values()]
    comparison, recommendation = compare(results, configured_method=the_plan.configured_method)
    fields.update(comparison=comparison, recommendation=recommendation)
    status = _status(current, "Succeeded", "Completed", recommendation.message, generation=generation, now=now,
                     **fields)
    configured = record.by_name.get(CONFIGURED)
    cells = step_cost_cells(configured.points or [] if configured else [], record.by_name[BASELINE].points or [])
    summary = CalibrationSummary(name=calibration, completed_at=now, fingerprint=the_plan.fingerprint,
                                 method=the_plan.configured_method, step_cost=cells,
                                 recommendation=recommendation.message)
    events.append(("Normal", "Completed", recommendation.message))
    target_event = ("Normal", "Calibrated",
                    f"calibration {calibration}: step time measured at {len(cells)} (batch size, K) cells; the "
                    f"tuner's step-cost prior is fitted to them from now on. {recommendation.message}")
    return Step(status=status, events=tuple(events), summary=summary, target_event=target_event)
