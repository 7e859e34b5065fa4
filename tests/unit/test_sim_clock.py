"""Scaled simulated time and workload phases."""

from __future__ import annotations

import pytest

from specinfer.runtime.sim.clock import ScaledClock, phase_workload
from specinfer.runtime.sim.settings import Phase

pytestmark = pytest.mark.unit


def test_scaled_clock_reports_simulated_seconds():
    wall = iter([100.0, 102.5]).__next__
    clock = ScaledClock(20.0, wall=wall)
    assert clock.now() == pytest.approx(50.0)
    assert clock.wall_seconds(1.0) == pytest.approx(0.05)
    assert clock.wall_seconds(-1.0) == 0.0
    with pytest.raises(ValueError, match="time_scale"):
        ScaledClock(0)


def test_phases_run_in_order_and_loop():
    phases = (Phase("chat", 10.0), Phase("code", 5.0))
    assert [phase_workload(phases, t, "math") for t in (0, 9.9, 10, 14.9, 15, 26)] == [
        "chat", "chat", "code", "code", "chat", "code"]
    assert phase_workload((), 123.0, "math") == "math"
