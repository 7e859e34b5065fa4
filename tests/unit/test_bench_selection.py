"""`specinfer bench selection` (bench/selection.py): method auto against the simulator's model."""

from __future__ import annotations

import pytest

from specinfer.bench.selection import GOAL, SCENARIOS, Scenario, report, run

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("initial", ["none", "first"])
def test_rag_chat_rag_switches_once_each_way_within_the_goal(initial):
    scenario = Scenario(**{**SCENARIOS["rag-chat-rag"].__dict__, "initial": initial})
    figures = report(scenario, run(scenario))
    changes = [(before, after) for _, before, after in figures["switches"] if before != "none"]
    assert changes == [("ngram", "eagle3"), ("eagle3", "ngram")]
    assert figures["vs_oracle"] >= GOAL, figures


def test_without_a_reselection_the_goal_is_missed():
    """The benchmark can fail: a policy that never compares again stays on n-gram through the chat phase."""
    scenario = Scenario(**{**SCENARIOS["rag-chat-rag"].__dict__, "reselect_seconds": 7 * 24 * 3600})
    figures = report(scenario, run(scenario))
    assert figures["comparisons"] == 1
    assert figures["vs_oracle"] < GOAL
