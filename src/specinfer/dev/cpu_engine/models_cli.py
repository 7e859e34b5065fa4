"""`specinfer models make DIR`: the tiny hub-free models, written by the engine environment."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click

from specinfer.dev.cpu_engine.environment import EngineNotInstalled


@click.group("models")
def models() -> None:
    """Tiny local models for the real CPU engine (no hub)."""


@models.command("make")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
def make_command(directory: Path) -> None:
    """Write DIR/target, DIR/draft-same (the target's weights) and DIR/draft-other (other weights)."""
    from specinfer.dev.cpu_engine.overlay import engine_process_env

    try:
        env = engine_process_env()
    except EngineNotInstalled as error:
        click.echo(f"specinfer models: {error}", err=True)
        sys.exit(1)
    # One tokenizer-training thread: the merges, and so the files, are the same every run.
    env.update({"RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONHASHSEED": "0"})
    directory = directory.resolve()
    result = subprocess.run([str(Path(env["VIRTUAL_ENV"]) / "bin" / "python"), "-m", "specinfer.dev.cpu_engine.models",
                             str(directory)], env=env, cwd=directory.parent if directory.parent.exists() else "/")
    sys.exit(result.returncode)
