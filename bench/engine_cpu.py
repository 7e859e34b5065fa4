"""`specinfer bench engine-cpu`: the real vLLM CPU engine's step time by batch size and K, and acceptance per position.

Offline vLLM (the engine environment, the tiny models of `specinfer models make`), greedy, a
repetitive prompt, `--tokens` generated tokens per request. For each (method, K) one engine is
built and runs one batch per batch size; step time is wall time / engine steps (vLLM's
`vllm:iteration_tokens_total` count, the prefill step included), acceptance per position is
vLLM's accepted-per-position / drafts. Methods: no speculation (K=0), `draft_model` with the
target as its own draft (always right: the upper bound of what drafting can give) and ngram.
The simulator's `cpu-tiny` preset is calibrated from this table (docs/simulator.md).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click

from specinfer.dev.cpu_engine.environment import EngineNotInstalled


def rows_for(env: dict, models: Path, method: str, k: int, tokens: int, batches: str, eager: bool) -> list[dict]:
    argv = [str(Path(env["VIRTUAL_ENV"]) / "bin" / "python"), "-m", "specinfer.bench.engine_cpu_worker",
            str(models / "target"), method, str(k), str(tokens), batches]
    if method == "draft_model":
        argv.append(str(models / "draft-same"))
    if eager:
        argv.append("--eager")
    result = subprocess.run(argv, env=env, cwd=models, capture_output=True, text=True)
    rows = [json.loads(line[4:]) for line in result.stdout.splitlines() if line.startswith("ROW ")]
    if result.returncode != 0 or not rows:
        raise click.ClickException(f"{method} K={k} failed (exit {result.returncode}):\n{result.stderr[-3000:]}")
    return rows


CATALOGUE_NAMES = {"draft_model": "draftModel", "ngram": "ngram", "none": "none"}


def simulated_step_ms(preset: str, method: str, k: int, batch: int) -> float:
    """The simulator's T(B, K) for the same point, to set beside the measurement."""
    from specinfer.runtime.methods import get_method
    from specinfer.runtime.sim.model import COST_MODELS, draft_scale

    name = CATALOGUE_NAMES[method]
    cost_shape = get_method(name).cost_shape if k else None
    return 1000 * COST_MODELS[preset].step_time(batch, k, cost_shape, draft_scale=draft_scale(name))


def table(rows: list[dict], preset: str = "cpu-tiny") -> str:
    """The measured points with the preset's step time beside them, then how far apart the two are."""
    base = {r["batch"]: r["generated"] / r["wall_s"] for r in rows if r["k"] == 0}
    lines = [f"| method | K | batch | step ms | {preset} sim ms | sim vs real | tokens/step/request | "
             "generated tok/s | vs K=0 | acceptance per position |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    errors: list[float] = []
    for r in rows:
        if not r["steps"] or r["batch"] not in base:
            continue
        step_ms = 1000 * r["wall_s"] / r["steps"]
        per_step = r["generated"] / r["batch"] / r["steps"]
        rate = r["generated"] / r["wall_s"]
        drafts = r["drafts"] or 0
        acceptance = ", ".join(f"{a / drafts:.2f}" for a in r["accepted_per_pos"]) if drafts else "-"
        sim_ms = simulated_step_ms(preset, r["method"], r["k"], r["batch"])
        errors.append(sim_ms / step_ms - 1)
        lines.append(f"| {r['method']} | {r['k']} | {r['batch']} | {step_ms:.1f} | {sim_ms:.1f} | {errors[-1]:+.0%} | "
                     f"{per_step:.2f} | {rate:,.0f} | {rate / base[r['batch']]:.2f}x | {acceptance} |")
    if errors:
        within = sum(abs(e) <= 0.15 for e in errors)
        lines.append(f"\n{preset} vs the real engine: median |error| {statistics.median(abs(e) for e in errors):.0%}, "
                     f"{within} of {len(errors)} points within 15%, worst {max(errors, key=abs):+.0%}")
    return "\n".join(lines)


@click.command("engine-cpu")
@click.option("--batch-sizes", default="1,4,16,64", show_default=True)
@click.option("--ks", default="0,1,2,3,4", show_default=True, help="draft lengths (0: no speculation)")
@click.option("--methods", default="draft_model,ngram", show_default=True)
@click.option("--tokens", default=128, show_default=True, help="generated tokens per request")
@click.option("--eager", is_flag=True, help="enforce_eager (no torch.compile): faster to start, not what serves")
@click.option("--preload-iomp", is_flag=True,
              help="LD_PRELOAD the engine environment's Intel OpenMP (libiomp5), as vLLM's CPU image does")
@click.option("--models", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="output of `specinfer models make` (default: made in a temporary folder)")
@click.option("--json-out", type=click.Path(dir_okay=False, path_type=Path), default=None)
@click.option("--from-json", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="print the table of an earlier --json-out run instead of measuring")
def engine_cpu_command(batch_sizes: str, ks: str, methods: str, tokens: int, eager: bool, preload_iomp: bool,
                       models: Path | None, json_out: Path | None, from_json: Path | None) -> None:
    """Measure the real CPU engine: step time by batch size and K, acceptance per position."""
    if from_json is not None:
        click.echo(table(json.loads(from_json.read_text())))
        return
    from specinfer.dev.cpu_engine.overlay import engine_process_env

    try:
        env = {**engine_process_env(), "VLLM_CPU_KVCACHE_SPACE": "2"}
    except EngineNotInstalled as error:
        raise click.ClickException(str(error)) from None
    if preload_iomp:
        env["LD_PRELOAD"] = str(Path(env["VIRTUAL_ENV"]) / "lib" / "libiomp5.so")
    with tempfile.TemporaryDirectory(prefix="specinfer-bench-models-") as tmp:
        if models is None:
            models = Path(tmp) / "tiny"
            subprocess.run([str(Path(sys.executable).parent / "specinfer"), "models", "make", str(models)],
                           check=True, capture_output=True)
        models = models.resolve()
        k_values = [int(k) for k in ks.split(",")]
        runs = [("none", 0)] if 0 in k_values else []
        runs += [(method, k) for method in methods.split(",") for k in k_values if k > 0]
        rows: list[dict] = []
        started = time.monotonic()
        for method, k in runs:
            click.echo(f"  {method} K={k} ... ({time.monotonic() - started:.0f} s)", err=True)
            rows += rows_for(env, models, method, k, tokens, batch_sizes, eager)
    click.echo(f"real vLLM CPU engine (vllm-cpu 0.32.0), tiny models, {tokens} tokens per request, greedy, "
               f"{'eager' if eager else 'torch.compile'}{', libiomp5 preloaded' if preload_iomp else ''}; "
               f"{time.monotonic() - started:.0f} s")
    click.echo(table(rows))
    if json_out is not None:
        json_out.write_text(json.dumps(rows, indent=1))
