"""`specinfer runtime` (engine simulator) as a real process, scraped by a real Prometheus, read back by PromQL.

This is the path the tuner depends on: the simulator's spec-decode counters, under load,
arrive in Prometheus with vLLM's names and labels, and the PromQL from
docs/../vllm-speculative-decoding.md recovers the acceptance profile the simulator drew from.
"""

from __future__ import annotations

import asyncio
import json
import math
import signal
import subprocess
import sys
import uuid

import aiohttp
import pytest

from specinfer.bench.load import LoadConfig, run_load
from specinfer.dev.cluster.http_probe import wait_http_ok
from specinfer.dev.cluster.ports import free_port
from specinfer.runtime.sim.model import acceptance_profile

pytestmark = pytest.mark.integration

K = 4
TIME_SCALE = 10.0


def runtime_config(port: int) -> dict:
    return {
        "apiVersion": "specinfer.io/v1alpha1", "kind": "RuntimeConfig", "name": "sim-it", "namespace": "it",
        "spec": {
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "servedModelName": "llama"},
            "speculation": {"method": "eagle3", "draftModel": {"name": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"},
                            "numSpeculativeTokens": K},
            "runtime": {"engine": "simulator", "port": port,
                        "simulator": {"timeScale": TIME_SCALE, "workload": "code", "seed": 3}},
        },
    }


def wait_healthy(url: str, process: subprocess.Popen, timeout: float = 30.0) -> None:
    def alive() -> None:
        assert process.poll() is None, f"runtime exited with {process.returncode}"

    wait_http_ok(f"{url}/health", timeout=timeout, alive=alive)


def scrape_direct(url: str) -> dict[str, float]:
    async def get() -> str:
        async with aiohttp.ClientSession() as session, session.get(f"{url}/metrics") as response:
            return await response.text()

    samples = {}
    for line in asyncio.run(get()).splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def value(result: list[dict]) -> float:
    return float(result[0]["value"][1])


def test_spec_decode_counters_reach_prometheus(prometheus, tmp_path):
    port = free_port()
    config = tmp_path / "runtime.json"
    config.write_text(json.dumps(runtime_config(port)))
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen([sys.executable, "-c", "from specinfer.cli import main; main()", "runtime",
                                "--config", str(config)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    run_id = uuid.uuid4().hex[:8]
    selector = f'{{sim_run="{run_id}"}}'
    try:
        wait_healthy(url, process)
        prometheus.add_target(f"sim-{run_id}", f"127.0.0.1:{port}", {"sim_run": run_id})
        prometheus.wait_for(f"up{selector} == 1", timeout=60)

        results, _ = asyncio.run(run_load(LoadConfig(url=url, concurrency=16, prompt_tokens=32, output_tokens=64,
                                                     duration_s=4.0)))
        assert results and all(r.ok for r in results)
        direct = scrape_direct(url)  # load has stopped: these are the final counter values
        labels = '{engine="0",model_name="llama"}'
        drafts = direct[f"vllm:spec_decode_num_drafts_total{labels}"]
        assert drafts > 1000

        result = prometheus.wait_for(f"vllm:spec_decode_num_drafts_total{selector}",
                                     predicate=lambda r: value(r) == drafts, timeout=60)
        assert result[0]["metric"]["model_name"] == "llama" and result[0]["metric"]["engine"] == "0"
        generated = prometheus.query(f"vllm:generation_tokens_total{selector}")
        assert value(generated) == sum(r.output_tokens for r in results)

        per_pos = prometheus.query(
            f"vllm:spec_decode_num_accepted_tokens_per_pos_total{selector} "
            f"/ ignoring(position) group_left vllm:spec_decode_num_drafts_total{selector}")
        rates = {int(r["metric"]["position"]): float(r["value"][1]) for r in per_pos}
        assert sorted(rates) == list(range(K))
        expected = acceptance_profile("eagle3", "code").prefix_probs(K)
        for position, p in enumerate(expected):
            sigma = math.sqrt(p * (1 - p) / drafts)
            assert abs(rates[position] - p) < 6 * sigma, (position, rates[position], p)
        assert all(rates[i + 1] <= rates[i] for i in range(K - 1))

        mean_accepted = prometheus.query(
            f"1 + vllm:spec_decode_num_accepted_tokens_total{selector} / vllm:spec_decode_num_drafts_total{selector}")
        assert value(mean_accepted) == pytest.approx(acceptance_profile("eagle3", "code").expected_tokens(K), rel=0.05)

        itl = prometheus.query(f"vllm:inter_token_latency_seconds_count{selector}")
        assert value(itl) > 0
        tpot = prometheus.query(f"histogram_quantile(0.5, vllm:request_time_per_output_token_seconds_bucket{selector})")
        assert 0 < value(tpot) < 0.1  # simulated seconds, not wall seconds
    finally:
        prometheus.remove_target(f"sim-{run_id}")
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
        output = process.stdout.read().decode() if process.stdout else ""
    assert code == 0, output[-2000:]
