"""One measured point, a candidate's report, and the report's wire format (a Job's termination message). Pure.

A point is what the engine's own counters say over one measurement window at one draft length
K and one batch size B (requests kept in flight): engine steps, request-steps (each running
request, each step: vLLM's inter-token latency count), generated tokens, drafts and accepted
tokens per position, and the window's length. Everything else is derived from those.

One candidate Job runs one engine (one candidate at one K) and reports its points, one per batch
size, in its container's termination message, which Kubernetes caps at 4096 bytes: compact JSON
arrays, a few hundred bytes. The operator treats the text as
hostile (bounded before parsing, every number checked) as the tuning loop treats Prometheus.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from specinfer.api.calibration import MAX_BATCH_SIZE, MAX_BATCH_SIZES, AcceptanceRow, CalibrationPoint
from specinfer.api.speculation import K_CEILING

WIRE_VERSION = 1
TERMINATION_MESSAGE_LIMIT = 4096  # what the kubelet keeps of a container's termination message
MAX_COUNT = 10**13
MAX_WINDOW_SECONDS = 86400.0

Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]


class ReportError(ValueError):
    """A report that cannot be read; the message says what is wrong with it (never echoes it)."""


class Measurement(BaseModel):
    """The engine's counters over one window at (K, batch size); seconds are engine seconds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    k: int = Field(ge=0, le=K_CEILING)
    batch_size: int = Field(ge=1, le=MAX_BATCH_SIZE)
    seconds: float = Field(gt=0, le=MAX_WINDOW_SECONDS)
    steps: int = Field(ge=1, le=MAX_COUNT)
    request_steps: Count
    generated: Count
    drafts: Count = 0
    accepted: tuple[Count, ...] = ()

    @field_validator("seconds")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be finite")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Measurement:
        if len(self.accepted) > max(self.k, 0):
            raise ValueError(f"{len(self.accepted)} accepted positions at K={self.k}")
        if any(count > self.drafts for count in self.accepted):
            raise ValueError("more accepted at a position than drafts")
        if self.k == 0 and self.drafts:
            raise ValueError("drafts without speculation")
        return self

    @property
    def step_seconds(self) -> float:
        return self.seconds / self.steps

    @property
    def mean_batch_size(self) -> float:
        return self.request_steps / self.steps

    @property
    def tokens_per_second(self) -> float:
        return self.generated / self.seconds

    @property
    def tokens_per_step(self) -> float:
        """Tokens per request per step: 1 + accepted drafts (0 when no request stepped)."""
        return self.generated / self.request_steps if self.request_steps else 0.0

    def point(self) -> CalibrationPoint:
        return CalibrationPoint(num_speculative_tokens=self.k, batch_size=self.batch_size,
                                mean_batch_size=round(self.mean_batch_size, 3),
                                step_seconds=float(f"{self.step_seconds:.6g}"),
                                tokens_per_second=round(self.tokens_per_second, 3),
                                tokens_per_step=round(self.tokens_per_step, 4), steps=self.steps)


def acceptance_rows(measurements: Iterable[Measurement]) -> list[AcceptanceRow]:
    """Acceptance per position by K, pooled over batch sizes: accepted at i / drafts."""
    pooled: dict[int, tuple[int, list[int]]] = {}
    for m in measurements:
        if m.k == 0:
            continue
        drafts, accepted = pooled.get(m.k, (0, [0] * m.k))
        counts = list(m.accepted) + [0] * (m.k - len(m.accepted))
        pooled[m.k] = (drafts + m.drafts, [a + b for a, b in zip(accepted, counts, strict=True)])
    return [AcceptanceRow(num_speculative_tokens=k, drafts=drafts,
                          per_position=[round(a / drafts, 4) if drafts else 0.0 for a in accepted])
            for k, (drafts, accepted) in sorted(pooled.items())]


class EngineReport(BaseModel):
    """What one candidate Job measured: one engine (one K), one point per batch size."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    measurements: tuple[Measurement, ...] = Field(min_length=1, max_length=MAX_BATCH_SIZES)

    @model_validator(mode="after")
    def _one_engine(self) -> EngineReport:
        if len({m.k for m in self.measurements}) != 1:
            raise ValueError("points of more than one draft length")
        sizes = [m.batch_size for m in self.measurements]
        if len(set(sizes)) != len(sizes):
            raise ValueError("a batch size appears twice")
        return self

    @property
    def k(self) -> int:
        return self.measurements[0].k

    def points(self) -> list[CalibrationPoint]:
        return [m.point() for m in sorted(self.measurements, key=lambda m: (m.k, m.batch_size))]


def _seconds(value: float) -> float:
    return float(f"{value:.7g}")


def encode(report: EngineReport) -> str:
    """The wire form: {"v": 1, "p": [[K, B, seconds, steps, requestSteps, generated, drafts, [accepted...]]...]}.

    Raises ReportError if it would not fit a termination message (the spec's bounds keep it well below)."""
    rows: list[list[Any]] = [[m.k, m.batch_size, _seconds(m.seconds), m.steps, m.request_steps, m.generated,
                              m.drafts, list(m.accepted)] for m in report.measurements]
    text = json.dumps({"v": WIRE_VERSION, "p": rows}, separators=(",", ":"))
    if len(text.encode()) > TERMINATION_MESSAGE_LIMIT:
        raise ReportError(f"the report takes {len(text.encode())} bytes, more than a termination message holds "
                          f"({TERMINATION_MESSAGE_LIMIT}): measure fewer points per candidate")
    return text


def _measurement(row: Any) -> Measurement:
    if not isinstance(row, list) or len(row) != 8 or not isinstance(row[7], list):
        raise ReportError("a point is not [K, B, seconds, steps, requestSteps, generated, drafts, [accepted...]]")
    for value in (*row[:7], *row[7]):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ReportError("a point holds something other than numbers")
    k, batch, seconds, steps, request_steps, generated, drafts, accepted = row
    for value in (k, batch, steps, request_steps, generated, drafts, *accepted):
        if not isinstance(value, int):
            raise ReportError("a count is not an integer")
    try:
        return Measurement(k=k, batch_size=batch, seconds=float(seconds), steps=steps, request_steps=request_steps,
                           generated=generated, drafts=drafts, accepted=tuple(accepted))
    except ValidationError as error:
        first = error.errors()[0]
        raise ReportError(f"point K={k}, batch size {batch}: {'.'.join(map(str, first['loc']))} "
                          f"{first['msg']}") from None


def decode(text: str) -> EngineReport:
    """Parse a report from an untrusted source. Raises ReportError naming what is wrong."""
    if not isinstance(text, str) or len(text) > 2 * TERMINATION_MESSAGE_LIMIT:
        raise ReportError("the report is missing or longer than a termination message")
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        raise ReportError("the report is not JSON") from None
    if not isinstance(data, dict) or data.get("v") != WIRE_VERSION or not isinstance(data.get("p"), list):
        raise ReportError(f"the report is not a version-{WIRE_VERSION} calibration report")
    if not data["p"] or len(data["p"]) > MAX_BATCH_SIZES:
        raise ReportError(f"the report holds {len(data['p'])} points (1 to {MAX_BATCH_SIZES} expected)")
    measurements = tuple(_measurement(row) for row in data["p"])
    try:
        return EngineReport(measurements=measurements)
    except ValidationError as error:
        raise ReportError(f"the report is inconsistent: {error.errors()[0]['msg']}") from None


def unexpected(report: EngineReport, k: int, batch_sizes: Sequence[int]) -> str | None:
    """Why the report is not the points that were asked for (None: it is)."""
    if report.k != k:
        return f"the report is for K={report.k}, the engine was started with K={k}"
    got, wanted = {m.batch_size for m in report.measurements}, set(batch_sizes)
    if got != wanted:
        return (f"the report has batch sizes {sorted(got)}, {sorted(wanted)} were asked for")
    return None
