"""The simulated engine: continuous batching stepped on a clock it is handed.

No asyncio and no wall clock here, so the same engine runs behind the HTTP server
(runtime/sim/server.py), inside benchmarks and in statistical tests in virtual time.
One step: admit waiting requests up to max_batch_size (their prompts are prefilled in
this step and they get their first token), then every decoding request gains
1 + accepted tokens, acceptance drawn per draft position from the workload's profile,
with K from vLLM's Dynamic SD schedule at the current batch size. The drafter costs what the
accelerator's engine drafter costs (runtime/methods/drafters.py): the scheduled K, or the startup K
on every step, and at K = 0 a first pass, a context store or the full startup drafts. With adaptive
verification (runtime/methods/adaptive.py) only the draft slots vLLM's rule admits are verified, ranked
by each request's true survival probability (vLLM ranks by the drafter's confidences, so this is the rule
at its best). `plan_step` decides what the step does and how long it takes; `complete_step` stamps its
end time.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from specinfer.runtime.contract.live_schedule.published import PublishedSchedule
from specinfer.runtime.methods import get_method
from specinfer.runtime.methods.adaptive import ADAPTIVE_COST, admitted, verification_budget
from specinfer.runtime.methods.engine_truth import drafting
from specinfer.runtime.methods.schedule import dense_schedule, effective_k
from specinfer.runtime.pod.live_schedule.watcher import ScheduleWatcher
from specinfer.runtime.sim.model import COLLAPSED, AcceptanceProfile, acceptance_profile, cost_model, draft_scale
from specinfer.runtime.sim.settings import SimulatorSettings

TokenSink = Callable[[int, "str | None"], None]  # (new tokens, finish reason when done)


@dataclass(eq=False)
class SimRequest:
    request_id: str
    prompt_tokens: int
    max_tokens: int
    arrival: float
    workload: str | None = None  # per-request override of the engine's workload
    sink: TokenSink | None = None
    scheduled_at: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    generated: int = 0
    finish_reason: str | None = None


@dataclass(frozen=True)
class FinishedStats:
    """What vLLM's FinishedRequestStats carries, in simulated seconds."""

    finish_reason: str
    e2e_latency: float
    queued_time: float
    prefill_time: float
    decode_time: float
    inference_time: float
    time_to_first_token: float
    mean_time_per_output_token: float
    prompt_tokens: int
    generation_tokens: int
    max_tokens: int


@dataclass
class StepStats:
    """One engine step, as the stat loggers see it (SchedulerStats + IterationStats + SpecDecodingStats)."""

    end_time: float
    duration: float
    batch_size: int  # requests scheduled in this step, prefills included (drives K, as in vLLM)
    k: int
    running: int
    waiting: int
    prompt_tokens: int
    generation_tokens: int
    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    accepted_per_pos: list[int]
    draft_per_pos: list[int]
    time_to_first_tokens: list[float] = field(default_factory=list)
    inter_token_latencies: list[float] = field(default_factory=list)
    finished: list[FinishedStats] = field(default_factory=list)


@dataclass
class StepPlan:
    start: float
    duration: float
    prefilling: list[SimRequest]
    decoding: list[SimRequest]
    k: int
    accepted: list[int]  # per decoding request
    scheduled: int  # requests in the step (decoding + prefilling): vLLM's batch size for the schedule
    verified: list[int] | None = None  # per decoding request, the drafts verified (None: all k)


def accepted_per_position(accepted: list[int], k: int) -> list[int]:
    """How many requests had position i accepted (accepted prefix length > i), for i < k."""
    if k <= 0:
        return []
    counts = np.bincount(np.asarray(accepted, dtype=np.int64), minlength=k + 1)
    return np.cumsum(counts[::-1])[::-1][1 : k + 1].tolist()


class Engine:
    def __init__(self, settings: SimulatorSettings) -> None:
        problems = settings.problems()
        if problems:
            raise ValueError("; ".join(problems))
        self.settings = settings
        self.cost = cost_model(settings.cost_model)
        self.draft_scale = draft_scale(settings.method)
        self.cost_shape = get_method(settings.method).cost_shape
        # None: the method does not draft
        self.drafting = drafting(settings.method, settings.accelerator, mtp_modules=settings.mtp_modules)
        self.rng = np.random.default_rng(settings.seed)
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.workload = settings.workload
        self.collapsed = False  # fault injection: every draft position almost never accepted
        self._profiles: dict[str, AcceptanceProfile] = {}
        self.live_schedule = _watcher(settings)  # retuned in place: the schedule file, as vLLM's scheduler reads it
        self._live_lookup: list[int] | None = None

    # -- workload -------------------------------------------------------------------
    def profile(self, workload: str) -> AcceptanceProfile:
        if self.collapsed:
            return COLLAPSED
        if workload not in self._profiles:
            self._profiles[workload] = acceptance_profile(self.settings.method, workload)
        return self._profiles[workload]

    def set_workload(self, workload: str) -> None:
        self.profile(workload)  # raises with the known names when unknown
        self.workload = workload

    # -- requests -------------------------------------------------------------------
    def add(self, request: SimRequest) -> None:
        self.waiting.append(request)

    def abort(self, request: SimRequest) -> None:
        """Client went away: drop the request without stats (vLLM counts it as aborted)."""
        if request in self.waiting:
            self.waiting.remove(request)
        elif request in self.running:
            self.running.remove(request)

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    # -- stepping -------------------------------------------------------------------
    def k_at(self, batch_size: int) -> int:
        settings = self.settings
        if not settings.speculative:
            return 0
        if self._live_lookup is not None:
            return self._live_lookup[min(batch_size, len(self._live_lookup) - 1)]
        return effective_k(batch_size, settings.num_speculative_tokens, settings.schedule)

    def plan_step(self, now: float) -> StepPlan:
        if self.live_schedule is not None:
            lookup = self.live_schedule.poll()  # between steps, as the engine's scheduler does
            if lookup is not None:
                self._live_lookup = lookup
        decoding = list(self.running)
        prefilling: list[SimRequest] = []
        while self.waiting and len(self.running) < self.settings.max_batch_size:
            request = self.waiting.popleft()
            request.scheduled_at = now
            self.running.append(request)
            prefilling.append(request)
        # vLLM picks K from the number of requests scheduled in the step, prefills included
        # (scheduler.py: dynamic_sd_lookup[len(num_scheduled_tokens)]).
        scheduled = len(decoding) + len(prefilling)
        k = self.k_at(scheduled) if decoding else 0
        accepted = self._draw_acceptance(decoding, k)
        verified = self._verified(decoding, k) if self.settings.adaptive_verification and k > 0 else None
        if verified is not None:
            accepted = [min(a, v) for a, v in zip(accepted, verified, strict=True)]
        duration = 0.0
        if decoding:
            duration += self._decode_time(len(decoding), k, None if verified is None else sum(verified))
        if prefilling:
            duration += self.cost.prefill_time(sum(r.prompt_tokens for r in prefilling))
            if not decoding:
                duration += self.cost.target_time(len(prefilling), 0)
        if self.settings.noise > 0 and duration > 0:
            duration *= float(self.rng.lognormal(0.0, self.settings.noise))
        return StepPlan(now, duration, prefilling, decoding, k, accepted, scheduled, verified)

    def _decode_time(self, batch_size: int, k: int, verified_drafts: int | None = None) -> float:
        """The decode part of a step: the drafter's work as the engine's drafter does it (started with the
        configured K, the envelope when retuned in place) and the target over the verified tokens."""
        seconds = self.cost.step_time(batch_size, k, self.cost_shape, draft_scale=self.draft_scale,
                                      speculative=self.settings.speculative, drafting=self.drafting,
                                      startup_k=self.settings.num_speculative_tokens or None,
                                      verified_tokens=None if verified_drafts is None else batch_size + verified_drafts)
        return seconds * (ADAPTIVE_COST.step_time_factor if self.settings.adaptive_verification else 1.0)

    def _verified(self, decoding: list[SimRequest], k: int) -> list[int]:
        """Adaptive verification: the drafts vLLM's rule verifies per request this step."""
        survival = np.array([self.profile(r.workload or self.workload).prefix_probs(k) for r in decoding])
        size = len(decoding)
        budget = verification_budget(survival.reshape(-1), size,
                                     lambda n: np.array([self._decode_time(size, k, int(m)) for m in n]))
        return admitted(survival, budget).tolist()

    def _draw_acceptance(self, decoding: list[SimRequest], k: int) -> list[int]:
        """Accepted prefix length per request: position i accepted with its conditional rate."""
        if k <= 0 or not decoding:
            return [0] * len(decoding)
        accepted = np.zeros(len(decoding), dtype=np.int64)
        by_workload: dict[str, list[int]] = {}
        for index, request in enumerate(decoding):
            by_workload.setdefault(request.workload or self.workload, []).append(index)
        for workload, indexes in by_workload.items():
            profile = self.profile(workload)
            rates = np.array([profile.conditional_at(i) for i in range(k)])
            draws = self.rng.random((len(indexes), k)) < rates
            accepted[indexes] = np.cumprod(draws, axis=1).sum(axis=1)
        return accepted.tolist()

    def complete_step(self, plan: StepPlan, end: float) -> StepStats:
        k = plan.k
        stats = StepStats(
            end_time=end,
            duration=end - plan.start,
            batch_size=plan.scheduled,
            k=k,
            running=0,
            waiting=0,
            prompt_tokens=sum(r.prompt_tokens for r in plan.prefilling),
            generation_tokens=0,
            num_drafts=len(plan.decoding) if k > 0 else 0,
            num_draft_tokens=len(plan.decoding) * k if plan.verified is None else sum(plan.verified),
            num_accepted_tokens=int(sum(plan.accepted)),
            accepted_per_pos=accepted_per_position(plan.accepted, k),
            draft_per_pos=([len(plan.decoding)] * k if plan.verified is None
                           else [sum(v > i for v in plan.verified) for i in range(k)]),
        )
        for request in plan.prefilling:
            request.first_token_at = end
            stats.time_to_first_tokens.append(end - request.arrival)
            self._emit(request, 1, end, stats)
        for request, accepted in zip(plan.decoding, plan.accepted, strict=True):
            stats.inter_token_latencies.append(end - (request.last_token_at or end))
            self._emit(request, 1 + accepted, end, stats)
        self.running = [r for r in self.running if r.finish_reason is None]
        stats.running = len(self.running)
        stats.waiting = len(self.waiting)
        return stats

    def _emit(self, request: SimRequest, tokens: int, end: float, stats: StepStats) -> None:
        if request.finish_reason is not None:  # aborted mid-step
            return
        tokens = min(tokens, request.max_tokens - request.generated)
        request.generated += tokens
        request.last_token_at = end
        stats.generation_tokens += tokens
        if request.generated >= request.max_tokens:
            request.finish_reason = "length"
            stats.finished.append(self._finished_stats(request, end))
        if request.sink is not None:
            request.sink(tokens, request.finish_reason)

    @staticmethod
    def _finished_stats(request: SimRequest, end: float) -> FinishedStats:
        scheduled = request.scheduled_at if request.scheduled_at is not None else request.arrival
        first = request.first_token_at if request.first_token_at is not None else end
        decode_time = end - first
        return FinishedStats(
            finish_reason=request.finish_reason or "length",
            e2e_latency=end - request.arrival,
            queued_time=scheduled - request.arrival,
            prefill_time=first - scheduled,
            decode_time=decode_time,
            inference_time=end - scheduled,
            time_to_first_token=first - request.arrival,
            mean_time_per_output_token=decode_time / (request.generated - 1) if request.generated > 1 else 0.0,
            prompt_tokens=request.prompt_tokens,
            generation_tokens=request.generated,
            max_tokens=request.max_tokens,
        )


def _watcher(settings: SimulatorSettings) -> ScheduleWatcher | None:
    if not settings.live_schedule_file or not settings.speculative:
        return None
    max_k, size = settings.num_speculative_tokens, settings.max_batch_size
    startup = settings.schedule or ((1, size, max_k),)
    return ScheduleWatcher(settings.live_schedule_file, startup=PublishedSchedule(tuple(startup)), max_k=max_k,
                           build=lambda ranges: dense_schedule(ranges, max_k, size),
                           state_path=settings.live_state_file)
