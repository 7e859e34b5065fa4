"""`specinfer calibrate`: measure step time by batch size and K and acceptance per position, and compare methods."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import tempfile
from pathlib import Path

import click

from specinfer.runtime.contract.calibration.measurement import EngineReport, ReportError, encode
from specinfer.runtime.contract.calibration.prompts import PromptsError, read_prompts
from specinfer.runtime.contract.calibration.report import Endpoint, json_report, text_report
from specinfer.runtime.pod.calibration.drive import LoadPlan, MeasureError, measure_endpoint
from specinfer.runtime.pod.calibration.engine import TERMINATION_LOG_ENV, EngineFailed, LocalEngine, read_engine_config

DEFAULT_TERMINATION_LOG = "/dev/termination-log"


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise click.BadParameter("a comma-separated list of integers, e.g. 1,4,16",
                                 param_hint="--batch-sizes") from None
    if not sizes or sorted(set(sizes)) != list(sizes) or sizes[0] < 1:
        raise click.BadParameter("ascending batch sizes >= 1, each once, e.g. 1,4,16", param_hint="--batch-sizes")
    return sizes


def _endpoint(text: str) -> tuple[str, str]:
    name, sep, url = text.partition("=")
    if not sep or not name or not url.startswith(("http://", "https://")):
        raise click.BadParameter(f"{text!r}: write NAME=URL, e.g. ngram=http://10.0.0.7:8000", param_hint="--endpoint")
    return name, url


def _write_termination_message(text: str) -> None:
    """Best effort, as the runtime does: outside Kubernetes there is no file."""
    try:
        with open(os.environ.get(TERMINATION_LOG_ENV) or DEFAULT_TERMINATION_LOG, "w") as handle:
            handle.write(text[:4096])
    except OSError:
        pass


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def _fail(message: str, termination_log: bool) -> None:
    line = f"specinfer calibrate: {message}"
    if termination_log:
        _write_termination_message(line)
    raise click.ClickException(message)


async def _measure_engine(config_path: Path, plan: LoadPlan, startup_timeout: float, log) -> Endpoint:
    engine_config = read_engine_config(config_path)
    plan = LoadPlan(**{**plan.__dict__, "time_scale": engine_config.time_scale})
    with tempfile.TemporaryDirectory(prefix="specinfer-calibrate-") as workdir:
        engine = LocalEngine(engine_config, Path(workdir), startup_timeout=startup_timeout)
        engine.start()
        try:
            seconds = await engine.wait_ready()
            log(f"engine {engine_config.method} K={engine_config.k} ready after {seconds:.0f} s")
            measurements = await measure_endpoint(engine_config.url, plan, progress=log)
        except MeasureError as error:
            code = engine.exited()
            if code is None:
                raise
            raise MeasureError(f"{error}; the engine exited with code {code}: {engine.cause()[-600:]}") from None
        finally:
            engine.stop()
    if measurements and measurements[0].k != engine_config.k:
        raise MeasureError(f"the engine reports {measurements[0].k} draft positions, its config says "
                           f"K={engine_config.k}")
    return Endpoint(name=engine_config.method, url=engine_config.url, measurements=tuple(measurements))


@click.command("calibrate", context_settings={"max_content_width": 110})
@click.option("-e", "--endpoint", "endpoints", multiple=True, metavar="NAME=URL",
              help="an OpenAI-compatible server to measure (vLLM: /metrics on the same port); repeat for "
                   "candidates; one name on several URLs = one method at several K")
@click.option("--engine-config", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="instead of --endpoint: start the engine this RuntimeConfig describes (`specinfer runtime`), "
                   "measure it and stop it (what the operator's calibration Jobs run)")
@click.option("--batch-sizes", default="1,4,16", show_default=True, help="requests kept in flight, ascending")
@click.option("--warmup", type=click.FloatRange(min=0), default=10.0, show_default=True,
              help="seconds of load before each measurement window")
@click.option("--duration", type=click.FloatRange(min=0.5), default=30.0, show_default=True,
              help="seconds of each measurement window")
@click.option("--output-tokens", type=click.IntRange(min=2), default=128, show_default=True,
              help="tokens per request (end-of-sequence ignored, so the batch stays full)")
@click.option("--prompt-tokens", type=click.IntRange(min=1), default=256, show_default=True,
              help="words per synthetic prompt (without --prompts)")
@click.option("--prompts", "prompts_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="your prompts: one per line, or JSON Lines with a \"prompt\" string")
@click.option("--temperature", type=click.FloatRange(min=0, max=2), default=0.0, show_default=True)
@click.option("--time-scale", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
              help="the simulator's timeScale: report engine seconds (an --engine-config reads it itself)")
@click.option("--startup-timeout", type=click.FloatRange(min=1), default=1800.0, show_default=True,
              help="seconds the engine of --engine-config may take to answer /health")
@click.option("--termination-message", is_flag=True,
              help="write the report (or the failure) to $SPECINFER_TERMINATION_LOG, else /dev/termination-log: "
                   "how a calibration Job hands its result to the operator")
@click.option("--json", "as_json", is_flag=True, help="print the results as JSON")
def calibrate_command(endpoints: tuple[str, ...], engine_config: Path | None, batch_sizes: str, warmup: float,
                      duration: float, output_tokens: int, prompt_tokens: int, prompts_file: Path | None,
                      temperature: float, time_scale: float, startup_timeout: float, termination_message: bool,
                      as_json: bool) -> None:
    """Measure what speculative decoding costs and gains on YOUR deployment and prompts.

    For each endpoint and batch size B it keeps B requests in flight (the load generator of `specinfer bench
    load`) and reads the engine's own counters (/metrics) at both ends of a measurement window: the step time
    T(B, K), tokens per request per step, goodput, and acceptance per draft position. With an endpoint that runs
    without speculation it compares the methods at their best K per batch size, against no speculation and
    against the first endpoint (your current config), and says which is fastest. Nothing is changed anywhere.

    \b
    Compare three candidates already serving (one engine each, idle apart from this):
      specinfer calibrate -e draftModel=http://10.0.0.5:8000 -e ngram=http://10.0.0.6:8000 \\
                          -e none=http://10.0.0.7:8000 --batch-sizes 1,4,16 --prompts prompts.txt
    One method at two K (two engines), same name:
      specinfer calibrate -e ngram=http://a:8000 -e ngram=http://b:8000 -e none=http://c:8000

    On Kubernetes, a SpeculativeInferenceCalibration does this for you: it starts each candidate with the
    target's model and hardware, never touching its serving pods, and hands the measured step-cost table to
    the tuner (docs/calibration.md).
    """
    if bool(endpoints) == (engine_config is not None):
        raise click.UsageError("give --endpoint NAME=URL (one or more) or --engine-config FILE")
    prompts = None
    if prompts_file is not None:
        try:
            prompts = tuple(read_prompts(prompts_file.read_bytes()))
        except (PromptsError, OSError) as error:
            _fail(f"--prompts {prompts_file}: {error}", termination_message)
    plan = LoadPlan(batch_sizes=_sizes(batch_sizes), warmup_seconds=warmup, duration_seconds=duration,
                    output_tokens=output_tokens, prompt_tokens=prompt_tokens, prompts=prompts,
                    temperature=temperature, time_scale=time_scale)
    log = lambda line: click.echo(line, err=True)

    if engine_config is not None:
        # Kubernetes (or the pod runner) stops the pod with SIGTERM: unwind, so the engine is stopped too.
        signal.signal(signal.SIGTERM, _exit_on_signal)

    async def run() -> list[Endpoint]:
        if engine_config is not None:
            return [await _measure_engine(engine_config, plan, startup_timeout, log)]
        measured = []
        for name, url in map(_endpoint, endpoints):
            measured.append(Endpoint(name=name, url=url,
                                     measurements=tuple(await measure_endpoint(url, plan, progress=log))))
        return measured

    try:
        measured = asyncio.run(run())
    except (MeasureError, EngineFailed) as error:
        _fail(str(error), termination_message)
        return
    if termination_message:
        try:
            _write_termination_message(encode(EngineReport(measurements=measured[0].measurements)))
        except ReportError as error:
            _fail(str(error), termination_message)
    click.echo(json.dumps(json_report(measured), indent=1) if as_json else text_report(measured))
    sys.stdout.flush()
