"""The calibration driver reads a whole /metrics answer, however it arrives (a local aiohttp server)."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from specinfer.runtime.pod.calibration import drive
from specinfer.runtime.pod.calibration.drive import MeasureError, scrape

pytestmark = pytest.mark.unit

HEAD = "\n".join(f"# HELP filler_{i} padding\n# TYPE filler_{i} counter\nfiller_{i}_total {i}" for i in range(3000))
TAIL = """# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_count{engine="0"} 10
vllm:iteration_tokens_total_sum{engine="0"} 40
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_count{engine="0"} 30
vllm:inter_token_latency_seconds_sum{engine="0"} 0.3
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0"} 55
"""


async def chunked_metrics(request: web.Request) -> web.StreamResponse:
    """vLLM's answer in pieces with pauses between them, as a busy engine sends it."""
    response = web.StreamResponse()
    await response.prepare(request)
    body = (HEAD + "\n" + TAIL).encode()
    for start in range(0, len(body), 16 * 1024):
        await response.write(body[start:start + 16 * 1024])
        await asyncio.sleep(0.01)
    await response.write_eof()
    return response


async def test_a_metrics_answer_in_many_chunks_is_read_whole():
    app = web.Application()
    app.router.add_get("/metrics", chunked_metrics)
    async with TestServer(app) as server, aiohttp.ClientSession() as session:
        counters = await scrape(session, str(server.make_url("/metrics")))
    assert (counters.steps, counters.request_steps, counters.generated) == (10, 30, 55)


async def test_an_answer_over_the_limit_is_refused(monkeypatch):
    monkeypatch.setattr(drive, "MAX_METRICS_BYTES", 50_000)
    app = web.Application()
    app.router.add_get("/metrics", chunked_metrics)
    async with TestServer(app) as server, aiohttp.ClientSession() as session:
        with pytest.raises(MeasureError, match="more than 50000 bytes"):
            await scrape(session, str(server.make_url("/metrics")))
