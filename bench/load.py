"""`specinfer bench load`: an async load generator for any OpenAI-compatible server (vLLM or the simulator).

Open loop (--qps, Poisson arrivals) or closed loop (--concurrency); streams every
response to time the first token and the per-token latency the way vLLM defines it
(decode time / (tokens - 1)). Against the simulator in scaled time, pass its timeScale
as --time-scale: --qps and --duration are then in simulated seconds too, and every
figure is reported in simulated seconds.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import asdict, dataclass, field

import aiohttp
import click

from specinfer.runtime.pod.calibration.requests import (
    LoadConfig,
    RequestResult,
    connector,
    one_request,
    percentile,
    request_body,
    served_model,
)


@dataclass
class LoadReport:
    workload: str | None
    mode: str
    wall_s: float
    time_scale: float
    requests: int
    failed: int
    output_tokens: int
    tokens_per_s: float
    requests_per_s: float
    ttft_p50_s: float
    ttft_p99_s: float
    per_token_p50_s: float
    per_token_p99_s: float
    e2e_p50_s: float
    errors: list[str] = field(default_factory=list)


def summarize(results: list[RequestResult], wall_s: float, *, mode: str, workload: str | None,
              time_scale: float = 1.0) -> LoadReport:
    """Figures in simulated seconds when time_scale != 1 (wall seconds x time_scale)."""
    ok = [r for r in results if r.ok]
    sim_s = wall_s * time_scale
    tokens = sum(r.output_tokens for r in ok)
    multi = [r.per_token_s * time_scale for r in ok if r.output_tokens > 1]
    return LoadReport(
        workload=workload, mode=mode, wall_s=wall_s, time_scale=time_scale,
        requests=len(ok), failed=len(results) - len(ok), output_tokens=tokens,
        tokens_per_s=tokens / sim_s if sim_s > 0 else 0.0,
        requests_per_s=len(ok) / sim_s if sim_s > 0 else 0.0,
        ttft_p50_s=percentile([r.ttft_s * time_scale for r in ok], 50),
        ttft_p99_s=percentile([r.ttft_s * time_scale for r in ok], 99),
        per_token_p50_s=percentile(multi, 50),
        per_token_p99_s=percentile(multi, 99),
        e2e_p50_s=percentile([r.e2e_s * time_scale for r in ok], 50),
        errors=sorted({r.error for r in results if r.error})[:5],
    )


async def run_load(config: LoadConfig) -> tuple[list[RequestResult], float]:
    """Drive the server for duration_s; returns every finished request and the wall time taken."""
    if (config.qps is None) == (config.concurrency is None):
        raise ValueError("give exactly one of qps or concurrency")
    rng = random.Random(config.seed)
    timeout = aiohttp.ClientTimeout(total=config.timeout_s)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector()) as session:
        model = config.model or await served_model(session, config.url)
        results: list[RequestResult] = []
        start = time.perf_counter()
        deadline = start + config.duration_s

        async def tracked() -> None:
            results.append(await one_request(session, config, request_body(config, model, rng)))

        if config.concurrency is not None:
            async def worker() -> None:
                while time.perf_counter() < deadline:
                    await tracked()

            await asyncio.gather(*(worker() for _ in range(config.concurrency)))
        elif config.qps is not None:  # exactly one of the two is set (checked above)
            tasks = []
            next_at = start
            while next_at < deadline:
                await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
                tasks.append(asyncio.create_task(tracked()))
                next_at += rng.expovariate(config.qps)
            await asyncio.gather(*tasks)
        return results, time.perf_counter() - start


def format_report(report: LoadReport) -> str:
    unit = "s" if report.time_scale == 1 else f"simulated s (time scale {report.time_scale:g})"
    ms = lambda v: f"{v * 1000:8.1f} ms"
    lines = [
        f"load: {report.mode}, workload {report.workload or '-'}, {report.wall_s:.1f} s wall; figures in {unit}",
        f"  requests      {report.requests} ok, {report.failed} failed ({report.requests_per_s:.2f} req/s)",
        f"  throughput    {report.tokens_per_s:10.1f} generated tokens/s ({report.output_tokens} tokens)",
        f"  TTFT          p50 {ms(report.ttft_p50_s)}   p99 {ms(report.ttft_p99_s)}",
        f"  per-token     p50 {ms(report.per_token_p50_s)}   p99 {ms(report.per_token_p99_s)}",
        f"  e2e           p50 {ms(report.e2e_p50_s)}",
    ]
    lines += [f"  error: {error}" for error in report.errors]
    return "\n".join(lines)


@click.command("load")
@click.option("--url", default="http://localhost:8000", show_default=True, help="server base URL")
@click.option("--model", default=None, help="model name (default: the first of /v1/models)")
@click.option("--qps", type=float, default=None, help="open loop: Poisson arrivals per (simulated) second")
@click.option("--concurrency", type=int, default=None, help="closed loop: requests in flight (default 8)")
@click.option("--prompt-tokens", type=int, default=256, show_default=True)
@click.option("--output-tokens", type=int, default=128, show_default=True)
@click.option("--duration", type=float, default=30.0, show_default=True, help="seconds of load (simulated)")
@click.option("--workload", default=None, help="workload tag (sent as X-Specinfer-Workload; the simulator honours it)")
@click.option("--chat", is_flag=True, help="use /v1/chat/completions instead of /v1/completions")
@click.option("--time-scale", type=float, default=1.0, show_default=True,
              help="the simulator's timeScale: report simulated seconds")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print the report as JSON")
def load_command(url, model, qps, concurrency, prompt_tokens, output_tokens, duration, workload, chat, time_scale,
                 seed, as_json) -> None:
    """Generate load against a vLLM-compatible server; print throughput, TTFT and per-token p50/p99."""
    if qps is not None and concurrency is not None:
        raise click.UsageError("give --qps or --concurrency, not both")
    if qps is None and concurrency is None:
        concurrency = 8
    if time_scale <= 0:
        raise click.BadParameter("must be > 0", param_hint="--time-scale")
    config = LoadConfig(url=url, model=model, qps=qps * time_scale if qps is not None else None,
                        concurrency=concurrency, prompt_tokens=prompt_tokens, output_tokens=output_tokens,
                        duration_s=duration / time_scale, workload=workload, chat=chat, seed=seed)
    try:
        results, wall = asyncio.run(run_load(config))
    except aiohttp.ClientConnectorError as error:
        raise click.ClickException(f"no server answers at {url} ({error.os_error.strerror or error}): start one "
                                   "there (`specinfer sim` serves a simulated vLLM on port 8000), or give --url") \
            from None
    except aiohttp.ClientError as error:
        raise click.ClickException(f"cannot reach {url}: {error}") from error
    mode = f"qps {qps:g}" if qps is not None else f"concurrency {concurrency}"
    report = summarize(results, wall, mode=mode, workload=workload, time_scale=time_scale)
    click.echo(json.dumps(asdict(report)) if as_json else format_report(report))
