"""Replayed: an engine started under a load above its first schedule's crossover, whose acceptance was never
measured (the tuning loop's simulator world -- EAGLE-3 on `cpu-small`, its first schedule 1-30:K=2,
31-65536:K=0 -- at 32 concurrent requests, recorded on 2026-12-06 with the operator's `tuning.recordFile`).

Batch 32 runs the K = 0 range: a window holds a draft or three from the moments the batch dips to 30, and
the policy before held there for good ("only 1 drafts in the window (need 200)", the first record, every tick
for four minutes) while the head's first pass ran in every step. Today it drafts K=1 at batch 32 for a window,
goes back, and turns speculation off on the measured acceptance (predicted +44.2%; the cost model's own
figure for off against that K = 0 range is +47%)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specinfer.operator.tuner.recording import read_records, replay

pytestmark = pytest.mark.unit

TICKS = Path(__file__).parent / "data" / "cold_heavy_start_ticks.jsonl"


def ticks() -> list[tuple[dict, dict]]:
    return [(record["decision"], replay(record).decision) for record in read_records(TICKS)]


def test_the_tick_that_held_for_want_of_drafts_now_measures_the_acceptance():
    recorded, today = ticks()[0]
    assert recorded["guard"] == "insufficientSamples" and "drafts in the window" in recorded["reason"]
    assert today["action"] == "setSchedule" and today.get("probe"), today["reason"]
    assert "K=1 at batch size 32" in today["reason"] and "no acceptance has been measured" in today["reason"]


def test_after_its_window_the_probe_goes_back_and_speculation_goes_off():
    _, probe, back, off = (today for _, today in ticks())
    assert probe.get("probe") and "probing K=1 at batch size 32" in probe["reason"]
    assert back["action"] == "setSchedule" and "back to the config it replaced" in back["reason"]
    assert back["config"]["schedule"] == [[1, 30, 2], [31, 65536, 0]]
    assert off["action"] == "disable" and off["path"] == "rollout", off["reason"]
    assert off["predictedGain"] > 0.3
