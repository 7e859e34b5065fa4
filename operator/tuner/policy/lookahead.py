"""Looking ahead: program the batch sizes to come while a restart is cheap.

A restart costs more the higher the load (restart.py), and the load a schedule must serve next is
often above today's (the morning before the peak). When the best config changes nothing worth a
restart at today's batch sizes, the policy may still reprogram the sizes above them (an engine
retuned in place does this for free: decide.py publishes its schedule ahead). The candidate keeps
the current K at every batch size up to today's largest -- so today's goodput cannot move, nothing
is verified, and a gain at today's batch sizes stays the payback's call (restart.py: how long
today's load has lasted) -- and takes the model's best K above. It is applied when its gain over
the anticipated sizes repays the restart priced at today's load (the same restart at the peak would
cost at least as much, and come after the peak began) and clears the hysteresis and noise terms.
The load may never come, so the gain must repay the restart as if it were earned at today's
goodput: with several replicas a quiet restart costs almost nothing and the schedule is programmed;
with one replica under Replace it costs restartSeconds of output and only a large gain justifies it.
Within sqrt(2) of maxBatchSize there are no batch sizes to come: at the peak nothing is looked ahead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .config import differs_at
from .goodput import (
    MAX_RANGES,
    Distribution,
    Model,
    anticipated_sizes,
    coverage_gain,
    goodput_sensitivity,
    is_speculative,
    limit_ranges,
)
from .guards import required_gain
from .inputs import TuningInput

LOOKAHEAD = 4.0  # the anticipated batch sizes reach this many times today's largest


@dataclass(frozen=True)
class LookAhead:
    dense: list[int]
    gain: float  # over the anticipated batch sizes
    needed: float


def look_ahead(model: Model, tuning: TuningInput, current: Sequence[int], best: Sequence[int],
               distribution: Distribution, restart_cost_seconds: float, noise: float,
               window_noise: float) -> LookAhead | None:
    """The look-ahead change worth making now, or None."""
    top = min(max(size for size, _ in distribution), tuning.max_batch_size)
    if top * 2 ** 0.5 > tuning.max_batch_size:
        return None  # no batch sizes to come: today's load is (near) the engine's largest
    if not is_speculative(current):
        # speculation off: a schedule's K = 0 at today's batch sizes is no plain decode step (a model drafter
        # runs its K = 0 work there, a draft model its whole startup K), so today's goodput would move
        return None
    ahead = anticipated_sizes(distribution, tuning.max_batch_size, LOOKAHEAD)
    if not ahead or not tuning.allow_schedule or not set(current[1 : top + 1]) <= set(tuning.allowed_ks()):
        return None  # keeping today's K would need a schedule, or a K the bounds no longer allow
    candidate = limit_ranges(model, [*current[: top + 1], *best[top + 1 :]], MAX_RANGES)
    if any(differs_at(candidate, current, b) for b in range(1, top + 1)):
        return None  # the sizes above cannot be programmed without touching today's
    if candidate == list(current):
        return None
    gain = coverage_gain(model, candidate, current, ahead)
    # Few data speak for those sizes: the fit's extrapolation there is uncertain, the more so the
    # farther from the data and the noisier the step times. Two standard errors of the predicted gain
    # (the step-cost fit's posterior) replace the measurement-noise term.
    direction = goodput_sensitivity(model, current, ahead) - goodput_sensitivity(model, candidate, ahead)
    spread = 2 * window_noise * model.cost.relative_spread(direction)
    # The restart is paid for certain, the gain only if the load comes: it must repay the restart as
    # if it were earned at today's goodput (a larger load would repay it sooner).
    needed, _ = required_gain(tuning, slo_violated=False, noise=max(noise, spread),
                              restart_cost_seconds=restart_cost_seconds)
    return LookAhead(candidate, gain, needed) if gain >= needed else None
