"""`specinfer bench tuner`: the tuning policy in closed loop against the simulator's engine model.

Contenders per scenario (bench/scenarios.py): no speculation, static K=3, static K=5, the best
static K in hindsight, the policy fed our plugin's series, the policy fed only vLLM's standard
series, the per-phase oracle (best config per phase with the true model, switching for free: the
upper bound) and the oracle that pays its way -- the "in-place oracle" where the spec is retuned in
place (switching for free when the switch goes in place, paying the restart model when it is a
rollout), the "oracle paying its rollouts" with `--no-in-place` (every change a rollout, the
behaviour before in-place retuning). Prints goodput, p99 per-token latency, SLO-violation minutes,
restarts and in-place changes, checks the goals for both signal sets (issue 43: at least 0.95 of
the per-phase oracle, 0.97 where the oracle that pays its way reaches that), writes one PNG per
scenario, and `--json` prints the same figures and every decision as JSON.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from specinfer.api import InvalidSpecError, SpeculativeInferenceSpec, effective_spec
from specinfer.api.status import SpeculationChoice
from specinfer.operator.tuner.policy import Decision, DraftConfig, Observation, PolicyState, TuningInput, decide
from specinfer.operator.tuner.pure.target import adaptive_accepted, spec_config
from specinfer.operator.tuner.pure.target import tuning_input as operator_tuning_input
from specinfer.runtime.contract.live_schedule.envelope import LiveEnvelope, live_envelope
from specinfer.runtime.methods import get_method

from .scenarios import (
    BENCH_ACCELERATOR,
    IN_PLACE_DELAY_SECONDS,
    SCENARIOS,
    SIGNAL_SETS,
    TICK_SECONDS,
    Controller,
    Engine,
    Scenario,
    phase_at,
    profile_of,
    run,
)

# A roofline estimate, wrong by up to 30% (kneeSharpness stays exact).
PRIOR_ERROR = {"floor": 1.15, "compute_per_token": 0.8, "kv_per_sequence": 1.3, "draft_pass": 1.3, "draft_token": 0.7}


def k_bounds(scenario: Scenario) -> tuple[int, int]:
    method = get_method(scenario.method)
    k_max = method.k_max if scenario.k_max is None else min(scenario.k_max, method.k_max)
    return method.k_min, k_max


def start_k(scenario: Scenario) -> int:
    """The K the scenario's spec asks for (numSpeculativeTokens): its own, or the catalogue's default."""
    k_min, k_max = k_bounds(scenario)
    wanted = scenario.initial_k if scenario.initial_k is not None else get_method(scenario.method).k_default
    return max(k_min, min(wanted, k_max))


def scenario_spec(scenario: Scenario) -> SpeculativeInferenceSpec:
    """The resource a user would write for this scenario: the simulator engine on the scenario's preset."""
    tuning: dict = {"mode": "auto", "maxRestartsPerHour": 6, "minSamples": 2000,
                    "slo": {"p99TimePerOutputTokenSeconds": scenario.per_token_slo}}
    if scenario.k_max is not None:
        tuning["maxNumSpeculativeTokens"] = scenario.k_max
    speculation: dict = {"method": scenario.method, "numSpeculativeTokens": start_k(scenario),
                         **({"advanced": scenario.advanced} if scenario.advanced else {}),
                         **({"mtpModules": scenario.mtp_modules} if scenario.mtp_modules else {})}
    if get_method(scenario.method).needs_draft_model:
        speculation["draftModel"] = {"name": "bench/draft"}
    return SpeculativeInferenceSpec.model_validate({
        "model": {"name": "bench/target"},
        "speculation": speculation,
        "runtime": {"engine": "simulator", "simulator": {"costModel": scenario.cost_preset,
                                                          "maxNumSeqs": scenario.max_batch_size}},
        "hardware": {"accelerator": scenario.accelerator or BENCH_ACCELERATOR},
        "replicas": scenario.replicas,
        "updateStrategy": scenario.strategy,
        "tuning": tuning,
    })


def tuning_input(scenario: Scenario, *, exact_prior: bool = False, in_place: bool = True,
                 probe: bool = True) -> TuningInput:
    """What the tuning loop passes for this scenario (the operator's own builder), with a rough prior.

    The builder sets inPlaceMaxK where the spec is retuned in place; `in_place=False` clears it, as
    for an engine that restarts for every change. The simulated engine has no CUDA graphs, so the
    builder leaves scheduleStepFactor at 1; a scenario that plays vLLM's Model Runner V1 with full
    graphs passes the catalogue's factor, as the builder does for engine vllm. `probe`: probes in place
    (operator configuration `tuning.policy.probeInPlace`)."""
    exact = operator_tuning_input(scenario_spec(scenario))
    prior = exact.cost_prior.model_copy(update={name: getattr(exact.cost_prior, name) * factor
                                                for name, factor in PRIOR_ERROR.items() if not exact_prior})
    if not exact_prior:  # prefill priced as a GPU resource's prior prices it: at the compute per token
        prior = prior.model_copy(update={"prefill_per_token": None})
    # a reload other than the preset's: what the operator configuration's tuning.policy.restartSeconds says
    reload = {} if scenario.reload_seconds is None else {"restart_seconds": scenario.reload_seconds}
    return exact.model_copy(update={"cost_prior": prior, "schedule_step_factor": scenario.schedule_step_factor,
                                    "probe_in_place": probe, **reload,
                                    **({} if in_place else {"in_place_max_k": None})})


def envelope_of(scenario: Scenario, *, in_place: bool = True) -> LiveEnvelope | None:
    """What the scenario's engine pods start with when the operator retunes them in place (None:
    every change rolls out), from the same spec the tuning input comes from."""
    return live_envelope(scenario_spec(scenario)) if in_place else None


def initial_config(scenario: Scenario, *, in_place: bool = True) -> DraftConfig:
    """What the scenario's engines run before any tuning, as the operator renders them: the spec's K, and --
    retuned in place -- none above the crossover its prior predicts
    (runtime/contract/live_schedule/envelope.py `own_ranges`)."""
    if in_place:
        return spec_config(scenario_spec(scenario))
    return DraftConfig(num_speculative_tokens=start_k(scenario))


def oracle_config(scenario: Scenario, minute: int, engine: Engine, *, keep_drafter: bool = False) -> DraftConfig:
    """Best config for the phase at `minute` with the true acceptance and cost: the best K per batch
    size -- or the best single K over the phase's loads (a ramp's from its start to its end) where the
    engine keeps no schedule or a schedule slows every step enough. `keep_drafter`: the best that keeps
    a drafter loaded (so an engine retuned in place reaches it without a restart): never speculation
    off, at most K = 0 within a schedule, which still pays the drafter's first pass."""
    phase = phase_at(scenario, minute)
    profile = profile_of(scenario, phase)
    k_min, k_max = k_bounds(scenario)
    # Each config as it runs from its own start (the oracle restarts for free): a drafter that drafts its
    # startup K pays the config's own largest K, whatever envelope `engine` runs now.
    probe = Engine(scenario, engine.config)
    loads = sorted({max(1, min(round(0.92 * phase.concurrency_at(share * phase.minutes) / scenario.replicas),
                               scenario.max_batch_size)) for share in (0.0, 0.25, 0.5, 0.75, 1.0)})

    def served(config: DraftConfig) -> float:
        """Tokens per second at the phase's loads, each an equal share of its time."""
        ks = config.dense(scenario.max_batch_size)
        return sum(b * (tokens := profile.expected_tokens(ks[b]))
                   / (probe.step_time(b, ks[b], config) + probe.prefill_seconds(b, tokens, config)) for b in loads)

    def per_batch_size(top: int) -> DraftConfig:
        """The best K at each batch size under a config whose largest K is `top`. Within a schedule K = 0
        still runs what the drafter runs then: judge each batch size's K with speculation configured."""
        candidates = [0, *range(k_min, top + 1)]
        speculating = DraftConfig(num_speculative_tokens=top)
        dense = [0]
        for b in range(1, scenario.max_batch_size + 1):
            dense.append(max(candidates, key=lambda k: (profile.expected_tokens(k) / probe.step_time(b, k, speculating),
                                                        -k)))
        if keep_drafter and not any(dense[1:]):  # K = 0 wherever the phase runs, the drafter still loaded
            dense[scenario.max_batch_size] = k_min
        return DraftConfig.from_dense(dense)

    law = scenario.drafting
    tops = range(k_min, k_max + 1) if law is not None and law.drafts_startup_k else [k_max]
    scheduled = max((per_batch_size(top) for top in tops), key=served)
    singles = range(k_min, k_max + 1) if keep_drafter else [0, *range(k_min, k_max + 1)]
    single = max((DraftConfig(num_speculative_tokens=k) for k in singles), key=served)
    if not scheduled.schedule:
        return scheduled if served(scheduled) >= served(single) else single
    # a tie is the schedule's: the same K at the phase's loads, and the best K at every other
    if not tuning_input(scenario).allow_schedule or served(single) > served(scheduled):
        return single
    return scheduled


def _static(k: int):
    return DraftConfig(num_speculative_tokens=k), (lambda obs, now, engine: None)


class PolicyController:
    """Feeds each window to `decide` and returns the config of every change it decides."""

    def __init__(self, tuning: TuningInput):
        self.tuning = tuning
        self.state: PolicyState | None = None
        self.decisions: list[tuple[float, Decision]] = []
        self.cpu_seconds, self.calls = 0.0, 0  # what deciding cost (the operator pays it per resource per tick)
        self.realised: list[float] = []  # the realised gains its verifications reported, tick by tick

    @property
    def ms_per_decision(self) -> float:
        return 1000 * self.cpu_seconds / self.calls if self.calls else 0.0

    def __call__(self, observation: Observation | None, now: float, engine: Engine) -> DraftConfig | None:
        if observation is None:
            return None
        envelope = engine.envelope
        if envelope is not None and envelope.drafts_max_k and self.tuning.in_place_max_k != envelope.max_k:
            # the envelope the pods run now, as the loop reads it from status.effective (target.with_engine_envelope)
            prior = self.tuning.cost_prior.model_copy(update={"startup_k": envelope.max_k})
            self.tuning = self.tuning.model_copy(update={"in_place_max_k": envelope.max_k, "cost_prior": prior})
        started = time.process_time()
        decision, self.state = decide(observation, self.tuning, self.state, now)
        self.cpu_seconds += time.process_time() - started
        self.calls += 1
        if decision.realised_gain is not None:
            self.realised.append(decision.realised_gain)
        if decision.is_change:
            self.decisions.append((now, decision))
            return decision.config
        return None


POLICIES = {"specinfer": "policy", "vllm": "policy (vLLM series only)"}  # contender name per signal set


def summarise(scenario: Scenario, engine: Engine) -> dict:
    minutes = engine.minutes
    seconds = len(minutes) * TICK_SECONDS
    p99s = sorted(m["p99"] for m in minutes)
    phases: dict[str, float] = {}
    for m in minutes:
        phases[m["phase"]] = phases.get(m["phase"], 0.0) + m["tokens"]
    return {
        "goodput": sum(m["tokens"] for m in minutes) / seconds,
        "p99PerTokenMs": 1000 * p99s[min(len(p99s) - 1, int(0.99 * len(p99s)))],
        "sloViolationMinutes": sum(1 for m in minutes if m["violation"]),
        "restarts": engine.restarts,  # rollouts only: a change in place restarts nothing
        # every rollout restarts each replica once
        "restartsPerReplicaHour": engine.restarts / (seconds / 3600),
        "inPlaceChanges": engine.in_place_changes,
        "phaseGoodput": {name: tokens / (60 * p.minutes) for name, tokens in phases.items()
                         for p in scenario.phases if p.name == name},
    }


def reference_name(in_place: bool) -> str:
    """The oracle that pays its way: in place where the engine takes the switch, else by rollouts."""
    return "in-place oracle" if in_place else "oracle paying its rollouts"


def run_scenario(scenario: Scenario, *, seed: int, substeps: int, quick: bool, exact_prior: bool = False,
                 in_place: bool = True, in_place_delay: float = IN_PLACE_DELAY_SECONDS,
                 probe_in_place: bool = True) -> dict:
    """Every contender on one scenario: results, traces for the plot, the policy's decisions, goals.

    `in_place`: the engine pods are retuned in place where the spec allows it (the operator's
    behaviour), or every change rolls out (`--no-in-place`, the behaviour before in-place retuning)."""
    k_min, k_max = k_bounds(scenario)
    envelope = envelope_of(scenario, in_place=in_place)
    results: dict[str, dict] = {}
    traces: dict[str, Engine] = {}
    engine_kwargs: dict[str, Any] = {"seed": seed, "substeps": substeps, "envelope": envelope,
                                     "in_place_delay": in_place_delay}

    def play(name: str, initial: DraftConfig, controller, **kwargs) -> None:
        engine = run(scenario, initial, controller, **engine_kwargs, **kwargs)
        traces[name] = engine
        results[name] = summarise(scenario, engine)

    play("no speculation", *_static(0))
    for k in (3, 5):
        label = f"static K={k}" if k <= k_max else f"static K={k}->{k_max}"
        play(label, *_static(min(k, k_max)))
    search = range(k_min, min(k_max, 6 if quick else 10) + 1)
    statics = {}
    for k in search:
        engine = run(scenario, *_static(k), **engine_kwargs)
        statics[k] = (summarise(scenario, engine), engine)
    best_k = max(statics, key=lambda k: statics[k][0]["goodput"])
    results[f"best static (K={best_k})"], traces["best static"] = statics[best_k]
    # vLLM alone: its adaptive verification at the best static K, where vLLM runs it for this resource
    refused = adaptive_refusal(scenario)
    if refused is None:
        adaptive = {}
        for k in search:
            engine = run(scenario, DraftConfig(num_speculative_tokens=k, adaptive_verification=True),
                         lambda observation, now, engine: None, **engine_kwargs)
            adaptive[k] = (summarise(scenario, engine), engine)
        best_adaptive = max(adaptive, key=lambda k: adaptive[k][0]["goodput"])
        results[f"{ADAPTIVE} (K={best_adaptive})"], traces[ADAPTIVE] = adaptive[best_adaptive]
    initial = initial_config(scenario, in_place=in_place)
    decisions: dict[str, list[tuple[float, Decision]]] = {}
    paths: dict[str, list[tuple[float, str]]] = {}
    for signals in SIGNAL_SETS:
        policy = PolicyController(tuning_input(scenario, exact_prior=exact_prior, in_place=in_place,
                                                probe=probe_in_place))
        play(POLICIES[signals], initial, policy, signals=signals)
        results[POLICIES[signals]]["cpuMsPerDecision"] = round(policy.ms_per_decision, 2)
        decisions[signals] = policy.decisions
        paths[signals] = traces[POLICIES[signals]].applied

    def oracle(observation, now, engine):
        minute = int(now // TICK_SECONDS)
        if minute >= scenario.minutes:
            return None
        wanted = oracle_config(scenario, minute, engine)
        return None if wanted.same_as(engine.config, scenario.max_batch_size) else wanted

    probe = Engine(scenario, initial, envelope=envelope)
    play("per-phase oracle", oracle_config(scenario, 0, probe), oracle, free_switches=True)
    reference = reference_name(in_place)
    play(reference, initial, phase_plan(scenario, initial, **engine_kwargs))
    return {"scenario": scenario, "results": results, "traces": traces, "decisions": decisions, "paths": paths,
            "envelope": envelope, "inPlaceDelay": in_place_delay, "reference": reference, "adaptiveRefused": refused,
            "seed": seed,
            "goals": {signals: goals(scenario, results, POLICIES[signals], reference) for signals in SIGNAL_SETS}}


ADAPTIVE = "adaptive verification"  # the contender: vLLM's adaptive verification at its best static K


def adaptive_refusal(scenario: Scenario) -> str | None:
    """Why vLLM would not run adaptive verification for the scenario's resource (None: it would), as admission
    says it (api/adaptive_rules.py)."""
    spec = scenario_spec(scenario)
    if adaptive_accepted(spec):
        return None
    try:
        effective_spec(spec, SpeculationChoice(adaptive_verification=True))
    except (ValueError, InvalidSpecError) as error:
        return str(error).splitlines()[-1].split(" [type=")[0].strip()
    return "refused"


def _phase_starts(scenario: Scenario) -> list[int]:
    starts: list[int] = []
    minute = 0.0
    for phase in scenario.phases:
        starts.append(int(minute))
        minute += phase.minutes
    return starts


Choice = str | None  # per phase: None (keep), "best" (the phase's best config), "drafter" (its best with a drafter)


def _planned(scenario: Scenario, choices: dict[int, Choice]) -> Controller:
    """Switch to the config `choices` names for each phase, as the phase begins (the first phase: after
    its first minute, the first moment a controller can act); the engine takes it in place or rolls it out."""
    def controller(observation: Observation | None, now: float, engine: Engine) -> DraftConfig | None:
        minute = int(now // TICK_SECONDS)
        phase = next((i for i, start in enumerate(_phase_starts(scenario)) if max(start, 1) == minute), None)
        if phase is None or choices.get(phase) is None or minute >= scenario.minutes:
            return None
        wanted = oracle_config(scenario, minute, engine, keep_drafter=choices[phase] == "drafter")
        return None if wanted.same_as(engine.config, scenario.max_batch_size) else wanted
    return controller


def phase_plan(scenario: Scenario, initial: DraftConfig, *, seed: int, substeps: int,
               envelope: LiveEnvelope | None = None, in_place_delay: float = IN_PLACE_DELAY_SECONDS) -> Controller:
    """The per-phase oracle made to pay its way like any controller: it knows each phase's best config
    from the start and, phase by phase (greedily, in hindsight), switches only where that repays
    itself within the phase. Without `envelope` every switch is a rollout: the "oracle paying its
    rollouts", what restarting at the right moments can reach without programming the sizes to come
    ahead of time. With it (the "in-place oracle") a switch the engine takes in place is free -- the
    propagation delay aside -- and where the phase's best is speculation off, which only a restart
    reaches, it may instead stay in place with the best config that keeps the drafter loaded."""
    kwargs: dict[str, Any] = {"seed": seed, "substeps": substeps, "envelope": envelope,
                              "in_place_delay": in_place_delay}
    probe = Engine(scenario, initial, envelope=envelope)
    choices: dict[int, Choice] = {}
    for index, start in enumerate(_phase_starts(scenario)):
        ends = sum(p.minutes for p in scenario.phases[: index + 1])
        options: list[Choice] = [None, "best"]
        minute = max(start, 1)
        if envelope is not None and not oracle_config(scenario, minute, probe, keep_drafter=True).same_as(
                oracle_config(scenario, minute, probe), scenario.max_batch_size):
            options.append("drafter")
        scored: dict[Choice, float] = {}
        for option in options:
            engine = run(scenario, initial, _planned(scenario, {**choices, index: option}), until=int(ends), **kwargs)
            scored[option] = sum(m["tokens"] for m in engine.minutes if m["minute"] < ends)
        choices[index] = max(options, key=lambda o: (scored[o], -options.index(o)))  # ties: the earlier option
    return _planned(scenario, choices)


# Of the per-phase oracle's goodput (issue 43): 0.95, and 0.97 where the oracle that pays its way
# (in place where the engine takes the switch) reaches that much.
ORACLE_GOAL, ORACLE_GOAL_REACHED = 0.95, 0.97


def goals(scenario: Scenario, results: dict[str, dict], contender: str = "policy",
          reference: str = "in-place oracle") -> dict:
    policy = results[contender]
    oracle = results["per-phase oracle"]
    none = results["no speculation"]
    best_static = next(v for k, v in results.items() if k.startswith("best static"))

    def worst_phase(contender: dict) -> float:
        return min(contender["phaseGoodput"][p] / none["phaseGoodput"][p] for p in none["phaseGoodput"])

    # What a controller paying for its switches reaches at best: the oracle that pays its way, or a config
    # that never switches (speculation off, the best static K, vLLM's adaptive verification at its best),
    # whichever serves more. Speculation off for good is what a user who gave up on speculation runs: where
    # a dear drafter's load keeps coming back it serves more than any K (the bench's recurring-peaks)
    paying = max((v for k, v in results.items()
                  if k in (reference, "no speculation") or k.startswith(("best static", ADAPTIVE))),
                 key=lambda v: v["goodput"])
    reached = paying["goodput"] / oracle["goodput"]
    if paying is not results[reference]:
        reference = next(k for k, v in results.items() if v is paying)
    checks = {
        # `reference`: the oracle that pays its way (phase_plan). Where it falls short of the goal
        # too, the goal is out of reach of any controller that pays for its restarts.
        "vsOracle": {"value": policy["goodput"] / oracle["goodput"],
                     "goal": ORACLE_GOAL_REACHED if reached >= ORACLE_GOAL_REACHED else ORACLE_GOAL,
                     "reference": reached, "referenceName": reference},
        "worstPhaseVsNoSpeculation": {"value": worst_phase(policy), "goal": 0.98,
                                      "reference": worst_phase(paying), "referenceName": reference},
        "restartsPerReplicaHour": {"value": policy["restartsPerReplicaHour"], "goal": 6.0, "atMost": True},
    }
    # vLLM alone (issue 43): its adaptive verification at the best static K; where vLLM refuses it for the
    # resource, what a user sets instead, the best static K
    alone = next((v for k, v in results.items() if k.startswith(ADAPTIVE)), best_static)
    checks["vsAdaptive"] = {"value": policy["goodput"] / alone["goodput"], "goal": 1.0,
                            "adaptive": alone is not best_static}
    # No controller can beat the per-phase oracle, so its lead over the best static K bounds this goal.
    checks["vsBestStatic"] = {"value": policy["goodput"] / best_static["goodput"],
                              "goal": 1.10 if scenario.check_vs_static else None,
                              "bound": oracle["goodput"] / best_static["goodput"]}
    for check in checks.values():
        goal = check["goal"]
        check["met"] = None if goal is None else (
            check["value"] <= goal if check.get("atMost") else check["value"] >= goal)
    return checks


def _table(reports: list[dict]) -> str:
    lines = [f"{'scenario':<19} {'contender':<27} {'goodput tok/s':>13} {'vs oracle':>9} "
             f"{'p99 ms/tok':>10} {'SLO-viol min':>12} {'restarts':>8} {'in place':>8}"]
    for report in reports:
        oracle = report["results"]["per-phase oracle"]["goodput"]
        scenario = report["scenario"]
        envelope = report["envelope"]
        how = (f"retuned in place up to K={envelope.max_k}, {report['inPlaceDelay']:g} s to take effect"
               if envelope else "every change rolls out")
        lines.append(f"{scenario.name} ({scenario.replicas} replica(s), {scenario.strategy}; {how})")
        for name, r in report["results"].items():
            lines.append(f"{scenario.name:<19} {name:<27} {r['goodput']:>13.0f} {r['goodput'] / oracle:>9.3f} "
                         f"{r['p99PerTokenMs']:>10.1f} {r['sloViolationMinutes']:>12d} {r['restarts']:>8d} "
                         f"{r['inPlaceChanges']:>8d}")
        for signals, checks in report["goals"].items():
            goal_text = []
            for name, check in checks.items():
                mark = "" if check["met"] is None else (" ok" if check["met"] else " MISSED")
                if "reference" in check and not check["met"] and check["reference"] < check["goal"]:
                    mark += f" (the {check['referenceName']} too: out of reach paying for restarts)"
                bound = (f", oracle bound {check['bound']:.3f}" if "bound" in check
                         else f", {check['referenceName']} {check['reference']:.3f}" if "reference" in check else "")
                goal_text.append(f"{name} {check['value']:.3f}"
                                 + (f" (goal {check['goal']}{bound}){mark}" if check["goal"] is not None else ""))
            cost = report["results"][POLICIES[signals]].get("cpuMsPerDecision")
            lines.append(f"{'':<19} goals, {signals} series: " + "; ".join(goal_text)
                         + (f"; {cost:.1f} ms CPU a decision" if cost is not None else ""))
    return "\n".join(lines)


def _plot(report: dict, out: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    scenario: Scenario = report["scenario"]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6.5), sharex=True)
    for name in ("no speculation", "best static", *POLICIES.values(), "per-phase oracle"):
        engine = report["traces"][name]
        top.plot([m["minute"] for m in engine.minutes], [m["tokens"] / TICK_SECONDS for m in engine.minutes],
                 label=name)
    top.set_ylabel("goodput (tokens/s)")
    top.set_title(f"{scenario.name}: {scenario.description}", fontsize=9)
    top.legend(fontsize=8)
    for name in (*POLICIES.values(), "per-phase oracle"):
        engine = report["traces"][name]
        bottom.step([m["minute"] for m in engine.minutes], [m["k"] for m in engine.minutes], where="post",
                    label=f"K in force ({name})")
    bottom.set_ylabel("K at a replica's batch size")
    bottom.set_xlabel("minute")
    twin = bottom.twinx()
    engine = report["traces"]["policy"]
    twin.plot([m["minute"] for m in engine.minutes], [m["batch"] for m in engine.minutes], color="grey", alpha=0.4,
              label="batch size")
    twin.set_ylabel("running batch size per replica")
    bottom.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{scenario.name}.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _json_report(report: dict) -> dict:
    decisions = {signals: [{"time": time, "action": d.action, "config": d.config.to_json() if d.config else None,
                            "path": d.path, "predictedGain": d.predicted_gain, "reason": d.reason}
                           for time, d in made]
                 for signals, made in report["decisions"].items()}
    scenario, envelope = report["scenario"], report["envelope"]
    return {"description": scenario.description, "replicas": scenario.replicas, "seed": report["seed"],
            "updateStrategy": scenario.strategy, "reloadSeconds": scenario.restart_seconds,
            "adaptiveRefused": report["adaptiveRefused"],
            "inPlace": {"maxK": envelope.max_k, "delaySeconds": report["inPlaceDelay"]} if envelope else None,
            "results": report["results"], "goals": report["goals"], "policyDecisions": decisions}


@click.command("tuner")
@click.option("--scenario", "names", multiple=True, type=click.Choice(sorted(SCENARIOS)),
              help="Run only these scenarios (repeatable); default: all.")
@click.option("--quick", is_flag=True, help="Fewer sub-steps and a smaller static-K search.")
@click.option("--seed", default=7, show_default=True, help="Seed of the load path and the metric noise.")
@click.option("--out", "out_dir", default="out/bench-tuner", show_default=True, type=click.Path(file_okay=False),
              help="Folder for the per-scenario PNG plots.")
@click.option("--update-strategy", type=click.Choice(["Surge", "Replace"]), default=None,
              help="How every scenario's restarts roll out (spec.updateStrategy), one replica at a time: Surge keeps "
                   "the old pod serving while the new one reloads the model; Replace (no spare accelerator) stops it "
                   "first, and the other replicas carry its load. Default: each scenario's own (Surge unless it "
                   "says Replace).")
@click.option("--exact-prior", is_flag=True,
              help="Give the policy the preset's own roofline as its cost prior (default: one 15-30% off).")
@click.option("--in-place/--no-in-place", default=True, show_default=True,
              help="Retune in place where the spec allows it, as the operator does: a change of K or schedule "
                   "within the engine's startup maximum is a new published schedule, no restart (speculation off, "
                   "and back on, still roll out). --no-in-place: every change rolls out, and the policy is told so "
                   "(inPlaceMaxK unset), the behaviour before in-place retuning.")
@click.option("--in-place-delay", default=IN_PLACE_DELAY_SECONDS, show_default=True, type=click.FloatRange(min=0),
              help="Seconds from an in-place decision to every engine running it (locally 1-2 s; on a real cluster "
                   "up to the kubelet's sync, 60-90 s).")
@click.option("--probe-in-place/--no-probe-in-place", "probe", default=True, show_default=True,
              help="Let the policy probe in place the K a fit with the drafter 3x dearer or cheaper would choose "
                   "(operator configuration tuning.policy.probeInPlace, on by default; docs/tuner.md).")
@click.option("--no-plots", is_flag=True, help="Skip the PNG plots.")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON instead of a table.")
def tuner_command(names: tuple[str, ...], quick: bool, seed: int, out_dir: str, update_strategy: str | None,
                  exact_prior: bool, in_place: bool, in_place_delay: float, probe: bool, no_plots: bool,
                  as_json: bool) -> None:
    """Closed-loop runs of the tuning policy against the simulator's engine model (simulated time)."""
    started = time.monotonic()
    scenarios = [replace(SCENARIOS[n], update_strategy=update_strategy or SCENARIOS[n].update_strategy)
                 for n in (names or SCENARIOS)]
    reports = [run_scenario(s, seed=seed, substeps=3 if quick else 6, quick=quick, exact_prior=exact_prior,
                            in_place=in_place, in_place_delay=in_place_delay, probe_in_place=probe)
               for s in scenarios]
    plots = [] if no_plots else [p for p in (_plot(r, Path(out_dir)) for r in reports) if p]
    if as_json:
        click.echo(json.dumps({r["scenario"].name: _json_report(r) for r in reports}, indent=2, default=str))
        return
    click.echo(_table(reports))
    click.echo(f"\n{len(reports)} scenario(s) in {time.monotonic() - started:.1f}s; plots: "
               + (", ".join(str(p) for p in plots) if plots else "none"))
