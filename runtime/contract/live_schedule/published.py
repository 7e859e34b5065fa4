"""The schedule file the operator publishes and the engine reads: format, digest, validation. Pure.

    {"kind": "LiveSchedule", "digest": "3f2a9c01d4e5", "schedule": [[1, 4, 3], [5, 4096, 1]]}

`schedule` is vLLM's `num_speculative_tokens_per_batch_size`: inclusive [start, end, K] ranges, the
first starting at 1. `digest` names the schedule (12 hex digits of the canonical ranges), so the
engine's `specinfer:live_schedule_info{digest=...}` can be matched with what the operator published.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from specinfer.runtime.methods.schedule import schedule_problems

KIND = "LiveSchedule"
MAX_FILE_BYTES = 64 * 1024  # a schedule is a few hundred bytes; anything larger is not one
Ranges = tuple[tuple[int, int, int], ...]

# Why a published schedule was not taken: the `reason` label of specinfer:live_schedule_errors_total.
MISSING = "missing"
UNREADABLE = "unreadable"
INVALID = "invalid"
ABOVE_MAX_K = "aboveMaxK"
REFUSED_BY_ENGINE = "refusedByEngine"
REASONS = (MISSING, UNREADABLE, INVALID, ABOVE_MAX_K, REFUSED_BY_ENGINE)


class ScheduleRefused(ValueError):
    """A published schedule the engine does not take; `reason` is one of REASONS."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


@dataclass(frozen=True)
class PublishedSchedule:
    ranges: Ranges

    @property
    def digest(self) -> str:
        return schedule_digest(self.ranges)

    def describe(self) -> str:
        return describe(self.ranges)

    @property
    def max_k(self) -> int:
        return max(k for _, _, k in self.ranges)


def schedule_digest(ranges: Sequence[Sequence[int]]) -> str:
    canonical = json.dumps([[int(v) for v in entry] for entry in ranges], separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def describe(ranges: Sequence[Sequence[int]]) -> str:
    """`1-4:3,5-4096:1`: short enough for a metric label and a status line."""
    return ",".join(f"{s}-{e}:{k}" for s, e, k in ranges)


def published_text(ranges: Sequence[Sequence[int]]) -> str:
    """The file the operator writes (the ConfigMap's value): key-sorted, one line."""
    entries = [[int(v) for v in entry] for entry in ranges]
    return json.dumps({"digest": schedule_digest(entries), "kind": KIND, "schedule": entries},
                      sort_keys=True, separators=(",", ":")) + "\n"


def parse_published(text: str, *, max_k: int) -> PublishedSchedule:
    """The schedule in `text`, or ScheduleRefused saying why the engine keeps its last good one.

    Refuses a K above the engine's startup maximum (`max_k`): vLLM's lookup builder would silently
    cap it, and the engine cannot draft more positions than it reserved at start-up."""
    if len(text) > MAX_FILE_BYTES:
        raise ScheduleRefused(UNREADABLE, f"the schedule file is {len(text)} bytes (at most {MAX_FILE_BYTES})")
    try:
        data = json.loads(text)
    except ValueError as error:
        raise ScheduleRefused(UNREADABLE, f"the schedule file is not JSON: {error}") from None
    except RecursionError:  # json's parser recurses once per `[`: thousands of them exhaust the stack
        raise ScheduleRefused(UNREADABLE, "the schedule file nests deeper than the JSON parser allows: "
                                          "not a schedule") from None
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise ScheduleRefused(INVALID, f"the schedule file must be a JSON object with kind {KIND!r}")
    raw = data.get("schedule")
    if not isinstance(raw, list) or not all(
            isinstance(entry, list) and len(entry) == 3
            and all(isinstance(v, int) and not isinstance(v, bool) for v in entry) for entry in raw):
        raise ScheduleRefused(INVALID, "schedule must be a list of [start, end, K] integer ranges")
    ranges: Ranges = tuple((s, e, k) for s, e, k in raw)
    problems = schedule_problems(ranges, max(max_k, *(k for _, _, k in ranges)) if ranges else max_k)
    if problems:
        raise ScheduleRefused(INVALID, "schedule: " + "; ".join(problems))
    top = max(k for _, _, k in ranges)
    if top > max_k:
        raise ScheduleRefused(ABOVE_MAX_K, f"schedule asks for K={top} but the engine started with at most "
                                           f"K={max_k}: a larger K needs a restart")
    digest = data.get("digest")
    if digest is not None and digest != schedule_digest(ranges):
        raise ScheduleRefused(INVALID, f"digest {digest!r} does not match the schedule (a partial or mixed write)")
    return PublishedSchedule(ranges)


def build_lookup(published: PublishedSchedule, build: Callable[[list[list[int]]], list[int]]) -> list[int]:
    """The engine's dense lookup from its own builder (vLLM's `build_dynamic_sd_schedule_lookup`)."""
    try:
        return list(build([list(entry) for entry in published.ranges]))
    except (ValueError, TypeError, IndexError) as error:
        raise ScheduleRefused(REFUSED_BY_ENGINE, f"the engine refused the schedule: {error}") from None
