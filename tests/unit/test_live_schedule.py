"""The engine side of retuning in place (runtime/live_schedule/): the published file, the watcher that
swaps it in between steps, and the series that say what the engine runs."""

from __future__ import annotations

import json
import os

import pytest
from prometheus_client import CollectorRegistry

from specinfer.runtime.live_schedule.published import (
    PublishedSchedule,
    ScheduleRefused,
    parse_published,
    published_text,
    schedule_digest,
)
from specinfer.runtime.live_schedule.watcher import ScheduleWatcher, read_state
from specinfer.runtime.methods.schedule import dense_schedule
from specinfer.runtime.telemetry.live_schedule_sink import LiveScheduleExporter

pytestmark = pytest.mark.unit

STARTUP = PublishedSchedule(((1, 16, 3),))


def build(ranges):
    return dense_schedule(ranges, 3, 16)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def publish(path, ranges) -> None:
    """As the kubelet does: the new content appears under the same name in one rename."""
    temporary = path.with_name(".incoming")
    temporary.write_text(published_text(ranges))
    os.replace(temporary, path)


@pytest.fixture
def watched(tmp_path):
    path, state = tmp_path / "schedule.json", tmp_path / "state.json"
    publish(path, [[1, 16, 3]])
    clock = Clock()
    watcher = ScheduleWatcher(path, startup=STARTUP, max_k=3, build=build, state_path=state, clock=clock,
                              wall=lambda: 1000.0 + clock.now)
    return watcher, path, state, clock


# --- the file -----------------------------------------------------------------------------------

def test_the_published_text_parses_back_to_its_schedule():
    text = published_text([[1, 4, 3], [5, 64, 1]])
    parsed = parse_published(text, max_k=3)
    assert parsed.ranges == ((1, 4, 3), (5, 64, 1))
    assert json.loads(text)["digest"] == parsed.digest == schedule_digest([[1, 4, 3], [5, 64, 1]])
    assert parsed.describe() == "1-4:3,5-64:1"


@pytest.mark.parametrize(("text", "reason", "words"), [
    ('{"kind": "LiveSch', "unreadable", "not JSON"),  # a partial write
    ("[]", "invalid", "kind"),
    ('{"kind": "LiveSchedule", "schedule": [[1, 16, "3"]]}', "invalid", "integer"),
    ('{"kind": "LiveSchedule", "schedule": [[1, 16, true]]}', "invalid", "integer"),
    ('{"kind": "LiveSchedule", "schedule": [[2, 16, 1]]}', "invalid", "start at batch size 1"),
    ('{"kind": "LiveSchedule", "schedule": [[1, 16, 5]]}', "aboveMaxK", "K=5"),
    ('{"kind": "LiveSchedule", "digest": "000000000000", "schedule": [[1, 16, 2]]}', "invalid", "digest"),
    ("x" * 70000, "unreadable", "bytes"),
])
def test_a_bad_file_is_refused_with_its_reason(text, reason, words):
    with pytest.raises(ScheduleRefused) as refused:
        parse_published(text, max_k=3)
    assert refused.value.reason == reason
    assert words in str(refused.value)


# --- the watcher --------------------------------------------------------------------------------

def test_a_new_schedule_is_swapped_in_at_the_next_check(watched):
    watcher, path, state, clock = watched
    assert watcher.poll() is None  # the startup schedule again: nothing to swap
    publish(path, [[1, 2, 3], [3, 16, 1]])
    assert watcher.poll() is None  # between checks: not even a stat
    clock.now += 1.0
    lookup = watcher.poll()
    assert lookup == build([[1, 2, 3], [3, 16, 1]])
    written = read_state(state)
    assert written["digest"] == schedule_digest([[1, 2, 3], [3, 16, 1]]) and written["swaps"] == 1
    assert written["source"] == "published" and written["appliedAt"] == 1001.0
    clock.now += 1.0
    assert watcher.poll() is None  # unchanged file: no second swap


def test_a_garbled_or_missing_file_keeps_the_last_good_schedule_and_counts_once(watched):
    watcher, path, state, clock = watched
    good = watcher.state.digest
    for _ in range(3):  # a garbled file seen at three checks is one problem, not three
        path.write_text('{"kind": "LiveSchedule", "sched')
        clock.now += 1.0
        assert watcher.poll() is None
    path.unlink()
    clock.now += 1.0
    assert watcher.poll() is None
    assert "missing" not in watcher.state.errors  # gone at one check: maybe the kubelet's swap in progress
    clock.now += 1.0
    assert watcher.poll() is None
    written = read_state(state)
    assert written["digest"] == good
    assert written["errors"] == {"unreadable": 1, "missing": 1}
    assert "does not exist" in written["lastError"]
    publish(path, [[1, 16, 2]])  # the next good file is taken
    clock.now += 1.0
    assert watcher.poll() == build([[1, 16, 2]])


def test_a_schedule_the_engine_builder_refuses_is_kept_out(watched):
    watcher, path, _, clock = watched

    def refusing(ranges):
        raise ValueError("vllm_max_batch_size must be > 0.")

    watcher._build = refusing
    publish(path, [[1, 16, 1]])
    clock.now += 1.0
    assert watcher.poll() is None
    assert watcher.state.errors == {"refusedByEngine": 1}


def test_the_watcher_never_raises_into_the_engine(watched, monkeypatch):
    watcher, _, _, clock = watched

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(watcher, "_check", broken)
    clock.now += 1.0
    assert watcher.poll() is None


# --- what the engine exports --------------------------------------------------------------------

def test_the_exporter_shows_the_schedule_in_force_and_counts_refusals(watched):
    watcher, path, state, clock = watched
    registry = CollectorRegistry()
    exporter = LiveScheduleExporter(state, registry, model_name="m", engine="0")
    exporter.refresh()

    def info():
        return {s.labels["digest"]: s.value for m in registry.collect() if m.name == "specinfer:live_schedule_info"
                for s in m.samples}

    assert info() == {STARTUP.digest: 1.0}
    publish(path, [[1, 16, 1]])
    clock.now += 1.0
    watcher.poll()
    path.write_text("garbage")
    clock.now += 1.0
    watcher.poll()
    exporter.refresh()
    assert info() == {schedule_digest([[1, 16, 1]]): 1.0}  # one series: the old schedule's is gone
    assert registry.get_sample_value("specinfer:live_schedule_errors_total",
                                     {"model_name": "m", "engine": "0", "reason": "unreadable"}) == 1.0
    assert registry.get_sample_value("specinfer:live_schedule_applied_timestamp_seconds",
                                     {"model_name": "m", "engine": "0"}) == 1001.0
