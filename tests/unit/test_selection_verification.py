"""Method auto, a switch verified on the live traffic (operator/selection/pure/verification.py through policy.step)."""

from __future__ import annotations

import pytest

from specinfer.api import parse_spec
from specinfer.api.status import MetricsStatus, SelectionStatus
from specinfer.api.timestamps import rfc3339
from specinfer.operator.selection.pure.policy import World, fingerprint, step
from specinfer.operator.selection.pure.verification import (
    ROLLBACK_HOLD_INTERVALS,
    VERIFY_SETTLE_SECONDS,
    VERIFY_TIMEOUT_SECONDS,
    VERIFY_WINDOWS,
)

pytestmark = pytest.mark.unit

NOW = 1_800_000_000.0
INTERVAL = 3600
RAW = {
    "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
    "speculation": {"method": "auto", "reselectIntervalSeconds": INTERVAL, "candidates": [
        {"method": "ngram", "numSpeculativeTokens": 4},
        {"method": "eagle3", "draftModel": {"name": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}},
    ]},
    "hardware": {"accelerator": "nvidia"},
    "tuning": {"mode": "auto"},
}
SPEC = parse_spec(RAW)


def world(selection: SelectionStatus, *, now: float = NOW, **fields) -> World:
    return World(name="llama", spec=SPEC, selection=selection, calibration=fields.pop("calibration", None),
                 now=now, **fields)


def window(speed: float, *, at: float, batch: float = 8.0, accepted: float | None = 2.5) -> MetricsStatus:
    return MetricsStatus(tokens_per_request_second=speed, mean_batch_size=batch, mean_accepted_length=accepted,
                         per_position_acceptance=[0.6, 0.4] if accepted else None, sampled_at=rfc3339(at))


def succeeded(ngram_acceptance: list[float] | None = None) -> dict:
    """A finished comparison: ngram 1.40x, eagle3 1.10x of no speculation (which served)."""
    per_position = ngram_acceptance or [0.6, 0.5, 0.3, 0.1]
    candidates = [{"name": "ngram", "method": "ngram", "phase": "Succeeded",
                   "acceptance": [{"numSpeculativeTokens": 4, "drafts": 500, "perPosition": per_position}]}]
    return {"metadata": {"name": "llama-select-1", "creationTimestamp": rfc3339(NOW - 600)},
            "spec": {"targetRef": {"name": "llama"}, "batchSizes": [1, 4, 16]},
            "status": {"phase": "Succeeded", "candidates": candidates, "comparison": [
                {"name": n, "method": m, "speedupVsNone": v, "gainVsConfigured": 0.0}
                for n, m, v in (("ngram", "ngram", 1.4), ("eagle3", "eagle3", 1.1), ("none", "none", 1.0))]}}


def measuring() -> SelectionStatus:
    return SelectionStatus(phase="Measuring", calibration="llama-select-1", comparisons=1, compared_with="none",
                           fingerprint=fingerprint(SPEC))


def with_baseline(speed: float = 20.0, batch: float = 8.0) -> SelectionStatus:
    """A comparison running while none serves live traffic: two windows folded into the baseline."""
    running = {**succeeded(), "status": {"phase": "Running"}}
    selection = measuring()
    for i in range(2):
        selection = step(world(selection, now=NOW - 300 + 60 * i, calibration=running, effective_method="none",
                               metrics=window(speed, at=NOW - 300 + 60 * i, batch=batch, accepted=None))).selection
    return selection


def switched(selection: SelectionStatus, calibration: dict | None = None) -> SelectionStatus:
    result = step(world(selection, calibration=calibration or succeeded()))
    assert result.event is not None and result.event[1] == "MethodSelected"
    return result.selection


def serve(selection: SelectionStatus, speeds: list[float], *, batch: float = 8.0, accepted: float | None = 2.5,
          start: float = NOW + 200):
    """The pods serve ngram alone from `start`; one window per speed after the settling time."""
    result = step(world(selection, now=start, effective_method="ngram"))
    assert result.selection.verification.serving_since == rfc3339(start)
    at = start + VERIFY_SETTLE_SECONDS
    for speed in speeds:
        result = step(world(result.selection, now=at, effective_method="ngram",
                            metrics=window(speed, at=at, batch=batch, accepted=accepted)))
        at += 30
    return result


def test_the_serving_candidates_live_speed_is_folded_while_the_comparison_runs_each_window_once():
    selection = with_baseline(20.0)
    assert selection.baseline is not None
    assert (selection.baseline.tokens_per_request_second, selection.baseline.windows) == (20.0, 2)
    running = {**succeeded(), "status": {"phase": "Running"}}
    again = step(world(selection, now=NOW, calibration=running, effective_method="none",
                       metrics=window(99.0, at=NOW - 240, accepted=None)))
    assert again.selection.baseline == selection.baseline  # a window already counted
    rolling = step(world(selection, now=NOW, calibration=running, effective_method="none", rolling_out=True,
                         metrics=window(5.0, at=NOW, accepted=None)))
    assert rolling.selection.baseline == selection.baseline  # a rollout's windows mix two configs
    other = step(world(selection, now=NOW, calibration=running, effective_method="ngram",
                       metrics=window(5.0, at=NOW, accepted=None)))
    assert other.selection.baseline == selection.baseline  # not the candidate that serves


def test_a_switch_starts_its_verification_with_the_prediction_and_the_baseline():
    selection = switched(with_baseline(20.0))
    check = selection.verification
    assert check is not None and (check.candidate, check.previous) == ("ngram", "none")
    assert check.predicted_gain == pytest.approx(0.4)
    assert check.predicted_accepted_length == pytest.approx(2.5)  # 1 + 0.6 + 0.5 + 0.3 + 0.1
    assert check.baseline is not None and check.baseline.tokens_per_request_second == 20.0
    assert selection.baseline is None  # moved into the verification
    assert selection.history[0].predicted_gain == pytest.approx(0.4) and selection.history[0].verdict is None
    kept = step(world(measuring(), calibration={**succeeded(), "status": {
        **succeeded()["status"], "comparison": [{"name": "none", "method": "none", "speedupVsNone": 1.0,
                                                 "gainVsConfigured": 0.0}]}}))
    assert kept.selection.verification is None  # nothing switched, nothing to verify


def test_windows_count_only_once_the_pods_serve_alone_and_have_settled():
    selection = switched(with_baseline())
    rolling = step(world(selection, now=NOW + 100, effective_method="ngram", rolling_out=True,
                         metrics=window(30.0, at=NOW + 100)))
    assert rolling.selection == selection  # the rollout still runs
    alone = step(world(selection, now=NOW + 200, effective_method="ngram", metrics=window(30.0, at=NOW + 200)))
    assert alone.selection.verification.speeds == []  # serving since now: this window straddles the rollout
    assert alone.wake_at == NOW + 200 + VERIFY_SETTLE_SECONDS
    early = step(world(alone.selection, now=NOW + 230, effective_method="ngram", metrics=window(30.0, at=NOW + 230)))
    assert early.selection.verification.speeds == []
    late = step(world(alone.selection, now=NOW + 300, effective_method="ngram", metrics=window(30.0, at=NOW + 300)))
    assert late.selection.verification.speeds == [30.0]
    same = step(world(late.selection, now=NOW + 310, effective_method="ngram", metrics=window(30.0, at=NOW + 300)))
    assert same.selection.verification.speeds == [30.0]  # the same window twice
    assert f"1/{VERIFY_WINDOWS} windows" in same.selection.message


def test_a_window_counts_only_once_it_no_longer_reaches_into_the_rollout():
    selection = switched(with_baseline())
    alone = step(world(selection, now=NOW + 200, effective_method="ngram", window_seconds=120.0))
    assert alone.wake_at == NOW + 320
    inside = step(world(alone.selection, now=NOW + 300, effective_method="ngram", window_seconds=120.0,
                        metrics=window(30.0, at=NOW + 300)))
    assert inside.selection.verification.speeds == []  # its 120 s reach back to NOW + 180, before serving alone
    after = step(world(alone.selection, now=NOW + 320, effective_method="ngram", window_seconds=120.0,
                       metrics=window(30.0, at=NOW + 320)))
    assert after.selection.verification.speeds == [30.0]


def test_a_switch_faster_live_is_verified_with_its_realised_gain():
    result = serve(switched(with_baseline(20.0)), [26.0, 27.0, 28.0])
    assert result.selection.verification is None and result.selection.candidate == "ngram"
    assert result.event is not None and result.event[:2] == ("Normal", "SelectionVerified")
    assert "realised +35.0% against a predicted +40.0%" in result.event[2]
    newest = result.selection.history[0]
    assert (newest.verdict, newest.realised_gain) == ("Verified", pytest.approx(0.35))


def test_a_switch_slower_live_rolls_back_and_the_loser_is_held_out_until_its_hold_expires():
    result = serve(switched(with_baseline(20.0)), [17.0, 17.0, 17.0])  # -15%
    selection = result.selection
    assert (selection.candidate, selection.method, selection.verification) == ("none", "none", None)
    assert result.event is not None and result.event[:2] == ("Warning", "SelectionRolledBack")
    assert "ngram realised -15.0% against a predicted +40.0%" in result.event[2]
    assert [h.candidate for h in selection.history[:2]] == ["none", "ngram"]
    assert (selection.history[1].verdict, selection.history[1].realised_gain) == ("RolledBack", pytest.approx(-0.15))
    (held,) = selection.excluded
    hold_end = NOW + 200 + VERIFY_SETTLE_SECONDS + 60 + ROLLBACK_HOLD_INTERVALS * INTERVAL
    assert held.name == "ngram" and held.until == rfc3339(hold_end)
    # the next comparison (a spec-independent retry here) leaves ngram out while held, and measures it again after
    due = selection.model_copy(update={"phase": "Failed", "not_before": None})
    inside = step(world(due, now=hold_end - 1)).create
    after = step(world(due, now=hold_end + 1)).create
    assert inside is not None and [c.name for c in inside[1].candidates] == ["eagle3"]
    assert after is not None and [c.name for c in after[1].candidates] == ["ngram", "eagle3"]


def test_noisy_windows_widen_the_margin_so_noise_alone_does_not_roll_back():
    steady = serve(switched(with_baseline(20.0)), [18.4, 18.4, 18.4])  # -8%, no spread
    assert steady.selection.candidate == "none"
    noisy = serve(switched(with_baseline(20.0)), [12.0, 18.4, 24.8])  # -8% on average, a wide spread
    assert noisy.selection.candidate == "ngram" and noisy.event[1] == "SelectionVerified"


def test_without_a_live_baseline_the_prediction_is_corrected_by_the_live_acceptance():
    no_traffic = switched(measuring())  # nothing served traffic during the comparison
    assert no_traffic.verification.baseline is None
    good = serve(no_traffic, [30.0, 30.0, 30.0], accepted=2.4)
    assert good.event[1] == "SelectionVerified"
    assert "tokens per step accepted live (2.40 against the 2.50 it measured; no traffic before" in good.event[2]
    assert good.selection.history[0].realised_gain == pytest.approx(1.4 * 2.4 / 2.5 - 1)
    off_domain = serve(no_traffic, [30.0, 30.0, 30.0], accepted=1.2)  # 1.4 * 1.2 / 2.5 = 0.67x
    assert off_domain.event[1] == "SelectionRolledBack" and off_domain.selection.candidate == "none"


def test_a_load_far_from_the_baselines_falls_back_to_the_acceptance_check():
    result = serve(switched(with_baseline(20.0, batch=2.0)), [10.0, 10.0, 10.0], batch=40.0, accepted=2.5)
    assert result.event[1] == "SelectionVerified"  # per-request speed at batch 40 says nothing against batch 2
    assert "the load moved from mean batch 2.0 to 40.0" in result.event[2]


def test_no_live_windows_within_the_timeout_leave_the_switch_unverified_and_say_why():
    selection = switched(with_baseline())
    waiting = step(world(selection, now=NOW + 600, effective_method="ngram"))
    assert waiting.event is None
    timed_out = step(world(waiting.selection, now=NOW + VERIFY_TIMEOUT_SECONDS + 1, effective_method="ngram"))
    assert timed_out.selection.verification is None and timed_out.selection.candidate == "ngram"
    assert timed_out.event[1] == "SelectionUnverified" and "tuning off" in timed_out.event[2]
    assert timed_out.selection.history[0].verdict == "Unverified"


def test_no_comparison_starts_while_a_switch_is_verified():
    selection = switched(with_baseline()).model_copy(update={
        "not_before": rfc3339(NOW - 1), "measured_batch_sizes": [1, 4, 16], "measured_acceptance": 0.9,
        "shift_since": rfc3339(NOW - 3600)})
    result = step(world(selection, now=NOW + 200, effective_method="ngram", metrics=window(30.0, at=NOW + 200,
                                                                                           batch=200.0)))
    assert result.create is None and result.selection.verification is not None


def test_a_spec_edit_while_verifying_compares_afresh():
    selection = switched(with_baseline())
    fewer = RAW["speculation"]["candidates"][:1]
    edited = parse_spec({**RAW, "speculation": {**RAW["speculation"], "candidates": fewer}})
    result = step(World(name="llama", spec=edited, selection=selection, calibration=None, now=NOW + 100))
    assert result.create is not None and result.selection.verification is None


def test_a_stored_baseline_at_its_bound_still_folds_a_window():
    from specinfer.api.status import MAX_ATTEMPTS, LiveSpeed
    from specinfer.operator.selection.pure.verification import fold_baseline

    full = LiveSpeed(tokens_per_request_second=20.0, mean_batch_size=4.0, windows=MAX_ATTEMPTS,
                     sampled_at=rfc3339(NOW - 60))
    folded = fold_baseline(full, window(30.0, at=NOW))
    assert folded is not None and folded.windows == MAX_ATTEMPTS and 20.0 < folded.tokens_per_request_second < 20.1
