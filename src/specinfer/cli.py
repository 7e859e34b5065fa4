"""The `specinfer` console script.

Subcommands are loaded lazily (click's documented LazyGroup pattern) so that
`specinfer runtime` in a pod does not import the operator's dependencies and
`specinfer --help` stays fast. To add a command, add one line to LAZY_COMMANDS.
"""

from __future__ import annotations

import importlib

import click

from specinfer import VLLM_VERSION, __version__
from specinfer.cli_errors import unreachable

# name -> "module:attribute" of a click command or group.
LAZY_COMMANDS: dict[str, str] = {
    "cluster": "specinfer.dev.cluster.cli:cluster",
    "demo": "specinfer.dev.demo.cli:demo",
    "bench": "specinfer.bench.cli:bench",
    "methods": "specinfer.runtime.methods.cli:methods_command",
    "crd": "specinfer.api.crd:crd_command",
    "monitoring": "specinfer.monitoring.cli:monitoring_command",
    "sim": "specinfer.runtime.sim.cli:sim",
    "runtime": "specinfer.runtime.pod.entrypoint:runtime",
    "render": "specinfer.operator.render_cli:render_command",
    "operator": "specinfer.operator.operator_cli:operator_command",
    "engine": "specinfer.dev.cpu_engine.cli:engine",
    "models": "specinfer.dev.cpu_engine.models_cli:models",
    "calibrate": "specinfer.runtime.pod.calibration.cli:calibrate_command",
    "tuner": "specinfer.operator.tuner.cli:tuner",
}


class LazyGroup(click.Group):
    """A click group that imports a subcommand's module only when it is used."""

    def __init__(self, *args, lazy_commands: dict[str, str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy_commands = lazy_commands or {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.lazy_commands])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy_commands:
            module_name, attribute = self.lazy_commands[cmd_name].split(":")
            return getattr(importlib.import_module(module_name), attribute)
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context):
        """A server a command needs that is not there (a cluster, an engine) is one line, not a traceback."""
        try:
            return super().invoke(ctx)
        except Exception as error:
            line = unreachable(error)
            if line is None:
                raise
            raise click.ClickException(line) from None


@click.group(cls=LazyGroup, lazy_commands=LAZY_COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="specinfer")
def main() -> None:
    """specinfer: declarative, self-tuning speculative decoding for vLLM on Kubernetes.

    \b
    Quick start (no GPU needed):
      make demo          local control plane + operator + simulator, tuned live
      make test          the whole test suite
    """


@main.command()
def version() -> None:
    """Print the specinfer version and the vLLM release it is pinned to."""
    click.echo(f"specinfer {__version__} (vLLM {VLLM_VERSION})")
