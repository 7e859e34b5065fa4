"""A failed calibration leaves nothing running: every failure path stops the run's unfinished Jobs,
and a refused delete is retried before the run is written Failed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from specinfer.api.calibration import SpeculativeInferenceCalibrationStatus
from specinfer.operator.calibration.pure import status as steps
from specinfer.operator.calibration.reconciler import CalibrationController
from specinfer.operator.pure.config import OperatorConfig
from specinfer.operator.pure.errors import ApiError, TemporaryError

pytestmark = pytest.mark.unit

UID = "cal-uid"
CALIBRATION = {"apiVersion": "specinfer.io/v1alpha1", "kind": "SpeculativeInferenceCalibration",
               "metadata": {"name": "cal", "namespace": "team-a", "uid": UID}, "spec": {}}


def job(name: str, owner: str = UID, finished: str | None = None) -> dict[str, Any]:
    conditions = [{"type": finished, "status": "True"}] if finished else []
    return {"kind": "Job", "metadata": {"name": name, "namespace": "team-a", "ownerReferences": [
        {"uid": owner, "controller": True, "kind": "SpeculativeInferenceCalibration", "name": "cal"}]},
        "status": {"conditions": conditions}}


class FakeKube:
    def __init__(self, refuse: set[str] = frozenset()) -> None:
        self.calls: list[tuple[str, str]] = []
        self.refuse = refuse

    async def request(self, method: str, path: str, **_: Any) -> dict[str, Any] | None:
        self.calls.append((method, path))
        name = path.rsplit("/", 1)[-1]
        if method == "DELETE" and name in self.refuse:
            raise ApiError(403, method, path, "forbidden")
        return None


class NoEvents:
    async def record(self, *_: Any, **__: Any) -> None:
        return None


def controller(kube: FakeKube) -> CalibrationController:
    made = CalibrationController(kube=kube, store=None, config=OperatorConfig(), events=NoEvents())  # type: ignore[arg-type]
    made.jobs = {("team-a", "cal-ngram-k1"): job("cal-ngram-k1"),
                 ("team-a", "cal-none-k0"): job("cal-none-k0", finished="Complete"),
                 ("team-a", "other-ngram-k1"): job("other-ngram-k1", owner="someone-else"),
                 ("team-b", "cal-ngram-k2"): job("cal-ngram-k2")}
    return made


def failure() -> steps.Step:
    return steps.failed(SpeculativeInferenceCalibrationStatus(phase="Running"), "InvalidReport", "bad report",
                        generation=1, now="2026-11-30T20:00:00Z")


def test_a_failure_without_a_stop_list_still_stops_the_runs_unfinished_jobs():
    kube = FakeKube()
    asyncio.run(controller(kube)._apply(CALIBRATION, failure(), None))
    deleted = [path for method, path in kube.calls if method == "DELETE"]
    assert deleted == ["/apis/batch/v1/namespaces/team-a/jobs/cal-ngram-k1"]  # not the finished one, not others'


def test_a_refused_delete_is_retried_before_the_run_is_written_failed():
    kube = FakeKube(refuse={"cal-ngram-k1"})
    with pytest.raises(TemporaryError, match="cannot stop Job team-a/cal-ngram-k1"):
        asyncio.run(controller(kube)._apply(CALIBRATION, failure(), None))
    assert not [call for call in kube.calls if call[0] == "PATCH"]  # no Failed status written
