"""Scenarios for `specinfer bench tuner` and the fluid closed loop that plays them.

A scenario is a list of phases (workload, concurrency across the fleet -- constant, or a linear
ramp -- acceptance collapse) on one method and cost preset of the simulator's engine model
(`specinfer.runtime.sim.model`; a scenario may make the target's compute or its drafter dearer than
the preset, and so than the policy's prior, says), served by `replicas` engine pods. The loop runs
in simulated time, no HTTP and no sleeping: every sub-step the running requests are spread evenly
over the replicas that are serving (at most maxBatchSize each; the rest wait), and each replica
serves its batch at the config it runs (tokens = B * E_K / T(B, K) per second).

A config change the engine can take in place (`envelope`: the spec is retuned in place,
runtime/contract/live_schedule/envelope.py;
the engine runs a drafter and keeps one, with K within its startup maximum) is a new published
schedule: every replica swaps it in between steps `IN_PLACE_DELAY_SECONDS` after the decision, with
no restart and nothing lost (counted as `in_place_changes`, never as restarts). Any other change is
a rollout with the resource's `updateStrategy`, one replica at a time as the
operator renders it: under Surge (maxSurge 1, maxUnavailable 0) each new pod loads the model while
its old pod keeps serving the old config; under Replace (maxSurge 0, maxUnavailable 1; no spare
accelerator) each old pod stops first, so for the reload time the other replicas carry its requests
(with one replica nothing is served). The rollout ends after replicas x reload time. Every tuning
interval (30 s) a contender sees the last window (120 s: consecutive windows overlap, as with the
operator's defaults) as the tuning loop would -- with our plugin's series or only vLLM's (batch
sizes then from quantiles of each pod's running-requests gauge), noisy counters and step times,
scrape gaps -- and may change the config. Figures are kept per minute.
"""

from __future__ import annotations

import functools
import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from specinfer.operator.tuner.policy import DraftConfig, Observation
from specinfer.operator.tuner.pure.observe import distribution_from_quantiles
from specinfer.operator.tuner.pure.queries import BATCH_QUANTILES
from specinfer.runtime.contract.live_schedule.envelope import LiveEnvelope
from specinfer.runtime.methods import get_method
from specinfer.runtime.methods.adaptive import ADAPTIVE_COST, admitted, verification_budget
from specinfer.runtime.methods.cost_presets import CostShape
from specinfer.runtime.methods.drafting import Drafting
from specinfer.runtime.methods.engine_truth import PIECEWISE_COST, drafting
from specinfer.runtime.sim.model import (
    COLLAPSED,
    AcceptanceProfile,
    CostModel,
    acceptance_profile,
    cost_model,
    draft_scale,
)

from .observations import synthetic_observation

TICK_SECONDS = 60.0  # the minute the figures are recorded by
# As the operator runs by default: a decision every spec.tuning.intervalSeconds (30 s) on rates over
# the operator configuration's tuning.windowSeconds (120 s), so consecutive windows overlap.
INTERVAL_SECONDS = 30.0
WINDOW_SECONDS = 120.0
OUTPUT_TOKENS = 256  # per request: spreads a restart stall over a request's per-token latency
P99_OVER_MEAN = 1.3  # per-token p99 / mean within a minute (request mix), applied to the fluid mean
SIGNAL_SETS = ("specinfer", "vllm")  # our plugin's series, or only vLLM's own
# From an in-place decision to every replica's scheduler running the new schedule: the operator
# writes the ConfigMap, the kubelet swaps the mounted file, the scheduler reads it between steps.
# Measured locally (the dev pod runner re-syncs volumes every ~1 s): 1-2 s. On a real cluster the
# kubelet's periodic sync bounds it at 60-90 s (docs/live-schedule.md), seconds when the pods are
# nudged. 5 s covers the local bound with room; `--in-place-delay` replays the cluster's worst case.
IN_PLACE_DELAY_SECONDS = 5.0
# The accelerator the scenarios' simulated engine stands for (bench/tuner.py scenario_spec): its engine's
# drafter decides how drafting follows the scheduled K (runtime/methods/drafters.py).
BENCH_ACCELERATOR = "nvidia"


@dataclass(frozen=True)
class Phase:
    name: str
    minutes: float
    workload: str = "chat"
    concurrency: int = 8  # requests in flight across the fleet (at the phase's start, for a ramp)
    collapsed: bool = False  # acceptance near zero (e.g. a broken attention backend after an upgrade)
    ramp_to: int | None = None  # the concurrency moves linearly to this by the phase's end (a ramp)

    def concurrency_at(self, elapsed_minutes: float) -> int:
        """Requests in flight `elapsed_minutes` into the phase."""
        if self.ramp_to is None or self.minutes <= 0:
            return self.concurrency
        share = min(max(elapsed_minutes / self.minutes, 0.0), 1.0)
        return round(self.concurrency + share * (self.ramp_to - self.concurrency))

    @property
    def mean_concurrency(self) -> float:
        return self.concurrency if self.ramp_to is None else (self.concurrency + self.ramp_to) / 2


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    phases: tuple[Phase, ...]
    method: str = "eagle3"
    cost_preset: str = "h100-llama8b"
    k_max: int | None = None  # the spec's bound (the catalogue's limit applies anyway)
    max_batch_size: int = 128
    per_token_slo: float = 0.040
    timing_noise: float = 0.02  # lognormal sigma of scraped step latencies
    gap_rate: float = 0.0  # share of ticks whose scrape is stale, NaN or incomplete
    check_vs_static: bool = False  # the ">= 1.10x best static K" goal applies
    initial_k: int | None = None  # K the policy starts from (default: the catalogue's k_default)
    replicas: int = 1  # spec.replicas
    update_strategy: str | None = None  # spec.updateStrategy; None: the command line's (default Surge)
    advanced: dict | None = None  # spec.speculation.advanced
    schedule_step_factor: float = 1.0  # every step slower while a schedule is configured (PIECEWISE graphs)
    drafter_cost_factor: float = 1.0  # the drafter's true cost over what the policy's prior believes
    # the target's true compute per verified token over the preset's, which the policy's prior follows
    # (long contexts, another kernel): the knee where drafting stops paying comes earlier than believed
    compute_factor: float = 1.0
    reload_seconds: float | None = None  # a pod's model reload; None: the preset's (the policy is told it)
    accelerator: str | None = None  # spec.hardware.accelerator; None: the spec's default
    mtp_modules: int | None = None  # spec.speculation.mtpModules: the checkpoint's MTP modules (None: unstated)
    # The load's prompt tokens per generated token: each step also prefills the prompts of the requests that
    # replace those finishing (vLLM schedules them beside the decodes), at the preset's prefill cost per token.
    prompt_per_generated: float = 0.0
    prompts_reported: bool = True  # vllm:prompt_tokens_total reaches the tuner (else the window has no count)

    @property
    def minutes(self) -> float:
        return sum(p.minutes for p in self.phases)

    @property
    def costs(self) -> CostModel:
        """The world's step cost: the preset, with the target's compute scaled by `compute_factor`."""
        return _world_costs(self.cost_preset, self.compute_factor)

    @property
    def restart_seconds(self) -> float:
        return self.costs.restart_s if self.reload_seconds is None else self.reload_seconds

    @property
    def strategy(self) -> str:
        return self.update_strategy or "Surge"

    @property
    def drafting(self) -> Drafting | None:
        """What the scenario's drafter does with the per-step K on its accelerator (None: it does not draft)."""
        return drafting(self.method, self.accelerator or BENCH_ACCELERATOR, mtp_modules=self.mtp_modules)


@functools.lru_cache(maxsize=32)
def _world_costs(preset: str, compute_factor: float) -> CostModel:
    base = cost_model(preset)
    if compute_factor == 1.0:
        return base
    return replace(base, compute_per_token_s=base.compute_per_token_s * compute_factor)


def _ramp(workload: str = "chat") -> tuple[Phase, ...]:
    return tuple(Phase(f"c={c}", 10, workload, c) for c in (1, 2, 4, 8, 16, 32, 64))


def _peak(base: int, peak: int, *, quiet: float = 20, ramp: float = 10, hold: float = 12, workload: str = "chat",
          suffix: str = "") -> tuple[Phase, ...]:
    """Quiet, a linear ramp to `peak` concurrent requests, `hold` minutes there, the ramp down, quiet again."""
    return (Phase(f"quiet{suffix}", quiet, workload, base),
            Phase(f"ramp up{suffix}", ramp, workload, base, ramp_to=peak),
            Phase(f"peak{suffix}", hold, workload, peak),
            Phase(f"ramp down{suffix}", ramp, workload, peak, ramp_to=base),
            Phase(f"after{suffix}", quiet, workload, base))


def _recurring(base: int, peak: int, *, peaks: int, ramp: float, hold: float, gap: float) -> tuple[Phase, ...]:
    """Quiet for 10 minutes, then `peaks` times: a ramp to `peak`, `hold` minutes there, the ramp down, `gap` quiet."""
    phases = [Phase("quiet", 10, "chat", base)]
    for n in range(1, peaks + 1):
        phases += [Phase(f"ramp up {n}", ramp, "chat", base, ramp_to=peak), Phase(f"peak {n}", hold, "chat", peak),
                   Phase(f"ramp down {n}", ramp, "chat", peak, ramp_to=base), Phase(f"gap {n}", gap, "chat", base)]
    return tuple(phases)


def _dips(high: int, low: int, *, dips: int, hold: float, dip: float, ramp: float = 1) -> tuple[Phase, ...]:
    """`hold` minutes at `high`, then `dips` times: a ramp down to `low`, `dip` minutes there, the ramp up, `hold`
    minutes at `high` again."""
    phases = [Phase("busy", hold, "chat", high)]
    for n in range(1, dips + 1):
        phases += [Phase(f"ramp down {n}", ramp, "chat", high, ramp_to=low), Phase(f"dip {n}", dip, "chat", low),
                   Phase(f"ramp up {n}", ramp, "chat", low, ramp_to=high), Phase(f"busy {n}", hold, "chat", high)]
    return tuple(phases)


# A diurnal day, minute by minute: night, morning ramp, day, lunch dip, evening peak, decline.
_DAY = (Phase("night", 360, "chat", 10), Phase("morning ramp", 150, "chat", 10, ramp_to=240),
        Phase("morning", 150, "chat", 240), Phase("lunch dip", 30, "chat", 240, ramp_to=120),
        Phase("lunch", 30, "chat", 120), Phase("afternoon ramp", 30, "chat", 120, ramp_to=260),
        Phase("afternoon", 240, "chat", 260), Phase("evening ramp", 20, "chat", 260, ramp_to=480),
        Phase("evening peak", 15, "chat", 480), Phase("evening decline", 180, "chat", 480, ramp_to=30),
        Phase("late", 235, "chat", 30))

SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("steady-chat", "EAGLE-3 on chat at 8 concurrent requests for an hour",
             (Phase("chat", 60, "chat", 8),)),
    Scenario("load-ramp", "EAGLE-3 on chat, concurrency doubling 1 -> 64 every 10 minutes",
             _ramp(), check_vs_static=True),
    Scenario("ramp-ngram", "n-gram drafting on code, concurrency doubling 1 -> 64 every 10 minutes",
             _ramp("code"), method="ngram", check_vs_static=True),
    Scenario("ramp-summarization", "n-gram drafting on summaries (the vLLM blog's CNN/DailyMail setting), "
             "concurrency doubling 1 -> 64 every 10 minutes", _ramp("summarization"), method="ngram",
             check_vs_static=True),
    Scenario("workload-shift", "EAGLE-3, code for 45 minutes then chat for 45, 16 concurrent",
             (Phase("code", 45, "code", 16), Phase("chat", 45, "chat", 16)), check_vs_static=True),
    Scenario("shift-ngram", "n-gram drafting (no draft model), code for 45 minutes then chat for 45, 16 concurrent",
             (Phase("code", 45, "code", 16), Phase("chat", 45, "chat", 16)), method="ngram", check_vs_static=True),
    Scenario("mtp-limit", "MTP on an MoE (4xH100), the spec capping K at 3; load 2 -> 24 -> 48",
             (Phase("c=2", 30, "chat", 2), Phase("c=24", 30, "chat", 24), Phase("c=48", 30, "chat", 48)),
             method="mtp", cost_preset="h100x4-moe80b", k_max=3, per_token_slo=0.060),
    Scenario("mtp-one-module", "mtp-limit with the spec stating the checkpoint's one MTP module (mtpModules: 1, as "
             "DeepSeek-V3's): on Model Runner V2 the drafter follows the schedule, so K moves in place",
             (Phase("c=2", 30, "chat", 2), Phase("c=24", 30, "chat", 24), Phase("c=48", 30, "chat", 48)),
             method="mtp", cost_preset="h100x4-moe80b", k_max=3, per_token_slo=0.060, mtp_modules=1),
    Scenario("collapse", "EAGLE-3 on code; after 30 minutes acceptance collapses (backend bug) for an hour",
             (Phase("healthy", 30, "code", 8), Phase("collapsed", 60, "code", 8, collapsed=True))),
    Scenario("noisy-gaps", "chat at 16 concurrent starting from K=6, 8% step-latency noise, 20% scrape gaps",
             (Phase("chat", 60, "chat", 16),), timing_noise=0.08, gap_rate=0.2, initial_k=6),
    Scenario("noisy-first-gain", "EAGLE-3 on code at 8 concurrent starting from K=2 (+14% on offer), "
             "6% step-latency noise, 15 minutes", (Phase("code", 15, "code", 8),), timing_noise=0.06, initial_k=2),
    Scenario("quiet-peak-day", "two replicas of a 70B target (5-minute reload) rolled one at a time with Replace: "
             "an hour at 4 requests, then an hour at 256", (Phase("quiet", 60, "chat", 4),
                                                            Phase("peak", 60, "chat", 256)),
             cost_preset="h100x4-llama70b", replicas=2, update_strategy="Replace", max_batch_size=256,
             per_token_slo=0.080),
    Scenario("ramp-suffix", "suffix decoding on code, concurrency doubling 1 -> 64 every 10 minutes: vLLM 0.33 "
             "drops a schedule for suffix (Model Runner V1), so one K at a time", _ramp("code"), method="suffix"),
    Scenario("piecewise-ramp", "EAGLE-3 with parallel drafting (P-EAGLE: Model Runner V1) on chat, concurrency "
             "doubling 1 -> 64: a schedule downgrades full CUDA graphs to PIECEWISE, every step ~19% slower "
             "(vllm#49548)", _ramp(), advanced={"parallel_drafting": True},
             schedule_step_factor=PIECEWISE_COST.step_time_factor),
    Scenario("fleet-ramp", "four replicas rolled one at a time with Replace, fleet concurrency 4 -> 512 "
             "(x4 every 15 minutes), then back to 16", tuple(
                 Phase(f"c={c}", 15, "chat", c) for c in (4, 16, 64, 256, 512, 16)),
             replicas=4, update_strategy="Replace", max_batch_size=256, per_token_slo=0.080),
    Scenario("rag-ramp", "EAGLE-3 on retrieval-augmented chat: 1,024-token contexts for 256-token answers, so each "
             "step also prefills 4 prompt tokens per token it generates; concurrency doubling 1 -> 64 every 10 "
             "minutes", _ramp(), prompt_per_generated=4.0),
    Scenario("rag-ramp-blind", "rag-ramp where the prompt counter never reaches the tuner (a scrape that drops "
             "vllm:prompt_tokens_total): the fit learns the prefill as decode", _ramp(), prompt_per_generated=4.0,
             prompts_reported=False),
    Scenario("heavy-head", "EAGLE-3 whose head costs 6x what the step-cost prior says (an unoptimised head kernel; "
             "the real CPU engine's tiny head: ~3x), chat at 2 then 16 concurrent: the starting K=3 serves 0.84x "
             "of K=1, which a fit of one measured K cannot see",
             (Phase("c=2", 30, "chat", 2), Phase("c=16", 30, "chat", 16)), drafter_cost_factor=6.0),
    # The failing pattern of issue 43: fleets of two replicas rolled with Replace, model reloads of
    # 2-4 minutes, ramps to 400-500 concurrent held 10-15 minutes. Speculation that pays while quiet
    # slows the server down at the peak.
    Scenario("fleet-peak", "two replicas of a 70B target with EAGLE-3, Replace, 3-minute reload: 20 minutes at "
             "16 concurrent, a 10-minute ramp to 450 held 12 minutes, and back", _peak(16, 450, hold=12),
             cost_preset="h100x4-llama70b", replicas=2, update_strategy="Replace", max_batch_size=256,
             per_token_slo=0.080, reload_seconds=180.0),
    Scenario("mtp-slow-peak", "MTP capped at K=3 on a slow-reloading accelerator (Ascend, 4-minute reload), two "
             "replicas, Replace: quiet at 12, a 6-minute ramp to 480 held 15 minutes, and back",
             _peak(12, 480, ramp=6, hold=15), method="mtp", cost_preset="h100x4-moe80b", k_max=3,
             accelerator="ascend", replicas=2, update_strategy="Replace", max_batch_size=256, per_token_slo=0.080),
    Scenario("peak-wrong-prior", "two replicas of an 8B target with EAGLE-3 whose verification costs 2.5x per token "
             "what the prior says (long contexts), Replace, 2-minute reload: two ramps to 400 held 10 minutes, "
             "15 quiet minutes apart", _peak(8, 400, quiet=15, ramp=5, hold=10)
             + _peak(8, 400, quiet=20, ramp=5, hold=10, suffix=" 2")[1:], replicas=2, update_strategy="Replace",
             max_batch_size=256, per_token_slo=0.080, compute_factor=2.5, reload_seconds=120.0),
    Scenario("heavy-drafter-peak", "two replicas of an 8B target whose EAGLE-3 head costs 4x what the prior says, "
             "Replace, 2-minute reload: quiet at 6, a 5-minute ramp to 450 held 45 minutes, and back: speculation "
             "off is worth +40% at the peak, which only a rollout reaches", _peak(6, 450, ramp=5, hold=45),
             replicas=2, update_strategy="Replace", max_batch_size=256, per_token_slo=0.080,
             drafter_cost_factor=4.0, reload_seconds=120.0),
    Scenario("draft-model-peak", "two replicas of a 70B target with a draft model, which vLLM 0.33.0's Model Runner "
             "V2 drafts at the engine's startup K every step (StandaloneARSpeculator: in place lowers only what is "
             "verified, a cheaper drafting rolls out), Replace, 4-minute reload: 20 minutes at 16 concurrent, a "
             "10-minute ramp to 450 held 12 minutes, and back", _peak(16, 450, hold=12), method="draftModel",
             cost_preset="h100x4-llama70b", replicas=2, update_strategy="Replace", max_batch_size=256,
             per_token_slo=0.080, reload_seconds=240.0),
    Scenario("recurring-peaks", "two replicas of an 8B target whose EAGLE-3 head costs 4x what the prior says, "
             "Replace, 2-minute reload: four 5-minute ramps to 450 held 8 minutes, 8 quiet minutes between: no peak "
             "lasts long enough to repay a rollout of its own, speculation off kept through the pattern does",
             _recurring(6, 450, peaks=4, ramp=5, hold=8, gap=8), replicas=2, update_strategy="Replace",
             max_batch_size=256, per_token_slo=0.080, drafter_cost_factor=4.0, reload_seconds=120.0),
    Scenario("recurring-dips", "two replicas of an 8B target whose EAGLE-3 head costs 4x what the prior says, "
             "Replace, 2-minute reload: 350 concurrent for 10 minutes at a time, with 4-minute dips to 10 between: "
             "the pattern of recurring-peaks turned over, where no dip is long enough for the rollout to land in it",
             _dips(350, 10, dips=5, hold=10, dip=4), replicas=2, update_strategy="Replace", max_batch_size=256,
             per_token_slo=0.080, drafter_cost_factor=4.0, reload_seconds=120.0),
    Scenario("heavy-spikes", "two replicas of an 8B target whose EAGLE-3 head costs 4x what the prior says, "
             "Replace, 2-minute reload: five 1-minute ramps to 450 held 6 minutes, 8 quiet minutes between: K=1 alone "
             "measured at a spike, where a window of K=0 tells the fits' split of the step apart too little",
             _recurring(6, 450, peaks=5, ramp=1, hold=6, gap=8), replicas=2, update_strategy="Replace",
             max_batch_size=256, per_token_slo=0.080, drafter_cost_factor=4.0, reload_seconds=120.0),
    Scenario("quiet-peaks-surge", "two replicas of an 8B target whose EAGLE-3 head costs 4x what the prior says, "
             "Surge, 2-minute reload: five 2-minute ramps to 450 held 6 minutes, 15 quiet minutes at 30 concurrent "
             "between: built for a hold between peaks that let speculation back on land in each quiet, and each "
             "peak run it until nearly over",
             _recurring(30, 450, peaks=5, ramp=2, hold=6, gap=15), replicas=2, update_strategy="Surge",
             max_batch_size=256, per_token_slo=0.080, drafter_cost_factor=4.0, reload_seconds=120.0),
    Scenario("diurnal-day", "a day of two replicas of a 70B target with EAGLE-3, Replace, 4-minute reload: a quiet "
             "night, a morning ramp to 240 concurrent, a lunch dip, an evening ramp to 480 held 15 minutes, a slow "
             "decline", _DAY, cost_preset="h100x4-llama70b", replicas=2, update_strategy="Replace",
             max_batch_size=256, per_token_slo=0.080, reload_seconds=240.0),
)}


@dataclass(frozen=True)
class Rollout:
    """A config change rolled one replica at a time: replica i reloads during [started + i*R, started + (i+1)*R)."""

    config: DraftConfig
    started: float
    reload_seconds: float
    replicas: int
    strategy: str

    @property
    def finished_at(self) -> float:
        return self.started + self.replicas * self.reload_seconds

    def state(self, replica: int, t: float) -> str:
        """'old', 'down' or 'new' for that replica at time t."""
        begins = self.started + replica * self.reload_seconds
        ends = begins + self.reload_seconds
        if t >= ends:
            return "new"
        if t >= begins and self.strategy == "Replace":
            return "down"  # the old pod stopped before its replacement started
        return "old"  # Surge: the old pod serves until its replacement is ready


@dataclass(frozen=True)
class Switch:
    """A schedule published for in-place retuning: every replica runs `config` from `at` on."""

    config: DraftConfig
    at: float


@dataclass
class Engine:
    """What the fleet runs and serves: config in force, a change under way, per-minute records."""

    scenario: Scenario
    config: DraftConfig
    since: float = 0.0
    rollout: Rollout | None = None
    restarts: int = 0  # rollouts: each restarts every replica once
    minutes: list[dict] = field(default_factory=list)
    # retuned in place (runtime/contract/live_schedule/envelope.py); None: every change rolls out
    envelope: LiveEnvelope | None = None
    in_place_delay: float = IN_PLACE_DELAY_SECONDS
    switch: Switch | None = None  # an in-place change on its way to the engines
    in_place_changes: int = 0  # changes applied without a restart (never counted in `restarts`)
    applied: list[tuple[float, str]] = field(default_factory=list)  # (time, "inPlace" or "rollout") per change
    adaptive_steps: dict = field(default_factory=dict, repr=False)  # _adaptive_step's cache

    @property
    def cost_shape(self) -> CostShape | None:
        return get_method(self.scenario.method).cost_shape

    @property
    def next_config(self) -> DraftConfig | None:
        return self.rollout.config if self.rollout else (self.switch.config if self.switch else None)

    @property
    def changing(self) -> bool:
        """A change is under way: a rollout, or a published schedule not yet in force."""
        return self.rollout is not None or self.switch is not None

    def step_time(self, batch_size: int, k: int, config: DraftConfig | None = None, *,
                  verified_tokens: float | None = None) -> float:
        """T(B, K) under `config` (default: the one in force); a schedule may slow every step, and an
        engine retuned in place always runs one while it drafts (its startup schedule, then each published one)."""
        cm = self.scenario.costs
        running = self.config if config is None else config
        scale = draft_scale(self.scenario.method) * self.scenario.drafter_cost_factor
        # a drafter that drafts its startup K pays the envelope the pods run
        # (runtime/contract/live_schedule/envelope.py)
        envelope = self.envelope
        startup = envelope.max_k if envelope is not None and envelope.drafts_max_k and self.in_place(running) \
            else running.num_speculative_tokens
        seconds = cm.step_time(batch_size, k, self.cost_shape, draft_scale=scale,
                               speculative=running.num_speculative_tokens > 0,
                               drafting=self.scenario.drafting,
                               startup_k=startup or None, verified_tokens=verified_tokens)
        return seconds * self.step_factor(running)

    def step_factor(self, config: DraftConfig) -> float:
        """What a configured schedule adds to every step (PIECEWISE graphs), an engine retuned in place running
        one whenever it drafts."""
        scheduled = config.schedule or (self.envelope is not None and not config.off)
        return self.scenario.schedule_step_factor if scheduled else 1.0

    def prefill_seconds(self, batch_size: int, tokens: float, config: DraftConfig) -> float:
        """The prompts a step of `batch_size` requests gaining `tokens` each prefills: those of the requests that
        replace the finishing ones, at the preset's cost per token. The schedule's slowdown is every step's, its
        prefill included, as the policy models it (cost.learn)."""
        if self.scenario.prompt_per_generated <= 0:
            return 0.0
        prompts = self.scenario.prompt_per_generated * batch_size * tokens
        return self.scenario.costs.prefill_per_token_s * prompts * self.step_factor(config)

    def serve(self, batch_size: int, k: int, profile: AcceptanceProfile, config: DraftConfig | None = None) -> Served:
        """One step of `batch_size` requests at K under `config` (default: the one in force): its time, and
        the chance a request's draft at each position is accepted -- with adaptive verification, only where
        vLLM's rule verified it (runtime/methods/adaptive.py: the budget over slots ranked by survival
        probability, here each request's true one)."""
        running = self.config if config is None else config
        seconds = self.step_time(batch_size, k, running)
        if k <= 0:
            served = Served(seconds * (ADAPTIVE_COST.step_time_factor if running.adaptive else 1.0), ())
        elif not running.adaptive:
            served = Served(seconds, tuple(profile.prefix_probs(k)))
        else:
            served = _adaptive_step(self, batch_size, k, running, tuple(profile.prefix_probs(k)))
        if self.scenario.prompt_per_generated <= 0:
            return served
        return Served(served.seconds + self.prefill_seconds(batch_size, served.tokens, running), served.accepted)

    def in_place(self, config: DraftConfig) -> bool:
        """The engines take `config` without a restart: they run a drafter now (the pods were started
        within the envelope), verify as now (adaptive verification is a setting of the engine's start) and the
        envelope admits it, as the operator's renderer decides."""
        return (self.envelope is not None and not self.config.off and config.adaptive == self.config.adaptive
                and self.envelope.admits(self.scenario.method, config.dense(self.scenario.max_batch_size)[1:]))

    def apply(self, config: DraftConfig, now: float) -> str:
        """In place (a published schedule, in force after the propagation delay) or a rollout, one
        replica at a time (the preset's reload time each). Returns the path, as a Decision names it."""
        if self.in_place(config):
            self.in_place_changes += 1
            self.switch = Switch(config, now + self.in_place_delay)
            path = "inPlace"
        else:
            self.restarts += 1
            if self.envelope is not None:  # the new pods start with the envelope the operator renders for them
                ks = config.dense(self.scenario.max_batch_size)[1:]
                self.envelope = self.envelope.after(self.scenario.method, ks)
            self.rollout = Rollout(config, now, self.scenario.restart_seconds, self.scenario.replicas,
                                   self.scenario.strategy)
            path = "rollout"
        self.applied.append((now, path))
        return path

    def segments(self, t: float, span: float) -> list[tuple[float, float]]:
        """[t, t + span) as (start, length) pieces, split where a published schedule takes over."""
        if self.switch is not None and t < self.switch.at < t + span:
            return [(t, self.switch.at - t), (self.switch.at, t + span - self.switch.at)]
        return [(t, span)]

    def replica_configs(self, t: float) -> list[DraftConfig | None]:
        """The config each replica serves at t (None: down); finishes a change when its time has come."""
        if self.switch is not None and t >= self.switch.at:  # every replica swaps it in between steps
            self.config, self.since, self.switch = self.switch.config, self.switch.at, None
        if self.rollout is not None and t >= self.rollout.finished_at:
            self.config, self.since, self.rollout = self.rollout.config, self.rollout.finished_at, None
        if self.rollout is None:
            return [self.config] * self.scenario.replicas
        states = [self.rollout.state(i, t) for i in range(self.scenario.replicas)]
        return [None if s == "down" else (self.rollout.config if s == "new" else self.config) for s in states]


@dataclass(frozen=True)
class Served:
    """One engine step: its time, and per draft position the chance a request's draft there is accepted
    (and verified); a request gains 1 + their sum tokens."""

    seconds: float
    accepted: tuple[float, ...]

    @property
    def tokens(self) -> float:
        return 1.0 + sum(self.accepted)


def _adaptive_step(engine: Engine, batch_size: int, k: int, config: DraftConfig, prefix: tuple[float, ...]) -> Served:
    """vLLM's adaptive verification over `batch_size` requests of one survival curve `prefix` (cached per engine)."""
    key = (batch_size, k, config, prefix, engine.envelope)
    if key in engine.adaptive_steps:
        return engine.adaptive_steps[key]
    survival = np.tile(np.asarray(prefix, dtype=float), (batch_size, 1))
    factor = ADAPTIVE_COST.step_time_factor

    def seconds(counts: np.ndarray) -> np.ndarray:
        return np.array([engine.step_time(batch_size, k, config, verified_tokens=batch_size + int(n)) * factor
                         for n in counts])

    budget = verification_budget(survival.reshape(-1), batch_size, seconds)
    admitted_per_request = admitted(survival, budget)
    share = [float(np.mean(admitted_per_request > i)) for i in range(k)]  # requests verified at position i
    served = Served(float(seconds(np.array([budget]))[0]), tuple(p * v for p, v in zip(prefix, share, strict=True)))
    engine.adaptive_steps[key] = served
    return served


def spread(running: int, serving: int, max_batch_size: int) -> list[int]:
    """Requests per serving replica: spread evenly (a load balancer), at most maxBatchSize each."""
    if serving <= 0:
        return []
    base, extra = divmod(running, serving)
    return [min(base + (1 if i < extra else 0), max_batch_size) for i in range(serving)]


def profile_of(scenario: Scenario, phase: Phase) -> AcceptanceProfile:
    return COLLAPSED if phase.collapsed else acceptance_profile(scenario.method, phase.workload)


def phase_at(scenario: Scenario, minute: int) -> Phase:
    return _phase_and_start(scenario, minute)[0]


def _phase_and_start(scenario: Scenario, minute: int) -> tuple[Phase, float]:
    elapsed = 0.0
    for phase in scenario.phases:
        if minute < elapsed + phase.minutes:
            return phase, elapsed
        elapsed += phase.minutes
    return scenario.phases[-1], elapsed - scenario.phases[-1].minutes


def concurrency_at(scenario: Scenario, minute: int) -> int:
    """Requests in flight across the fleet during `minute` (a ramp moves within its phase)."""
    phase, start = _phase_and_start(scenario, minute)
    return phase.concurrency_at(minute + 0.5 - start)


def batch_path(scenario: Scenario, seed: int, substeps: int) -> list[list[int]]:
    """Requests running across the fleet per sub-step of every minute; the same path for every contender."""
    rng = random.Random(seed)
    path = []
    for minute in range(int(scenario.minutes)):
        c = concurrency_at(scenario, minute)
        path.append([max(1, sum(1 for _ in range(c) if rng.random() < 0.92)) for _ in range(substeps)])
    return path


def prometheus_quantile(q: float, values: list[float]) -> float:
    """quantile_over_time as Prometheus computes it: linear interpolation between the sorted samples."""
    ordered = sorted(values)
    rank = q * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


# (observation or None when the tick has none, now, engine) -> a new config or None
Controller = Callable[[Observation | None, float, Engine], DraftConfig | None]


@dataclass
class _Slice:
    """One sub-step as the tuning loop's queries see it: engine time per batch size while the config
    in force ran alone, each pod's running-requests gauge, the worst per-token time, a stopped pod."""

    start: float
    mix: dict[int, float]
    gauges: list[float | None]
    worst_per_token: float
    stalled: bool


def run(scenario: Scenario, initial: DraftConfig, controller: Controller, *, seed: int, substeps: int = 6,
        signals: str = "specinfer", free_switches: bool = False, envelope: LiveEnvelope | None = None,
        in_place_delay: float = IN_PLACE_DELAY_SECONDS, until: int | None = None,
        interval: float = INTERVAL_SECONDS, window: float = WINDOW_SECONDS) -> Engine:
    """Play the scenario (its first `until` minutes) in sub-steps of a minute; every `interval`
    seconds `controller` sees the last `window` seconds and may return a new config.

    A new config goes in place where `envelope` admits it and is a rollout otherwise (see the module
    doc), unless `free_switches` (the per-phase oracle, an upper bound that switches every replica
    at once and for free).
    """
    rng = random.Random(seed + 1)
    if free_switches and envelope is not None and envelope.drafts_max_k and not initial.off:
        envelope = replace(envelope, max_k=initial.num_speculative_tokens)  # started at its own K, as it restarts
    engine = Engine(scenario, initial, envelope=envelope, in_place_delay=in_place_delay)
    path = batch_path(scenario, seed, substeps)
    dt = TICK_SECONDS / substeps
    restart_s = scenario.restart_seconds
    slices: deque[_Slice] = deque()
    next_tick = interval
    for minute, batches in enumerate(path[:until]):
        phase = phase_at(scenario, minute)
        profile = profile_of(scenario, phase)
        start = minute * TICK_SECONDS
        tokens = 0.0
        worst_minute = 0.0
        stalled_minute = False
        shown_k = 0
        for index, running in enumerate(batches):
            piece_start = start + index * dt
            now_slice = _Slice(piece_start, {}, [None] * scenario.replicas, 0.0, False)
            for piece, (t, span) in enumerate(engine.segments(piece_start, dt)):
                configs = engine.replica_configs(t)
                serving = [i for i, c in enumerate(configs) if c is not None]
                now_slice.stalled = now_slice.stalled or len(serving) < len(configs)
                for i, batch in zip(serving, spread(running, len(serving), scenario.max_batch_size), strict=True):
                    if piece == 0:  # one gauge sample per scrape
                        now_slice.gauges[i] = float(batch)
                    config = configs[i]
                    if batch <= 0 or config is None:
                        continue
                    k = config.dense(scenario.max_batch_size)[batch]
                    served = engine.serve(batch, k, profile, config)
                    step, expected = served.seconds, served.tokens
                    tokens += span * batch * expected / step
                    now_slice.worst_per_token = max(now_slice.worst_per_token, step / expected)
                    shown_k = k
                    if t >= engine.since and not engine.changing:
                        now_slice.mix[batch] = now_slice.mix.get(batch, 0.0) + span
            slices.append(now_slice)
            worst_minute = max(worst_minute, now_slice.worst_per_token)
            stalled_minute = stalled_minute or now_slice.stalled
            now = piece_start + dt
            if now + 1e-6 < next_tick:
                continue
            while next_tick <= now + 1e-6:
                next_tick += interval
            while slices and slices[0].start < now - window - 1e-6:
                slices.popleft()
            _tick(scenario, engine, controller, profile, list(slices), now, rng, signals, window, free_switches)
        p99 = worst_minute * P99_OVER_MEAN + (restart_s / OUTPUT_TOKENS if stalled_minute else 0.0)
        engine.minutes.append({"minute": minute, "phase": phase.name, "tokens": tokens, "p99": p99,
                               "batch": sum(batches) / len(batches) / scenario.replicas, "k": shown_k,
                               "violation": p99 > scenario.per_token_slo})
    return engine


def _tick(scenario: Scenario, engine: Engine, controller: Controller, profile: AcceptanceProfile,
          slices: list[_Slice], now: float, rng: random.Random, signals: str, window: float,
          free_switches: bool) -> None:
    """One tuning tick: the window's observation to the controller, and its change to the engine."""
    engine.replica_configs(now)  # a change that ended with the sub-step is in force for the next window
    mix: dict[int, float] = {}
    for piece in slices:
        if piece.start >= engine.since:
            for batch, seconds in piece.mix.items():
                mix[batch] = mix.get(batch, 0.0) + seconds
    observation = None
    if mix:
        gauges = [[g for piece in slices if (g := piece.gauges[i]) is not None] for i in range(scenario.replicas)]
        stalled = any(piece.stalled for piece in slices)
        p99 = (max(piece.worst_per_token for piece in slices) * P99_OVER_MEAN
               + (scenario.restart_seconds / OUTPUT_TOKENS if stalled else 0.0))
        observation = _observe(scenario, engine, profile, mix, gauges, now, rng, signals, p99, window)
    new_config = controller(observation, now, engine)
    if new_config is None or engine.changing:
        return
    if free_switches:  # every replica restarted at once and for free: a new envelope starts at the config's own K
        if engine.envelope is not None and engine.envelope.drafts_max_k and not new_config.off:
            engine.envelope = replace(engine.envelope, max_k=new_config.num_speculative_tokens)
        engine.config, engine.since = new_config, now
    else:
        engine.apply(new_config, now)


def _observe(scenario: Scenario, engine: Engine, profile: AcceptanceProfile, mix: dict[int, float],
             gauges: list[list[float]], now: float, rng: random.Random, signals: str,
             p99: float, window: float) -> Observation | None:
    """The window as the tuning loop would build it from Prometheus, gaps included (None: the
    series were missing, so the loop holds without consulting the policy)."""
    busy = sum(mix.values())
    k_top = engine.config.num_speculative_tokens
    observation = synthetic_observation(
        time=now, window_seconds=window, method=scenario.method, num_speculative_tokens=k_top,
        schedule=engine.config.schedule, applied_since=engine.since,
        batch_sizes={b: s / busy for b, s in mix.items()}, prefix=profile.prefix_probs(max(k_top, 1)),
        step_time=lambda b, k: engine.serve(b, k, profile).seconds,
        accepted=lambda b, k: engine.serve(b, k, profile).accepted,
        adaptive_verification=engine.config.adaptive, signals=signals, rng=rng, timing_noise=scenario.timing_noise,
        # the prompts are in step_time already; reported as vLLM's counter reports them
        prompt_per_generated=scenario.prompt_per_generated if scenario.prompts_reported and
        scenario.prompt_per_generated > 0 else None,
        busy_fraction=busy / window, per_token_p99_seconds=p99 * math.exp(rng.gauss(0, 0.05)),
        # a published schedule not every engine runs yet holds the tuner like a rollout (tuner/in_force.py)
        rollout_in_progress=engine.changing,
    )
    if signals == "vllm":
        observation = vllm_batch_sizes(observation, gauges)
    if scenario.gap_rate and rng.random() < scenario.gap_rate:
        kind = rng.choice(("stale", "nan", "missing", "partial"))
        if kind == "stale":
            return replace(observation, scrape_time=now - 600)
        if kind == "nan":
            return replace(observation, step_mean_seconds=float("nan"))
        if kind == "missing":
            return None
        # the plugin's series missing for a scrape: only vLLM's standard series remain
        return vllm_batch_sizes(replace(observation, drafts_per_position=None, step_samples=None), gauges)
    return observation


def vllm_batch_sizes(observation: Observation, gauges: list[list[float]]) -> Observation:
    """Without the plugin the loop knows batch sizes only from quantiles of each pod's running-requests
    gauge over the window (operator/tuner/pure/queries.py), one sample per scrape."""
    quantiles = [prometheus_quantile(q, samples) for samples in gauges if samples for q in BATCH_QUANTILES]
    distribution = distribution_from_quantiles(quantiles)
    if distribution is None:
        return observation
    return replace(observation, batch_size_distribution=distribution,
                   batch_size_mean=sum(size * share for size, share in distribution))
