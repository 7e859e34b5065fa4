"""`specinfer bench load` against the in-process simulator, and its statistics."""

from __future__ import annotations

import math
import random

import pytest
from aiohttp.test_utils import TestServer

from specinfer.bench.load import LoadConfig, RequestResult, percentile, run_load, summarize
from specinfer.runtime.pod.calibration.requests import SYNTHETIC_WORDS, request_body, synthetic_prompt
from specinfer.runtime.sim.server import build_app
from specinfer.runtime.sim.settings import SimulatorSettings
from specinfer.runtime.sim.simulator import Simulator

pytestmark = pytest.mark.unit


def test_percentile_interpolates_and_handles_empty():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([5], 99) == 5
    assert percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 90) == pytest.approx(9.1)
    assert math.isnan(percentile([], 50))


def test_synthetic_prompts_draw_each_word_and_repeat_with_the_seed():
    prompt = synthetic_prompt(random.Random(7), 24).split()
    assert len(prompt) == 24 and set(prompt) <= set(SYNTHETIC_WORDS)
    assert len(set(prompt)) > 1  # one generator for the whole prompt, not a new one per word
    assert synthetic_prompt(random.Random(7), 24) == " ".join(prompt)
    assert synthetic_prompt(random.Random(8), 24) != " ".join(prompt)
    # a load without prompts of its own sends exactly these
    body = request_body(LoadConfig(prompt_tokens=24), "m", random.Random(7))
    assert body["prompt"] == " ".join(prompt) and body["max_tokens"] == 128


def test_summary_reports_simulated_seconds_and_counts_failures():
    results = [RequestResult(ok=True, ttft_s=0.01, per_token_s=0.001, e2e_s=0.1, output_tokens=100)] * 3
    results += [RequestResult(ok=False, error="HTTP 503: loading")]
    report = summarize(results, 2.0, mode="qps 1", workload="chat", time_scale=10.0)
    assert (report.requests, report.failed, report.output_tokens) == (3, 1, 300)
    assert report.tokens_per_s == pytest.approx(300 / 20.0)
    assert report.ttft_p50_s == pytest.approx(0.1)
    assert report.per_token_p99_s == pytest.approx(0.01)
    assert report.errors == ["HTTP 503: loading"]


@pytest.mark.parametrize("mode", [{"concurrency": 8}, {"qps": 40.0}])
async def test_load_against_the_simulator_counts_every_token(mode):
    settings = SimulatorSettings(model_name="sim", method="eagle3",
                                 num_speculative_tokens=3, time_scale=50.0)
    sim = Simulator(settings)
    server = TestServer(build_app(sim))
    await server.start_server()
    try:
        config = LoadConfig(url=str(server.make_url("")), prompt_tokens=16, output_tokens=24, duration_s=0.6,
                            workload="code", **mode)
        results, wall = await run_load(config)
    finally:
        await server.close()
    assert results and all(r.ok for r in results), [r.error for r in results if not r.ok][:3]
    assert all(r.output_tokens == 24 for r in results)
    assert all(0 < r.ttft_s <= r.e2e_s for r in results)
    report = summarize(results, wall, mode="x", workload="code", time_scale=50.0)
    assert report.per_token_p50_s > 0
    assert sim.engine.waiting == type(sim.engine.waiting)()  # nothing left queued


async def test_exactly_one_of_qps_and_concurrency():
    with pytest.raises(ValueError, match="exactly one"):
        await run_load(LoadConfig(qps=1.0, concurrency=2))
