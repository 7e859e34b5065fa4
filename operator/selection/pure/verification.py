"""Method auto, a switch verified on the live traffic: realised against predicted gain, rolled back when worse. Pure.

A comparison measures the candidates in Jobs, on its prompts; the switch it picks is then checked
where it matters, on the resource's own traffic, as the tuner checks each of its changes:

- While the comparison runs, the windows of the candidate serving are averaged into a live baseline
  (`status.selection.baseline`: tokens per request-second at the load they ran).
- Once the new candidate's pods serve alone, VERIFY_WINDOWS fresh windows of it are taken, from
  the settling time on (the tuner's window, at least VERIFY_SETTLE_SECONDS: no window reaching into the
  rollout).
- Realised gain: their speed over the baseline's, when the load is comparable (mean batch within
  BASELINE_LOAD_SHIFT). A faster engine empties its batch under open-loop traffic, which makes its
  per-request speed look better still, and a slower one fills it: the direction stays right, so the
  factor is wide. Without a comparable baseline (nothing served traffic during the comparison) the
  comparison's own prediction is corrected by what differs most between its prompts and the
  traffic: the tokens per step the candidate accepts live against those it accepted there.
- Realised below -(ROLLBACK_TOLERANCE + the windows' own spread): back to the candidate that served,
  and the one that lost live is left out of comparisons for ROLLBACK_HOLD_INTERVALS reselect
  intervals. Otherwise the switch stands. No windows within VERIFY_TIMEOUT_SECONDS (tuning off, no
  traffic): it stands, Unverified, and says why.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specinfer.api.auto import NO_SPECULATION, find_candidate
from specinfer.api.base import MAX_TEXT
from specinfer.api.calibration import SpeculativeInferenceCalibrationStatus
from specinfer.api.spec import SpeculativeInferenceSpec
from specinfer.api.speculation import K_CEILING
from specinfer.api.status import (
    MAX_ATTEMPTS,
    MAX_SELECTION_HISTORY,
    ExcludedCandidate,
    LiveSpeed,
    MetricsStatus,
    SelectionChoice,
    SelectionStatus,
    SwitchVerdict,
    SwitchVerification,
)
from specinfer.api.timestamps import parse_rfc3339, rfc3339
from specinfer.operator.selection.pure.edit import replace_selection

VERIFY_WINDOWS = 3
VERIFY_SETTLE_SECONDS = 60.0  # at least; or the tuner's window, when longer
VERIFY_TIMEOUT_SECONDS = 1800.0
BASELINE_LOAD_SHIFT = 4.0
ROLLBACK_TOLERANCE = 0.05
MAX_SPREAD_MARGIN = 0.2
ROLLBACK_HOLD_INTERVALS = 2
MAX_GAIN = 1000.0  # what status stores: a gain read from a hostile calibration or metrics cannot overflow it


@dataclass(frozen=True)
class Verdict:
    """The outcome of one verification pass: the next selection and, once judged, an Event."""

    selection: SelectionStatus
    event: tuple[str, str, str] | None = None
    wake_at: float | None = None


def _bounded(gain: float) -> float:
    return max(-1.0, min(MAX_GAIN, round(gain, 4)))


def _sampled(metrics: MetricsStatus) -> float | None:
    return parse_rfc3339(metrics.sampled_at) if metrics.sampled_at else None


def fold_baseline(baseline: LiveSpeed | None, metrics: MetricsStatus | None) -> LiveSpeed | None:
    """The serving candidate's live speed with one more window (each window counted once)."""
    if metrics is None or not metrics.tokens_per_request_second or metrics.mean_batch_size is None \
            or metrics.sampled_at is None:
        return baseline
    speed, batch = metrics.tokens_per_request_second, metrics.mean_batch_size
    if baseline is None:
        return LiveSpeed(tokens_per_request_second=speed, mean_batch_size=batch, windows=1,
                         sampled_at=metrics.sampled_at)
    previous, now = parse_rfc3339(baseline.sampled_at), _sampled(metrics)
    if previous is not None and now is not None and now <= previous:
        return baseline
    n = min(baseline.windows, MAX_ATTEMPTS - 1)  # read back from the API server: bounded
    return LiveSpeed(tokens_per_request_second=(baseline.tokens_per_request_second * n + speed) / (n + 1),
                     mean_batch_size=(baseline.mean_batch_size * n + batch) / (n + 1), windows=n + 1,
                     sampled_at=metrics.sampled_at)


def accepted_length(status: SpeculativeInferenceCalibrationStatus, candidate: str, k: int) -> float | None:
    """Tokens per step the comparison measured for `candidate` at K (1 + the per-position acceptances)."""
    for measured in status.candidates or ():
        if measured.name != candidate:
            continue
        for row in measured.acceptance or ():
            if row.num_speculative_tokens == k and row.drafts > 0 and row.per_position:
                return min(K_CEILING + 1.0, 1.0 + sum(min(1.0, max(0.0, p)) for p in row.per_position))
    return None


def start(*, candidate: str, previous: str, predicted_gain: float | None, predicted_accepted_length: float | None,
          baseline: LiveSpeed | None, now: float) -> SwitchVerification:
    gain = None if predicted_gain is None or not math.isfinite(predicted_gain) else _bounded(predicted_gain)
    return SwitchVerification(candidate=candidate, previous=previous, predicted_gain=gain,
                              predicted_accepted_length=predicted_accepted_length, baseline=baseline,
                              chosen_at=rfc3339(now))


def _spread(values: Sequence[float]) -> float:
    """Two standard errors of the windows' mean, relative to it (bounded: a wild window cannot excuse all)."""
    if len(values) < 2 or statistics.fmean(values) <= 0:
        return 0.0
    relative = statistics.stdev(values) / statistics.fmean(values)
    return min(MAX_SPREAD_MARGIN, 2 * relative / math.sqrt(len(values)))


def _judge(v: SwitchVerification) -> tuple[float, float, str] | None:
    """(realised gain, margin, how it was measured), or None when nothing live can judge the switch."""
    # the lists are read back from the API server: a hand edit may leave them of different lengths
    speed, batch = statistics.fmean(v.speeds), statistics.fmean(v.batch_sizes) if v.batch_sizes else 0.0
    base = v.baseline
    if base is not None and base.tokens_per_request_second > 0 and base.mean_batch_size > 0 and batch > 0 \
            and 1 / BASELINE_LOAD_SHIFT <= batch / base.mean_batch_size <= BASELINE_LOAD_SHIFT:
        how = (f"{speed:.1f} tokens/s per running request over {len(v.speeds)} windows at mean batch {batch:.1f}, "
               f"against {v.previous}'s {base.tokens_per_request_second:.1f} at {base.mean_batch_size:.1f} "
               f"before the switch")
        return speed / base.tokens_per_request_second - 1, _spread(v.speeds), how
    if v.predicted_gain is not None and v.predicted_accepted_length and v.accepted_lengths \
            and statistics.fmean(v.accepted_lengths) > 0:
        live = statistics.fmean(v.accepted_lengths)
        why = "no traffic before the switch" if base is None else \
            f"the load moved from mean batch {base.mean_batch_size:.1f} to {batch:.1f}"
        how = (f"the comparison's prediction with the tokens per step accepted live ({live:.2f} against the "
               f"{v.predicted_accepted_length:.2f} it measured; {why}, so no live baseline)")
        return (1 + v.predicted_gain) * live / v.predicted_accepted_length - 1, _spread(v.accepted_lengths), how
    return None


def _with_verdict(selection: SelectionStatus, verdict: SwitchVerdict, realised: float | None) -> list[dict[str, Any]]:
    history = [h.model_dump() for h in selection.history or ()]
    if history:
        history[0] = {**history[0], "verdict": verdict,
                      "realised_gain": None if realised is None else _bounded(realised)}
    return history


def verify(selection: SelectionStatus, spec: SpeculativeInferenceSpec, *, metrics: MetricsStatus | None,
           serving_alone: bool, interval_seconds: float, window_seconds: float = 0.0, now: float) -> Verdict:
    """One pass while `selection.verification` runs. `metrics`: fresh status.metrics of the candidate switched
    to, or None; `serving_alone`: its pods serve and no rollout runs; `window_seconds`: how far back a metrics
    window reaches (a window counts once it no longer reaches into the rollout)."""
    v = selection.verification
    assert v is not None
    settle = max(VERIFY_SETTLE_SECONDS, window_seconds)
    chosen_at = parse_rfc3339(v.chosen_at) or now
    if now - chosen_at > VERIFY_TIMEOUT_SECONDS and len(v.speeds) < VERIFY_WINDOWS:
        return _unverified(selection, f"no {VERIFY_WINDOWS} live windows of {v.candidate} within "
                                      f"{VERIFY_TIMEOUT_SECONDS / 60:.0f} min of the switch (tuning off or "
                                      f"paused, Prometheus away, or no traffic)")
    if not serving_alone:
        return Verdict(selection, wake_at=chosen_at + VERIFY_TIMEOUT_SECONDS)
    if v.serving_since is None:
        started = v.model_copy(update={"serving_since": rfc3339(now)})
        return Verdict(replace_selection(selection, verification=started), wake_at=now + settle)
    since = parse_rfc3339(v.serving_since) or now
    sampled = _sampled(metrics) if metrics is not None else None
    last = parse_rfc3339(v.last_sampled_at) if v.last_sampled_at else None
    if metrics is not None and sampled is not None and sampled >= since + settle \
            and (last is None or sampled > last) and metrics.tokens_per_request_second \
            and metrics.mean_batch_size is not None:
        v = v.model_copy(update={
            "speeds": [*v.speeds, metrics.tokens_per_request_second][-8:],
            "batch_sizes": [*v.batch_sizes, metrics.mean_batch_size][-8:],
            "accepted_lengths": [*v.accepted_lengths, *([metrics.mean_accepted_length]
                                                        if metrics.mean_accepted_length else [])][-8:],
            "last_sampled_at": metrics.sampled_at})
    if len(v.speeds) < VERIFY_WINDOWS:
        message = (f"verifying {v.candidate} on the live traffic: {len(v.speeds)}/{VERIFY_WINDOWS} windows "
                   f"({_predicted(v)} over {v.previous})")
        updated = replace_selection(selection, verification=v, message=message)
        return Verdict(updated, wake_at=max(now + 1, since + settle))
    judged = _judge(v)
    if judged is None:
        return _unverified(selection, f"no live baseline of {v.previous} at this load and no acceptance to "
                                      f"correct the comparison's prediction by")
    realised, margin, how = judged
    verdict = f"realised {realised:+.1%} against {_predicted(v)} ({how})"
    if realised >= -(ROLLBACK_TOLERANCE + margin):
        message = f"{v.candidate} verified: {verdict}"
        updated = replace_selection(selection, verification=None, message=message,
                                    history=_with_verdict(selection, "Verified", realised))
        return Verdict(updated, event=("Normal", "SelectionVerified", message[:1024]))
    return _rolled_back(selection, spec, v, realised, verdict, interval_seconds, now)


def _predicted(v: SwitchVerification) -> str:
    return "no prediction" if v.predicted_gain is None else f"a predicted {v.predicted_gain:+.1%}"


def _unverified(selection: SelectionStatus, why: str) -> Verdict:
    v = selection.verification
    assert v is not None
    message = f"{v.candidate} stays, not verified: {why}"
    updated = replace_selection(selection, verification=None, message=message,
                                history=_with_verdict(selection, "Unverified", None))
    return Verdict(updated, event=("Normal", "SelectionUnverified", message[:1024]))


def _rolled_back(selection: SelectionStatus, spec: SpeculativeInferenceSpec, v: SwitchVerification,
                 realised: float, verdict: str, interval_seconds: float, now: float) -> Verdict:
    fallback = find_candidate(spec, v.previous) or NO_SPECULATION
    until = now + ROLLBACK_HOLD_INTERVALS * interval_seconds
    excluded = {e.name: e for e in selection.excluded or ()}
    excluded[v.candidate] = ExcludedCandidate(name=v.candidate, until=rfc3339(until),
                                              reason=f"measured worse live than {v.previous}: {verdict}"[:MAX_TEXT])
    message = (f"{v.candidate} {verdict}: back to {fallback.display_name()}; {v.candidate} is left out of "
               f"comparisons until {rfc3339(until)}")
    entry = SelectionChoice(time=rfc3339(now), candidate=fallback.display_name(), method=fallback.method,
                            calibration=selection.calibration, reason=f"rollback: {message}"[:MAX_TEXT])
    history = [entry.model_dump(), *_with_verdict(selection, "RolledBack", realised)][:MAX_SELECTION_HISTORY]
    updated = replace_selection(selection, candidate=fallback.display_name(), method=fallback.method, verification=None,
                       measured_acceptance=None, shift_since=None, message=message, history=history,
                       excluded=[e.model_dump() for e in excluded.values()][:8])
    return Verdict(updated, event=("Warning", "SelectionRolledBack", message[:1024]))


def excluded_now(selection: SelectionStatus, now: float) -> set[str]:
    """Candidates left out of the next comparison: those whose hold has not expired."""
    left_out = set()
    for e in selection.excluded or ():
        until = parse_rfc3339(e.until) if e.until else None
        if until is None or now < until:
            left_out.add(e.name)
    return left_out


def predicted_gain(speedups: Mapping[str, float], chosen: str, previous: str) -> float | None:
    before = speedups.get(previous)
    after = speedups.get(chosen)
    if before is None or after is None or before <= 0:
        return None
    return after / before - 1
