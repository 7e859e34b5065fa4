"""Stopping a local process ends its whole session, as a kubelet ends a container."""

from __future__ import annotations

import os
import time

import pytest

from specinfer.dev.cluster import processes

pytestmark = pytest.mark.unit


def group_members(pgid: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[2]) == pgid and stat[0] not in ("Z", "X"):
                members.append(int(entry))
    return members


def test_stop_leaves_no_child_of_the_stopped_process_running(tmp_path):
    # the shell dies on SIGTERM and leaves its background child behind, like a vLLM API server
    # killed while its engine-core process starts
    record = processes.start("leader", ["sh", "-c", "sleep 300 & wait"], log_dir=tmp_path)
    deadline = time.monotonic() + 10
    while len(group_members(record.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(group_members(record.pid)) == 2
    processes.stop(record, timeout=5)
    deadline = time.monotonic() + 5
    while group_members(record.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert group_members(record.pid) == []


def test_stop_after_the_leader_exited_ends_what_it_left(tmp_path):
    record = processes.start("leader", ["sh", "-c", "sleep 300 & exit 3"], log_dir=tmp_path)
    deadline = time.monotonic() + 10
    while processes.is_running(record) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert group_members(record.pid)  # the orphan runs on
    assert processes.exit_code(record) == 3  # read before stop, which reaps the leader
    processes.stop(record, timeout=5)
    deadline = time.monotonic() + 5
    while group_members(record.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert group_members(record.pid) == []
