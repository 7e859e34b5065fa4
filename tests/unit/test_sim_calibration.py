"""The default profiles reproduce the shape of the published figures (sources: docs/simulator.md).

Each test prints simulated next to published (run with -s to see the table) and
asserts the shape within a tolerance: level at the calibration points and the
direction of change with load.
"""

from __future__ import annotations

from itertools import pairwise

import pytest

from specinfer.runtime.sim.model import COST_MODELS, CostShape, acceptance_profile, draft_scale
from tests.sim_steady_state import steady_state

pytestmark = pytest.mark.unit


def batch_speedup(cost_name: str, method: str, workload: str, k: int, cost_shape: CostShape, batch_size: int) -> float:
    """Throughput ratio at a fixed batch size (the EAGLE-3 paper's Table 5 setting)."""
    cost = COST_MODELS[cost_name]
    expected = acceptance_profile(method, workload).expected_tokens(k)
    spec = cost.step_time(batch_size, k, cost_shape, draft_scale=draft_scale(method))
    return expected * cost.step_time(batch_size, 0, None) / spec


def qps_speedup(cost_name: str, method: str, workload: str, k: int, cost_shape: CostShape, qps: float, *, prompt: int,
                output: int) -> float:
    """Per-output-token latency ratio (baseline / speculative) at a Poisson arrival rate."""
    cost = COST_MODELS[cost_name]
    profile = acceptance_profile(method, workload)
    spec = steady_state(cost, profile, k=k, cost_shape=cost_shape, qps=qps, prompt_tokens=prompt, output_tokens=output,
                        draft_scale=draft_scale(method))
    base = steady_state(cost, profile, k=0, cost_shape=None, qps=qps, prompt_tokens=prompt, output_tokens=output)
    return base.per_token_s / spec.per_token_s


def show(title: str, rows: list[tuple[str, float, str]]) -> None:
    print(f"\n{title}")
    for point, simulated, published in rows:
        print(f"  {point:<18} simulated {simulated:5.2f}x   published {published}")


def test_eagle3_chain_speedup_falls_from_175x_at_batch_2_to_1x_at_batch_56():
    batches = [2, 4, 8, 16, 24, 32, 48, 56]
    speedups = [batch_speedup("rtx3090-llama8b", "eagle3", "chat", 4, "sequential", b) for b in batches]
    paper = {2: "1.75x", 56: "1.01x"}
    show("EAGLE-3 chain, RTX 3090, Llama-3.1-8B, MT-bench (paper Table 5)",
         [(f"batch {b}", s, paper.get(b, "-")) for b, s in zip(batches, speedups, strict=True)])
    assert speedups[0] == pytest.approx(1.75, abs=0.15)
    assert speedups[-1] == pytest.approx(1.01, abs=0.15)
    assert all(later <= earlier + 1e-9 for earlier, later in pairwise(speedups)), speedups


def test_mtp_speedup_is_16x_at_1_qps_and_about_1x_by_6_to_8_qps():
    rates = [0.5, 1, 2, 3, 4, 5, 6, 7, 8]
    speedups = [qps_speedup("h100x4-moe80b", "mtp", "chat", 1, "sequential", q, prompt=1024, output=1024)
                for q in rates]
    reported = {1: "1.6-1.7x", 6: "~1.0x (6-8)", 8: "~1.0x (6-8)"}
    show("MTP, K=1, MoE target, 1k/1k requests (kaito#2286)",
         [(f"{q} QPS", s, reported.get(q, "-")) for q, s in zip(rates, speedups, strict=True)])
    assert speedups[1] == pytest.approx(1.65, abs=0.15)
    high = speedups[rates.index(6):]
    assert min(high) == pytest.approx(1.0, abs=0.12)
    assert all(later <= earlier + 0.02 for earlier, later in pairwise(speedups)), speedups


def test_ngram_is_high_on_summarization_and_low_on_chat():
    summarization = qps_speedup("h100-llama8b", "ngram", "summarization", 5, "lookup", 1, prompt=1024, output=256)
    chat = qps_speedup("h100-llama8b", "ngram", "chat", 5, "lookup", 1, prompt=1024, output=256)
    show("n-gram, K=5, low QPS (vLLM blog 2024-10-17)",
         [("summarization", summarization, "2.8x (CNN/DailyMail)"), ("chat", chat, "low")])
    assert summarization == pytest.approx(2.8, abs=0.5)
    assert chat < 1.4
    assert summarization > chat + 1.0


def test_draft_model_helps_at_low_qps_and_slows_down_at_high_qps():
    low = qps_speedup("h100x4-llama70b", "draftModel", "chat", 4, "sequential", 1, prompt=512, output=256)
    high = qps_speedup("h100x4-llama70b", "draftModel", "chat", 4, "sequential", 12, prompt=512, output=256)
    show("draft model, Llama3-70B on 4xH100, ShareGPT (vLLM blog)",
         [("1 QPS", low, "up to 1.5x"), ("12 QPS", high, "slowdown (0.7x)")])
    assert 1.2 <= low <= 1.65
    assert high < 1.0


@pytest.mark.parametrize(("workload", "published"), [("chat", 3.63), ("math", 6.12)])
def test_dspark_block7_mean_accepted_length(workload, published):
    simulated = acceptance_profile("dspark", workload).expected_tokens(7)
    show(f"DSpark block7, {workload} (vllm RFC #48202)", [("accepted length", simulated, f"{published}")])
    assert simulated == pytest.approx(published, abs=0.35)


def test_eagle3_acceptance_stays_high_while_the_right_action_flips_to_off():
    """vllm#26504: acceptance alone is the wrong signal; speedup crosses 1 with batch size."""
    profile = acceptance_profile("eagle3", "chat")
    small = batch_speedup("h100-llama8b", "eagle3", "chat", 4, "sequential", 1)
    large = batch_speedup("h100-llama8b", "eagle3", "chat", 4, "sequential", 128)
    assert profile.prefix_probs(1)[0] >= 0.7
    assert small > 1.5 and large < 1.0
