"""`specinfer bench tuning-loop` measures the loop with the policy in it: its fake Prometheus answers
every query of a tick as the real one would, so no resource is held before the policy runs."""

from __future__ import annotations

import pytest

from specinfer.bench.tuning_loop import measure
from specinfer.operator.tuner.pure.queries import build_queries
from specinfer.operator.tuner.pure.settings import TunerSettings

pytestmark = pytest.mark.unit


def test_every_resource_reaches_the_policy_with_one_round_trip_per_query():
    settings = TunerSettings(window_seconds=60)
    row = measure(3)
    assert row["queries"] == row["roundTrips"] == len(build_queries(settings.labels.mapping(), 60))
    assert row["heldBeforePolicy"] == 0  # was 3: the plugin's accepted-per-position query went unanswered
    assert sum(row["actions"].values()) == 3
