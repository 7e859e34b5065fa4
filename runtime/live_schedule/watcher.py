"""Follow the published schedule from inside the engine: poll, validate, swap, report.

`poll()` runs once per engine step, so it must cost almost nothing: between checks (every
`check_interval` seconds) it is one clock read and a comparison; a check is one `stat` of the file
(the kubelet's `..data` swap replaces it, so inode and mtime change); only a changed file is read.
Nothing here raises into the engine: a missing, partial or garbled file keeps the last good
schedule, logs one line per distinct problem and counts it in the state file the telemetry plugin
exports (`specinfer:live_schedule_errors_total{reason}`).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .published import MISSING, UNREADABLE, PublishedSchedule, ScheduleRefused, build_lookup, parse_published

logger = logging.getLogger("vllm.specinfer.live_schedule")

CHECK_INTERVAL_SECONDS = 0.25  # how often the file is stat'ed; bounds the delay after the kubelet's swap


@dataclass
class LiveState:
    """What the state file says: the schedule in force, since when, and what was refused."""

    digest: str
    schedule: list[list[int]]
    max_k: int
    applied_at: float  # wall clock: when this schedule took effect in the engine
    source: str = "startup"  # "startup" (the engine's own config) or "published" (the mounted file)
    swaps: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    last_error: str | None = None

    def to_json(self) -> dict[str, object]:
        return {"digest": self.digest, "schedule": self.schedule, "maxK": self.max_k, "appliedAt": self.applied_at,
                "source": self.source, "swaps": self.swaps, "errors": dict(sorted(self.errors.items())),
                "lastError": self.last_error}


class ScheduleWatcher:
    """Polls `path`; `poll()` returns a new dense lookup when a valid new schedule appeared, else None."""

    def __init__(self, path: str | os.PathLike[str], *, startup: PublishedSchedule, max_k: int,
                 build: Callable[[list[list[int]]], list[int]], state_path: str | os.PathLike[str] | None = None,
                 check_interval: float = CHECK_INTERVAL_SECONDS, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self.state_path = Path(state_path) if state_path else None
        self.max_k = max_k
        self._build = build
        self._interval = check_interval
        self._clock = clock
        self._wall = wall
        self._next_check = 0.0
        self._seen: tuple[int, int, int] | None = None
        self._last_problem: str | None = None
        self._vanished = False  # the file was missing at the last check (maybe a swap in progress)
        self.state = LiveState(digest=startup.digest, schedule=[list(r) for r in startup.ranges], max_k=max_k,
                               applied_at=wall())
        self._write_state()

    def poll(self) -> list[int] | None:
        now = self._clock()
        if now < self._next_check:
            return None
        self._next_check = now + self._interval
        try:
            return self._check()
        except Exception:  # the engine must never stop for its schedule file
            logger.exception("live schedule: unexpected error while reading %s; keeping the schedule in force",
                             self.path)
            return None

    def _check(self) -> list[int] | None:
        try:
            stat = os.stat(self.path)  # follows the kubelet's symlinks: a swap shows as a new inode
        except FileNotFoundError:
            self._seen = None
            # The kubelet renames `..data` and then deletes the old folder: for an instant the path can
            # resolve to nothing. Missing at two checks in a row is missing.
            if self._vanished:
                self._refuse(ScheduleRefused(MISSING, f"{self.path} does not exist"))
            self._vanished = True
            return None
        except OSError as error:
            self._seen = None
            self._refuse(ScheduleRefused(UNREADABLE, f"cannot stat {self.path}: {error.strerror}"))
            return None
        self._vanished = False
        key = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        if key == self._seen:
            return None
        self._seen = key
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            self._seen = None  # swapped between the stat and the open: read the new one at the next check
            return None
        except (OSError, UnicodeDecodeError) as error:
            self._seen = None  # try again at the next check: a read racing a swap
            self._refuse(ScheduleRefused(UNREADABLE, f"cannot read {self.path}: {error}"))
            return None
        try:
            published = parse_published(text, max_k=self.max_k)
            lookup = build_lookup(published, self._build)
        except ScheduleRefused as refused:
            self._refuse(refused)
            return None
        self._last_problem = None
        if published.digest == self.state.digest:
            return None  # the same schedule again (a re-publish or the startup one): nothing to swap
        self.state.digest, self.state.schedule = published.digest, [list(r) for r in published.ranges]
        self.state.applied_at, self.state.source = self._wall(), "published"
        self.state.swaps += 1
        self.state.last_error = None
        self._write_state()
        logger.info("live schedule: now %s (digest %s)", published.describe(), published.digest)
        return lookup

    def _refuse(self, refused: ScheduleRefused) -> None:
        message = str(refused)
        if message == self._last_problem:
            return  # one count and one log line per distinct problem, not one per check
        self._last_problem = message
        self.state.errors[refused.reason] = self.state.errors.get(refused.reason, 0) + 1
        self.state.last_error = message
        self._write_state()
        logger.warning("live schedule: %s; keeping %s", message, self.state.digest)

    def _write_state(self) -> None:
        if self.state_path is None:
            return
        try:
            temporary = self.state_path.with_name(self.state_path.name + ".tmp")
            temporary.write_text(json.dumps(self.state.to_json(), sort_keys=True))
            os.replace(temporary, self.state_path)  # readers see the old or the new state, never half
        except OSError as error:
            logger.warning("live schedule: cannot write the state file %s: %s", self.state_path, error.strerror)


def read_state(path: str | os.PathLike[str]) -> dict[str, object] | None:
    """The state file as the telemetry plugin reads it (None: absent or unreadable)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
