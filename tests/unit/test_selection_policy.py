"""Method auto's decisions (operator/selection/policy.py): when to compare, what, and which candidate wins."""

from __future__ import annotations

import pytest

from specinfer.api import parse_spec
from specinfer.api.status import MetricsStatus, SelectionStatus
from specinfer.api.timestamps import rfc3339
from specinfer.operator.selection.policy import (
    MIN_SWITCH_GAIN,
    RETRY_BASE_SECONDS,
    SHIFT_HOLD_SECONDS,
    World,
    comparison_name,
    step,
)

pytestmark = pytest.mark.unit

NOW = 1_800_000_000.0
SPEC = parse_spec({
    "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
    "speculation": {"method": "auto", "reselectIntervalSeconds": 3600, "candidates": [
        {"method": "ngram", "numSpeculativeTokens": 4},
        {"method": "eagle3", "draftModel": {"name": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}},
    ]},
    "hardware": {"accelerator": "nvidia"},
    "tuning": {"mode": "auto"},
})


def world(selection: SelectionStatus | None = None, calibration=None, **fields) -> World:
    return World(name="llama", spec=SPEC, selection=selection or SelectionStatus(), calibration=calibration,
                 now=fields.pop("now", NOW), **fields)


def calibration(phase: str, speedups: dict[str, float] | None = None, *, created: float = NOW - 600,
                acceptance: dict[str, list[float]] | None = None, failed: str | None = None) -> dict:
    methods = {"configured": "ngram", "ngram": "ngram", "eagle3": "eagle3", "none": "none"}
    status: dict = {"phase": phase, "progress": "2/3", "running": "eagle3 K=3"}
    if speedups:
        status["comparison"] = [{"name": n, "method": methods[n], "speedupVsNone": v, "gainVsConfigured": 0.0}
                                for n, v in speedups.items()]
    if acceptance:
        status["candidates"] = [{"name": n, "method": methods[n], "acceptance": [
            {"numSpeculativeTokens": len(p), "drafts": 100, "perPosition": p}]} for n, p in acceptance.items()]
    if failed:
        status["conditions"] = [{"type": "Failed", "status": "True", "reason": "EngineFailed", "message": failed}]
        status["candidates"] = [{"name": "eagle3", "method": "eagle3", "phase": "Failed",
                                 "message": "engine exited 1: draft weights not found"}]
    return {"metadata": {"name": "llama-select-1", "creationTimestamp": rfc3339(created)},
            "spec": {"batchSizes": [1, 4, 16]}, "status": status}


def measuring(**fields) -> SelectionStatus:
    return SelectionStatus(phase="Measuring", calibration="llama-select-1", comparisons=1, **fields)


def test_a_new_resource_is_compared_at_once_while_initial_serves():
    result = step(world())
    assert result.create is not None
    name, spec = result.create
    assert name == "llama-select-1" and spec.target_ref.name == "llama"
    assert [(c.name, c.speculation.method, c.num_speculative_tokens) for c in spec.candidates] == [
        ("ngram", "ngram", [4]), ("eagle3", "eagle3", [3])]  # eagle3 at its default K on nvidia
    assert spec.num_speculative_tokens is None  # what serves (none) is the calibration's baseline
    assert spec.batch_sizes == [1, 4, 16]
    assert result.selection.phase == "Measuring" and result.selection.calibration == name
    assert result.event is not None and result.event[1] == "SelectionStarted"
    assert "none serves meanwhile" in result.event[2]


def test_a_running_comparison_reports_progress_and_creates_nothing():
    result = step(world(measuring(message="no comparison yet: comparing ngram, eagle3, none"),
                        calibration("Running")))
    assert result.create is None and result.event is None
    assert result.selection.message.endswith("[2/3 engines measured; running eagle3 K=3]")
    again = step(world(result.selection, calibration("Running")))
    assert again.selection == result.selection  # nothing to write the second time


def test_the_fastest_candidate_wins_and_the_reason_names_the_runner_up():
    result = step(world(measuring(), calibration("Succeeded", {"ngram": 1.42, "eagle3": 1.17, "none": 1.0},
                                                 acceptance={"ngram": [0.8, 0.6, 0.4, 0.2]})))
    selection = result.selection
    assert (selection.candidate, selection.method, selection.phase, selection.attempts) == ("ngram", "ngram",
                                                                                            "Chosen", 0)
    assert selection.history[0].reason.startswith("ngram beat eagle3 by 21% at batch sizes 1, 4, 16")
    assert selection.history[0].num_speculative_tokens == 4
    assert selection.measured_batch_sizes == [1, 4, 16]
    assert selection.measured_acceptance == 0.5
    assert selection.not_before == rfc3339(NOW + 3600)
    assert result.event is not None and result.event[:2] == ("Normal", "MethodSelected")


def test_no_speculation_can_win():
    result = step(world(measuring(), calibration("Succeeded", {"ngram": 0.81, "eagle3": 0.92, "none": 1.0})))
    assert result.selection.candidate == "none"
    assert result.event is not None and result.event[1] == "MethodKept"  # none was serving already


def test_a_gain_within_the_switch_margin_keeps_what_serves():
    serving = measuring(candidate="ngram", method="ngram")
    near = 1.0 + MIN_SWITCH_GAIN / 2
    result = step(world(serving, calibration("Succeeded", {"configured": 1.30, "eagle3": 1.30 * near, "none": 1.0})))
    assert result.selection.candidate == "ngram"
    assert "below the 3% a method change must earn" in result.selection.message


def test_the_serving_candidate_is_measured_as_the_calibrations_own_method():
    chosen = SelectionStatus(phase="Failed", candidate="ngram", method="ngram", comparisons=3,
                             not_before=rfc3339(NOW - 1))
    result = step(world(chosen))
    assert result.create is not None
    name, spec = result.create
    assert name == "llama-select-4"
    assert [c.name for c in spec.candidates] == ["eagle3"]
    assert spec.num_speculative_tokens == [4]


def test_a_failed_comparison_keeps_serving_says_which_candidate_and_backs_off():
    first = step(world(measuring(), calibration("Failed", failed="engine eagle3 K=3 failed")))
    selection = first.selection
    assert (selection.phase, selection.attempts, selection.candidate) == ("Failed", 1, None)
    assert "candidate eagle3: engine exited 1: draft weights not found" in selection.message
    assert "none keeps serving" in selection.message
    assert selection.not_before == rfc3339(NOW + RETRY_BASE_SECONDS)
    assert first.event is not None and first.event[:2] == ("Warning", "SelectionFailed")
    assert step(world(selection, now=NOW + 10)).create is None  # backing off
    retry = step(world(selection, now=NOW + RETRY_BASE_SECONDS))
    assert retry.create is not None and retry.create[0] == "llama-select-2"
    second = step(world(retry.selection.model_copy(update={"calibration": "llama-select-1"}),
                        calibration("Failed", failed="again"), now=NOW + 200))
    assert second.selection.not_before == rfc3339(NOW + 200 + 2 * RETRY_BASE_SECONDS)


def test_a_comparison_deleted_while_measuring_is_a_failure_not_a_hang():
    result = step(world(measuring(), None))
    assert result.selection.phase == "Failed" and "is gone" in result.selection.message


def test_a_comparison_that_never_finishes_fails_after_hours():
    result = step(world(measuring(), calibration("Running", created=NOW - 4 * 3600)))
    assert result.selection.phase == "Failed" and "may not be schedulable" in result.selection.message


def chosen(**fields) -> SelectionStatus:
    return SelectionStatus(phase="Chosen", candidate="ngram", method="ngram", comparisons=1,
                           measured_batch_sizes=[1, 4, 16], measured_acceptance=0.5,
                           not_before=rfc3339(NOW - 1), **fields)


def test_a_sustained_batch_size_shift_starts_a_new_comparison():
    peak = MetricsStatus(mean_batch_size=48.0, acceptance_rate=0.5)
    first = step(world(chosen(), metrics=peak))
    assert first.create is None and first.selection.shift_since == rfc3339(NOW)
    held = step(world(first.selection, metrics=peak, now=NOW + SHIFT_HOLD_SECONDS - 1))
    assert held.create is None
    later = step(world(first.selection, metrics=peak, now=NOW + SHIFT_HOLD_SECONDS))
    assert later.create is not None
    assert later.create[1].batch_sizes == [1, 4, 16, 64]  # the larger batches are measured this time
    assert "mean batch size 48.0 is outside" in later.selection.message


def test_an_acceptance_shift_counts_too_and_a_return_clears_it():
    drifted = step(world(chosen(), metrics=MetricsStatus(mean_batch_size=4.0, acceptance_rate=0.2)))
    assert drifted.selection.shift_since is not None
    back = step(world(drifted.selection, metrics=MetricsStatus(mean_batch_size=4.0, acceptance_rate=0.45)))
    assert back.selection.shift_since is None


def test_reselection_is_rate_limited_and_waits_for_rollouts():
    peak = MetricsStatus(mean_batch_size=48.0)
    shifted = chosen(shift_since=rfc3339(NOW - 2 * SHIFT_HOLD_SECONDS))
    early = shifted.model_copy(update={"not_before": rfc3339(NOW + 60)})
    assert step(world(early, metrics=peak)).create is None
    busy = step(world(shifted, metrics=peak, busy="a rollout is in progress"))
    assert busy.create is None and "waits: a rollout is in progress" in busy.selection.message
    assert step(world(busy.selection, metrics=peak, busy="a rollout is in progress")).selection == busy.selection


def test_comparison_names_stay_short_enough_for_their_jobs():
    assert comparison_name("llama", 3) == "llama-select-3"
    long = comparison_name("a" * 63, 12)
    assert len(long) <= 40 and long.endswith("-select-12")
    assert comparison_name("a" * 63, 12) != comparison_name("a" * 62 + "b", 12)
