"""Simulated time: real time, or scaled so fast tests run e.g. 20x while metrics report simulated seconds."""

from __future__ import annotations

import time
from collections.abc import Sequence

from specinfer.runtime.sim.settings import Phase


class ScaledClock:
    """Simulated seconds since start; `time_scale` simulated seconds pass per wall-clock second."""

    def __init__(self, time_scale: float = 1.0, *, wall=time.monotonic) -> None:
        if time_scale <= 0:
            raise ValueError(f"time_scale must be > 0, got {time_scale}")
        self.time_scale = time_scale
        self._wall = wall
        self._start = wall()

    def now(self) -> float:
        return (self._wall() - self._start) * self.time_scale

    def wall_seconds(self, simulated_seconds: float) -> float:
        """How long to sleep in wall-clock time for `simulated_seconds` to pass."""
        return max(0.0, simulated_seconds) / self.time_scale


def phase_at(phases: Sequence[Phase], elapsed: float) -> Phase | None:
    """The phase at `elapsed` simulated seconds: phases run in order, then the script loops to the first."""
    if not phases:
        return None
    cycle = sum(phase.duration_s for phase in phases)
    offset = elapsed % cycle
    boundary = 0.0
    for phase in phases:
        boundary += phase.duration_s
        if offset < boundary:
            return phase
    return phases[-1]


def phase_workload(phases: Sequence[Phase], elapsed: float, default: str) -> str:
    """Workload at `elapsed` simulated seconds (`default` without phases)."""
    phase = phase_at(phases, elapsed)
    return default if phase is None else phase.workload
