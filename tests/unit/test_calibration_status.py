"""Jobs and pods -> the calibration's next status, the Jobs to start or stop, the target's summary."""

from __future__ import annotations

import pytest

from specinfer.api import parse_spec
from specinfer.api.calibration import SpeculativeInferenceCalibrationSpec, SpeculativeInferenceCalibrationStatus
from specinfer.operator.calibration.pure.render import plan
from specinfer.operator.calibration.pure.status import EngineOutcome, engine_outcome, step, waiting
from specinfer.runtime.contract.calibration.measurement import EngineReport, Measurement, encode
from tests.crd_schema import assert_status_in_crd

pytestmark = pytest.mark.unit

TARGET = parse_spec({"model": {"name": "m"}, "speculation": {"method": "ngram", "numSpeculativeTokens": 2},
                     "hardware": {"accelerator": "cpu"}})
SPEC = SpeculativeInferenceCalibrationSpec.model_validate({
    "targetRef": {"name": "t"}, "batchSizes": [1, 4], "numSpeculativeTokens": [2], "parallelism": 2,
    "candidates": [{"speculation": {"method": "draftModel", "draftModel": {"name": "d"}}}]})
PLAN = plan(SPEC, TARGET)  # configured-k2, draftmodel-k2, none-k0
NOW = "2026-12-01T10:00:00Z"


def job(*conditions: str) -> dict:
    return {"status": {"conditions": [{"type": c, "status": "True", "reason": "DeadlineExceeded",
                                       "message": "Job was active longer than specified deadline"}
                                      for c in conditions]}}


def pod(*, exit_code: int | None = None, message: str = "", waiting_reason: str | None = None) -> dict:
    if waiting_reason:
        state = {"waiting": {"reason": waiting_reason, "message": "pull access denied"}}
    elif exit_code is None:
        state = {"running": {}}
    else:
        state = {"terminated": {"exitCode": exit_code, "message": message, "reason": "Completed"}}
    return {"status": {"containerStatuses": [{"name": "engine", "state": state}]}}


def report(k: int, step_seconds: float, tokens: int) -> str:
    def point(batch: int) -> Measurement:
        drafts = 100 if k else 0
        return Measurement(k=k, batch_size=batch, seconds=1.0, steps=round(1 / step_seconds),
                           request_steps=round(batch / step_seconds), generated=tokens * batch, drafts=drafts,
                           accepted=(90, 70) if k else ())
    return encode(EngineReport(measurements=(point(1), point(4))))


def test_engine_outcomes():
    assert engine_outcome(None, None).state == "pending"
    assert engine_outcome(job(), pod()).state == "running"
    assert engine_outcome(job(), pod(exit_code=0, message="x")).state == "running"  # not counted by the Job yet
    assert engine_outcome(job("Complete"), pod(exit_code=0, message="R")) == EngineOutcome("succeeded",
                                                                                          report_text="R")
    failed = engine_outcome(job(), pod(exit_code=1, message="specinfer calibrate: the engine exited with code 2"))
    assert failed.state == "failed" and failed.message == "specinfer calibrate: the engine exited with code 2"
    assert "exited with code 137 (Completed) and left no message" in engine_outcome(job(), pod(exit_code=137)).message
    pull = engine_outcome(job(), pod(waiting_reason="ErrImagePull"))
    assert pull.state == "failed" and pull.message.startswith("ErrImagePull: pull access denied")
    deadline = engine_outcome(job("Failed"), pod())
    assert deadline.state == "failed" and "DeadlineExceeded" in deadline.message
    late = engine_outcome(job("Failed"), pod(exit_code=0, message="R"))  # finished after the Job's deadline
    assert late.state == "failed" and "DeadlineExceeded" in late.message and "exited 0" in late.message


def test_a_run_starts_within_parallelism_records_results_and_finishes():
    empty = SpeculativeInferenceCalibrationStatus()
    first = step(spec=SPEC, current=empty, the_plan=PLAN, outcomes={}, generation=1, now=NOW, calibration="cal")
    assert [e.key for e in first.start] == ["configured-k2", "draftmodel-k2"]
    assert first.status.phase == "Running" and first.status.progress == "0/3" and first.status.start_time == NOW
    assert first.status.running == "configured K=2, draftmodel K=2"

    running = {"configured-k2": EngineOutcome("succeeded", report_text=report(2, 0.010, 2)),
               "draftmodel-k2": EngineOutcome("running")}
    second = step(spec=SPEC, current=first.status, the_plan=PLAN, outcomes=running, generation=1, now=NOW,
                  calibration="cal")
    assert [e.key for e in second.start] == ["none-k0"]
    assert second.status.progress == "1/3"
    configured = next(c for c in second.status.candidates if c.name == "configured")
    assert configured.measured == [2] and configured.phase == "Succeeded" and len(configured.points) == 2
    assert configured.acceptance[0].per_position == [0.9, 0.7]
    assert any(reason == "EngineMeasured" and "configured K=2" in message for _, reason, message in second.events)

    # the configured engine's pod is gone now (TTL): its result is in status and it is not run again
    done = {"draftmodel-k2": EngineOutcome("succeeded", report_text=report(2, 0.020, 3)),
            "none-k0": EngineOutcome("succeeded", report_text=report(0, 0.008, 1))}
    final = step(spec=SPEC, current=second.status, the_plan=PLAN, outcomes=done, generation=1, now=NOW,
                 calibration="cal")
    assert final.start == () and final.status.phase == "Succeeded" and final.status.progress == "3/3"
    assert [c.status for c in final.status.conditions if c.type == "Complete"] == ["True"]
    assert final.status.completion_time == NOW and final.status.recommendation is not None
    assert final.summary is not None and final.summary.name == "cal" and final.summary.method == "ngram"
    assert sorted({c.num_speculative_tokens for c in final.summary.step_cost}) == [0, 2]
    assert final.target_event[1] == "Calibrated"
    # what the controller writes: the calibration's status and the target's status.calibration
    for status in (first.status, second.status, final.status):
        assert_status_in_crd("SpeculativeInferenceCalibration", status.to_json())
    assert_status_in_crd("SpeculativeInference", {"calibration": final.summary.to_json()})


def test_one_failed_engine_fails_the_run_and_stops_the_others():
    outcomes = {"configured-k2": EngineOutcome("running"),
                "draftmodel-k2": EngineOutcome("failed", "specinfer calibrate: the engine exited with code 2 "
                                                         "before it served: spec.speculation.draftModel.name: ...")}
    result = step(spec=SPEC, current=SpeculativeInferenceCalibrationStatus(), the_plan=PLAN, outcomes=outcomes,
                  generation=1, now=NOW, calibration="cal")
    assert result.status.phase == "Failed" and [e.key for e in result.stop] == ["configured-k2"]
    failed = next(c for c in result.status.conditions if c.type == "Failed")
    assert failed.status == "True" and failed.reason == "EngineFailed"
    assert failed.message.startswith("engine draftmodel K=2 (draftModel): specinfer calibrate: the engine exited")
    assert result.summary is None


def test_an_unreadable_or_wrong_report_fails_the_run():
    for text, words in (("garbage", "its result cannot be read: the report is not JSON"),
                        (report(3, 0.01, 2), "the report is for K=3")):
        result = step(spec=SPEC, current=SpeculativeInferenceCalibrationStatus(), the_plan=PLAN,
                      outcomes={"configured-k2": EngineOutcome("succeeded", report_text=text)}, generation=1,
                      now=NOW, calibration="cal")
        failed = next(c for c in result.status.conditions if c.type == "Failed")
        assert failed.reason == "InvalidReport" and words in failed.message


def test_a_target_changed_mid_run_fails_it():
    current = SpeculativeInferenceCalibrationStatus(target_fingerprint="0123456789abcdef", phase="Running")
    result = step(spec=SPEC, current=current, the_plan=PLAN, outcomes={"none-k0": EngineOutcome("running")},
                  generation=1, now=NOW, calibration="cal")
    assert result.status.phase == "Failed" and [e.key for e in result.stop] == ["none-k0"]
    assert "changed while the calibration ran" in result.status.conditions[0].message


def test_waiting_announces_once_per_reason():
    first = waiting(SpeculativeInferenceCalibrationStatus(), "TargetNotFound", "spec.targetRef.name: ...",
                    generation=1, now=NOW)
    assert first.status.phase == "Pending" and first.events[0][:2] == ("Warning", "TargetNotFound")
    again = waiting(first.status, "TargetNotFound", "spec.targetRef.name: ...", generation=1, now=NOW)
    assert again.events == ()
