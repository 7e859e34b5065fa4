"""`specinfer bench live-schedule` runs and emits its figures (what they are is the benchmark's to print)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from specinfer.bench.cli import bench

pytestmark = pytest.mark.unit


def test_the_command_runs_every_regime_and_prints_json(tmp_path):
    result = CliRunner().invoke(bench, ["live-schedule", "--calls", "2000", "--max-batch-sizes", "16,64",
                                        "--step-rates", "50,500", "--state-dir", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert {"goal_us", "check_interval_s", "regimes", "overhead_over_noop_us", "amortised_per_step",
            "worst_steady_us", "meets_goal", "machine"} <= set(report)
    assert list(report["regimes"]) == [
        "no-op call", "between checks", "check, file unchanged", "check, file changed (max batch 16)",
        "check, file changed (max batch 64)", "check, file changed (max batch 64, no state file)"]
    for figures in report["regimes"].values():
        assert {"calls", "median_us", "p99_us"} <= set(figures)
    assert set(report["amortised_per_step"]) == {"50", "500"}
    assert report["amortised_per_step"]["50"]["steps_per_check"] == 12.5
    assert list(tmp_path.iterdir()) == []  # the schedule and state files are cleaned up


def test_the_table_names_the_goal():
    result = CliRunner().invoke(bench, ["live-schedule", "--calls", "2000", "--max-batch-sizes", "16"])
    assert result.exit_code == 0, result.output
    assert "the 2 us goal" in result.output and "between checks" in result.output
