"""`specinfer demo`."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from specinfer.dev.cluster.paths import REPO_ROOT


@click.command("demo")
@click.option("-f", "--file", "example", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=REPO_ROOT / "examples" / "specinference.yaml", show_default=True,
              help="The SpeculativeInference to apply (engine simulator).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("out/demo"),
              show_default=True, help="Where the summary plot is written.")
@click.option("--quick", is_flag=True, help="Two short load phases (about 2 minutes) instead of three longer ones.")
@click.option("--keep", is_flag=True, help="After the load phases keep everything running until Ctrl-C.")
@click.option("--no-live", is_flag=True, help="Print periodic lines instead of redrawing the screen.")
@click.option("--engine", type=click.Choice(["simulator", "vllm"]), default="simulator", show_default=True,
              help="vllm: the same story on the real vLLM CPU engine (tiny local models, made once; 8-12 "
                   "minutes, a phase waits out a rollout in progress; --quick 5-8); --file does not apply.")
@click.option("--method", type=click.Choice(["draftModel", "eagle3"]), default=None,
              help="With --engine vllm: what drafts (default draftModel). draftModel: the target's own weights "
                   "(always right); eagle3: "
                   "the tiny EAGLE-3 head of `specinfer models make` (right on a fraction of tokens; its drafters "
                   "are built once per machine, 1-3 minutes).")
def demo(example: Path, out: Path, quick: bool, keep: bool, no_live: bool, engine: str,
         method: str | None) -> None:
    """Run the whole product locally, no GPU needed.

    \b
    Starts a real local control plane (built on first use), Prometheus, the CRD
    and the operator; applies a SpeculativeInference whose pods run the simulator
    engine (executed locally from their pod specs); drives load through phases
    and shows the tuner adapting the draft length live. Ends with a summary and a
    PNG plot. Ctrl-C stops and cleans everything up.
    """
    from specinfer.dev.demo.prerequisites import missing_prerequisites
    from specinfer.dev.demo.run import Demo, DemoOptions

    if method is not None and engine != "vllm":
        raise click.UsageError("--method applies to --engine vllm (the simulator's resource comes from --file)")
    missing = missing_prerequisites(engine)
    if missing:
        raise click.ClickException(f"the demo needs {'; '.join(missing)}: run `make setup`")
    options = DemoOptions(example=example, out=out, quick=quick, keep=keep, live=not no_live, engine=engine,
                          **({"method": method} if method else {}))
    try:
        code = Demo(options, log=lambda message: click.echo(message, err=True)).run()
    except (RuntimeError, TimeoutError, OSError) as error:  # a component failed: say which, not a traceback
        raise click.ClickException(str(error)) from error
    sys.exit(code)
