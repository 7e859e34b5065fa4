"""`specinfer bench live-schedule`: cost of the live-schedule watcher's poll() per engine step.

The live-schedule scheduler (runtime/live_schedule/vllm_scheduler.py) calls `ScheduleWatcher.poll()`
once per engine step, before vLLM's own `schedule()`, so it must stay cheap (goal, issue 22: under
2 microseconds per step). poll() runs in one of three regimes:

- between checks (all but one step in every `check_interval`): one clock read and a comparison;
- at a check with the file unchanged: one `stat`;
- at a check with a changed file: read, parse and validate it, build the dense lookup (here with
  runtime/methods/schedule.py `dense_schedule`, which expands exactly as vLLM's builder) and write
  the state file (rendered into the pod's /tmp emptyDir: a disk write; one more row measures the
  same without it). The file is swapped the way the kubelet swaps a mounted ConfigMap, by replacing
  a symlink, between two timed calls.

Each regime is timed per call with time.perf_counter_ns (median and p99), and as a whole loop
(mean per call); a no-op method call timed the same way shows what the timing itself costs. A
changed file is also timed in thread CPU time: on a shared machine its ~1 ms calls are often
preempted. The
amortised cost per step at a step rate r is the regime mix the engine sees: one check every
`check_interval` seconds, i.e. every r * check_interval steps. Garbage collection is off while
timing (as in timeit): a collection belongs to whatever allocation triggers it. The watcher's log
line per swap goes to a handler at INFO (writing to /dev/null), as vLLM's logging configuration
emits it in the engine.
"""

from __future__ import annotations

import functools
import gc
import json
import logging
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import click

from specinfer.runtime.contract.live_schedule.published import PublishedSchedule, published_text
from specinfer.runtime.methods.schedule import dense_schedule
from specinfer.runtime.pod.live_schedule.watcher import CHECK_INTERVAL_SECONDS, ScheduleWatcher

GOAL_MICROSECONDS = 2.0
MAX_K = 4
# Two schedules the file alternates between (a retune and back): a few ranges, as the tuner writes them.
SCHEDULE_A = ((1, 4, 4), (5, 16, 3), (17, 64, 2), (65, 65536, 1))
SCHEDULE_B = ((1, 8, 3), (9, 32, 2), (33, 128, 1), (129, 65536, 0))


class _NoOp:
    def poll(self) -> None:
        return None


def per_call(call: Callable[[], object], calls: int, between: Callable[[], None] | None = None,
             clock: Callable[[], int] = time.perf_counter_ns) -> list[int]:
    """Nanoseconds of each of `calls` calls; `between` runs untimed before each one."""
    timings = [0] * calls
    for index in range(calls):
        if between is not None:
            between()
        start = clock()
        call()
        timings[index] = clock() - start
    return timings


def loop_mean(call: Callable[[], object], calls: int) -> float:
    """Nanoseconds per call of a tight loop (no per-call clock reads), less the empty loop's."""
    clock = time.perf_counter_ns
    iterations = range(calls)
    start = clock()
    for _ in iterations:
        call()
    looped = clock() - start
    start = clock()
    for _ in iterations:
        pass
    return max(0.0, (looped - (clock() - start)) / calls)


def summary(timings: list[int], mean_ns: float | None = None, cpu: list[int] | None = None) -> dict[str, float | int]:
    ordered = sorted(timings)
    figures: dict[str, float | int] = {
        "calls": len(ordered),
        "median_us": statistics.median(ordered) / 1000,
        "p99_us": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] / 1000,
    }
    if mean_ns is not None:
        figures["loop_mean_us"] = mean_ns / 1000
    if cpu is not None:
        figures["cpu_median_us"] = statistics.median(cpu) / 1000
    return figures


class _Mount:
    """A mounted-ConfigMap look-alike: `schedule.json` is a symlink the swap replaces atomically."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.targets = []
        for name, ranges in (("a", SCHEDULE_A), ("b", SCHEDULE_B)):
            target = directory / f"..data_{name}.json"
            target.write_text(published_text(ranges))
            self.targets.append(target)
        self.path = directory / "schedule.json"
        self.showing = 0
        self.path.symlink_to(self.targets[0])

    def swap(self) -> None:
        self.showing = 1 - self.showing
        temporary = self.directory / "schedule.json.tmp"
        temporary.symlink_to(self.targets[self.showing])
        os.replace(temporary, self.path)


def watcher(mount: _Mount, state: Path | None, max_batch_size: int, check_interval: float) -> ScheduleWatcher:
    build = functools.partial(dense_schedule, num_speculative_tokens=MAX_K, max_batch_size=max_batch_size)
    created = ScheduleWatcher(mount.path, startup=PublishedSchedule(SCHEDULE_A), max_k=MAX_K, build=build,
                              state_path=state, check_interval=check_interval)
    assert created.poll() is None  # the first check: the startup schedule is already in force
    return created


def measure(calls: int, max_batch_sizes: list[int], state_dir: str | None) -> dict[str, dict[str, float | int]]:
    regimes: dict[str, dict[str, float | int]] = {}
    noop = _NoOp().poll
    per_call(noop, 1000)
    regimes["no-op call"] = summary(per_call(noop, calls), loop_mean(noop, calls))
    with tempfile.TemporaryDirectory(prefix="specinfer-live-bench-", dir=state_dir) as directory:
        root = Path(directory)
        mount, state = _Mount(root), root / "state.json"

        between = watcher(mount, state, 256, check_interval=1e9).poll
        per_call(between, 1000)
        timings = per_call(between, calls)
        regimes["between checks"] = summary(timings, loop_mean(between, calls))

        unchanged = watcher(mount, state, 256, check_interval=0.0)
        poll = unchanged.poll
        per_call(poll, 200)
        checks = max(1000, calls // 10)
        regimes["check, file unchanged"] = summary(per_call(poll, checks), loop_mean(poll, checks))
        assert unchanged.state.swaps == 0 and not unchanged.state.errors, unchanged.state

        cases = [(size, state) for size in max_batch_sizes] + [(max(max_batch_sizes), None)]
        for max_batch_size, state_path in cases:
            label = f"max batch {max_batch_size}" + ("" if state_path else ", no state file")
            swaps = max(200, calls // 100)
            timings = changed_file(mount, state_path, max_batch_size, swaps, time.perf_counter_ns)
            cpu = changed_file(mount, state_path, max_batch_size, swaps, time.thread_time_ns)
            regimes[f"check, file changed ({label})"] = summary(timings, cpu=cpu)
    return regimes


def changed_file(mount: _Mount, state: Path | None, max_batch_size: int, swaps: int,
                 clock: Callable[[], int]) -> list[int]:
    """Nanoseconds (of `clock`) of each poll() that finds a new schedule (the file swapped before each one)."""
    changed = watcher(mount, state, max_batch_size, check_interval=0.0)
    results: list[list[int] | None] = []
    swap = lambda: results.append(changed.poll())  # keeps what each poll returned, to check below
    per_call(swap, 50, between=mount.swap)
    results.clear()
    timings = per_call(swap, swaps, between=mount.swap, clock=clock)
    assert all(lookup is not None and len(lookup) == max_batch_size + 1 for lookup in results), \
        "a changed file did not produce a new lookup"
    assert not changed.state.errors, changed.state.errors
    if mount.showing:  # every watcher starts on schedule A
        mount.swap()
    return timings


def amortised(regimes: dict[str, dict[str, float | int]], check_interval: float, step_rate: float,
              check_regime: str) -> float:
    """Microseconds per step when one step in every step_rate * check_interval is a check of `check_regime`."""
    steps_per_check = max(1.0, step_rate * check_interval)
    between, check = float(regimes["between checks"]["median_us"]), float(regimes[check_regime]["median_us"])
    return ((steps_per_check - 1) * between + check) / steps_per_check


@click.command("live-schedule")
@click.option("--calls", default=200_000, show_default=True,
              help="Timed calls between checks (checks: a tenth; changed files: a hundredth, at least 200).")
@click.option("--max-batch-sizes", default="256,1024", show_default=True,
              help="Comma-separated max batch sizes (the dense lookup's length) for the changed-file regime.")
@click.option("--step-rates", default="50,500", show_default=True, help="Comma-separated engine steps per second.")
@click.option("--check-interval", default=CHECK_INTERVAL_SECONDS, show_default=True,
              help="Seconds between two checks of the file (the watcher's default).")
@click.option("--state-dir", default=None, type=click.Path(file_okay=False, exists=True),
              help="Where the schedule and state files live [default: the system temporary directory, "
                   "as the pod's /tmp emptyDir].")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON instead of a table.")
def live_schedule_command(calls: int, max_batch_sizes: str, step_rates: str, check_interval: float,
                          state_dir: str | None, as_json: bool) -> None:
    """Microseconds per ScheduleWatcher.poll() call, once per engine step (goal < 2 us per step)."""
    sizes = [int(value) for value in max_batch_sizes.split(",")]
    rates = [float(value) for value in step_rates.split(",")]
    logger = logging.getLogger("vllm.specinfer.live_schedule")
    saved_level, enabled = logger.level, gc.isenabled()
    with open(os.devnull, "w") as sink:
        handler = logging.StreamHandler(sink)
        handler.setFormatter(logging.Formatter("%(levelname)s %(asctime)s [%(filename)s:%(lineno)d] %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        gc.disable()
        try:
            regimes = measure(calls, sizes, state_dir)
        finally:
            if enabled:
                gc.enable()
            logger.removeHandler(handler)
            logger.setLevel(saved_level)
    noop = float(regimes["no-op call"]["median_us"])
    changed = [name for name in regimes if name.startswith("check, file changed") and "no state file" not in name]
    per_step = {}
    for rate in rates:
        per_step[f"{rate:g}"] = {
            "steps_per_check": max(1.0, rate * check_interval),
            "steady_us": amortised(regimes, check_interval, rate, "check, file unchanged"),
            "file_changed_at_every_check_us": amortised(regimes, check_interval, rate, changed[-1]),
        }
    worst = max(step["steady_us"] for step in per_step.values())
    machine = {"cpus": os.cpu_count(), "load_average": os.getloadavg()[0]}
    if as_json:
        click.echo(json.dumps({
            "goal_us": GOAL_MICROSECONDS, "check_interval_s": check_interval, "regimes": regimes,
            "overhead_over_noop_us": {name: float(figures["median_us"]) - noop for name, figures in regimes.items()},
            "amortised_per_step": per_step, "worst_steady_us": worst, "meets_goal": worst < GOAL_MICROSECONDS,
            "machine": machine,
        }, indent=2))
        return
    click.echo(f"{'regime':<52}{'calls':>8}{'median us':>11}{'p99 us':>11}{'- no-op':>11}{'loop us':>9}"
               f"{'cpu us':>10}")
    for name, figures in regimes.items():
        loop = f"{figures['loop_mean_us']:>9.3f}" if "loop_mean_us" in figures else f"{'':>9}"
        cpu = f"{figures['cpu_median_us']:>10.1f}" if "cpu_median_us" in figures else ""
        click.echo(f"{name:<52}{figures['calls']:>8}{figures['median_us']:>11.3f}{figures['p99_us']:>11.3f}"
                   f"{float(figures['median_us']) - noop:>11.3f}{loop}{cpu}")
    click.echo("median/p99: single calls timed with perf_counter_ns (timer included, as in the no-op row); "
               "- no-op: median above the no-op call's; loop: mean per call of an untimed loop; "
               "cpu: median thread CPU time of a call (a shared machine preempts the long ones)")
    click.echo(f"amortised per step, one check every {check_interval:g} s "
               f"(a changed file costs as in: {changed[-1]}):")
    for steps_per_second, step in per_step.items():
        click.echo(f"  {steps_per_second:>5} steps/s ({step['steps_per_check']:g} steps per check): "
                   f"{step['steady_us']:.3f} us steady, {step['file_changed_at_every_check_us']:.3f} us "
                   "if the file changed at every check")
    verdict = "meets" if worst < GOAL_MICROSECONDS else "MISSES"
    click.echo(f"worst steady cost {worst:.3f} us per step: {verdict} the {GOAL_MICROSECONDS:g} us goal "
               f"(CPU: {machine['cpus']} cores, load {machine['load_average']:.1f})")
