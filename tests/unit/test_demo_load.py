"""The demo's phases: a phase lasts its seconds, and one with `hold_while` waits out a change in progress."""

from __future__ import annotations

import time

import pytest

from specinfer.dev.demo.load import Phase, PhasedLoad, PhaseResults, phase_over
from specinfer.runtime.pod.calibration.requests import RequestResult

pytestmark = pytest.mark.unit

PEAK = Phase("peak", concurrency=2, seconds=10, hold_while=30)


def no_endpoints() -> list[str]:
    return []  # no pod serves: the workers only wait, so a phase's length is its clock's


@pytest.mark.parametrize(("phase", "elapsed", "holding", "over"), [
    (PEAK, 5, False, False),     # before its seconds, nothing ends it
    (PEAK, 5, True, False),
    (PEAK, 10, False, True),     # its seconds, and nothing in progress
    (PEAK, 12, True, False),     # a rollout in progress: the phase goes on
    (PEAK, 40, True, True),      # ... for at most hold_while more
    (Phase("low", 1, 10), 12, True, True),  # a phase without hold_while never waits
])
def test_a_phase_ends_after_its_seconds_or_after_what_it_waits_out(phase, elapsed, holding, over):
    assert phase_over(phase, elapsed, holding) is over


def run(load: PhasedLoad, timeout: float = 10) -> None:
    load.start()
    deadline = time.monotonic() + timeout
    while not load.finished and time.monotonic() < deadline:
        time.sleep(0.02)
    assert load.finished, "the phases did not end"


def test_a_phase_goes_on_while_holding_and_no_longer():
    answers = [True, True, True]  # three polls find the change in progress, the fourth finds it done
    asked = []

    def holding() -> bool:
        asked.append(1)
        return answers.pop() if answers else False

    load = PhasedLoad(no_endpoints, "m", (Phase("peak", 1, 0.2, hold_while=5), Phase("after", 1, 0.2)),
                      holding=holding, poll_s=0.2)
    run(load)
    peak, after = (done.ended - done.started for done in load.done)
    assert 0.7 <= peak < 4.5, peak  # 0.2 s + three polls of 0.2 s (+ a worker's 0.5 s nap), not 5 s
    assert len(asked) == 4, asked   # "after" has no hold_while: it never asks
    assert after < 4.5, after


def test_hold_while_bounds_a_change_that_never_finishes():
    asked = []
    load = PhasedLoad(no_endpoints, "m", (Phase("peak", 1, 0.2, hold_while=0.6),),
                      holding=lambda: asked.append(1) or True, poll_s=0.1)
    run(load)
    (peak,) = (done.ended - done.started for done in load.done)
    assert 0.8 <= peak < 5.0, peak  # 0.2 s + the 0.6 s bound, not forever
    assert asked


def test_stop_ends_a_long_phase_promptly():
    load = PhasedLoad(no_endpoints, "m", (Phase("steady", 1, 3600),))
    load.start()
    time.sleep(0.2)
    started = time.monotonic()
    load.stop()
    assert load.finished and time.monotonic() - started < 5.0


def test_a_failing_check_holds_nothing():
    def broken() -> bool:
        raise TimeoutError("kubectl timed out")

    load = PhasedLoad(no_endpoints, "m", (Phase("peak", 1, 0.2, hold_while=30), Phase("after", 1, 0.2)),
                      holding=broken, poll_s=0.1)
    run(load)
    assert [done.phase.name for done in load.done] == ["peak", "after"]  # both phases ran, neither waited


def test_a_phase_says_why_its_requests_failed_most_frequent_first():
    done = PhaseResults(PEAK, results=[RequestResult(ok=True, output_tokens=8),
                                       RequestResult(ok=False, error="ServerDisconnectedError: Server disconnected"),
                                       RequestResult(ok=False, error="HTTP 503: loading"),
                                       RequestResult(ok=False, error="ServerDisconnectedError: Server disconnected"),
                                       RequestResult(ok=False)])
    assert done.errors() == [("ServerDisconnectedError: Server disconnected", 2), ("HTTP 503: loading", 1),
                             ("unknown", 1)]
    assert PhaseResults(PEAK, results=[RequestResult(ok=True)]).errors() == []
