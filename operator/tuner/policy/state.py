"""The policy's memory between ticks.

The tuning loop stores it as JSON in `status.tuning.policyState` (so an operator restart or a
failover forgets nothing) and hands it back next tick; None starts fresh. Everything a guard needs
-- when the last change was issued, the restarts of the past hour, the change being verified,
configs recently rolled back, a collapse -- is here, so the policy itself stays a pure function.
The JSON shape is the one version 1 stored, so states written by earlier releases still load.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .acceptance import AcceptanceEstimate
from .config import DraftConfig
from .observation import bounded_prompt_ratio

STATE_VERSION = 1
RESTART_WINDOW_SECONDS = 3600.0
LOAD_SHIFT = 2.0  # the mean batch size moved by more than this factor: another load
DEFAULT_NOISE = 0.01  # relative window-to-window noise of measured step times until observed

# A cost cell: the prior's term vector at (batch size, K), the remembered mean step time, its weight.
CostCell = tuple[list[float], float, float]


class _State(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore", validate_assignment=False)


class PendingChange(_State):
    """A change issued and not yet verified: realised gain is compared with `predicted_gain`."""

    at: float
    config: DraftConfig
    previous: DraftConfig
    predicted_gain: float
    calibration: float  # measured / modelled speed of the previous config when the change was decided
    in_place: bool = False  # applied without a restart: so is its rollback
    prefix: list[float] = Field(default_factory=list)  # the model as it was then: acceptance ...
    theta: list[float] = Field(default_factory=list)  # ... and step-cost multipliers (the decode terms) ...
    # ... and the prefill term's, apart: a release before the term reads `theta` as all its terms
    prefill_theta: float = 0.0
    batch_mean: float = 0.0  # load when deciding: verification needs comparable load
    # a loss today the change was taken with (an envelope chosen for the load to come, envelope.py): verification
    # rolls it back only for losing more
    tolerated_loss: float = 0.0
    measured_tokens: float = 0.0
    expected_tokens: float = 0.0  # what the previous config would have produced in the same busy time
    windows: int = 0


class Rejection(_State):
    """A config rolled back: not retried until `until`, nor one with the same K at `batch_sizes`."""

    config: DraftConfig
    until: float
    batch_sizes: list[int] = Field(default_factory=list, alias="batchSizes")


class ProbeRecord(_State):
    """A probe in place (probe.py): not run again at `batch_sizes` with the same K until `until`."""

    config: DraftConfig
    until: float
    batch_sizes: list[int] = Field(default_factory=list, alias="batchSizes")
    # measured the acceptance (probe.acceptance_probe_for), not a split of the step the prior was doubted on
    acceptance: bool = False


class SpeculationSwitch(_State):
    """The last rollout that turned speculation on or off: where (the load) and when."""

    speculative: bool  # what it switched to
    batch_mean: float  # when deciding
    at: float
    # the first judged window's under the new config: the switch itself moves the batch mean (an engine
    # faster without drafting empties its batch; closed-loop clients on the same cores fall behind)
    settled_mean: float | None = None
    predicted_gain: float = 0.0  # the switch's, when deciding (a state from before it: 0)
    throughput: float = 0.0  # tokens per second generated in the deciding window (a state from before it: 0)
    recurring: bool = False  # taken for a load that keeps coming back (recurring.py), not for today's
    # decided on a ramp (batch_mean 0): the deciding window's mean and whether the load rose (None: a state from
    # before them)
    ramp_mean: float = 0.0
    ramp_rising: bool | None = None

    def moved_it(self, throughput: float, batch_mean: float | None = None) -> bool:
        """A window generating `throughput` tokens per second runs at the load the switch was decided at, as far
        as the switch itself can tell. The same arrivals are served at the same throughput (Little's law: the
        batch mean, not the throughput, moves with the speed), closed-loop clients at the switch's speed ratio
        (1 + its predicted gain), and an engine saturated when deciding drains its queue by that much faster --
        where its batch mean, pinned at the cap before, may fall by far more. A throughput further off than
        LOAD_SHIFT times that ratio is another load, one the load moved to while the rollout rolled (the bench's
        peak-wrong-prior, seed 8: off decided at batch 164 as the peak ended, its first window at batch 8 -- where
        speculation back on was then held for half an hour as "this load").

        Decided on a ramp, the switch settles where the ramp went (`batch_mean`: the window's), whenever that
        comes, or at a throughput the switch explains (off on a rising load empties the batch against the ramp)
        -- not where a load that turned back while the rollout rolled is (the bench's recurring-dips under
        Surge: back on decided at batch 5 as a dip began, its rollout landed as the load came back to 160, a
        thirtieth of the throughput, and speculation off there, +11%, was held for the hour as "this load")."""
        if self.batch_mean <= 0 and self._where_the_ramp_went(batch_mean):
            return True
        if self.throughput <= 0:
            return self.batch_mean > 0  # unknown (a state from before it): as before, at rest
        reach = LOAD_SHIFT * (1 + abs(self.predicted_gain))
        return 1 / reach <= throughput / self.throughput <= reach

    def _where_the_ramp_went(self, batch_mean: float | None) -> bool:
        """`batch_mean` lies on the ramp's side of its deciding window, within LOAD_SHIFT (unknown: yes)."""
        if batch_mean is None or self.ramp_mean <= 0 or self.ramp_rising is None:
            return True
        if self.ramp_rising:
            return batch_mean >= self.ramp_mean / LOAD_SHIFT
        return batch_mean <= self.ramp_mean * LOAD_SHIFT


class Calibration(_State):
    """Smoothed ratio of measured to modelled speed for `config`."""

    config: DraftConfig
    value: float


class PolicyState(_State):
    version: int = STATE_VERSION
    method: str | None = None
    cost: dict[str, dict[str, CostCell] | bool] | None = None  # {"cells": {...}, "k0Split": true} (cost.py)
    # the load's prompt tokens per generated token, as the step cost remembers it (cost.py, the prefill term);
    # beside `cost`, not in it, so that a release before it reads the state (and forgets the cells, longer
    # than it knows: relearnt within a few windows)
    prompt_per_generated: float = 0.0

    @field_validator("prompt_per_generated", mode="before")
    @classmethod
    def _a_ratio_or_none(cls, value: Any) -> float:
        """A stored ratio that is no ratio is forgotten, not the whole state with it."""
        return bounded_prompt_ratio(value) or 0.0
    acceptance: AcceptanceEstimate | None = None
    changes: list[float] = Field(default_factory=list)  # times rollouts were issued (restart budget)
    last_change_at: float | None = None  # the last rollout (cooldown); in-place changes have no cooldown
    pending: PendingChange | None = None
    realised_gain: float | None = None
    collapsed_at: float | None = None
    collapsed_config: DraftConfig | None = None
    confirmations: int = 0
    rejected: list[Rejection] = Field(default_factory=list)
    probed: list[ProbeRecord] = Field(default_factory=list)  # probes in place run lately (probe.py): not again
    # The config a probe replaced, while the probe runs: what the engine goes back to after its window.
    probe_from: DraftConfig | None = None
    switched: SpeculationSwitch | None = None  # guards.reversal_guard
    calibration: Calibration | None = None
    # Window-to-window relative noise of step times (squared), measured against each cell's memory:
    # a property of the engine and the scrapes, kept across config changes. None until measured.
    noise_variance: float | None = None
    evidence: float = 0.0  # predicted gain beyond the threshold, summed over the confirming windows
    # consecutive windows in which speculation off for a load that keeps coming back cleared its bar (recurring.py):
    # apart from `confirmations`, which today's candidates count
    recurring_windows: int = 0
    # How long a load lasts here: the batch mean when it last moved by more than LOAD_SHIFT, since when,
    # and the smoothed time between such moves (None until one was seen; restart.Payback).
    load_reference: float | None = None
    load_changed_at: float | None = None
    load_persistence: float | None = None
    # The load of the recent windows, oldest first: [time, mean batch size] for the last two paybackSeconds
    # (restart.payback: how long the load has stayed where a rollout would win; recurring.py: a load that keeps
    # coming back).
    loads: list[tuple[float, float]] = Field(default_factory=list)
    # The previous decided-on window: its mean batch size and when it ended (guards.load_moving_guard).
    window_batch_mean: float | None = None
    window_at: float | None = None

    def restarts_within(self, now: float, seconds: float = RESTART_WINDOW_SECONDS) -> int:
        """Changes issued in the `seconds` before `now` (each one restarted the pods)."""
        return sum(1 for t in self.changes if now - seconds < t <= now)

    def record_change(self, now: float, *, in_place: bool = False) -> None:
        """A change was issued; a rollout also counts against the restart budget and starts the cooldown."""
        if not in_place:
            self.changes = [t for t in self.changes if now - t < RESTART_WINDOW_SECONDS] + [now]
            self.last_change_at = now
        self.confirmations = 0
        self.evidence = 0.0

    def note_window(self, batch_mean: float, now: float) -> tuple[float, float] | None:
        """Remember this window's mean batch size; returns the previous window's (mean, time), if any."""
        previous = None
        if self.window_batch_mean is not None and self.window_at is not None:
            previous = (self.window_batch_mean, self.window_at)
        self.window_batch_mean, self.window_at = batch_mean, now
        return previous

    def note_load(self, batch_mean: float, now: float) -> None:
        """Follow the load: a move by more than LOAD_SHIFT ends one load and measures how long it lasted."""
        if self.load_reference is None or self.load_changed_at is None or self.load_reference <= 0:
            self.load_reference, self.load_changed_at = batch_mean, now
            return
        if 1 / LOAD_SHIFT <= batch_mean / self.load_reference <= LOAD_SHIFT:
            return
        lasted = now - self.load_changed_at
        previous = self.load_persistence
        self.load_persistence = lasted if previous is None else (previous + lasted) / 2
        self.load_reference, self.load_changed_at = batch_mean, now

    def remember_load(self, batch_mean: float, now: float, keep_seconds: float) -> None:
        """This window's load, and no window older than `keep_seconds`."""
        self.loads = [(at, mean) for at, mean in self.loads if now - at <= keep_seconds and at < now]
        self.loads.append((round(now, 1), round(batch_mean, 1)))

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)

    @staticmethod
    def from_json(data: Any) -> PolicyState:
        """A state from its JSON form; None, another version or anything unreadable starts afresh
        (the guards make a fresh state cautious)."""
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
            return PolicyState()
        try:
            return PolicyState.model_validate(data)
        except ValidationError:
            return PolicyState()
