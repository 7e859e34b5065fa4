"""Measure one endpoint: closed-loop load at each batch size, the engine's counters before and after. I/O.

The requests are `specinfer bench load`'s (its request body and streaming client); what is new is
the window: B workers keep B requests in flight, the window opens once the batch decodes and the
warm-up has passed, and the
engine's /metrics is read at both ends, so every figure comes from the engine's own counters
over exactly that window (not from the requests that happened to finish in it). In-flight
requests are cancelled when the window closes; the next batch size starts from an idle engine.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import aiohttp

from specinfer.runtime.contract.calibration.measurement import Measurement
from specinfer.runtime.contract.calibration.scrape import Counters, ScrapeError, parse
from specinfer.runtime.pod.calibration.requests import (
    LoadConfig,
    RequestResult,
    connector,
    one_request,
    request_body,
    served_model,
)

MAX_METRICS_BYTES = 8 * 1024 * 1024
METRICS_TIMEOUT_SECONDS = 10.0
DECODING_POLL_SECONDS = 0.5


class MeasureError(RuntimeError):
    """A point could not be measured; the message says why (and what the requests answered)."""


@dataclass(frozen=True)
class LoadPlan:
    batch_sizes: tuple[int, ...]
    warmup_seconds: float = 10.0
    duration_seconds: float = 30.0
    output_tokens: int = 128
    prompt_tokens: int = 256
    prompts: tuple[str, ...] | None = None
    temperature: float = 0.0
    time_scale: float = 1.0  # the simulator's timeScale: engine seconds = wall seconds x time_scale
    seed: int = 0
    request_timeout_seconds: float = 600.0

    def load_config(self, url: str, model: str) -> LoadConfig:
        return LoadConfig(url=url, model=model, concurrency=1, prompt_tokens=self.prompt_tokens,
                          output_tokens=self.output_tokens, prompts=self.prompts, temperature=self.temperature,
                          seed=self.seed, timeout_s=self.request_timeout_seconds)


async def read_bounded(stream: aiohttp.StreamReader, limit: int) -> bytes | None:
    """The whole body, or None once it exceeds `limit` bytes. (`StreamReader.read(n)` returns what has
    arrived so far, at most n: one call cut vLLM's /metrics after its first chunk, and the series
    later in the text looked missing.)"""
    chunks, size = [], 0
    async for chunk in stream.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


async def scrape(session: aiohttp.ClientSession, metrics_url: str) -> Counters:
    try:
        async with session.get(metrics_url, timeout=aiohttp.ClientTimeout(total=METRICS_TIMEOUT_SECONDS)) as answer:
            if answer.status != 200:
                raise MeasureError(f"{metrics_url} answered HTTP {answer.status}")
            raw = await read_bounded(answer.content, MAX_METRICS_BYTES)
    except (aiohttp.ClientError, TimeoutError) as error:
        raise MeasureError(f"cannot read {metrics_url}: {type(error).__name__}: {error}") from None
    if raw is None:
        raise MeasureError(f"{metrics_url} answered more than {MAX_METRICS_BYTES} bytes")
    try:
        return parse(raw.decode("utf-8", errors="replace"))
    except ScrapeError as error:
        raise MeasureError(f"{metrics_url}: {error}") from None


def _errors(results: Sequence[RequestResult]) -> str:
    failed = [r.error for r in results if not r.ok and r.error]
    return f"{len(failed)} of {len(results)} requests failed, e.g. {failed[0]}" if failed else "no request failed"


async def decoding(session: aiohttp.ClientSession, metrics_url: str, batch_size: int, timeout: float,
                   results: Sequence[RequestResult]) -> None:
    """Wait until the batch decodes: as many request-steps as requests in flight since the load began.

    The first requests after a start (or on a busy machine) can take seconds before their first
    decode step; a warm-up counted from then on measures the batch, not the engine's first step."""
    start = await scrape(session, metrics_url)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        await asyncio.sleep(DECODING_POLL_SECONDS)
        if (await scrape(session, metrics_url)).request_steps - start.request_steps >= batch_size:
            return
    raise MeasureError(f"batch size {batch_size}: the engine made no {batch_size} decode steps within "
                       f"{timeout:g} s of load ({_errors(results)})")


async def measure_point(session: aiohttp.ClientSession, url: str, metrics_url: str, model: str, batch_size: int,
                        plan: LoadPlan) -> Measurement:
    """Keep `batch_size` requests in flight, open the window after the warm-up, read the counters at both ends."""
    config = plan.load_config(url, model)
    stop = asyncio.Event()
    results: list[RequestResult] = []

    async def worker(index: int) -> None:
        rng = random.Random(plan.seed * 1000 + batch_size * 100 + index)
        while not stop.is_set():
            try:
                results.append(await one_request(session, config, request_body(config, model, rng)))
            except Exception as error:  # noqa: BLE001 -- a garbled answer is a failed request, not a dead worker
                results.append(RequestResult(ok=False, error=f"{type(error).__name__}: {error}"))
            if results[-1].error and not results[-1].ok:
                await asyncio.sleep(0.2)  # a failing server is not hammered

    workers = [asyncio.create_task(worker(i)) for i in range(batch_size)]
    try:
        await decoding(session, metrics_url, batch_size, plan.request_timeout_seconds, results)
        await asyncio.sleep(plan.warmup_seconds)
        before, opened = await scrape(session, metrics_url), time.monotonic()
        await asyncio.sleep(plan.duration_seconds)
        after, closed = await scrape(session, metrics_url), time.monotonic()
    finally:
        stop.set()
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
    try:
        delta = after.minus(before)
    except ScrapeError as error:
        raise MeasureError(f"batch size {batch_size}: {error}") from None
    if delta.steps < 1 or delta.request_steps < 1:
        raise MeasureError(f"batch size {batch_size}: the engine made no decode step in the "
                           f"{plan.duration_seconds:g} s window ({_errors(results)})")
    return Measurement(k=len(after.accepted), batch_size=batch_size, seconds=(closed - opened) * plan.time_scale,
                       steps=round(delta.steps), request_steps=round(delta.request_steps),
                       generated=round(delta.generated), drafts=round(delta.drafts),
                       accepted=tuple(round(a) for a in delta.accepted))


async def measure_endpoint(url: str, plan: LoadPlan, *, metrics_url: str | None = None, model: str | None = None,
                           progress: Callable[[str], None] = lambda line: None) -> list[Measurement]:
    """Every batch size of the plan against one OpenAI-compatible server (vLLM's /metrics on the same port
    unless `metrics_url` says otherwise)."""
    base = url.rstrip("/")
    metrics = metrics_url or f"{base}/metrics"
    timeout = aiohttp.ClientTimeout(total=plan.request_timeout_seconds)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector()) as session:
        try:
            name = model or await served_model(session, base)
        except aiohttp.ClientConnectorError as error:  # nothing listens there: say what would
            raise MeasureError(f"no engine answers at {base} ({error.os_error.strerror or error}): start one there "
                               "(`specinfer sim --port PORT` serves a simulated one), or give --engine-config and "
                               "calibrate starts it") from None
        except (aiohttp.ClientError, TimeoutError, KeyError, IndexError, ValueError) as error:
            raise MeasureError(f"cannot read the served model from {base}/v1/models: {type(error).__name__}: "
                               f"{error}") from None
        await scrape(session, metrics)  # fail before any load if /metrics cannot be read
        measurements = []
        for batch_size in plan.batch_sizes:
            progress(f"{base}: batch size {batch_size} ({plan.warmup_seconds:g} s warm-up, "
                     f"{plan.duration_seconds:g} s window)")
            measurements.append(await measure_point(session, base, metrics, name, batch_size, plan))
        return measurements
