"""vLLM's adaptive verification as a lever (issue 43, item 6; policy/lever.py): where vLLM runs it for the
resource the tuner turns it on or off -- a rollout, priced like any other -- when its model of vLLM's rule
predicts a gain; where vLLM refuses it, never. Played in closed loop against the bench's engine model, whose
adaptive steps run vLLM's rule over each request's true survival probability."""

from __future__ import annotations

from dataclasses import replace

import pytest

from specinfer.bench.scenarios import Scenario, _peak, run
from specinfer.bench.tuner import PolicyController, summarise, tuning_input
from specinfer.operator.tuner.policy import DraftConfig
from specinfer.operator.tuner.policy.config import differs_at
from specinfer.operator.tuner.policy.verification import differing_share

pytestmark = pytest.mark.unit

# Two replicas of a 70B target rolled with Surge; quiet at 16, a ramp to 450 held 30 minutes, quiet again
PINNED = Scenario("pinned-peak", "K pinned at 4 by the spec, one K for every batch size", _peak(16, 450, hold=30),
                  cost_preset="h100x4-llama70b", replicas=2, update_strategy="Surge", max_batch_size=256,
                  per_token_slo=0.080, reload_seconds=120.0)
K4 = DraftConfig(num_speculative_tokens=4)


def played(allow: bool, scenario: Scenario = PINNED) -> tuple[PolicyController, dict]:
    """The spec pins K (kMin = kMax = 4, drafting never off) on an engine that takes no schedule and
    rolls out every change -- what is left to tune is how much of each step's drafts vLLM verifies."""
    tuning = tuning_input(scenario).model_copy(update={
        "allow_schedule": False, "in_place_max_k": None, "k_min": 4, "k_max": 4, "allow_disable": False,
        "allow_adaptive_verification": allow})
    controller = PolicyController(tuning)
    engine = run(scenario, K4, controller, seed=7, substeps=3)
    return controller, summarise(scenario, engine)


def static(adaptive: bool) -> float:
    engine = run(PINNED, DraftConfig(num_speculative_tokens=4, adaptive_verification=adaptive),
                 lambda observation, now, engine: None, seed=7, substeps=3)
    return float(summarise(PINNED, engine)["goodput"])


def test_the_tuner_turns_adaptive_verification_on_at_the_peak_and_off_when_quiet():
    controller, result = played(allow=True)
    changes = [(at, decision) for at, decision in controller.decisions]
    assert [d.config.adaptive for _, d in changes] == [True, False], [d.reason for _, d in changes]
    assert all(d.path == "rollout" for _, d in changes)  # a setting of the engine's start: new pods
    on, off = changes[0], changes[1]
    assert 20 * 60 < on[0] < 40 * 60 and "with adaptive verification (rollout)" in on[1].reason
    assert "the rollout's payback" in on[1].reason and on[1].predicted_gain > 0.05
    # off once the peak's hold has ended: on its ramp down, where verifying every draft wins wherever the load goes
    assert off[0] >= 60 * 60 and off[1].config.to_json() == {"numSpeculativeTokens": 4, "schedule": None}
    assert on[1].config.to_json()["adaptiveVerification"] is True
    # better than either static choice: K=4 verifying every draft, or vLLM's rule all day
    assert result["goodput"] > max(static(False), static(True))


def test_a_switch_of_adaptive_verification_is_verified_against_its_prediction():
    """Each switch, at the same K, is a change the policy verifies -- where its first windows run near the load
    it was decided at. (On the ramps above both switches go mid-ramp, where they win wherever the load goes, and
    the old config never ran at the load they reach: nothing to judge them against. A peak reached in a minute.)"""
    step = replace(PINNED, name="pinned-step", phases=_peak(16, 450, ramp=1, hold=30))
    controller, _ = played(allow=True, scenario=step)
    assert [d.config.adaptive for _, d in controller.decisions] == [True, False], [
        d.reason for _, d in controller.decisions]
    assert len(controller.realised) >= 2, controller.realised


def test_where_vllm_refuses_it_the_tuner_never_turns_it_on():
    controller, result = played(allow=False)
    assert not any(d.config.adaptive for _, d in controller.decisions)
    assert result["goodput"] == pytest.approx(static(False), rel=1e-9)


def test_adaptive_verification_alone_is_a_change_at_every_batch_size():
    plain, adaptive = K4.dense(8), DraftConfig(num_speculative_tokens=4, adaptive_verification=True).dense(8)
    assert differs_at(plain, adaptive, 3) and not differs_at(plain, K4.dense(8), 3)
    assert differing_share([(3, 0.5), (6, 0.5)], plain, adaptive, 8) == 1.0
    assert differing_share([(3, 1.0)], plain, K4.dense(8), 8) == 0.0
