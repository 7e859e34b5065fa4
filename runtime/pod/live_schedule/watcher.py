"""Follow the published schedule from inside the engine: poll, validate, swap, report.

`poll()` runs once per engine step, so it must cost almost nothing: between checks (every
`check_interval` seconds) it is one clock read and a comparison; a check is one `stat` of the file
(the kubelet's `..data` swap replaces it, so inode and mtime change); only a changed file is read.
Nothing here raises into the engine: a missing, partial or garbled file keeps the last good
schedule, logs one line per distinct problem and counts it in the state file the telemetry plugin
exports (`specinfer:live_schedule_errors_total{reason}`).

Nothing here may block the engine's step either (issue 44: a FIFO at the path blocked `schedule()`
forever, and a 10 MB file was read whole before the bound was checked). Only a regular file is
opened -- checked on the `stat` before opening and again on the open descriptor, which is opened
non-blocking, so a FIFO swapped in between the two cannot block the open -- and at most
MAX_FILE_BYTES + 1 bytes are read. Whatever refuses a file (not a regular file, too large, not
UTF-8, nested too deep for the JSON parser, not a schedule) is counted and logged in one line.
"""

from __future__ import annotations

import json
import logging
import os
import stat as stat_modes
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from specinfer.runtime.contract.live_schedule.published import (
    MAX_FILE_BYTES,
    MISSING,
    UNREADABLE,
    PublishedSchedule,
    ScheduleRefused,
    build_lookup,
    parse_published,
)

logger = logging.getLogger("vllm.specinfer.live_schedule")

CHECK_INTERVAL_SECONDS = 0.25  # how often the file is stat'ed; bounds the delay after the kubelet's swap
# O_NONBLOCK: opening a FIFO without a writer returns at once instead of waiting for one (open(2));
# on a regular file it changes nothing. O_NOCTTY: a terminal at the path never becomes ours.
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
_KINDS = ((stat_modes.S_ISDIR, "a directory"), (stat_modes.S_ISFIFO, "a FIFO"),
          (stat_modes.S_ISCHR, "a character device"), (stat_modes.S_ISBLK, "a block device"),
          (stat_modes.S_ISSOCK, "a socket"))


def not_a_regular_file(path: Path, mode: int) -> ScheduleRefused | None:
    """Why the file at `path` is not read, when its mode is anything but a regular file."""
    if stat_modes.S_ISREG(mode):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), f"not a regular file (mode {mode:o})")
    return ScheduleRefused(UNREADABLE, f"{path} is {kind}, not a regular file: not read")


def too_large(path: Path, size: int) -> ScheduleRefused:
    return ScheduleRefused(UNREADABLE, f"{path} holds more than {MAX_FILE_BYTES} bytes ({size} or more): "
                                       "not a schedule, not read further")


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
        except Exception as error:  # noqa: BLE001 -- the engine must never stop for its schedule file
            # counted like any refusal, in one line: a traceback per check would flood the engine's log
            self._refuse(ScheduleRefused(UNREADABLE, f"unexpected {type(error).__name__} while reading "
                                                     f"{self.path}: {error}"))
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
        # Refused before opening: a FIFO, device or directory is never opened (opening a device can
        # have effects of its own), and a file larger than the bound is not read at all.
        unread = not_a_regular_file(self.path, stat.st_mode)
        if unread is None and stat.st_size > MAX_FILE_BYTES:
            unread = too_large(self.path, stat.st_size)
        if unread is not None:
            self._refuse(unread)
            return None
        try:
            data = self._read_bounded()
        except FileNotFoundError:
            self._seen = None  # swapped between the stat and the open: read the new one at the next check
            return None
        except ScheduleRefused as refused_late:  # swapped for something else between the stat and the open
            self._refuse(refused_late)
            return None
        except OSError as error:
            self._seen = None  # try again at the next check: a read racing a swap
            self._refuse(ScheduleRefused(UNREADABLE, f"cannot read {self.path}: {error.strerror or error}"))
            return None
        try:
            published = parse_published(_decoded(self.path, data), max_k=self.max_k)
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

    def _read_bounded(self) -> bytes:
        """At most MAX_FILE_BYTES + 1 bytes of the file, opened without blocking; ScheduleRefused when the
        path no longer names a regular file (the check on the descriptor, not the path, cannot race)."""
        descriptor = os.open(self.path, _OPEN_FLAGS)
        try:
            refused = not_a_regular_file(self.path, os.fstat(descriptor).st_mode)
            if refused is not None:
                raise refused
            chunks: list[bytes] = []
            remaining = MAX_FILE_BYTES + 1
            while remaining > 0:
                chunk = os.read(descriptor, remaining)
                if not chunk:
                    break
                chunks.append(chunk)
                remaining -= len(chunk)
        finally:
            os.close(descriptor)
        data = b"".join(chunks)
        if len(data) > MAX_FILE_BYTES:  # it grew after the stat
            raise too_large(self.path, len(data))
        return data

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


def _decoded(path: Path, data: bytes) -> str:
    """The file's text: JSON is UTF-8 (RFC 8259), whatever the engine's locale says."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ScheduleRefused(UNREADABLE, f"{path} is not UTF-8 text ({error.reason} at byte {error.start})") from None


def read_state(path: str | os.PathLike[str]) -> dict[str, object] | None:
    """The state file as the telemetry plugin reads it (None: absent or unreadable)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
