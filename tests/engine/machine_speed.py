"""How fast this machine runs a fixed piece of work over a story, to compare two of its periods.

A forecast from step times (operator/tuner/policy/forecast.py) is of the machine the tuner measured them on.
On two shared cores that machine changes under the story: other work may start beside it (issue 41: a
second clone's tests, a benchmark), and the high load's own clients and HTTP streams take CPU the low load
did not. A probe process times the same pure-Python work every half second at the tests' priority, so it
waits on the run queue as the engine does; the ratio of its median times in two periods is how much slower
the machine ran a CPU-bound task in the second.

Run as a script it is the probe: one line per sample, "<unix time> <seconds the work took>".
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import threading
import time

WORK = 200_000  # iterations: ~10 ms on an idle core of the build machine
EVERY = 0.5  # seconds between samples: ~2% of one core


def _probe() -> None:
    while True:
        started = time.perf_counter()
        total = 0
        for i in range(WORK):
            total += i * i
        took = time.perf_counter() - started
        print(f"{time.time():.3f} {took:.6f}", flush=True)
        time.sleep(EVERY)


class MachineSpeed:
    """The probe running beside a story: `slowdown(then, now)` compares two periods of wall-clock time."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []
        self._process: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> MachineSpeed:
        self._process = subprocess.Popen([sys.executable, __file__], stdout=subprocess.PIPE, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait(timeout=10)

    def __enter__(self) -> MachineSpeed:
        return self.start()

    def __exit__(self, *_exc) -> None:
        self.stop()

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            at, took = line.split()
            self.samples.append((float(at), float(took)))

    def median(self, start: float, end: float) -> float | None:
        """The work's median time between two unix times (None: fewer than 5 samples there)."""
        times = [took for at, took in list(self.samples) if start <= at <= end]
        return statistics.median(times) if len(times) >= 5 else None

    def slowdown(self, then: tuple[float, float], now: tuple[float, float]) -> float:
        """How many times slower the work ran in `now` than in `then` (1.0 where either has too few samples)."""
        before, after = self.median(*then), self.median(*now)
        return after / before if before and after else 1.0


if __name__ == "__main__":
    try:
        _probe()
    except (KeyboardInterrupt, BrokenPipeError):
        pass
