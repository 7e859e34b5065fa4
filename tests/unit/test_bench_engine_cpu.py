"""`specinfer bench engine-cpu`'s table: step time, speed-up and acceptance from the engine's counters."""

from __future__ import annotations

import pytest

from specinfer.bench.engine_cpu import table

pytestmark = pytest.mark.unit


def row(method, k, batch, wall_s, generated, steps, drafts=0, accepted=()):
    return {"method": method, "k": k, "batch": batch, "wall_s": wall_s, "generated": generated, "steps": steps,
            "drafts": drafts, "draft_tokens": drafts * k, "accepted_per_pos": list(accepted)}


def test_table_derives_step_time_speedup_and_acceptance_per_position():
    rows = [row("none", 0, 4, 2.0, 512, 129),
            row("draft_model", 2, 4, 1.0, 512, 50, drafts=160, accepted=(160, 120))]
    lines = table(rows).splitlines()
    none, draft = (line.split("|")[1:-1] for line in lines[2:4])
    assert [c.strip() for c in none[:4]] == ["none", "0", "4", "15.5"]      # 2.0 s / 129 steps
    assert [c.strip() for c in draft[:4]] == ["draft_model", "2", "4", "20.0"]  # 1.0 s / 50 steps
    assert draft[6].strip() == "2.56" and draft[7].strip() == "512"           # 512 / 4 / 50; tokens/s
    assert draft[8].strip() == "2.00x"                                         # 512 tok/s vs 256 at K=0
    assert draft[9].strip() == "1.00, 0.75"                                    # 160/160, 120/160
    assert float(none[4]) > 0 and float(draft[4]) > float(none[4])           # the simulator's T(B, K) beside it
    # sim vs real: the preset's step time over the measured one
    assert draft[5].strip() == f"{float(draft[4]) / 20.0 - 1:+.0%}"


def test_table_ends_with_how_far_the_preset_is_from_the_engine():
    from specinfer.bench.engine_cpu import simulated_step_ms

    exact = 1000 / simulated_step_ms("cpu-tiny", "none", 0, 4)  # steps in one second at exactly the preset's pace
    rows = [row("none", 0, 4, 1.0, 4 * round(exact), round(exact)),
            row("draft_model", 2, 4, 1.0, 512, round(1000 / (2 * simulated_step_ms("cpu-tiny", "draft_model", 2, 4))))]
    summary = table(rows).splitlines()[-1]
    assert "1 of 2 points within 15%" in summary, summary  # the second point's steps take twice the preset's
    worst = int(summary.rsplit("worst ", 1)[1].rstrip("%"))
    assert -52 <= worst <= -48, summary  # the preset's step is half the measured one
