"""Scenarios for `specinfer bench tuner` and the fluid closed loop that plays them.

A scenario is a list of phases (workload, concurrency, acceptance collapse) on one method and
cost preset of the simulator's engine model (`specinfer.runtime.sim.model`). The loop runs in
simulated time, no HTTP and no sleeping: every sub-step the engine serves the running batch at
the config in force (tokens = B * E_K / T(B, K) per second). A config change is a rollout with
the resource's `updateStrategy`: under Surge (the operator's default: maxSurge 1, maxUnavailable 0)
the old pod keeps serving its config while the new one reloads the model, so the change only takes
effect the preset's reload time later; under Replace (no spare accelerator) the one replica serves
nothing for the reload time. Every tick a contender sees the last window as the tuning loop would
(noisy counters, scrape gaps) and may change the config.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from specinfer.operator.tuner.policy import DraftConfig, Observation
from specinfer.runtime.methods import get_method
from specinfer.runtime.sim.model import COLLAPSED, AcceptanceProfile, acceptance_profile, cost_model, draft_scale

from .observations import synthetic_observation

TICK_SECONDS = 60.0  # tuning interval and observation window
OUTPUT_TOKENS = 256  # per request: spreads a restart stall over a request's per-token latency
P99_OVER_MEAN = 1.3  # per-token p99 / mean within a minute (request mix), applied to the fluid mean


@dataclass(frozen=True)
class Phase:
    name: str
    minutes: float
    workload: str = "chat"
    concurrency: int = 8
    collapsed: bool = False  # acceptance near zero (e.g. a broken attention backend after an upgrade)


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
    update_strategy: str = "Surge"  # spec.updateStrategy: how a restart rolls out (see the module doc)

    @property
    def minutes(self) -> float:
        return sum(p.minutes for p in self.phases)


def _ramp(workload: str = "chat") -> tuple[Phase, ...]:
    return tuple(Phase(f"c={c}", 10, workload, c) for c in (1, 2, 4, 8, 16, 32, 64))


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
    Scenario("collapse", "EAGLE-3 on code; after 30 minutes acceptance collapses (backend bug) for an hour",
             (Phase("healthy", 30, "code", 8), Phase("collapsed", 60, "code", 8, collapsed=True))),
    Scenario("noisy-gaps", "chat at 16 concurrent starting from K=6, 8% step-latency noise, 20% scrape gaps",
             (Phase("chat", 60, "chat", 16),), timing_noise=0.08, gap_rate=0.2, initial_k=6),
)}


@dataclass
class Engine:
    """What the engine runs and serves: config in force, pending restart, per-minute records."""

    scenario: Scenario
    config: DraftConfig
    since: float = 0.0
    down_until: float = -1.0
    ready_at: float = -1.0
    next_config: DraftConfig | None = None
    restarts: int = 0
    minutes: list[dict] = field(default_factory=list)

    @property
    def drafting(self) -> str:
        return get_method(self.scenario.method).drafting

    def step_time(self, batch_size: int, k: int) -> float:
        cm = cost_model(self.scenario.cost_preset)
        return cm.step_time(batch_size, k, self.drafting, draft_scale=draft_scale(self.scenario.method))

    def apply(self, config: DraftConfig, now: float) -> None:
        """A rollout: the new pod loads the model for the preset's restart time, then `config` runs."""
        self.restarts += 1
        self.next_config = config
        self.ready_at = now + cost_model(self.scenario.cost_preset).restart_s
        if self.scenario.update_strategy == "Replace":
            self.down_until = self.ready_at  # the only replica stopped before its replacement started


def profile_of(scenario: Scenario, phase: Phase) -> AcceptanceProfile:
    return COLLAPSED if phase.collapsed else acceptance_profile(scenario.method, phase.workload)


def phase_at(scenario: Scenario, minute: int) -> Phase:
    elapsed = 0.0
    for phase in scenario.phases:
        elapsed += phase.minutes
        if minute < elapsed:
            return phase
    return scenario.phases[-1]


def batch_path(scenario: Scenario, seed: int, substeps: int) -> list[list[int]]:
    """Running batch size per sub-step of every minute; the same path for every contender."""
    rng = random.Random(seed)
    path = []
    for minute in range(int(scenario.minutes)):
        c = phase_at(scenario, minute).concurrency
        path.append([max(1, sum(1 for _ in range(c) if rng.random() < 0.92)) for _ in range(substeps)])
    return path


# (observation or None when the tick has none, now, engine) -> a new config or None
Controller = Callable[[Observation | None, float, Engine], DraftConfig | None]


def run(scenario: Scenario, initial: DraftConfig, controller: Controller, *, seed: int, substeps: int = 6,
        signals: str = "specinfer", free_switches: bool = False) -> Engine:
    """Play the scenario minute by minute; `controller` may return a new config each tick.

    A new config is a rollout (the preset's reload time before it runs; under Replace nothing is
    served meanwhile) unless `free_switches` (the per-phase oracle, an upper bound that switches at once).
    """
    rng = random.Random(seed + 1)
    engine = Engine(scenario, initial)
    path = batch_path(scenario, seed, substeps)
    dt = TICK_SECONDS / substeps
    restart_s = cost_model(scenario.cost_preset).restart_s
    for minute, batches in enumerate(path):
        phase = phase_at(scenario, minute)
        profile = profile_of(scenario, phase)
        start = minute * TICK_SECONDS
        dense = engine.config.dense(scenario.max_batch_size)
        tokens = 0.0
        worst_per_token = 0.0
        mix: dict[int, float] = {}
        stalled = False
        for index, batch in enumerate(batches):
            t = start + index * dt
            if engine.next_config is not None and t >= engine.ready_at:
                engine.config, engine.since, engine.next_config = engine.next_config, engine.ready_at, None
                dense = engine.config.dense(scenario.max_batch_size)
            if t < engine.down_until:
                stalled = True
                continue
            k = dense[min(batch, scenario.max_batch_size)]
            step = engine.step_time(batch, k)
            expected = profile.expected_tokens(k) if k else 1.0
            tokens += dt * batch * expected / step
            worst_per_token = max(worst_per_token, step / expected)
            if t >= engine.since:
                mix[batch] = mix.get(batch, 0.0) + dt
        p99 = worst_per_token * P99_OVER_MEAN + (restart_s / OUTPUT_TOKENS if stalled else 0.0)
        mean_batch = sum(batches) / len(batches)
        engine.minutes.append({"minute": minute, "phase": phase.name, "tokens": tokens, "p99": p99,
                               "batch": mean_batch, "k": dense[min(round(mean_batch), scenario.max_batch_size)],
                               "violation": p99 > scenario.per_token_slo})
        now = start + TICK_SECONDS
        observation = None
        if mix:
            observation = _observe(scenario, engine, profile, mix, now, rng, signals, p99)
        new_config = controller(observation, now, engine)
        if new_config is None or engine.next_config is not None:
            continue
        if free_switches:
            engine.config, engine.since = new_config, now
        else:
            engine.apply(new_config, now)
    return engine


def _observe(scenario: Scenario, engine: Engine, profile: AcceptanceProfile, mix: dict[int, float],
             now: float, rng: random.Random, signals: str, p99: float) -> Observation | None:
    """The window as the tuning loop would build it from Prometheus, gaps included (None: the
    series were missing, so the loop holds without consulting the policy)."""
    busy = sum(mix.values())
    k_top = engine.config.num_speculative_tokens
    observation = synthetic_observation(
        time=now, window_seconds=TICK_SECONDS, method=scenario.method, num_speculative_tokens=k_top,
        schedule=engine.config.schedule, applied_since=engine.since,
        batch_sizes={b: s / busy for b, s in mix.items()}, prefix=profile.prefix_probs(max(k_top, 1)),
        step_time=engine.step_time, signals=signals, rng=rng, timing_noise=scenario.timing_noise,
        busy_fraction=busy / TICK_SECONDS, per_token_p99_seconds=p99 * math.exp(rng.gauss(0, 0.05)),
        rollout_in_progress=engine.next_config is not None,
    )
    if scenario.gap_rate and rng.random() < scenario.gap_rate:
        kind = rng.choice(("stale", "nan", "missing", "partial"))
        if kind == "stale":
            return replace(observation, scrape_time=now - 600)
        if kind == "nan":
            return replace(observation, step_mean_seconds=float("nan"))
        if kind == "missing":
            return None
        # the plugin's series missing for a scrape: only vLLM's standard series remain
        return replace(observation, drafts_per_position=None, step_samples=None)
    return observation
