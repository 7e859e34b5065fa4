"""Retuning in place: the Dynamic SD schedule a running engine takes without a restart.

The operator publishes the schedule in a ConfigMap child of the resource, mounted into the engine
pod as a directory (the kubelet swaps its `..data` symlink on change). Inside the engine a watcher
(runtime/pod/live_schedule/) re-reads the file when it changes, validates it against the engine's
startup maximum K and batch size, and hands the scheduler a new dense batch-size -> K lookup between
two steps; a bad file keeps the last good schedule and says why. What is in force goes to a small
state file the telemetry plugin exports (`specinfer:live_schedule_*`), so the tuner reads what the
engine runs. This room is what both sides agree on:

- this module -- the file and environment names, and the scheduler class the engine is started with;
- `envelope.py` -- which specs are retuned in place, their envelope and startup schedule (pure);
- `published.py` -- the file format and its validation (pure).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

SCHEDULE_FILE_ENV = "SPECINFER_LIVE_SCHEDULE_FILE"  # the mounted schedule (the engine reads it)
STATE_FILE_ENV = "SPECINFER_LIVE_SCHEDULE_STATE"  # what is in force (the engine writes, the plugin reads)
SCHEDULE_KEY = "schedule.json"  # the ConfigMap key, and the file name in the mounted directory
SCHEDULER_CLASS = "specinfer.runtime.pod.live_schedule.vllm_scheduler.LiveScheduleScheduler"


class LiveScheduleFiles(Protocol):
    file: str
    state_file: str


def live_schedule_env(files: LiveScheduleFiles, environ: Mapping[str, str]) -> dict[str, str]:
    """The engine's schedule and state files: the pod's env wins (it names the same files where they are
    mounted: a local pod runner maps container paths to its own folders, which it cannot do inside the
    RuntimeConfig), else the RuntimeConfig's paths."""
    return {SCHEDULE_FILE_ENV: environ.get(SCHEDULE_FILE_ENV) or files.file,
            STATE_FILE_ENV: environ.get(STATE_FILE_ENV) or files.state_file}
