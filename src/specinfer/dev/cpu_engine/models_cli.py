"""`specinfer models make DIR`: the tiny hub-free models, written by the engine environment."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click

from specinfer.dev.cpu_engine import acceptance, drafters
from specinfer.dev.cpu_engine.environment import EngineNotInstalled
from specinfer.dev.cpu_engine.models import TARGET


@click.group("models")
def models() -> None:
    """Tiny local models for the real CPU engine (no hub)."""


@models.command("make")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--drafters/--no-drafters", default=True, show_default=True,
              help="Also write the seed-method drafters: eagle-, eagle3-, dflash-random, eagle- and eagle3-bigram "
              "(EAGLE heads), mtp-target-random and -bigram (MiMo targets with an MTP layer). Built once per machine "
              "into the cache (the engine runs twice, ~1-3 minutes), then copied.")
def make_command(directory: Path, drafters: bool) -> None:
    """Write DIR/target, DIR/draft-same (the target's weights) and DIR/draft-other (other weights), and the
    seed methods' tiny drafters (docs/development.md, "Seed-method drafters")."""
    from specinfer.dev.cpu_engine.overlay import engine_process_env

    try:
        env = engine_process_env()
    except EngineNotInstalled as error:
        click.echo(f"specinfer models: {error}", err=True)
        sys.exit(1)
    # One tokenizer-training thread: the merges, and so the files, are the same every run.
    env.update({"RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONHASHSEED": "0"})
    directory = directory.resolve()
    argv = [str(Path(env["VIRTUAL_ENV"]) / "bin" / "python"), "-m", "specinfer.dev.cpu_engine.models", str(directory),
            *([] if drafters else ["--no-drafters"])]
    result = subprocess.run(argv, env=env, cwd=directory.parent if directory.parent.exists() else "/")
    sys.exit(result.returncode)


# (method, drafter folder or None, target folder) for each drafter `make` writes
MEASURED = (("eagle", drafters.EAGLE_RANDOM, TARGET), ("eagle", drafters.EAGLE_BIGRAM, TARGET),
            ("eagle3", drafters.EAGLE3_RANDOM, TARGET), ("eagle3", drafters.EAGLE3_BIGRAM, TARGET),
            ("dflash", drafters.DFLASH_RANDOM, TARGET), ("mtp", None, drafters.MTP_RANDOM),
            ("mtp", None, drafters.MTP_BIGRAM))


@models.command("measure")
@click.argument("directory", type=click.Path(file_okay=False, exists=True, path_type=Path))
def measure_command(directory: Path) -> None:
    """Serve DIR's seed-method drafters on the real engine, one engine each (20-120 s a start), on 16 prompts
    of the real-engine demo's kind (16 words, 128 greedy tokens), and print vLLM's own counters: drafts,
    accepted tokens per position (K=3), first-position acceptance."""
    from specinfer.dev.cpu_engine.overlay import engine_process_env

    try:
        env = engine_process_env()
    except EngineNotInstalled as error:
        click.echo(f"specinfer models: {error}", err=True)
        sys.exit(1)
    missing = [name for _, drafter, target in MEASURED for name in (drafter, target)
               if name and not (directory / name).is_dir()]
    if missing:
        click.echo(f"specinfer models: {directory} has no {', '.join(sorted(set(missing)))}: run `specinfer models "
                   f"make {directory}` first (without --no-drafters)", err=True)
        sys.exit(1)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    python = str(Path(env["VIRTUAL_ENV"]) / "bin" / "python")
    failed = 0
    for method, drafter, target in MEASURED:
        argv = [python, "-m", "specinfer.dev.cpu_engine.acceptance", method,
                str(directory / drafter) if drafter else "-", str(directory / target)]
        # not from the checkout: its operator/ folder would shadow the standard library's module
        result = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=directory)
        if result.returncode != 0:
            failed += 1
            click.echo(f"{method:<7} {drafter or target}: the engine failed:\n{result.stderr[-1500:]}", err=True)
            continue
        figures = acceptance.result_of(result.stdout)
        if figures is None:
            failed += 1
            click.echo(f"{method:<7} {drafter or target}: the engine printed no result:\n{result.stdout[-1500:]}",
                       err=True)
            continue
        click.echo(f"{method:<7} {drafter or target:<18} drafts {figures['drafts']:>4.0f}, accepted per position "
                   f"{[round(a) for a in figures['acceptedPerPosition']]}, first position "
                   f"{figures['firstPositionAcceptance']}")
    sys.exit(1 if failed else 0)
