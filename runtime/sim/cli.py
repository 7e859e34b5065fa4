"""`specinfer sim`: run the simulator standalone (the runtime runs it from a RuntimeConfig instead)."""

from __future__ import annotations

import json
import logging

import click

from specinfer.runtime.methods import ACCELERATORS
from specinfer.runtime.sim.model import COST_MODELS, METHODS, WORKLOADS
from specinfer.runtime.sim.settings import Phase, SimulatorSettings


def parse_phases(text: str | None) -> tuple[Phase, ...]:
    if not text:
        return ()
    try:
        items = json.loads(text)
        return tuple(Phase(workload=item["workload"], duration_s=float(item["durationSeconds"])) for item in items)
    except (ValueError, KeyError, TypeError) as error:
        raise click.BadParameter(f'expected [{{"workload": "chat", "durationSeconds": 60}}, ...]: {error}') from error


def parse_schedule(text: str | None) -> tuple[tuple[int, int, int], ...] | None:
    if not text:
        return None
    try:
        return tuple(tuple(int(v) for v in entry) for entry in json.loads(text))  # type: ignore[misc]
    except (ValueError, TypeError) as error:
        raise click.BadParameter(f"expected [[start, end, K], ...]: {error}") from error


@click.command("sim")
@click.option("--model-name", default="simulated-model", show_default=True, help="served model name")
@click.option("--method", type=click.Choice(METHODS), default="eagle3", show_default=True)
@click.option("-k", "--num-speculative-tokens", type=int, default=None, help="default: the catalogue's k_default")
@click.option("--schedule", default=None,
              help="num_speculative_tokens_per_batch_size as JSON, e.g. '[[1,8,4],[9,64,0]]'")
@click.option("--workload", type=click.Choice(WORKLOADS), default="chat", show_default=True)
@click.option("--phases", default=None, help='JSON list: [{"workload":"chat","durationSeconds":60}, ...]')
@click.option("--cost-model", type=click.Choice(sorted(COST_MODELS)), default="h100-llama8b", show_default=True)
@click.option("--accelerator", type=click.Choice(list(ACCELERATORS)), default="nvidia", show_default=True,
              help="whose engine's drafter to play: how drafting follows the scheduled K")
@click.option("--mtp-modules", type=click.IntRange(min=1), default=None,
              help="method mtp: the simulated checkpoint's MTP module count (default: several, drafting the "
              "startup K every step on Model Runner V2)")
@click.option("--adaptive-verification", is_flag=True, help="verify only the draft slots vLLM's adaptive "
              "verification admits (enable_adaptive_verification)")
@click.option("--max-batch-size", type=int, default=256, show_default=True, help="vLLM's max_num_seqs")
@click.option("--time-scale", type=float, default=1.0, show_default=True, help="simulated seconds per wall second")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--noise", type=float, default=0.05, show_default=True, help="lognormal sigma of step time")
@click.option("--startup-seconds", type=float, default=0.0, show_default=True, help="simulated model load time")
@click.option("--host", default="0.0.0.0", show_default=True)
@click.option("--port", type=int, default=8000, show_default=True)
@click.option("--admin", is_flag=True, help="serve /admin/workload and /admin/state (unauthenticated: "
              "anyone who reaches the port can switch the workload)")
def sim(model_name, method, num_speculative_tokens, schedule, workload, phases, cost_model, accelerator,
        mtp_modules, adaptive_verification, max_batch_size, time_scale, seed, noise, startup_seconds, host, port,
        admin) -> None:
    """Serve a simulated vLLM (OpenAI API + vLLM's /metrics) under speculative decoding."""
    from specinfer.runtime.methods import get_method
    from specinfer.runtime.sim.server import serve

    spec = get_method(method)
    k = 0 if not spec.speculates else (num_speculative_tokens if num_speculative_tokens is not None else spec.k_default)
    settings = SimulatorSettings(
        model_name=model_name, method=method, num_speculative_tokens=k,
        schedule=parse_schedule(schedule), workload=workload, phases=parse_phases(phases), cost_model=cost_model,
        accelerator=accelerator, mtp_modules=mtp_modules, adaptive_verification=adaptive_verification,
        max_batch_size=max_batch_size, time_scale=time_scale, seed=seed, noise=noise, startup_s=startup_seconds,
        host=host, port=port, admin=admin,
    )
    problems = settings.problems()
    if problems:
        raise click.UsageError("; ".join(problems))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    serve(settings)
