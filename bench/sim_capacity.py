"""`specinfer bench sim-capacity`: how much load one simulator process sustains on one core.

Starts `specinfer sim` as a subprocess pinned to one CPU core, drives it with the load
generator (pinned elsewhere when the machine has a second core) at a fixed number of
concurrent streams for each time scale, and prints, from the simulator's own /metrics
and /admin/state: generated tokens per wall second, streams running, the fraction of
simulated time the engine lagged behind its clock (fidelity), and the simulator's CPU use.
Goal (issue 5): >= 256 concurrent streams and >= 5,000 generated tokens/s on one core.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from dataclasses import dataclass

import aiohttp
import click

from specinfer.bench.load import LoadConfig, run_load
from specinfer.dev.cluster.http_probe import wait_http_ok
from specinfer.dev.cluster.ports import free_port


@dataclass(frozen=True)
class CapacityResult:
    time_scale: float
    streams: int
    wall_s: float
    tokens_per_wall_s: float
    tokens_per_sim_s: float
    running_peak: int
    lag_fraction: float
    sim_cpu_fraction: float
    failed: int


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process from /proc (Linux)."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def scrape(session: aiohttp.ClientSession, url: str) -> tuple[float, dict]:
    async with session.get(f"{url}/metrics") as response:
        text = await response.text()
    tokens = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                 if line.startswith("vllm:generation_tokens_total"))
    async with session.get(f"{url}/admin/state") as response:
        state = await response.json()
    return tokens, state


async def measure(url: str, pid: int, *, streams: int, duration_s: float, output_tokens: int,
                  time_scale: float) -> CapacityResult:
    async with aiohttp.ClientSession() as session:
        tokens_before, state_before = await scrape(session, url)
        cpu_before, wall_before = cpu_seconds(pid), time.perf_counter()
        peak = 0

        async def sample_running() -> None:
            nonlocal peak
            while True:
                await asyncio.sleep(0.25)
                _, state = await scrape(session, url)
                peak = max(peak, state["running"])

        sampler = asyncio.create_task(sample_running())
        results, _ = await run_load(LoadConfig(url=url, concurrency=streams, prompt_tokens=32,
                                               output_tokens=output_tokens, duration_s=duration_s))
        sampler.cancel()
        wall = time.perf_counter() - wall_before
        cpu = cpu_seconds(pid) - cpu_before
        tokens_after, state_after = await scrape(session, url)
    sim_elapsed = state_after["simulatedSeconds"] - state_before["simulatedSeconds"]
    lag = state_after["lagSeconds"] - state_before["lagSeconds"]
    generated = tokens_after - tokens_before
    return CapacityResult(
        time_scale=time_scale, streams=streams, wall_s=wall, tokens_per_wall_s=generated / wall,
        tokens_per_sim_s=generated / sim_elapsed if sim_elapsed > 0 else 0.0, running_peak=peak,
        lag_fraction=lag / sim_elapsed if sim_elapsed > 0 else 0.0, sim_cpu_fraction=cpu / wall,
        failed=sum(1 for r in results if not r.ok),
    )


def start_simulator(port: int, time_scale: float, streams: int, core: int | None) -> subprocess.Popen:
    command = [sys.executable, "-c", "from specinfer.cli import main; main()", "sim", "--port", str(port),
               "--host", "127.0.0.1", "--time-scale", str(time_scale), "--max-batch-size", str(streams),
               "--method", "eagle3", "--num-speculative-tokens", "3", "--cost-model", "h100-llama8b",
               "--admin"]  # /admin/state: clock lag
    pin = (lambda: os.sched_setaffinity(0, {core})) if core is not None else None
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=pin)


def wait_ready(url: str, timeout_s: float = 30.0) -> None:
    wait_http_ok(f"{url}/health", timeout=timeout_s)


@click.command("sim-capacity")
@click.option("--streams", type=int, default=256, show_default=True, help="concurrent streaming requests")
@click.option("--time-scales", default="1,10,20", show_default=True, help="comma-separated simulator time scales")
@click.option("--duration", type=float, default=10.0, show_default=True, help="wall seconds of load per time scale")
@click.option("--output-tokens", type=int, default=256, show_default=True)
def sim_capacity_command(streams: int, time_scales: str, duration: float, output_tokens: int) -> None:
    """Measure the simulator's capacity on one core: streams, tokens/s and clock fidelity."""
    cores = sorted(os.sched_getaffinity(0))
    sim_core = cores[0]
    if len(cores) > 1:
        os.sched_setaffinity(0, set(cores[1:]))  # keep the load generator off the simulator's core
    click.echo(f"simulator pinned to core {sim_core}; load generator on {sorted(os.sched_getaffinity(0))}; "
               f"{streams} streams, {output_tokens} output tokens each, eagle3 K=3, h100-llama8b")
    click.echo(f"{'scale':>6} {'streams':>8} {'peak running':>13} {'tok/s (wall)':>13} {'tok/s (sim)':>12} "
               f"{'lag':>6} {'sim CPU':>8} {'failed':>7}")
    for scale in (float(s) for s in time_scales.split(",")):
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        process = start_simulator(port, scale, streams, sim_core)
        try:
            wait_ready(url)
            result = asyncio.run(measure(url, process.pid, streams=streams, duration_s=duration,
                                         output_tokens=output_tokens, time_scale=scale))
        finally:
            process.terminate()
            process.wait(timeout=10)
        click.echo(f"{result.time_scale:6g} {result.streams:8d} {result.running_peak:13d} "
                   f"{result.tokens_per_wall_s:13.0f} {result.tokens_per_sim_s:12.0f} "
                   f"{result.lag_fraction:6.1%} {result.sim_cpu_fraction:8.0%} {result.failed:7d}")
