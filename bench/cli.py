"""`specinfer bench ...`: benchmarks that print figures (never timed unit tests)."""

from __future__ import annotations

import click

from specinfer.cli import LazyGroup

# name -> "module:attribute"; each benchmark lives in its own module under bench/.
BENCHMARKS: dict[str, str] = {
    "cost-fit": "specinfer.bench.cost_fit:cost_fit_command",
    "engine-cpu": "specinfer.bench.engine_cpu:engine_cpu_command",
    "live-schedule": "specinfer.bench.live_schedule:live_schedule_command",
    "load": "specinfer.bench.load:load_command",
    "operator-scale": "specinfer.bench.operator_scale:operator_scale_command",
    "selection": "specinfer.bench.selection:selection_command",
    "sim-capacity": "specinfer.bench.sim_capacity:sim_capacity_command",
    "telemetry-overhead": "specinfer.bench.telemetry_overhead:telemetry_overhead_command",
    "tuner": "specinfer.bench.tuner:tuner_command",
    "tuner-table": "specinfer.bench.tuner_table:tuner_table_command",
    "tuning-loop": "specinfer.bench.tuning_loop:tuning_loop_command",
}


@click.group(cls=LazyGroup, lazy_commands=BENCHMARKS)
def bench() -> None:
    """Benchmarks: load generation against a vLLM-compatible server, closed-loop tuner runs."""
