"""`specinfer runtime`: the pod entrypoint. Config -> preflight -> exec `vllm serve` (or run the simulator).

exec (not a child process) so that Kubernetes' SIGTERM reaches vLLM directly and the
pod's exit code is vLLM's. Misconfiguration prints one line naming the field and exits 2; the
same line goes to the container's termination message file, so `kubectl describe pod` and the
operator (a crash-looping pod's lastState) show the cause.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shlex
import sys

import click

from specinfer.runtime.contract.live_schedule import live_schedule_env
from specinfer.runtime.pod.config import MisconfigurationError, config_path, load_runtime_config

EXIT_MISCONFIGURED = 2
# Kubernetes' default terminationMessagePath; the kubelet shows the file's content as the
# container's termination message. Overridable where the path differs (the local pod runner).
TERMINATION_LOG_ENV = "SPECINFER_TERMINATION_LOG"
DEFAULT_TERMINATION_LOG = "/dev/termination-log"


def write_termination_message(line: str) -> None:
    """Best effort: a container without the file (outside Kubernetes) only has stderr."""
    path = os.environ.get(TERMINATION_LOG_ENV) or DEFAULT_TERMINATION_LOG
    try:
        with open(path, "w") as handle:
            handle.write(line[:4096])  # the kubelet keeps at most 4096 bytes
    except OSError:
        pass


def fail(error: MisconfigurationError) -> None:
    line = f"specinfer runtime: {error}"
    click.echo(line, err=True)
    write_termination_message(line)
    sys.exit(EXIT_MISCONFIGURED)


@click.command("runtime")
@click.option("--config", "config_flag", default=None,
              help="RuntimeConfig JSON (default: $SPECINFER_CONFIG, then /etc/specinfer/runtime.json)")
@click.option("--dry-run", is_flag=True, help="print the engine command line and exit")
def runtime(config_flag: str | None, dry_run: bool) -> None:
    """Start the engine the RuntimeConfig describes: vLLM with speculative decoding, or the simulator."""
    from specinfer.runtime.contract.argv import engine_env, vllm_argv
    from specinfer.runtime.pod.preflight import preflight

    try:
        config = load_runtime_config(config_path(config_flag))
        spec = config.spec
        if spec.runtime.engine == "simulator":
            from specinfer.runtime.pod.sim_from_runtime_config import simulator_settings

            settings = simulator_settings(config, os.environ)
            problems = settings.problems()
            if problems:
                raise MisconfigurationError("spec.runtime.simulator", f"spec.runtime.simulator: {problems[0]}")
            if dry_run:
                click.echo("simulator " + json.dumps(dataclasses.asdict(settings), sort_keys=True))
                return
            from specinfer.runtime.sim.server import serve

            logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
            serve(settings)
            return
        preflight(spec, engine_binary=not dry_run)  # before rendering: it explains what rendering would trip on
        argv = vllm_argv(spec, live_schedule=config.live_schedule is not None)
        if dry_run:
            click.echo(shlex.join(argv))
            return
    except MisconfigurationError as error:
        fail(error)
        return
    env = engine_env(spec, os.environ)
    if config.live_schedule is not None:  # read by the scheduler class (engine core) and the telemetry plugin
        env.update(live_schedule_env(config.live_schedule, os.environ))
    click.echo(f"specinfer runtime: exec {shlex.join(argv)}", err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(argv[0], argv, env)
