"""Export what an engine retuned in place runs: the state file its scheduler writes -> `specinfer:live_schedule_*`.

The scheduler lives in vLLM's engine-core process and /metrics in the API server process, so the
watcher (runtime/pod/live_schedule/watcher.py) writes a small JSON state file and this exporter, in the
process that serves /metrics (the stat-logger plugin, or the simulator), re-reads it when it changed.
The file is the engine's word, not the operator's: the tuner trusts it over what was published.
"""

from __future__ import annotations

import os
import weakref
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge

from specinfer.runtime.contract.live_schedule.published import REASONS, describe
from specinfer.runtime.contract.telemetry.series import LIVE_SCHEDULE_APPLIED, LIVE_SCHEDULE_ERRORS, LIVE_SCHEDULE_INFO
from specinfer.runtime.pod.live_schedule.watcher import read_state

_Families = tuple[Gauge, Gauge, Counter]
_FAMILIES: weakref.WeakKeyDictionary[CollectorRegistry, _Families] = weakref.WeakKeyDictionary()


def _families(registry: CollectorRegistry) -> _Families:
    # one set per registry: vLLM may build its stat loggers more than once per process
    key = registry
    if key not in _FAMILIES:
        _FAMILIES[key] = (
            Gauge(LIVE_SCHEDULE_INFO.name, LIVE_SCHEDULE_INFO.documentation, list(LIVE_SCHEDULE_INFO.labels),
                  registry=registry, multiprocess_mode="livemostrecent"),
            Gauge(LIVE_SCHEDULE_APPLIED.name, LIVE_SCHEDULE_APPLIED.documentation, list(LIVE_SCHEDULE_APPLIED.labels),
                  registry=registry, multiprocess_mode="livemostrecent"),
            Counter(LIVE_SCHEDULE_ERRORS.name, LIVE_SCHEDULE_ERRORS.documentation, list(LIVE_SCHEDULE_ERRORS.labels),
                    registry=registry),
        )
    return _FAMILIES[key]


class LiveScheduleExporter:
    """Re-reads the engine's live-schedule state file on change and updates the series of one engine."""

    def __init__(self, state_path: str | os.PathLike[str], registry: CollectorRegistry, *, model_name: str,
                 engine: str) -> None:
        self.state_path = Path(state_path)
        self.labels = (model_name, engine)
        self.info, self.applied, self.errors = _families(registry)
        self._seen: tuple[int, int] | None = None
        self._info_labels: tuple[str, ...] | None = None
        self._errors_counted: dict[str, int] = {}
        for reason in REASONS:  # every reason exists at 0, so increase() sees the first error
            self.errors.labels(*self.labels, reason)

    def refresh(self) -> None:
        try:
            stat = os.stat(self.state_path)
        except OSError:
            return  # not written yet: nothing to say
        key = (stat.st_ino, stat.st_mtime_ns)
        if key == self._seen:
            return
        state = read_state(self.state_path)
        if state is None:
            return  # read again next time
        self._seen = key
        self._export(state)

    def _export(self, state: dict[str, object]) -> None:
        schedule = state.get("schedule")
        digest = state.get("digest")
        if isinstance(digest, str) and isinstance(schedule, list):
            labels = (*self.labels, digest[:32], describe(schedule)[:256])
            if labels != self._info_labels:
                if self._info_labels is not None:
                    self.info.remove(*self._info_labels)  # one series per engine: the schedule now in force
                self.info.labels(*labels).set(1)
                self._info_labels = labels
        applied_at = state.get("appliedAt")
        if isinstance(applied_at, (int, float)):
            self.applied.labels(*self.labels).set(float(applied_at))
        errors = state.get("errors")
        if isinstance(errors, dict):
            for reason, count in errors.items():
                if reason in REASONS and isinstance(count, int):
                    delta = count - self._errors_counted.get(reason, 0)
                    if delta > 0:
                        self.errors.labels(*self.labels, reason).inc(delta)
                        self._errors_counted[reason] = count
