"""The demo's live view and plot are pure functions of sampled snapshots."""

from __future__ import annotations

import pytest

from specinfer.dev.demo.plot import write_plot
from specinfer.dev.demo.view import Snapshot, render

pytestmark = pytest.mark.unit

STATUS = {
    "replicas": 1, "readyReplicas": 1,
    "conditions": [{"type": "Ready", "status": "True"}, {"type": "Tuned", "status": "True", "reason": "Applied"}],
    "effective": {"method": "eagle3", "numSpeculativeTokens": 5, "configHash": "abc",
                  "schedule": [{"minBatchSize": 1, "maxBatchSize": 24, "numSpeculativeTokens": 5},
                               {"minBatchSize": 25, "maxBatchSize": 256, "numSpeculativeTokens": 0}]},
    "metrics": {"meanBatchSize": 2.0, "p99TimePerOutputTokenSeconds": 0.0123},
    "tuning": {"mode": "auto", "restartsLastHour": 1,
               "history": [{"time": "2026-11-29T10:31:02Z", "action": "setSchedule", "predictedGain": 0.18,
                            "reason": "K=0 above batch 24 avoids a slowdown under load"}]},
}


def test_render_shows_effective_config_metrics_and_decisions():
    lines = render(Snapshot(elapsed_s=92, phase="peak load", concurrency=96, status=STATUS, tokens_per_s=812.4,
                            acceptance=0.71, pods_serving=1), name="llama", namespace="default")
    text = "\n".join(lines)
    assert "t=+1m32s" in text and "peak load (96 concurrent" in text
    assert "method eagle3  K 5  schedule 1-24:K=5, 25-256:K=0" in text
    assert "812 tokens/s" in text and "acceptance 0.71" in text and "12.3 ms" in text
    assert "Ready True" in text and "Tuned True (Applied)" in text
    assert "10:31:02  setSchedule (+18% predicted) K=0 above batch 24" in text


def test_render_copes_with_an_empty_status():
    text = "\n".join(render(Snapshot(elapsed_s=0, phase="low load", concurrency=2), name="x", namespace="y"))
    assert "method -  K -" in text and "none yet" in text


def test_plot_writes_a_png(tmp_path):
    other = {**STATUS, "effective": {**STATUS["effective"], "numSpeculativeTokens": 3, "configHash": "def"}}
    snapshots = [Snapshot(elapsed_s=t, phase="low" if t < 30 else "peak", concurrency=2 if t < 30 else 64,
                          status=STATUS if t < 40 else other, tokens_per_s=100.0 + t) for t in range(0, 60, 2)]
    path = write_plot(snapshots, tmp_path / "demo.png", title="test")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 10_000


def test_plotted_k_follows_the_schedule_at_the_observed_batch_size():
    from specinfer.dev.demo.plot import k_at_batch_size, max_k

    low = Snapshot(elapsed_s=0, phase="low", concurrency=2, status=STATUS)
    peak = Snapshot(elapsed_s=0, phase="peak", concurrency=96,
                    status={**STATUS, "metrics": {"meanBatchSize": 90.4}})
    assert (max_k(low), k_at_batch_size(low)) == (5, 5)
    assert (max_k(peak), k_at_batch_size(peak)) == (5, 0)
