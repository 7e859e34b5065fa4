"""How fast this machine runs a fixed piece of work over a story, to compare its periods.

A forecast from step times (operator/tuner/policy/forecast.py) is of the machine the tuner measured them on.
On two shared cores that machine changes under the story: other work may start beside it (issue 41: a
second clone's tests, a benchmark). A probe process times the same pure-Python work every half second at
the tests' priority; the ratio of its median times in two periods says how much slower a CPU-bound task
ran in the second. It is not pinned to the engine's core (the pod runner gives each engine one) and
mostly sleeps, so it reads the whole machine's contention -- the high load's own clients and HTTP streams
included -- rather than the engine's own: a check may lean on it to excuse a slower engine, not to demand
a faster one.

Run as a script it is the probe: one line per sample, "<unix time> <seconds the work took>".
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

WORK = 200_000  # iterations: ~12 ms on an idle core of the build machine
EVERY = 0.5  # seconds between samples: ~2% of one core
ENOUGH = 5  # samples for a period's median


def _probe() -> None:
    while True:
        started = time.perf_counter()
        total = 0
        for i in range(WORK):
            total += i * i
        took = time.perf_counter() - started
        print(f"{time.time():.3f} {took:.6f}", flush=True)
        time.sleep(EVERY)


Period = tuple[float, float]  # unix times


@dataclass(frozen=True)
class Slowdown:
    """How many times slower the work ran `now` than `then`, with what it rests on."""

    then_seconds: float
    then_samples: int
    now_seconds: float
    now_samples: int

    @property
    def factor(self) -> float:
        return self.now_seconds / self.then_seconds

    def describe(self) -> str:
        return (f"{self.factor:.2f}x as slow (the probe's work: median {self.now_seconds * 1e3:.1f} ms over "
                f"{self.now_samples} samples, against {self.then_seconds * 1e3:.1f} ms over {self.then_samples})")


class MachineSpeed:
    """The probe running beside a story, as a context manager."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []
        self._process: subprocess.Popen | None = None

    def __enter__(self) -> MachineSpeed:
        self._process = subprocess.Popen([sys.executable, __file__], stdout=subprocess.PIPE, text=True)
        threading.Thread(target=self._read, args=(self._process.stdout,), daemon=True).start()
        return self

    def __exit__(self, *_exc) -> None:
        if self._process is not None:
            self._process.kill()  # its pipe closes: the reader ends and closes it
            self._process.wait(timeout=10)

    def _read(self, lines) -> None:
        with lines:
            for line in lines:
                fields = line.split()
                if len(fields) == 2:  # anything else the interpreter may print is not a sample
                    self.samples.append((float(fields[0]), float(fields[1])))

    def _in(self, periods: Iterable[Period]) -> list[float]:
        spans = list(periods)
        return [took for at, took in list(self.samples) if any(start <= at <= end for start, end in spans)]

    def slowdown(self, then: Iterable[Period], now: Iterable[Period]) -> Slowdown:
        """The work's median time in the periods `now` against the periods `then`."""
        assert self._process is not None and self._process.poll() is None, "the machine-speed probe is not running"
        before, after = self._in(then), self._in(now)
        assert len(before) >= ENOUGH and len(after) >= ENOUGH, (
            f"the probe sampled {len(before)} and {len(after)} times in the two periods (of {len(self.samples)})")
        return Slowdown(statistics.median(before), len(before), statistics.median(after), len(after))


if __name__ == "__main__":
    try:
        _probe()
    except (KeyboardInterrupt, BrokenPipeError):
        pass
