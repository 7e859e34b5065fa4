"""Method auto's decisions (operator/selection/pure/policy.py): when to compare, what, and which candidate wins."""

from __future__ import annotations

import copy

import pytest

from specinfer.api import parse_spec
from specinfer.api.status import MetricsStatus, SelectionStatus
from specinfer.api.timestamps import rfc3339
from specinfer.operator.selection.pure.policy import (
    MIN_COMPARISON_SECONDS,
    MIN_SWITCH_GAIN,
    RETRY_BASE_SECONDS,
    RETRY_MAX_SECONDS,
    SHIFT_HOLD_SECONDS,
    World,
    batch_sizes_to_measure,
    comparison_name,
    fingerprint,
    step,
)

pytestmark = pytest.mark.unit

NOW = 1_800_000_000.0
RAW = {
    "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
    "speculation": {"method": "auto", "reselectIntervalSeconds": 3600, "candidates": [
        {"method": "ngram", "numSpeculativeTokens": 4},
        {"method": "eagle3", "draftModel": {"name": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}},
    ]},
    "hardware": {"accelerator": "nvidia"},
    "tuning": {"mode": "auto"},
}
SPEC = parse_spec(RAW)
PRINT = fingerprint(SPEC)


def world(selection: SelectionStatus | None = None, calibration=None, spec=SPEC, **fields) -> World:
    return World(name="llama", spec=spec, selection=selection or SelectionStatus(), calibration=calibration,
                 now=fields.pop("now", NOW), **fields)


def calibration(phase: str, speedups: dict[str, float] | None = None, *, created: float = NOW - 600,
                failed: str | None = None, status_extra: dict | None = None) -> dict:
    methods = {"configured": "ngram", "ngram": "ngram", "eagle3": "eagle3", "none": "none"}
    status: dict = {"phase": phase, "progress": "2/3", "running": "eagle3 K=3", **(status_extra or {})}
    if speedups:
        status["comparison"] = [{"name": n, "method": methods[n], "speedupVsNone": v, "gainVsConfigured": 0.0}
                                for n, v in speedups.items()]
    if failed:
        status["conditions"] = [{"type": "Failed", "status": "True", "reason": "EngineFailed", "message": failed}]
        status["candidates"] = [{"name": "eagle3", "method": "eagle3", "phase": "Failed",
                                 "message": "engine exited 1: draft weights not found"}]
    return {"metadata": {"name": "llama-select-1", "creationTimestamp": rfc3339(created)},
            "spec": {"targetRef": {"name": "llama"}, "batchSizes": [1, 4, 16],
                     "candidates": [{"name": "eagle3", "speculation": RAW["speculation"]["candidates"][1]}]},
            "status": status}


def measuring(**fields) -> SelectionStatus:
    return SelectionStatus(**{"phase": "Measuring", "calibration": "llama-select-1", "comparisons": 1,
                              "compared_with": "none", "fingerprint": PRINT, **fields})


def live(first: float | None = 0.5, batch: float = 4.0, *, at: float = NOW, k: int = 4) -> MetricsStatus:
    return MetricsStatus(mean_batch_size=batch, per_position_acceptance=[first] + [0.3] * (k - 1) if first else None,
                         sampled_at=rfc3339(at))


def test_a_new_resource_is_compared_at_once_while_initial_serves():
    result = step(world())
    assert result.create is not None
    name, spec = result.create
    assert name == "llama-select-1" and spec.target_ref.name == "llama"
    assert [(c.name, c.speculation.method, c.num_speculative_tokens) for c in spec.candidates] == [
        ("ngram", "ngram", [4]), ("eagle3", "eagle3", [3])]  # eagle3 at its default K on nvidia
    assert spec.num_speculative_tokens is None  # what serves (none) is the calibration's baseline
    assert spec.batch_sizes == [1, 4, 16]
    selection = result.selection
    assert (selection.phase, selection.calibration, selection.compared_with) == ("Measuring", name, "none")
    assert selection.fingerprint == PRINT
    assert result.event is not None and result.event[1] == "SelectionStarted"
    assert "none serves meanwhile" in result.event[2]


def test_a_running_comparison_reports_progress_and_creates_nothing():
    result = step(world(measuring(message="no comparison yet: comparing ngram, eagle3, none"),
                        calibration("Running")))
    assert result.create is None and result.event is None
    assert result.selection.message.endswith("[2/3 engines measured; running eagle3 K=3]")
    assert result.wake_at is not None and result.wake_at >= NOW - 600 + MIN_COMPARISON_SECONDS
    again = step(world(result.selection, calibration("Running")))
    assert again.selection == result.selection  # nothing to write the second time


def test_a_long_waiting_reason_never_overflows_the_stored_message():
    waiting = {"conditions": [{"type": "Progressing", "status": "False", "reason": "Waiting", "message": "x" * 4096}]}
    result = step(world(measuring(message="m" * 4000), calibration("Running", status_extra=waiting)))
    assert len(result.selection.message) <= 4096


def test_the_fastest_candidate_wins_and_the_reason_names_the_runner_up_and_what_served():
    result = step(world(measuring(), calibration("Succeeded", {"ngram": 1.42, "eagle3": 1.17, "none": 1.0})))
    selection = result.selection
    assert (selection.candidate, selection.method, selection.phase, selection.attempts) == ("ngram", "ngram",
                                                                                            "Chosen", 0)
    reason = selection.history[0].reason
    assert reason.startswith("ngram beat eagle3 by 21% and no speculation, which served, by 42% at batch sizes "
                             "1, 4, 16"), reason
    assert selection.history[0].num_speculative_tokens == 4
    assert selection.measured_batch_sizes == [1, 4, 16]
    assert selection.measured_acceptance is None  # taken on the live traffic once ngram serves
    assert selection.not_before == rfc3339(NOW + 3600)
    assert result.event is not None and result.event[:2] == ("Normal", "MethodSelected")


def test_no_speculation_can_win():
    result = step(world(measuring(), calibration("Succeeded", {"ngram": 0.81, "eagle3": 0.92, "none": 1.0})))
    assert result.selection.candidate == "none"
    assert result.event is not None and result.event[1] == "MethodKept"  # none was serving already


def test_a_gain_within_the_switch_margin_keeps_what_serves():
    serving = measuring(candidate="ngram", method="ngram", compared_with="ngram")
    near = 1.0 + MIN_SWITCH_GAIN / 2
    result = step(world(serving, calibration("Succeeded", {"configured": 1.30, "eagle3": 1.30 * near, "none": 1.0})))
    assert result.selection.candidate == "ngram"
    assert "below the 3% a method change must earn" in result.selection.message


def test_the_configured_row_is_the_candidate_that_served_when_the_comparison_started():
    """initial edited from first to none mid-comparison: the `configured` row is still ngram's."""
    edited = copy.deepcopy(RAW)
    edited["speculation"]["initial"] = "none"
    result = step(world(measuring(compared_with="ngram"), calibration(
        "Succeeded", {"configured": 1.4, "eagle3": 1.1, "none": 1.0}), spec=parse_spec(edited)))
    assert result.selection.candidate == "ngram"
    dropped = step(world(measuring(compared_with="none"), calibration(
        "Succeeded", {"configured": 1.4, "eagle3": 1.1, "none": 1.0})))
    assert dropped.selection.candidate == "eagle3"  # no configured row when none served
    assert "1.40x" not in dropped.selection.message


def test_the_serving_candidate_is_measured_as_the_calibrations_own_method():
    chosen = SelectionStatus(phase="Failed", candidate="ngram", method="ngram", comparisons=3, fingerprint=PRINT,
                             not_before=rfc3339(NOW - 1))
    result = step(world(chosen))
    assert result.create is not None
    name, spec = result.create
    assert name == "llama-select-4"
    assert [c.name for c in spec.candidates] == ["eagle3"]
    assert spec.num_speculative_tokens == [4]
    assert result.selection.compared_with == "ngram"


def test_a_failed_comparison_keeps_serving_leaves_out_the_failed_candidate_and_backs_off():
    first = step(world(measuring(), calibration("Failed", failed="engine eagle3 K=3 failed")))
    selection = first.selection
    assert (selection.phase, selection.attempts, selection.candidate) == ("Failed", 1, None)
    assert "candidate eagle3: engine exited 1: draft weights not found" in selection.message
    assert "none keeps serving" in selection.message
    assert [e.name for e in selection.excluded] == ["eagle3"]
    assert selection.not_before == rfc3339(NOW + RETRY_BASE_SECONDS)
    assert first.event is not None and first.event[:2] == ("Warning", "SelectionFailed")
    assert first.wake_at == NOW + RETRY_BASE_SECONDS
    assert step(world(selection, now=NOW + 10)).create is None  # backing off
    retry = step(world(selection, now=NOW + RETRY_BASE_SECONDS))
    assert retry.create is not None and retry.create[0] == "llama-select-2"
    assert [c.name for c in retry.create[1].candidates] == ["ngram"]  # eagle3 left out
    second = step(world(retry.selection.model_copy(update={"calibration": "llama-select-1"}),
                        calibration("Failed", failed="again"), now=NOW + 200))
    assert second.selection.not_before == rfc3339(NOW + 200 + 2 * RETRY_BASE_SECONDS)


def test_the_backoff_is_bounded_whatever_the_stored_attempts():
    stored = measuring(attempts=9_999)
    result = step(world(stored, calibration("Failed", failed="again")))
    assert result.selection.not_before == rfc3339(NOW + RETRY_MAX_SECONDS)


def test_a_spec_edit_compares_again_at_once_and_forgets_earlier_failures():
    failed = SelectionStatus(phase="Failed", attempts=4, comparisons=5, fingerprint=PRINT,
                             not_before=rfc3339(NOW + 3000), excluded=[{"name": "eagle3", "reason": "failed"}])
    assert step(world(failed)).create is None  # backing off, same spec
    edited = copy.deepcopy(RAW)
    edited["speculation"]["candidates"][1]["draftModel"]["name"] = "me/a-better-head"
    result = step(world(failed, spec=parse_spec(edited)))
    assert result.create is not None and result.create[0] == "llama-select-6"
    assert [c.name for c in result.create[1].candidates] == ["ngram", "eagle3"]
    assert result.selection.attempts == 0 and not result.selection.excluded
    assert result.selection.fingerprint == fingerprint(parse_spec(edited)) != PRINT


def test_a_comparison_deleted_while_measuring_is_a_failure_not_a_hang():
    result = step(world(measuring(), None))
    assert result.selection.phase == "Failed" and "is gone" in result.selection.message


def test_a_comparison_that_never_finishes_fails_after_its_deadline_even_with_an_unreadable_status():
    late = NOW - MIN_COMPARISON_SECONDS - 60
    assert step(world(measuring(), calibration("Running", created=late))).selection.phase == "Failed"
    garbled = calibration("Running", created=late)
    garbled["status"] = {"phase": 7, "candidates": "nope"}
    result = step(world(measuring(), garbled))
    assert result.selection.phase == "Failed" and "may not be schedulable" in result.selection.message
    assert step(world(measuring(), calibration("Running", created=NOW - 600))).selection.phase == "Measuring"


def test_a_long_comparison_gets_a_longer_deadline():
    slow = calibration("Running", created=NOW - MIN_COMPARISON_SECONDS - 60)
    slow["spec"]["load"] = {"warmupSeconds": 60, "durationSeconds": 3600}
    assert step(world(measuring(), slow)).selection.phase == "Measuring"


def chosen(**fields) -> SelectionStatus:
    return SelectionStatus(phase="Chosen", candidate="ngram", method="ngram", comparisons=1, fingerprint=PRINT,
                           measured_batch_sizes=[1, 4, 16], not_before=rfc3339(NOW - 1),
                           history=[{"time": rfc3339(NOW - 3600), "candidate": "ngram", "method": "ngram",
                                     "reason": "fastest"}], **fields)


def test_the_live_reference_is_taken_once_the_choice_has_served_for_a_while():
    early = step(world(chosen(), metrics=live(0.5, at=NOW - 3600 + 60), effective_method="ngram"))
    assert early.selection.measured_acceptance is None  # a window from the first minute after the switch
    taken = step(world(chosen(), metrics=live(0.5), effective_method="ngram"))
    assert taken.selection.measured_acceptance == 0.5
    other = step(world(chosen(), metrics=live(0.5), effective_method="eagle3"))
    assert other.selection.measured_acceptance is None  # the pods do not run ngram yet


def test_a_sustained_batch_size_shift_starts_a_new_comparison():
    peak = live(0.5, 48.0)
    first = step(world(chosen(measured_acceptance=0.5), metrics=peak, effective_method="ngram"))
    assert first.create is None and first.selection.shift_since == rfc3339(NOW)
    assert first.wake_at == NOW + SHIFT_HOLD_SECONDS
    held = step(world(first.selection, metrics=live(0.5, 48.0, at=NOW + 200), now=NOW + 200,
                      effective_method="ngram"))
    assert held.create is None and held.wake_at == NOW + SHIFT_HOLD_SECONDS
    later = step(world(first.selection, metrics=live(0.5, 48.0, at=NOW + 300), now=NOW + SHIFT_HOLD_SECONDS,
                       effective_method="ngram"))
    assert later.create is not None
    assert later.create[1].batch_sizes == [1, 4, 16, 64]  # the larger batches are measured this time
    assert "mean batch size 48.0 is outside" in later.selection.message


def test_a_first_position_acceptance_shift_counts_and_a_k_change_does_not():
    reference = chosen(measured_acceptance=0.5)
    longer_k = step(world(reference, metrics=live(0.5, k=7), effective_method="ngram"))
    assert longer_k.selection.shift_since is None  # position 0 does not depend on K
    drifted = step(world(reference, metrics=live(0.45), effective_method="ngram"))
    assert drifted.selection.shift_since is not None  # -10%
    back = step(world(drifted.selection, metrics=live(0.49), effective_method="ngram"))
    assert back.selection.shift_since is None


def test_stale_metrics_or_metrics_of_another_method_move_nothing():
    reference = chosen(measured_acceptance=0.5)
    stale = step(world(reference, metrics=live(0.1, 200.0, at=NOW - 3600), effective_method="ngram"))
    assert stale.selection == reference
    rolling = step(world(reference, metrics=live(0.1, 200.0), effective_method="none"))
    assert rolling.selection == reference


def test_reselection_is_rate_limited_and_waits_for_rollouts():
    peak = live(0.5, 48.0)
    shifted = chosen(measured_acceptance=0.5, shift_since=rfc3339(NOW - 2 * SHIFT_HOLD_SECONDS))
    early = shifted.model_copy(update={"not_before": rfc3339(NOW + 60)})
    held = step(world(early, metrics=peak, effective_method="ngram"))
    assert held.create is None and held.wake_at == NOW + 60
    busy = step(world(shifted, metrics=peak, busy="a rollout is in progress", effective_method="ngram"))
    assert busy.create is None and "waits: a rollout is in progress" in busy.selection.message
    assert step(world(busy.selection, metrics=peak, busy="a rollout is in progress",
                      effective_method="ngram")).selection == busy.selection


def test_a_chosen_candidate_that_fails_serving_goes_back_to_the_previous_choice():
    history = [{"time": rfc3339(NOW - 600), "candidate": "eagle3", "method": "eagle3", "reason": "fastest"},
               {"time": rfc3339(NOW - 9000), "candidate": "ngram", "method": "ngram", "reason": "fastest"}]
    serving = SelectionStatus(phase="Chosen", candidate="eagle3", method="eagle3", fingerprint=PRINT, history=history)
    result = step(world(serving, effective_method="eagle3", engine_failing="CrashLoopBackOff: out of memory"))
    assert (result.selection.candidate, result.selection.method) == ("ngram", "ngram")
    assert [e.name for e in result.selection.excluded] == ["eagle3"]
    assert result.event is not None and result.event[:2] == ("Warning", "SelectionRolledBack")
    first_only = SelectionStatus.model_validate({**serving.model_dump(), "history": history[:1]})
    assert step(world(first_only, effective_method="eagle3", engine_failing="oom")).selection.candidate == "none"
    assert step(world(serving, effective_method="none", engine_failing="oom")).selection == serving  # not eagle3's


def test_batch_sizes_follow_the_traffic_below_and_above_the_measured_ones():
    spec = parse_spec({**RAW, "speculation": {**RAW["speculation"], "comparison": {"batchSizes": [8, 16, 32]}}})
    assert batch_sizes_to_measure(spec, live(batch=2.0)) == [2, 8, 16, 32]
    assert batch_sizes_to_measure(spec, live(batch=40.5)) == [8, 16, 32, 64]
    full = parse_spec({**RAW, "speculation": {**RAW["speculation"],
                                               "comparison": {"batchSizes": [1, 2, 4, 8, 16, 32, 64, 128]}}})
    assert batch_sizes_to_measure(full, live(batch=300.0)) == [2, 4, 8, 16, 32, 64, 128, 512]
    assert batch_sizes_to_measure(SPEC, live(batch=16.5)) == [1, 4, 16, 32]


def test_comparison_names_stay_short_enough_for_their_jobs():
    assert comparison_name("llama", 3) == "llama-select-3"
    long = comparison_name("a" * 63, 12)
    assert len(long) <= 40 and long.endswith("-select-12")
    assert comparison_name("a" * 63, 12) != comparison_name("a" * 62 + "b", 12)
