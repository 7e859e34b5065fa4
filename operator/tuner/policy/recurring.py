"""Speculation on or off for a load that comes back: judged over the recent windows' loads, not today's alone.

The payback (restart.py) asks how long today's load will stay: a peak shorter than a rollout's payback
is served by the best change in place, and speculation stays on. That is right for a peak that comes
once. A load that keeps coming back -- peaks of a few minutes every quarter hour -- is another case:
no peak lasts long enough to repay a rollout of its own, but speculation off, kept through the quiet
minutes between them, may serve more tokens over the whole pattern than anything the engine reaches
in place. The bench's recurring-peaks (an EAGLE-3 head 4x dearer than its prior, four 8-minute peaks
to 450 concurrent, 8 quiet minutes between): the policy held K=1 through every peak and served 0.92 of
the per-phase oracle, where speculation off for good served 0.995.

So where the recent windows (the last two `paybackSeconds`) came back at least RECURRENCES times to
where speculation off wins, each time for at least a window, the switch is judged over those windows'
loads, each weighted by the time it stands for: the tokens of a pattern that has lasted that long are
what it may be expected to serve again. Speculation off is taken where it gains, over that mix, more
than the floor and more tokens than the rollout costs at today's load -- little between peaks, where
the other replicas absorb a reloading one. Speculation back on is held while off still wins over that
mix: a quiet window between peaks would otherwise turn it back on, and the next peak off again, two
rollouts a cycle. A switch off taken for the pattern is held so while one such stay is left in the
recent windows (hysteresis: a cycle longer than half of them holds one peak at a time).

With Surge a rollout costs no goodput, so speculation off is each peak's own payback's call. Back on between peaks
is priced (`back_on_now`): what it gains in the quiet still to come, against what the next peak loses running it
until off lands again -- a decision and a rollout, or the cooldown's rest where that is longer. The bench's
recurring-dips: back on in every other 4-minute dip landed as the next busy phase came, and the cooldown kept it
drafting 7 minutes where off gains 11%. With 15 quiet minutes at 30 concurrent between 6-minute peaks at 450,
back on landed in time but each peak ran speculation 5 of its 6 minutes: 0.933 of the per-phase oracle, where
off for good served 0.956.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .goodput import Distribution, Model, goodput

RECURRENCES = 2  # stays of the load where speculation off wins: one is a peak, two are a pattern
# The recent windows span this many times paybackSeconds: two peaks of a pattern fit in them for most of its cycle
# when the cycle is up to a payback long (at one payback, two 8-minute peaks 26 minutes apart fit for 6 minutes).
RECURRENCE_MEMORY = 2.0
MAX_MEMORY_SECONDS = 7200.0  # ... but no more than this beyond paybackSeconds: the state keeps every window of it
# The rollout may cost at most this share of what off gains over the recent windows: it repays itself within a
# quarter of the time the pattern has been seen. At a peak (a reloading replica's share of the fleet at its largest)
# that is rarely so, between peaks (the other replicas absorb it) almost always: the switch waits for the quiet.
COST_SHARE = 0.25
# A quiet this many times the longest seen between the peaks is no pattern's: quiets vary by a window or two, and
# a peak a little late would otherwise find speculation back on for the cooldown.
BROKEN = 1.25


def memory_seconds(payback_seconds: float) -> float:
    """How far back the windows' loads are kept: RECURRENCE_MEMORY paybacks, never less than one payback (restart.py
    counts how long the load has stayed over that) and at most MAX_MEMORY_SECONDS more."""
    return max(payback_seconds, min(RECURRENCE_MEMORY * payback_seconds, payback_seconds + MAX_MEMORY_SECONDS))


@dataclass(frozen=True)
class Recurrence:
    """The recent windows' loads, as a switch of speculation on or off sees them. The loads' times are the
    windows' (no window is recorded while a rollout rolls: those minutes are no load seen); the stays' and the
    quiets' are the clock's, the time the next peak keeps."""

    stays: int  # runs of windows whose load the candidate serves better, each begun and ended by a window of it
    distribution: Distribution  # their mean batch sizes, each weighted by its share of the time they stand for
    span_seconds: float  # the time they stand for
    gaps: tuple[float, ...] = ()  # the quiets between two stays
    quiet_seconds: float = 0.0  # since the load last left a stay (a dip within one counts; 0 before the first)
    # how long the stays that ended lasted; one that began before the recent windows only where no other ended
    stay_seconds: tuple[float, ...] = ()
    stay_distribution: Distribution = ()  # the loads of the windows where the candidate wins

    @property
    def recurs(self) -> bool:
        return self.stays >= RECURRENCES

    def describe(self, off_gain: float) -> str:
        """`off_gain`: speculation off's over speculation on, over these loads."""
        return (f"speculation off gains {off_gain:+.1%} over the last {self.span_seconds / 60:.0f} min of load, "
                f"which came back {self.stays} times to where off wins")


def recurrence(model: Model, current: Sequence[int], candidate: Sequence[int], loads: Sequence[Sequence[float]],
               now: float, max_batch_size: int, window_seconds: float) -> Recurrence | None:
    """`candidate` against `current` over the recent windows (`loads`: [end time, mean batch size], oldest
    first). Each window stands for the time since the one before it, at most `window_seconds` (no window is
    recorded while a rollout rolls or a window is held: that gap is no load of the one before it). A stay begins
    once the candidate has won for a window, and ends once it has lost for a window: a shorter blip either way
    belongs to what is around it. None without two windows."""
    points = [(float(at), float(mean)) for at, mean in loads if at <= now + 1.0]  # `loads` rounds times
    if len(points) < 2:
        return None
    first = points[0][0] - min(points[1][0] - points[0][0], window_seconds)  # when the recent windows begin
    stays, run, dip, in_stay = 0, 0.0, 0.0, False
    run_began = dip_began = stay_began = 0.0
    ended: float | None = None  # when the latest stay ended (None before one)
    gaps: list[float] = []
    complete: list[float] = []  # stays that ended, by the clock
    cut: list[float] = []  # ... those that began with the recent windows, and may have begun before
    weights: dict[int, float] = {}
    winning: dict[int, float] = {}
    wins: dict[int, bool] = {}  # per batch size: an hour of windows holds few distinct ones
    for index, (at, mean) in enumerate(points):
        previous = points[index - 1][0] if index else at - (points[1][0] - at)
        seconds = min(max(0.0, at - previous), window_seconds)
        began = at - seconds
        size = max(1, min(round(mean), max_batch_size))
        if size not in wins:
            sample: Distribution = [(size, 1.0)]
            wins[size] = goodput(model, candidate, sample) > goodput(model, current, sample)
        weights[size] = weights.get(size, 0.0) + seconds
        if wins[size]:
            winning[size] = winning.get(size, 0.0) + seconds
            dip = 0.0
            if in_stay:
                continue
            if not run:
                run_began = began
            before, run = run, run + seconds
            if before < window_seconds <= run:
                stays += 1
                if ended is not None:
                    gaps.append(max(0.0, run_began - ended))
                in_stay, stay_began = True, run_began
            continue
        run = 0.0
        if not in_stay:
            continue
        if not dip:
            dip_began = began
        dip += seconds
        if dip >= window_seconds:  # the stay ended where its load began to lose
            in_stay, ended, dip = False, dip_began, 0.0
            # a stay that began within a window of the recent windows' start may have begun before them
            (cut if stay_began - first < window_seconds else complete).append(ended - stay_began)
    total = sum(weights.values())
    if total <= 0:
        return None
    if in_stay:
        left_at = dip_began if dip else None  # a dip shorter than a window may be the quiet's start
    else:
        left_at = ended
    share = sum(winning.values())
    return Recurrence(stays, [(size, seconds / total) for size, seconds in sorted(weights.items())], total,
                      tuple(gaps), 0.0 if left_at is None else max(0.0, now - left_at), tuple(complete or cut),
                      [(size, seconds / share) for size, seconds in sorted(winning.items())] if share else [])


@dataclass(frozen=True)
class BackOn:
    """Speculation back on now, in a quiet between peaks, priced in tokens a replica (Surge: the rollout itself
    costs none). It serves the quiet still to come, less the rollout, at today's gain; the next peak then runs it
    until a switch off lands again: a decision and a rollout, or the cooldown's rest and a rollout where that is
    longer -- at most a stay's mean length, at what off gains at the stays' loads."""

    quiet_seconds: float  # the quiet so far
    expected_seconds: float  # the mean of the quiets between peaks longer than that: when the next peak is due
    rollout_seconds: float
    gained: float  # tokens back on serves over off in the quiet left after its rollout
    peak_seconds: float  # how long the next peak would run speculation on
    lost: float  # tokens that costs at the peaks' loads

    @property
    def pays(self) -> bool:
        return self.gained > self.lost

    def describe(self) -> str:
        left = max(0.0, self.expected_seconds - self.quiet_seconds)
        if left <= self.rollout_seconds:
            quiet = (f"the next peak is due (this quiet has lasted {self.quiet_seconds / 60:.0f} min, the longer "
                     f"ones between the peaks {self.expected_seconds / 60:.0f}): back on would land after it came, ")
        else:
            quiet = (f"back on now would gain {self.gained:,.0f} tokens a replica in the "
                     f"{(left - self.rollout_seconds) / 60:.0f} min after its rollout of the "
                     f"{left / 60:.0f} min of quiet expected before the next peak, and ")
        return (f"{quiet}the next peak would run it {self.peak_seconds / 60:.1f} min before speculation off lands "
                f"again, {self.lost:,.0f} tokens lost")


def back_on_now(model: Model, on: Sequence[int], off: Sequence[int], today: Distribution, seen: Recurrence, *,
                rollout_seconds: float, cooldown_seconds: float, decision_seconds: float) -> BackOn | None:
    """`on` against `off` for the quiet now (`today`) and the next peak (`seen.stay_distribution`). The next peak
    is expected after the mean of the quiets between peaks longer than today's so far (a shorter quiet says
    nothing about when a longer one ends). None where the pattern tells no quiet (no two stays yet) or
    today's quiet has outlasted every one between the peaks by BROKEN: the pattern has broken, and today's load
    decides."""
    if not seen.gaps or not seen.stay_seconds or not seen.stay_distribution:
        return None
    if seen.quiet_seconds > BROKEN * max(seen.gaps):
        return None
    longer = [gap for gap in seen.gaps if gap > seen.quiet_seconds] or [max(seen.gaps)]
    expected = sum(longer) / len(longer)
    left = max(0.0, expected - seen.quiet_seconds)
    gained = (goodput(model, on, today) - goodput(model, off, today)) * max(0.0, left - rollout_seconds)
    peak_seconds = min(max(decision_seconds, cooldown_seconds - left) + rollout_seconds,
                       sum(seen.stay_seconds) / len(seen.stay_seconds))
    peak = seen.stay_distribution
    lost = max(0.0, goodput(model, off, peak) - goodput(model, on, peak)) * peak_seconds
    return BackOn(seen.quiet_seconds, expected, rollout_seconds, gained, peak_seconds, lost)
