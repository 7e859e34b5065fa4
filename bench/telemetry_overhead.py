"""`specinfer bench telemetry-overhead`: cost of the stat-logger plugin's record() per engine step.

record() runs on vLLM's output path once per engine step, so it must stay cheap (goal: under
20 microseconds). The plugin is driven exactly as vLLM drives it: vLLM's own stats classes
(from the cached 0.33.0 wheel) built through vLLM's code paths, one record() per step, the
periodic flush included. Stats objects are built before timing; only record() is timed.
Both prometheus_client value backends are measured: in-process (one API server) and the
mmap files of Prometheus multiprocess mode (--api-server-count > 1).
"""

from __future__ import annotations

import os
import random
import statistics
import tempfile
import time
from contextlib import contextmanager
from types import SimpleNamespace

import click
from prometheus_client import CollectorRegistry, Histogram, values

from specinfer.bench.wheel_stats import StepRequest, build_step, vllm_from_wheel

GOAL_MICROSECONDS = 20.0


def make_steps(batch_size: int, k: int, count: int, seed: int = 0) -> list[tuple]:
    """Distinct realistic steps: every request drafts k, accepts a random prefix, decoded last step."""
    rng = random.Random(seed)
    steps = []
    now = 100.0
    for _ in range(count):
        requests = [StepRequest(drafted=k, accepted=rng.randint(0, k), last_output=now) for _ in range(batch_size)]
        now += 0.02 + rng.random() * 0.01
        steps.append(build_step(requests, now=now, num_spec_tokens=k))
    return steps


@contextmanager
def value_backend(multiprocess: bool):
    """prometheus_client picks its value class at import from PROMETHEUS_MULTIPROC_DIR; mirror that."""
    if not multiprocess:
        yield
        return
    saved_class, saved_env = values.ValueClass, os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    with tempfile.TemporaryDirectory() as directory:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
        values.ValueClass = values.MultiProcessValue()
        try:
            yield
        finally:
            values.ValueClass = saved_class
            if saved_env is None:
                os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
            else:
                os.environ["PROMETHEUS_MULTIPROC_DIR"] = saved_env


def measure(plugin_class, steps: list[tuple], k: int, multiprocess: bool, repeats: int) -> dict:
    with value_backend(multiprocess):
        config = SimpleNamespace(model_config=SimpleNamespace(served_model_name="bench"),
                                 speculative_config=SimpleNamespace(num_speculative_tokens=k))
        plugin = plugin_class(config, [0], registry=CollectorRegistry())
        record = plugin.record
        for scheduler_stats, iteration_stats in steps[:200]:  # warm-up: lazily created cells
            record(scheduler_stats, iteration_stats)
        clock = time.perf_counter_ns
        cpu_clock = time.thread_time_ns  # CPU time: a shared, loaded machine preempts long passes
        pass_means = []  # whole passes, flushes included: the CPU vLLM's output path spends per step
        for _ in range(repeats):
            started = cpu_clock()
            for scheduler_stats, iteration_stats in steps:
                record(scheduler_stats, iteration_stats)
            pass_means.append((cpu_clock() - started) / len(steps))
        per_call = []  # one pass timing each call, for the spread
        for scheduler_stats, iteration_stats in steps:
            start = clock()
            record(scheduler_stats, iteration_stats)
            per_call.append(clock() - start)
        assert not plugin.disabled, "the plugin disabled itself during the benchmark"
    per_call.sort()
    return {
        "best": min(pass_means) / 1000,
        "median": statistics.median(pass_means) / 1000,
        "p50": per_call[len(per_call) // 2] / 1000,
        "p99": per_call[int(len(per_call) * 0.99)] / 1000,
    }


def vllm_itl_reference(batch_size: int, passes: int = 200) -> float:
    """For scale: microseconds vLLM's own Prometheus logger spends per step observing each request's ITL."""
    histogram = Histogram("reference_itl", "", ["model_name", "engine"], registry=CollectorRegistry(),
                          buckets=[0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0]).labels("m", "0")
    latencies = [0.02 + 0.0001 * index for index in range(batch_size)]
    started = time.thread_time_ns()
    for _ in range(passes):
        for latency in latencies:  # loggers.py: for itl in iteration_stats.inter_token_latencies_iter: observe
            histogram.observe(latency)
    return (time.thread_time_ns() - started) / passes / 1000


@click.command("telemetry-overhead")
@click.option("--batch-sizes", default="1,32,256", show_default=True, help="Comma-separated batch sizes.")
@click.option("--ks", default="3,8,15", show_default=True, help="Comma-separated draft lengths K.")
@click.option("--steps", default=2000, show_default=True, help="Distinct steps per case.")
@click.option("--repeats", default=7, show_default=True, help="Timed passes over the steps.")
def telemetry_overhead_command(batch_sizes: str, ks: str, steps: int, repeats: int) -> None:
    """Microseconds per record() call of the vLLM stat-logger plugin (goal < 20 us)."""
    sizes = [int(value) for value in batch_sizes.split(",")]
    draft_lengths = [int(value) for value in ks.split(",")]
    worst = 0.0
    with vllm_from_wheel():
        from specinfer.runtime.pod.telemetry.vllm_plugin import SpecinferStatLogger

        click.echo(f"{'backend':<13}{'batch':>6}{'K':>4}{'cpu us':>9}{'best us':>9}{'p50 us':>9}{'p99 us':>9}")
        for multiprocess in (False, True):
            for k in draft_lengths:
                for batch_size in sizes:
                    case = make_steps(batch_size, k, steps)
                    figures = measure(SpecinferStatLogger, case, k, multiprocess, repeats)
                    worst = max(worst, figures["median"])
                    click.echo(f"{'multiprocess' if multiprocess else 'in-process':<13}{batch_size:>6}{k:>4}"
                               f"{figures['median']:>9.2f}{figures['best']:>9.2f}{figures['p50']:>9.2f}"
                               f"{figures['p99']:>9.2f}")
    click.echo("cpu: CPU time per record(), median over passes (flushes included); best: fastest pass; "
               "p50/p99: wall clock of single calls")
    reference = ", ".join(f"B={size}: {vllm_itl_reference(size):.1f} us" for size in sizes)
    click.echo(f"for scale, CPU of vLLM's own logger per step for its inter-token-latency histogram alone: {reference}")
    verdict = "meets" if worst < GOAL_MICROSECONDS else "MISSES"
    click.echo(f"worst CPU time {worst:.2f} us per record(): {verdict} the {GOAL_MICROSECONDS:.0f} us goal "
               f"(CPU: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f})")
