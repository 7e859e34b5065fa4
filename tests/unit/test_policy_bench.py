"""`specinfer bench tuner` runs end to end and its figures hang together (not what they are)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from specinfer.bench.tuner import tuner_command

pytestmark = pytest.mark.unit


def test_quick_json_run_of_one_scenario(tmp_path):
    result = CliRunner().invoke(tuner_command, ["--quick", "--json", "--scenario", "collapse",
                                                "--out", str(tmp_path), "--no-plots"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)["collapse"]
    results = report["results"]
    oracle = results["per-phase oracle"]["goodput"]
    statics = [v["goodput"] for k, v in results.items() if k.startswith(("static", "best static", "no spec"))]
    assert all(oracle >= s * 0.999 for s in statics)  # the per-phase oracle bounds every fixed config
    assert results["policy"]["restarts"] >= 1  # the collapse must be acted on
    assert any(d["action"] == "disable" for d in report["policyDecisions"])
    assert set(report["goals"]) == {"vsOracle", "worstPhaseVsNoSpeculation", "restartsPerHour", "vsBestStatic"}


def test_plot_is_written(tmp_path):
    pytest.importorskip("matplotlib")
    result = CliRunner().invoke(tuner_command, ["--quick", "--scenario", "steady-chat", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "steady-chat.png").stat().st_size > 1000
    assert "per-phase oracle" in result.output
