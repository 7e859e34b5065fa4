"""Method auto's controller on plain data: a fake API records what it creates and writes; no cluster."""

from __future__ import annotations

import asyncio
import copy

import pytest

from specinfer.api.calibration import SpeculativeInferenceCalibrationSpec
from specinfer.operator.plumbing.store import Cache, Store
from specinfer.operator.pure.config import OperatorConfig
from specinfer.operator.pure.errors import ApiError
from specinfer.operator.render import render
from specinfer.operator.selection.controller import (
    FIELD_MANAGER,
    SELECTION_LABEL,
    SelectionController,
    read_selection,
)
from tests.crd_schema import assert_status_in_crd

pytestmark = pytest.mark.unit

RESOURCE = {
    "apiVersion": "specinfer.io/v1alpha1", "kind": "SpeculativeInference",
    "metadata": {"name": "llama", "namespace": "ml", "uid": "u-1", "generation": 1, "resourceVersion": "10"},
    "spec": {"model": {"name": "m/x"}, "hardware": {"accelerator": "cpu"},
             "speculation": {"method": "auto", "candidates": [{"method": "ngram", "numSpeculativeTokens": 3},
                                                             {"method": "draftModel", "draftModel": {"name": "m/x"},
                                                              "numSpeculativeTokens": 2}]}},
}


class FakeKube:
    def __init__(self, refuse: int | None = None, existing: dict | None = None) -> None:
        self.applied: list[tuple[dict, str]] = []
        self.status_writes: list[dict] = []
        self.refuse = refuse
        self.existing = existing  # what a GET of the comparison answers

    async def create(self, manifest, *, field_manager):
        if self.refuse:
            raise ApiError(self.refuse, "PATCH", "/apis/specinfer.io", "forbidden: quota exceeded")
        self.applied.append((copy.deepcopy(manifest), field_manager))
        return {**copy.deepcopy(manifest), "metadata": {**manifest["metadata"], "uid": "c-1",
                                                        "creationTimestamp": "2026-12-02T00:00:00Z"}}

    async def request(self, method, path, *, body=None, content_type=None, query=None, verb=None):
        assert method == "PATCH" and path.endswith("/status") and ("fieldManager", FIELD_MANAGER) in query
        assert_status_in_crd("SpeculativeInference", body["status"])
        self.status_writes.append(copy.deepcopy(body["status"]))
        stored = copy.deepcopy(RESOURCE)
        stored["status"] = body["status"]
        return stored

    async def get(self, path, **_):
        return copy.deepcopy(self.existing)


class Events:
    def __init__(self) -> None:
        self.recorded: list[tuple[str, str, str]] = []

    async def record(self, resource, *, type_, reason, message):
        self.recorded.append((type_, reason, message))


def controller(kube: FakeKube, resource: dict | None = None) -> tuple[SelectionController, Store, Cache, Events]:
    store, cache, events = Store(), Cache(), Events()
    store.put_resource(copy.deepcopy(resource or RESOURCE))
    return SelectionController(kube=kube, store=store, calibrations=cache, events=events,
                               clock=lambda: 1_800_000_000.0), store, cache, events


def test_an_auto_resource_gets_a_comparison_and_a_measuring_status():
    kube = FakeKube()
    selection, store, cache, events = controller(kube)
    asyncio.run(selection.reconcile(("ml", "llama")))
    (manifest, manager), = kube.applied
    assert manager == FIELD_MANAGER
    assert manifest["kind"] == "SpeculativeInferenceCalibration" and manifest["metadata"]["name"] == "llama-select-1"
    assert manifest["metadata"]["labels"][SELECTION_LABEL] == "llama"
    assert manifest["metadata"]["ownerReferences"][0]["uid"] == "u-1"  # deleted with the resource
    spec = SpeculativeInferenceCalibrationSpec.model_validate(manifest["spec"])  # what admission would take
    assert [(c.name, c.num_speculative_tokens) for c in spec.candidates] == [("ngram", [3]), ("draftmodel", [2])]
    assert ("ml", "llama-select-1") in cache
    (status,) = kube.status_writes
    assert status["selection"]["phase"] == "Measuring"
    assert [reason for _, reason, _ in events.recorded] == ["SelectionStarted"]


def test_a_finished_comparison_names_the_winner_and_the_pods_serve_it():
    kube = FakeKube()
    selection, store, cache, events = controller(kube)
    asyncio.run(selection.reconcile(("ml", "llama")))
    cache[("ml", "llama-select-1")]["status"] = {"phase": "Succeeded", "comparison": [
        {"name": "ngram", "method": "ngram", "speedupVsNone": 1.10, "gainVsConfigured": 0.1},
        {"name": "draftmodel", "method": "draftModel", "speedupVsNone": 1.60, "gainVsConfigured": 0.6},
        {"name": "none", "method": "none", "speedupVsNone": 1.0, "gainVsConfigured": 0.0}]}
    asyncio.run(selection.reconcile(("ml", "llama")))
    chosen = kube.status_writes[-1]["selection"]
    assert (chosen["candidate"], chosen["phase"]) == ("draftmodel", "Chosen")
    assert events.recorded[-1][1] == "MethodSelected"
    assert "draftModel beat ngram by 45%" in events.recorded[-1][2]
    effective = render(store.resources[("ml", "llama")], OperatorConfig()).effective_status()
    assert (effective.method, effective.num_speculative_tokens) == ("draftModel", 2)
    assert len(kube.applied) == 1  # no second comparison


def test_the_serving_candidates_live_windows_become_the_baseline_a_switch_is_verified_against():
    kube = FakeKube()
    selection, store, cache, events = controller(kube)
    asyncio.run(selection.reconcile(("ml", "llama")))
    cache[("ml", "llama-select-1")]["metadata"]["creationTimestamp"] = "2027-01-15T07:55:00Z"  # running, in time

    def window(speed: float, at: str, rolling: bool) -> None:
        stored = store.resources[("ml", "llama")]
        stored["status"] = {**stored["status"], "effective": {"method": "none", "numSpeculativeTokens": 0},
                            "metrics": {"tokensPerRequestSecond": speed, "meanBatchSize": 4.0, "sampledAt": at},
                            "conditions": [{"type": "Progressing", "status": "True" if rolling else "False"}]}
        asyncio.run(selection.reconcile(("ml", "llama")))

    window(5.0, "2027-01-15T07:59:00Z", rolling=True)  # a rollout's window mixes two configs
    assert "baseline" not in (store.resources[("ml", "llama")]["status"]["selection"])
    window(20.0, "2027-01-15T07:59:30Z", rolling=False)
    assert store.resources[("ml", "llama")]["status"]["selection"]["baseline"]["tokensPerRequestSecond"] == 20.0
    cache[("ml", "llama-select-1")]["status"] = {"phase": "Succeeded", "comparison": [
        {"name": "ngram", "method": "ngram", "speedupVsNone": 1.30, "gainVsConfigured": 0.3},
        {"name": "none", "method": "none", "speedupVsNone": 1.0, "gainVsConfigured": 0.0}]}
    asyncio.run(selection.reconcile(("ml", "llama")))
    chosen = kube.status_writes[-1]["selection"]
    assert chosen["candidate"] == "ngram" and "baseline" not in chosen
    assert chosen["verification"]["baseline"]["tokensPerRequestSecond"] == 20.0
    assert chosen["verification"]["previous"] == "none"
    assert chosen["history"][0]["predictedGain"] == pytest.approx(0.3)


def test_a_fixed_method_is_left_alone():
    kube = FakeKube()
    fixed = copy.deepcopy(RESOURCE)
    fixed["spec"]["speculation"] = {"method": "ngram"}
    selection, *_ = controller(kube, fixed)
    asyncio.run(selection.reconcile(("ml", "llama")))
    assert kube.applied == [] and kube.status_writes == []


def test_a_refused_comparison_is_said_in_status_and_retried_with_backoff():
    kube = FakeKube(refuse=403)
    selection, store, cache, events = controller(kube)
    asyncio.run(selection.reconcile(("ml", "llama")))
    (status,) = kube.status_writes
    assert status["selection"]["phase"] == "Failed" and status["selection"]["attempts"] == 1
    message = status["selection"]["message"]
    assert "cannot create comparison llama-select-1: HTTP 403 forbidden: quota exceeded" in message
    assert "none keeps serving" in message
    assert events.recorded[-1][:2] == ("Warning", "SelectionFailed")


def test_a_transient_api_error_is_left_to_the_queue():
    kube = FakeKube(refuse=429)
    selection, *_ = controller(kube)
    with pytest.raises(ApiError):
        asyncio.run(selection.reconcile(("ml", "llama")))
    assert kube.status_writes == []


def test_a_taken_name_is_adopted_only_when_it_is_this_resources_running_comparison():
    ours = {"metadata": {"name": "llama-select-1", "labels": {SELECTION_LABEL: "llama"},
                         "ownerReferences": [{"uid": "u-1", "kind": "SpeculativeInference", "name": "llama"}]},
            "status": {"phase": "Running"}}
    kube = FakeKube(refuse=409, existing=ours)
    selection, *_ = controller(kube)
    asyncio.run(selection.reconcile(("ml", "llama")))
    assert kube.status_writes[-1]["selection"]["phase"] == "Measuring"
    finished = {**ours, "status": {"phase": "Succeeded"}}  # an old run: its figures would decide at once
    foreign = {**ours, "metadata": {**ours["metadata"], "labels": {}}}  # a user's calibration of that name
    for taken in (finished, foreign):
        kube = FakeKube(refuse=409, existing=taken)
        selection, *_ = controller(kube)
        asyncio.run(selection.reconcile(("ml", "llama")))
        stored = kube.status_writes[-1]["selection"]
        assert stored["phase"] == "Failed" and "exists and is not this resource's running comparison" in \
            stored["message"]
        assert stored["comparisons"] == 1  # the next attempt takes the next number


def test_a_stored_selection_that_partly_does_not_read_keeps_its_choice():
    stored = {"candidate": "draftmodel", "method": "draftModel", "phase": "Chosen", "comparisons": 4,
              "history": [{"candidate": "x", "time": "t"}], "attempts": -3, "message": 7}
    selection = read_selection(stored)
    assert (selection.candidate, selection.phase, selection.comparisons) == ("draftmodel", "Chosen", 4)
    assert selection.history is None and selection.attempts == 0 and selection.message is None
    assert read_selection("garbage").candidate is None
