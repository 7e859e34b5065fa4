"""Tick records: an observation's JSON form reads back as the same observation, and a recorded
tick replays to the decision it recorded."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from specinfer.bench.observations import synthetic_observation
from specinfer.operator.tuner.cli import tuner
from specinfer.operator.tuner.policy import TuningInput, decide, parse_observation
from specinfer.operator.tuner.policy.observation import ObservationError, observation_to_json
from specinfer.operator.tuner.recording import append_record, read_records, replay, tick_record

pytestmark = pytest.mark.unit


def observation(now: float, signals: str = "specinfer"):
    return synthetic_observation(time=now, window_seconds=60.0, method="eagle3", num_speculative_tokens=2,
                                 schedule=[[1, 8, 2], [9, 64, 1]], applied_since=0.0, batch_sizes={2: 0.7, 24: 0.3},
                                 prefix=[0.8, 0.6], step_time=lambda b, k: 0.01 + 2e-5 * b * (k + 1) + 8e-4 * k,
                                 signals=signals, per_token_p99_seconds=0.05)


@pytest.mark.parametrize("signals", ["specinfer", "vllm"])
def test_the_json_form_reads_back_as_the_same_observation(signals):
    original = observation(120.0, signals)
    assert parse_observation(json.loads(json.dumps(observation_to_json(original)))) == original


def test_a_recorded_tick_replays_to_its_decision(tmp_path):
    spec = TuningInput(method="eagle3", k_max=6, max_batch_size=64, confirmations=1, cooldown_seconds=0)
    path = tmp_path / "ticks.jsonl"
    state = None
    for now in (120.0, 180.0):
        decision, new_state = decide(observation(now), spec, state, now)
        append_record(str(path), tick_record("ns", "llama", now, observation(now), spec, state, decision))
        state = new_state
    records = list(read_records(path, "ns/llama"))
    assert len(records) == 2 and list(read_records(path, "other")) == []
    for record in records:
        result = replay(record)
        assert result.same and result.decision == record["decision"]
    result = CliRunner().invoke(tuner, ["replay", str(path)])
    assert result.exit_code == 0, result.output
    assert "then:" in result.output and "now:" not in result.output


def test_replay_says_when_todays_policy_decides_otherwise(tmp_path):
    spec = TuningInput(method="eagle3", k_max=6, max_batch_size=64, confirmations=1, cooldown_seconds=0)
    decision, _ = decide(observation(120.0), spec, None, 120.0)
    record = tick_record("ns", "llama", 120.0, observation(120.0), spec, None, decision)
    record["decision"] = {**record["decision"], "action": "disable", "config": None}
    path = tmp_path / "ticks.jsonl"
    path.write_text(json.dumps(record) + "\n")
    result = CliRunner().invoke(tuner, ["replay", str(path)])
    assert result.exit_code == 1
    assert "* 120" in result.output and "now:" in result.output


def test_a_garbled_record_names_its_line(tmp_path):
    path = tmp_path / "ticks.jsonl"
    path.write_text('{"version": 1}\nnot json\n')
    with pytest.raises(ValueError, match="ticks.jsonl:2"):
        list(read_records(path))


def test_an_adaptive_flag_that_is_not_a_boolean_is_refused():
    """bool("false") is True: a replayed or hostile observation must say true or false, or be refused."""
    good = observation_to_json(observation(120.0, "specinfer"))
    for bad in ("false", 1, None):
        data = {**good, "applied": {**good["applied"], "adaptiveVerification": bad}}
        with pytest.raises(ObservationError, match="adaptiveVerification must be true or false"):
            parse_observation(data)
