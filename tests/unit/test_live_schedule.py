"""The engine side of retuning in place (runtime/pod/live_schedule/): the published file, the watcher that
swaps it in between steps, and the series that say what the engine runs."""

from __future__ import annotations

import json
import logging
import os
import threading

import pytest
from prometheus_client import CollectorRegistry

from specinfer.runtime.contract.live_schedule.published import (
    MAX_FILE_BYTES,
    PublishedSchedule,
    ScheduleRefused,
    parse_published,
    published_text,
    schedule_digest,
)
from specinfer.runtime.methods.schedule import dense_schedule
from specinfer.runtime.pod.live_schedule.watcher import ScheduleWatcher, read_state
from specinfer.runtime.pod.telemetry.live_schedule_sink import LiveScheduleExporter

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


def test_the_watcher_never_raises_into_the_engine(watched, monkeypatch, caplog):
    """Even a bug of its own is one counted refusal and one log line, never an exception or a traceback."""
    watcher, _, state, clock = watched

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(watcher, "_check", broken)
    clock.now += 1.0
    with caplog.at_level(logging.WARNING, logger="vllm.specinfer.live_schedule"):
        assert watcher.poll() is None
    assert read_state(state)["errors"] == {"unreadable": 1}
    assert "unexpected RuntimeError" in read_state(state)["lastError"] and "boom" in read_state(state)["lastError"]
    assert_one_line_each(caplog)


# --- what the watcher refuses to read, and how it says so ----------------------------------------------------

def assert_one_line_each(caplog) -> None:
    assert caplog.records, "the refusal was not logged"
    for record in caplog.records:
        assert record.exc_info is None and "\n" not in record.getMessage(), record.getMessage()


def poll_within(watcher, seconds: float = 5.0, *, unblock=None):
    """watcher.poll() in a thread: a poll that blocks (a FIFO opened without O_NONBLOCK waits for a
    writer forever) fails the test instead of hanging it; `unblock` then releases the thread."""
    result: dict[str, object] = {}
    thread = threading.Thread(target=lambda: result.setdefault("lookup", watcher.poll()), daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        if unblock is not None:
            unblock()
        pytest.fail(f"poll() blocked for more than {seconds} s")
    return result["lookup"]


def open_fifo_for_writing(path) -> None:
    """Releases a reader blocked in open() on the FIFO at `path` (then closes at once)."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass


def refusals(watcher, state) -> tuple[dict, str]:
    written = read_state(state)
    assert written["errors"] == watcher.state.errors
    return written["errors"], written["lastError"]


def test_a_fifo_at_the_path_is_refused_without_blocking_the_engine(watched, caplog):
    watcher, path, state, clock = watched
    good = watcher.state.digest
    path.unlink()
    os.mkfifo(path)
    clock.now += 1.0
    with caplog.at_level(logging.WARNING, logger="vllm.specinfer.live_schedule"):
        assert poll_within(watcher, unblock=lambda: open_fifo_for_writing(path)) is None
    errors, last = refusals(watcher, state)
    assert errors == {"unreadable": 1} and "is a FIFO, not a regular file" in last
    assert watcher.state.digest == good
    assert_one_line_each(caplog)
    clock.now += 1.0
    assert poll_within(watcher, unblock=lambda: open_fifo_for_writing(path)) is None
    assert watcher.state.errors == {"unreadable": 1}  # the same problem at the next check: counted once


def test_a_fifo_swapped_in_between_the_stat_and_the_open_does_not_block(watched, monkeypatch):
    """The stat saw a regular file; by the open a FIFO is there. The open must not wait for a writer,
    and the descriptor's own type refuses it."""
    watcher, path, state, clock = watched
    regular = os.stat(path)
    path.unlink()
    os.mkfifo(path)
    real_stat = os.stat

    def stale_stat(target, *args, **kwargs):  # what the stat saw just before the swap
        return regular if os.fspath(target) == os.fspath(path) else real_stat(target, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stale_stat)
    watcher._seen = None
    clock.now += 1.0
    assert poll_within(watcher, unblock=lambda: open_fifo_for_writing(path)) is None
    errors, last = refusals(watcher, state)
    assert errors == {"unreadable": 1} and "is a FIFO, not a regular file" in last


@pytest.mark.parametrize("kind", ["directory", "character device"])
def test_a_directory_or_device_at_the_path_is_refused_without_opening_it(watched, monkeypatch, kind):
    watcher, path, state, clock = watched
    path.unlink()
    if kind == "directory":
        path.mkdir()
    else:
        path.symlink_to("/dev/zero")  # the kubelet's files are symlinks too: followed, then refused
    opened = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda target, *args: opened.append(target) or real_open(target, *args))
    clock.now += 1.0
    assert poll_within(watcher) is None
    errors, last = refusals(watcher, state)
    assert errors == {"unreadable": 1} and f"is a {kind}, not a regular file" in last
    assert os.fspath(path) not in map(os.fspath, opened)


def test_a_file_larger_than_the_bound_is_not_read(watched, monkeypatch):
    watcher, path, state, clock = watched
    path.write_bytes(b" " * (10 * 1024 * 1024))  # 10 MB: read whole, it took 79 ms of one engine step
    opened = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda target, *args: opened.append(target) or real_open(target, *args))
    clock.now += 1.0
    assert watcher.poll() is None
    errors, last = refusals(watcher, state)
    assert errors == {"unreadable": 1} and f"more than {MAX_FILE_BYTES} bytes" in last
    assert os.fspath(path) not in map(os.fspath, opened)


def test_a_file_that_grew_after_the_stat_is_read_no_further_than_the_bound(watched, monkeypatch):
    watcher, path, state, clock = watched
    small = os.stat(path)
    path.write_bytes(b"[" * (3 * MAX_FILE_BYTES))
    real_stat, real_read = os.stat, os.read
    monkeypatch.setattr(os, "stat", lambda target, *args, **kwargs: small if os.fspath(target) == os.fspath(path)
                        else real_stat(target, *args, **kwargs))
    read = []
    monkeypatch.setattr(os, "read", lambda descriptor, count: read.append(real_read(descriptor, count)) or read[-1])
    watcher._seen = None
    clock.now += 1.0
    assert watcher.poll() is None
    assert sum(map(len, read)) == MAX_FILE_BYTES + 1
    errors, last = refusals(watcher, state)
    assert errors == {"unreadable": 1} and f"more than {MAX_FILE_BYTES} bytes" in last


def test_a_file_that_is_not_utf8_is_refused(watched):
    watcher, path, state, clock = watched
    path.write_bytes(b'{"kind": "LiveSchedule", "schedule": [[1, 16, 2]], "note": "\xff\xfe"}')
    clock.now += 1.0
    assert watcher.poll() is None
    errors, last = refusals(watcher, state)
    assert errors == {"unreadable": 1} and "is not UTF-8 text" in last


def test_nesting_deeper_than_the_parser_allows_is_counted_not_raised(watched, caplog):
    """60,000 `[` exhaust json's recursion: a RecursionError, counted like any refusal."""
    watcher, path, state, clock = watched
    path.write_text("[" * 60000)
    clock.now += 1.0
    with caplog.at_level(logging.WARNING, logger="vllm.specinfer.live_schedule"):
        assert watcher.poll() is None
    errors, last = refusals(watcher, state)
    assert errors == {"unreadable": 1} and "nests deeper than the JSON parser allows" in last
    assert_one_line_each(caplog)
    publish(path, [[1, 16, 2]])  # and the next good file is still taken
    clock.now += 1.0
    assert watcher.poll() == build([[1, 16, 2]])


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
