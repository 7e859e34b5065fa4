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
recent windows (hysteresis: a cycle longer than half of them holds one peak at a time). With Surge a rollout
costs no goodput, so speculation off is each peak's own payback's call; the hold between peaks applies where the
quiet between them has been shorter than the cooldown and a rollout together: back on there lands as the next
peak comes, and the cooldown then keeps that peak drafting (decide._held_off).
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


def memory_seconds(payback_seconds: float) -> float:
    """How far back the windows' loads are kept: RECURRENCE_MEMORY paybacks, never less than one payback (restart.py
    counts how long the load has stayed over that) and at most MAX_MEMORY_SECONDS more."""
    return max(payback_seconds, min(RECURRENCE_MEMORY * payback_seconds, payback_seconds + MAX_MEMORY_SECONDS))


@dataclass(frozen=True)
class Recurrence:
    """The recent windows' loads, as a switch of speculation on or off sees them."""

    stays: int  # separate runs of windows, each at least one window long, whose load the candidate serves better
    distribution: Distribution  # their mean batch sizes, each weighted by its share of the time they stand for
    span_seconds: float  # the time they stand for
    longest_gap_seconds: float = 0.0  # the longest time windows stand for between two runs where the candidate wins

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
    recorded while a rollout rolls or a window is held: that gap is no load of the one before it). None
    without two windows."""
    points = [(float(at), float(mean)) for at, mean in loads if at <= now + 1.0]  # `loads` rounds times
    if len(points) < 2:
        return None
    stays, run, gap = 0, 0.0, 0.0
    quiet: float | None = None  # the time the windows since the latest one where the candidate wins stand for
    weights: dict[int, float] = {}
    wins: dict[int, bool] = {}  # per batch size: an hour of windows holds few distinct ones
    for index, (at, mean) in enumerate(points):
        previous = points[index - 1][0] if index else at - (points[1][0] - at)
        seconds = min(max(0.0, at - previous), window_seconds)
        size = max(1, min(round(mean), max_batch_size))
        if size not in wins:
            sample: Distribution = [(size, 1.0)]
            wins[size] = goodput(model, candidate, sample) > goodput(model, current, sample)
        if wins[size]:
            if quiet:  # the windows' time, not the clock's: no window is recorded while a rollout rolls
                gap = max(gap, quiet)
            before, run, quiet = run, run + seconds, 0.0
            stays += before < window_seconds <= run  # a stay counts once it has lasted a window: not a blip
        else:
            run = 0.0
            quiet = None if quiet is None else quiet + seconds
        weights[size] = weights.get(size, 0.0) + seconds
    total = sum(weights.values())
    if total <= 0:
        return None
    return Recurrence(stays, [(size, seconds / total) for size, seconds in sorted(weights.items())], total, gap)
