"""Issue 25, replayed: the ticks the tuning loop recorded on the real vLLM CPU engine while the load
of the engine tuning story ramped from 1 to 64 requests (tests/engine/test_tuning_engine.py, the
crossover resource: the always-right draft on schedule 1-19:K=4, 20-63:K=3, 64:K=2).

What went wrong before (CI on a fresh machine: `setK ... -> K=4: predicted +29.8% (mean 16.6)`):
windows that straddle the ramp hold a few steps at batch 64 -- 6 in the first window here, a cost
cell of weight 0.03 -- so the step-cost fit at batch 64 is the prior's shape scaled to the batch-1
level. In the first record it predicts T(64, K=2) = 145 ms where the engine took 229 ms, and
T(64, K=4) = 224 ms, i.e. two more drafted tokens per request for the price of what K=2 really
costs: K=4 at batch 64 looked 8% faster per request, and with more of the window at batch 64
(mean 16.6) that became +29.8%. Measured (the last record), T(64,2) = 233 ms and T(64,4) = 386 ms:
drafting more there earns nothing, and speculation off is the best config.

The policy of today waits while the load moves (`loadMoving`; at its top, where speculation off
wins wherever the load goes, because the gain rests on batch sizes not yet measured: `unmeasured`),
holds once more while batch 63 has a thin window of steps (`unmeasured`), and disables speculation
on the measured window. The
policy before issue 25 rolled out on the second record (mean 35.4, mid-ramp)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specinfer.operator.tuner.policy import guards
from specinfer.operator.tuner.recording import read_records, replay

pytestmark = pytest.mark.unit

TICKS = Path(__file__).parent / "data" / "ramp_to_peak_ticks.jsonl"


def decisions() -> list[tuple[float, dict]]:
    return [(record["observation"]["batchSize"]["mean"], replay(record).decision) for record in read_records(TICKS)]


def test_no_rollout_while_the_load_ramps():
    ramp = decisions()[:4]
    assert [round(mean) for mean, _ in ramp] == [8, 35, 55, 63]
    for mean, decision in ramp[:3]:
        assert decision["action"] == "keep", (mean, decision["reason"])
        assert decision["guard"] == guards.LOAD_MOVING, (mean, decision["reason"])
    # at 63 speculation off wins at every batch size the rising load may reach, so the ramp does not hold it
    # (policy/ramp.py): what it rests on, steps at batch sizes no window has measured, still does
    mean, decision = ramp[3]
    assert decision["action"] == "keep" and decision["guard"] == guards.UNMEASURED, (mean, decision["reason"])


def test_a_thin_window_at_the_new_batch_size_is_measured_before_acting():
    mean, decision = decisions()[4]
    assert decision["action"] == "keep" and decision["guard"] == guards.UNMEASURED, decision["reason"]
    assert "rests on the step-cost prior" in decision["reason"] and "63" in decision["reason"]
    assert decision["recommendation"]["config"]["numSpeculativeTokens"] == 0


def test_once_measured_the_peak_turns_speculation_off():
    mean, decision = decisions()[5]
    assert mean > 50
    assert decision["action"] == "disable", decision["reason"]
    assert decision["predictedGain"] > 0.5


def test_the_recorded_decisions_are_todays():
    """The records were written by the live loop with this policy: replaying them changes nothing
    (a policy change that moves them must re-record or explain itself here)."""
    for record in read_records(TICKS):
        assert replay(record).same, record["now"]
