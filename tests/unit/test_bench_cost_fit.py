"""`specinfer bench cost-fit`: the fit recovers a known step-cost model from its own step times."""

from __future__ import annotations

import dataclasses

import pytest

from specinfer.bench.cost_fit import Point, comparison, fit, points, simulated
from specinfer.runtime.methods.cost_presets import CostModel

pytestmark = pytest.mark.unit

# A CPU-like world that no preset holds: a 3 ms floor, a sharp knee, draft passes as costly as the target's.
WORLD = CostModel(name="world", floor_s=0.003, compute_per_token_s=0.00012, kv_per_seq_s=0.00001,
                  draft_pass_s=0.0006, draft_per_token_s=0.00004, parallel_pass_s=0.001,
                  lookup_per_token_s=0.00002, prefill_per_token_s=0.0001, restart_s=60.0, knee_sharpness=2.0)


def measured() -> list[Point]:
    grid = [Point("none", 0, b, 0.0) for b in (1, 4, 16, 64)]
    grid += [Point(m, k, b, 0.0) for m in ("draft_model", "ngram") for k in (1, 2, 4) for b in (1, 4, 16, 64)]
    return [dataclasses.replace(p, seconds=simulated(WORLD, p)) for p in grid]


def test_the_fit_reproduces_every_measured_step_time():
    data = measured()
    fitted = fit(data, dataclasses.replace(WORLD, name="cpu-test", floor_s=0.03, draft_pass_s=0.01))
    errors = [abs(simulated(fitted, p) / p.seconds - 1) for p in data]
    assert max(errors) < 0.05, comparison(data, fitted)
    assert fitted.name == "cpu-test" and fitted.restart_s == WORLD.restart_s
    assert fitted.floor_s == pytest.approx(WORLD.floor_s, rel=0.15)


def test_a_preset_far_from_the_data_shows_its_errors():
    data = measured()
    table = comparison(data, dataclasses.replace(WORLD, floor_s=0.03))
    # ten times the floor: a lone request's 3 ms step is simulated at ~30 ms, about +900%
    row = next(line for line in table.splitlines() if line.startswith("| none | 0 | 1 |"))
    assert row.split("|")[4].strip() == "3.0" and 29.5 < float(row.split("|")[5]) < 30.5
    assert 880 <= int(row.split("|")[6].strip().rstrip("%")) <= 900
    assert "of 28 points within 15%" in table


def test_bench_rows_become_step_times():
    rows = [{"method": "none", "k": 0, "batch": 4, "wall_s": 2.0, "steps": 100},
            {"method": "ngram", "k": 2, "batch": 4, "wall_s": 1.0, "steps": 0}]  # no steps counted: dropped
    assert points(rows) == [Point("none", 0, 4, 0.02)]
